"""Checks of ch05.sample: temperature, then top-k, then top-p, then one draw per row from the
given generator; temperature 0 is greedy.

What may be drawn, and with which probabilities, comes from the package's top-k and the grader's
own top-p (oracle.py); the statistical checks draw many tokens and compare frequencies.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from minimodel.grading.ch05.common import NEG_INF, _ints
from minimodel.grading.ch05.oracle import _margin_to_p, _top_p_mask
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import tr
from minimodel.sampling import top_k_filter as package_top_k

DRAWS = 8000  # draws per distribution in the statistical checks

# (temperature, top_k, top_p): plain, each filter, both, sharp and flat temperatures. With a
# low temperature top-p keeps fewer tokens than it would at T=1, and after top-k it keeps fewer
# than on the whole vocabulary, so a wrong order shows.
SAMPLE_CONFIGS = [
    (1.0, 0, 1.0), (0.7, 4, 1.0), (1.0, 0, 0.83), (0.5, 0, 0.7), (1.5, 0, 0.65),
    (2.0, 5, 1.0), (0.8, 6, 0.6), (1.0, 4, 0.75),
]
# A next-token distribution on which every config above keeps a clear set (no cumulative sum
# within 0.02 of p) and where each wrong order keeps a different set.
SHAPED = torch.tensor([0.30, 0.20, 0.12, 0.10, 0.08, 0.06, 0.05, 0.04, 0.02, 0.015, 0.01, 0.005])


def _allowed(logits: torch.Tensor, temperature: float, top_k: int, top_p: float) -> torch.Tensor:
    """Bool [B, V]: the tokens that temperature -> top-k -> top-p keep."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).bool()
    scaled = logits.double() / temperature
    B = logits.shape[0]
    if top_k > 0:
        scaled = package_top_k(scaled, torch.full((B,), top_k, dtype=torch.long))
    if top_p < 1.0:
        scaled = scaled.masked_fill(~_top_p_mask(scaled, top_p), NEG_INF)
    return scaled != NEG_INF


def _expected_probs(logits: torch.Tensor, temperature: float, top_k: int,
                    top_p: float) -> torch.Tensor:
    """float64 [B, V]: the distribution `sample` draws from."""
    scaled = logits.double() / temperature
    return scaled.masked_fill(~_allowed(logits, temperature, top_k, top_p), NEG_INF).softmax(-1)


def _settings(t: float, k: int, p: float) -> str:
    """A config as the call writes it: "temperature=0.7, top_k=4, top_p=1.0"."""
    return f"temperature={t}, top_k={k}, top_p={p}"


def _tokens(out: object, B: int, what: str) -> torch.Tensor:
    """`out` checked to be token ids Long [B]."""
    if isinstance(out, torch.Tensor) and out.dim() == 0 and B == 1:
        raise CheckFailed(tr("{what} should have shape (1,), got a 0-d tensor: squeeze() drops "
                             "every dimension of size 1, and with B=1 that includes the batch",
                             what=what))
    expect_shape(out, (B,), what)
    assert isinstance(out, torch.Tensor)
    expect(out.dtype == torch.long, tr("{what} should be token ids of dtype torch.long (int64), "
                                       "got {got}", what=what, got=out.dtype))
    return out


def _gen(seed: int) -> torch.Generator:
    """A CPU generator seeded `seed`."""
    return torch.Generator().manual_seed(seed)


def _sample_logits(configs: list[tuple[float, int, float]]) -> torch.Tensor:
    """Logits [2, 12]: the shaped distribution (shuffled, shifted) and a random one, both with
    clear top-p boundaries under every config."""
    shaped = SHAPED[torch.randperm(len(SHAPED))].log() + torch.randn(()) * 2
    for _ in range(500):
        logits = torch.stack([shaped, torch.randn(len(SHAPED)) * 1.5])  # [2, V]
        ok = True
        for t, k, p in configs:
            if p < 1.0:
                scaled = logits.double() / t
                if k > 0:
                    scaled = package_top_k(scaled, torch.full((2,), k, dtype=torch.long))
                if _margin_to_p(scaled, p) < 0.02:
                    ok = False
                    break
        if ok:
            return logits
    raise AssertionError(  # pragma: no cover
        tr("could not draw logits with clear top-p boundaries"))


def _call(fn: Callable, logits: torch.Tensor, t: float, k: int, p: float,
          gen: torch.Generator) -> torch.Tensor:
    """fn(logits, t, k, p, gen), checked to be token ids Long [B]."""
    what = f"sample(logits [{logits.shape[0]}, {logits.shape[1]}], {_settings(t, k, p)})"
    return _tokens(fn(logits.clone(), t, k, p, gen), logits.shape[0], what)


def _many_draws(fn: Callable, seed: int) -> Iterator[tuple[float, int, float, torch.Tensor,
                                                           torch.Tensor]]:
    """(temperature, top_k, top_p, logits [2, V], tokens [DRAWS]) for each of SAMPLE_CONFIGS:
    the tokens are fn's draws, DRAWS // 2 from row 0 of the logits, then as many from row 1,
    with a generator seeded `seed` for each config."""
    logits = _sample_logits(SAMPLE_CONFIGS)
    many = logits.repeat_interleave(DRAWS // 2, dim=0)  # [DRAWS, V]: two rows, many copies
    for t, k, p in SAMPLE_CONFIGS:
        yield t, k, p, logits, _call(fn, many, t, k, p, _gen(seed))


@exercise("ch05.sample", "returns Long [B], one token id per row")
def _sample_shape(fn: Callable) -> None:
    for B, V, (t, k, p) in [(1, 10, (1.0, 0, 1.0)), (4, 50, (0.0, 0, 1.0)),
                            (3, 151936, (0.8, 20, 0.9)), (2, 7, (1.0, 1, 1.0))]:
        out = _call(fn, torch.randn(B, V), t, k, p, _gen(0))
        expect(bool(((out >= 0) & (out < V)).all()),
               tr("sample returned ids {ids}, outside the vocabulary 0..{last}", ids=out.tolist(),
                  last=V - 1))


@exercise("ch05.sample", "temperature 0 is greedy: the argmax of each row, whatever top-k/p")
def _sample_greedy(fn: Callable) -> None:
    for B, V, k, p in [(1, 10, 0, 1.0), (5, 100, 3, 0.5), (3, 151936, 0, 1.0)]:
        for dtype in (torch.float32, torch.bfloat16):
            logits = torch.randn(B, V) * 2
            logits[torch.arange(B), logits.argmax(-1)] += 1  # no ties for the max, even in bf16
            logits = logits.to(dtype)
            out = _call(fn, logits, 0.0, k, p, _gen(1))
            want = logits.argmax(-1)
            expect(torch.equal(out, want),
                   tr("sample(logits [{B}, {V}] in {dtype}, temperature=0) should return the "
                      "argmax of each row {want}, got {got}: temperature 0 means greedy (do not "
                      "divide by 0, and do not draw)", B=B, V=V, dtype=dtype, want=want.tolist(),
                      got=out.tolist()))


@exercise("ch05.sample", "top_k=1, or a temperature near 0, is greedy too")
def _sample_greedy_limits(fn: Callable) -> None:
    B, V = 64, 30
    logits = torch.randn(B, V)
    top2 = logits.topk(2, dim=-1).values
    gap_ok = (top2[:, 0] - top2[:, 1]) > 0.05  # avoid near-ties for the T -> 0 case
    logits = logits[gap_ok]
    want = logits.argmax(-1)
    out = _call(fn, logits, 1.0, 1, 1.0, _gen(2))
    expect(torch.equal(out, want), tr("sample(..., temperature=1.0, top_k=1) should always "
                                      "return the argmax: top-k with k=1 keeps only the best "
                                      "token"))
    out = _call(fn, logits, 1e-3, 0, 1.0, _gen(3))
    expect(torch.equal(out, want), tr("sample(..., temperature=0.001) should return the argmax: "
                                      "a tiny temperature puts almost all probability on it"))


@exercise("ch05.sample", "never draws a token that temperature -> top-k -> top-p removed")
def _sample_support(fn: Callable) -> str:
    for t, k, p, logits, out in _many_draws(fn, 4):
        allowed = _allowed(logits, t, k, p).repeat_interleave(DRAWS // 2, dim=0)  # [DRAWS, V]
        ok = allowed.gather(-1, out[:, None])[:, 0]
        if not ok.all():
            i = int((~ok).nonzero()[0])
            raise CheckFailed(tr(
                "with {settings} only {allowed} of the {V} tokens may be drawn, but sample drew "
                "token {token}, which was filtered out (apply temperature first, then top-k, then "
                "top-p on the probabilities of what is left)", settings=_settings(t, k, p),
                allowed=int(allowed[i].sum()), V=len(SHAPED), token=int(out[i])))
    return tr("{n} configs x {draws} draws", n=len(SAMPLE_CONFIGS), draws=DRAWS)


@exercise("ch05.sample", "draws with the probabilities of the filtered softmax")
def _sample_frequencies(fn: Callable) -> str:
    worst = 0.0
    for t, k, p, logits, out in _many_draws(fn, 5):
        want = _expected_probs(logits, t, k, p)  # [2, V]
        for row in range(2):
            drawn = out[row * (DRAWS // 2):(row + 1) * (DRAWS // 2)]
            freq = torch.bincount(drawn, minlength=len(SHAPED)).double() / drawn.numel()
            tv = 0.5 * float((freq - want[row]).abs().sum())
            worst = max(worst, tv)
            if tv > 0.05:
                raise CheckFailed(tr(
                    "with {settings}, the frequencies of {n} draws are {freq} but the filtered "
                    "softmax is {want} (they differ by {tv:.2f} in total variation; sampling "
                    "noise is below 0.05). Divide the logits by the temperature, filter, softmax "
                    "over the vocabulary, then draw", settings=_settings(t, k, p),
                    n=drawn.numel(), freq=_ints(freq, 12), want=_ints(want[row], 12), tv=tv))
    return tr("worst total variation {worst:.3f} over {n} configs", worst=worst,
              n=len(SAMPLE_CONFIGS))


@exercise("ch05.sample", "draws from the given generator: same seed, same tokens")
def _sample_seeded(fn: Callable) -> None:
    logits = torch.randn(200, 40)
    for t, k, p in [(1.0, 0, 1.0), (0.8, 10, 0.9)]:
        torch.manual_seed(1)
        a = _call(fn, logits, t, k, p, _gen(123))
        torch.manual_seed(2)  # the global generator must not matter
        b = _call(fn, logits, t, k, p, _gen(123))
        expect(torch.equal(a, b),
               tr("two calls with generators seeded alike ({settings}) returned different "
                  "tokens: every random number should come from the `generator` argument, not "
                  "from torch's global generator (torch's random functions draw from the global "
                  "one unless they are given another)", settings=_settings(t, k, p)))
        c = _call(fn, logits, t, k, p, _gen(321))
        expect(not torch.equal(a, c),
               tr("generators with different seeds gave the very same 200 tokens: the draw "
                  "should depend on the generator"))
        gen = _gen(7)
        d = _call(fn, logits, t, k, p, gen)
        e = _call(fn, logits, t, k, p, gen)
        expect(not torch.equal(d, e),
               tr("two calls in a row with the same generator object gave the same 200 tokens: "
                  "the generator should advance as it is used"))
