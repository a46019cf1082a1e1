"""What chapter 13's checks share: a chi-square test with a stated false-alarm rate, stand-in
language models whose next-token distributions are known exactly, and two small random Qwen3s
(a target and a drafter that agrees with it often, not always) on the engine's paged KV cache.

- `chi_square`: the p-value of observed counts against exact probabilities; a check fails when
  it is below FALSE_ALARM, so a correct implementation fails by bad luck once in 10,000 seeds
  (the checks' seeds are fixed, so a given implementation passes or fails the same way on every
  run).
- `TableLM`: a `CachedLM` whose logits are a fixed table of the last two tokens (a tiny
  vocabulary), with the real page bookkeeping (`allocator`, `page_table`, `truncate`): fast
  enough for the many thousands of steps a statistical test needs, and its distributions are
  exact.
- `small_models`: a 3-layer random Qwen3 over 32 ids (the target) and the same model with its
  weights perturbed (the drafter), loaded into the engine's `PackedQwen3ForCausalLM`.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file

from minimodel.checkpoints import random_state_dict_numpy
from minimodel.config import Qwen3Config
from minimodel.engine.kv_cache import PageAllocator, pages_needed
from minimodel.engine.model import PackedQwen3ForCausalLM
from minimodel.engine.speculative import CachedLM
from minimodel.grading.common import clip
from minimodel.grading.core import CheckFailed
from minimodel.grading.i18n import Text, tr
from minimodel.weights import build_model

FALSE_ALARM = 1e-4  # a correct implementation fails a statistical check once in 10,000 seeds


def single_threaded(check: Callable) -> Callable:
    """Run a check with one torch thread (restored afterwards). Its thousands of small steps
    gain nothing from a second thread, and on a busy machine each small op that waits for one
    can take milliseconds. The results are the same digits either way."""

    @functools.wraps(check)
    def run(fn: Callable) -> object:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return check(fn)
        finally:
            torch.set_num_threads(threads)
    return run


# --- statistics -------------------------------------------------------------------------------

def chi_square(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    """(p-value, degrees of freedom) of observed counts against exact probabilities. Cells
    expected fewer than 5 times are pooled into one, as the test requires; an observation where
    the probability is 0 gives p-value 0."""
    counts, probs = counts.double().flatten(), probs.double().flatten()
    n = float(counts.sum())
    if n == 0:
        return 1.0, 0
    if bool(((probs <= 0) & (counts > 0)).any()):
        return 0.0, 0
    expected = probs * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().reshape(1)])
    exp = torch.cat([expected[big], expected[~big].sum().reshape(1)])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    df = int(obs.numel()) - 1
    if df < 1:
        return 1.0, 0
    stat = float(((obs - exp) ** 2 / exp).sum())
    pvalue = float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                           torch.tensor(stat / 2, dtype=torch.float64)))
    return pvalue, df


def expect_distribution(counts: torch.Tensor, probs: torch.Tensor, what: Text,
                        hint: Text) -> Text:
    """Fail unless counts pass the chi-square test against probs at FALSE_ALARM."""
    pvalue, df = chi_square(counts, probs)
    if pvalue < FALSE_ALARM:
        n = int(counts.sum())
        got = (counts.double() / max(n, 1)).flatten()
        want = probs.double().flatten()
        worst = int((got - want).abs().argmax())
        raise CheckFailed(tr(
            "{what}: over {n} draws the frequencies are not the target's distribution "
            "(chi-square p-value {pvalue:.1e}, below the false-alarm rate {rate:g}); e.g. token "
            "{token} came out {got:.3f} of the time, its target probability is {want:.3f}. "
            "{hint}", what=what, n=n, pvalue=pvalue, rate=FALSE_ALARM, token=worst,
            got=float(got[worst]), want=float(want[worst]), hint=hint))
    return tr("{n} draws, chi-square p = {pvalue:.2f} ({df} d.o.f.)", n=int(counts.sum()),
              pvalue=pvalue, df=df)


def random_rows(n: int, V: int, generator: torch.Generator, scale: float = 1.5) -> torch.Tensor:
    """n random distributions over V tokens, float64 [n, V]."""
    return torch.softmax(torch.randn(n, V, generator=generator, dtype=torch.float64) * scale, -1)


def nearby_rows(p: torch.Tensor, generator: torch.Generator, noise: float = 0.7) -> torch.Tensor:
    """Distributions close to p's rows (a drafter that often agrees with the target)."""
    return torch.softmax(p.log() + noise * torch.randn(p.shape, generator=generator,
                                                       dtype=torch.float64), -1)


def as_tokens(out: object, what: Text | str) -> list[int]:
    """out as a list of Python ints, or a CheckFailed that says what came back."""
    if isinstance(out, torch.Tensor):
        out = out.tolist()
    if not isinstance(out, (list, tuple)) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in out):
        raise CheckFailed(tr("{what} returned {out!r}; it should return a list of token ids "
                             "(Python ints)", what=what, out=out))
    return list(out)


# --- a stand-in language model with known distributions ----------------------------------------

class TableLM(CachedLM):
    """A CachedLM whose next-token logits are table[a, b] for the last two tokens a, b of the
    sequence (V tiny): the real page bookkeeping, no network. `extends` counts its calls and
    `fed` logs the ids of each."""

    def __init__(self, table: torch.Tensor, page_size: int = 4, max_tokens: int = 256) -> None:
        self.model, self.vocab = None, None  # type: ignore[assignment]
        self.table = table.float()  # [V, V, V]
        self.page_size = page_size
        self.allocator = PageAllocator(pages_needed(max_tokens, page_size))
        self.tokens: list[int] = []
        self.page_table: list[int] = []
        self.fed: list[list[int]] = []

    @property
    def V(self) -> int:
        return self.table.shape[-1]

    def extend(self, ids: Sequence[int]) -> torch.Tensor:
        ids = [int(t) for t in ids]
        if not ids:
            raise ValueError(tr("extend needs at least one token id."))
        if any(not 0 <= t < self.V for t in ids):
            raise ValueError(tr("token ids must be in 0..{last}, got {ids}.", last=self.V - 1,
                                ids=clip(ids)))
        total = self.num_cached + len(ids)
        extra = pages_needed(total, self.page_size) - len(self.page_table)
        if extra > self.allocator.num_free:
            raise ValueError(tr("{total} tokens do not fit in this cache: a step that never "
                                "gives back rejected tokens' pages runs out of them.",
                                total=total))
        if extra > 0:
            self.page_table += self.allocator.allocate(extra)
        seq = self.tokens + ids
        rows = [self.table[seq[i - 1] if i >= 1 else 0, seq[i]]
                for i in range(self.num_cached, total)]
        self.tokens += ids
        self.fed.append(ids)
        return torch.stack(rows)

    def distribution(self, context: Sequence[int], temperature: float) -> torch.Tensor:
        """The exact next-token distribution after context, float64 [V]."""
        row = self.table[context[-2] if len(context) >= 2 else 0, context[-1]].double()
        return torch.softmax(row / temperature, -1)

    def clone_empty(self) -> TableLM:
        return TableLM(self.table, self.page_size, self.allocator.num_pages * self.page_size)


def table_pair(V: int, generator: torch.Generator, scale: float = 2.0,
               noise: float = 1.2) -> tuple[torch.Tensor, torch.Tensor]:
    """(target table, drafter table) [V, V, V]: the drafter's logits are the target's plus noise,
    so it guesses right often, not always."""
    target = torch.randn(V, V, V, generator=generator) * scale
    return target, target + torch.randn(V, V, V, generator=generator) * noise


# --- two small random Qwen3s on the engine's KV cache ------------------------------------------

SMALL_V = 32


def _config(layers: int) -> Qwen3Config:
    return Qwen3Config(vocab_size=SMALL_V, hidden_size=32, intermediate_size=64,
                       num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=8, max_position_embeddings=256, rope_theta=10_000.0,
                       tie_word_embeddings=False, torch_dtype="float32")


@functools.cache
def _folders() -> tuple[Path, Path]:
    """Checkpoint folders of the target and the drafter (written once per process)."""
    root = Path(tempfile.mkdtemp(prefix="minimodel-ch13-"))
    cfg = _config(3)
    target = random_state_dict_numpy(cfg, seed=13)
    target["lm_head.weight"] = target["lm_head.weight"] * 3  # peaked: clear greedy choices
    rng = torch.Generator().manual_seed(14)
    draft = {n: t + 0.12 * t.std() * torch.randn(t.shape, generator=rng) if t.ndim == 2 else t
             for n, t in target.items()}
    folders = []
    for name, weights in (("target", target), ("draft", draft)):
        folder = root / name
        folder.mkdir()
        cfg.save(folder)
        save_file({n: t.contiguous() for n, t in weights.items()},
                  str(folder / "model.safetensors"))
        folders.append(folder)
    return folders[0], folders[1]


@functools.cache
def _model(which: str) -> PackedQwen3ForCausalLM:
    folder = _folders()[0 if which == "target" else 1]
    model = build_model(PackedQwen3ForCausalLM, folder, torch.float32, "cpu")
    model.build_rope_tables(256)
    return model.eval()


def small_lm(which: str, page_size: int = 4) -> CachedLM:
    """A fresh CachedLM over the small target ("target") or its drafter ("draft")."""
    return CachedLM(_model(which), page_size=page_size, max_tokens=256)


def plain_greedy(lm: CachedLM, prompt: Sequence[int], n: int) -> tuple[list[int], float]:
    """n greedy tokens after prompt, one forward per token on a fresh cache, and the smallest
    gap between the top two logits on the way (a near tie could flip with rounding)."""
    logits = lm.extend(list(prompt))[-1]
    out, gap = [], float("inf")
    for _ in range(n):
        top = logits.topk(2).values
        gap = min(gap, float(top[0] - top[1]))
        out.append(int(logits.argmax()))
        logits = lm.extend(out[-1:])[-1]
    return out, gap
