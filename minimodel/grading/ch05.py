"""Checks for chapter 05, logits and sampling: top_k_filter, top_p_filter, sample.

Shapes: B rows (requests), V vocabulary. Filters return logits [B, V] with -inf where a token is
removed; `sample` returns one token id per row, Long [B].

The learner's top-p is fairer than the package's on ties: every token whose probability equals
that of the token crossing p stays (the package keeps whichever of them its sort put first).
Without ties the two agree, so `sample` is checked on untied random logits.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.sampling import top_k_filter as package_top_k

NEG_INF = float("-inf")

# --- shared helpers ------------------------------------------------------------------------


def _ints(t: torch.Tensor, n: int = 8) -> str:
    """A short readable list of a 1-D tensor's values."""
    vals = [round(float(x), 3) for x in t.flatten()[:n]]
    return f"{vals}{'...' if t.numel() > n else ''}"


def _kept(out: object, logits: torch.Tensor, what: str) -> torch.Tensor:
    """The kept mask of a filter's output: Bool [B, V]; checks shape, dtype and kept values."""
    expect_shape(out, tuple(logits.shape), what)
    assert isinstance(out, torch.Tensor)
    expect(out.dtype == logits.dtype,
           f"{what} should keep the logits' dtype {logits.dtype}, got {out.dtype}")
    removed = out == NEG_INF
    kept = ~removed
    if kept.any() and not torch.equal(out[kept], logits[kept]):
        changed = out[kept] != logits[kept]
        if bool((out[kept][changed] < -1e3).all()):
            raise CheckFailed(
                f"{what}: a removed token should be -inf (float('-inf')), got "
                f"{float(out[kept][changed][0]):.3g}: a very negative number still leaves it "
                "a tiny probability, and -inf is what the next filter and softmax expect"
            )
        raise CheckFailed(
            f"{what}: the kept logits should come back unchanged (a filter only writes -inf; "
            "it does not rescale, renormalise or turn logits into probabilities)"
        )
    return kept


def _describe_row(kept: torch.Tensor, want: torch.Tensor) -> str:
    """Say how a row's kept set differs from the expected one."""
    return f"kept {int(kept.sum())} token(s), expected {int(want.sum())}"


def _first_bad_row(kept: torch.Tensor, want: torch.Tensor) -> int | None:
    bad = (kept != want).any(-1)
    return int(bad.nonzero()[0]) if bad.any() else None


def _crossing(logits: torch.Tensor, p: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(index in descending order, logit) of each row's token that brings the mass to >= p.

    Both are [B, 1]. The logit does not depend on how a sort orders tied tokens.
    """
    sorted_desc = logits.double().sort(dim=-1, descending=True).values  # [B, V]
    mass = sorted_desc.softmax(dim=-1).cumsum(dim=-1)  # running sum, most likely first
    index = (mass < p).sum(dim=-1, keepdim=True).clamp(max=logits.shape[-1] - 1)
    return index, sorted_desc.gather(-1, index)


def _top_p_mask(logits: torch.Tensor, p: float) -> torch.Tensor:
    """The tokens top-p keeps, Bool [B, V], in float64: every token at least as likely as the
    token that crosses p (so the tokens tied with it stay too)."""
    if p >= 1.0:
        return torch.ones_like(logits, dtype=torch.bool)
    return logits.double() >= _crossing(logits, p)[1]


def _margin_to_p(logits: torch.Tensor, p: float) -> float:
    """How close any row's cumulative probability (sorted, descending) comes to p."""
    probs = logits.double().softmax(-1).sort(-1, descending=True).values
    return float((probs.cumsum(-1) - p).abs().min())


def _clear_gap(logits: torch.Tensor, p: float) -> bool:
    """No logit of any row lies within 1e-5 of its row's crossing logit (except itself)."""
    threshold = _crossing(logits, p)[1]  # [B, 1]
    gap = (logits.double() - threshold).abs()
    return bool(((gap == 0).sum(-1) == 1).all() and (gap[gap > 0] > 1e-5).all())


def _logits_away_from_p(B: int, V: int, p: float, scale: float) -> torch.Tensor:
    """Random logits [B, V] whose cumulative probabilities stay clear of p.

    On a boundary a correct implementation may round either way; the checks avoid it. A large
    vocabulary gets a few dozen favourites over a long tail, like a real model's next token. The
    crossing token's logit is also kept clear of its neighbours, so that comparing probabilities
    or logits gives the same kept set.
    """
    for _ in range(200):
        logits = torch.randn(B, V) * scale
        if V > 1000:
            favourites = torch.randint(0, V, (B, 30))
            logits.scatter_add_(1, favourites, torch.full((B, 30), 14.0))
        if _margin_to_p(logits, p) > (1e-3 if V > 1000 else 2e-5) and _clear_gap(logits, p):
            return logits
    raise AssertionError(f"could not draw logits away from p={p}")  # pragma: no cover


# --- ch05.top_k_filter ---------------------------------------------------------------------

# (B, V, k): one token kept, a few, half, all of them, and the real vocabulary size.
TOP_K_CASES = [(1, 7, 1), (3, 10, 2), (2, 50, 5), (4, 100, 50), (2, 37, 37), (2, 151936, 20)]


def _top_k_expected(logits: torch.Tensor, k: int) -> torch.Tensor:
    B = logits.shape[0]
    return package_top_k(logits, torch.full((B,), k, dtype=torch.long)) != NEG_INF


def _top_k_compare(fn: Callable, logits: torch.Tensor, k: int, what: str) -> None:
    want = _top_k_expected(logits, k)
    kept = _kept(fn(logits.clone(), k), logits, what)
    row = _first_bad_row(kept, want)
    if row is not None:
        ranks = logits[row].sort(descending=True).values
        hint = ""
        if int(kept[row].sum()) == k and int(want[row].sum()) > k:
            hint = (f"; the k-th largest value {float(ranks[k - 1]):.3g} is tied, and every "
                    "token equal to it stays")
        elif int(kept[row].sum()) < k:
            hint = (f"; a logit equal to the k-th largest ({float(ranks[k - 1]):.3g}) must "
                    "stay: remove only logits strictly below it")
        elif torch.equal(kept[row], logits[row] >= ranks[-k]):
            hint = ("; it used the k-th smallest logit as the threshold: count from the "
                    "largest (sort in descending order)")
        raise CheckFailed(
            f"{what}: row {row} {_describe_row(kept[row], want[row])}; keep every logit >= "
            f"the row's k-th largest and set the others to -inf{hint}"
        )


@exercise("ch05.top_k_filter", "keeps each row's k largest logits and writes -inf elsewhere")
def _top_k_values(fn: Callable) -> str:
    for B, V, k in TOP_K_CASES:
        logits = torch.randn(B, V) * 3
        logits[0] += 10 * torch.rand(1)  # rows on different scales: each row has its own k-th
        _top_k_compare(fn, logits, k, f"top_k_filter(logits [{B}, {V}], k={k})")
    return f"{len(TOP_K_CASES)} cases, up to V = 151936"


@exercise("ch05.top_k_filter", "keeps every token tied with the k-th largest")
def _top_k_ties(fn: Callable) -> None:
    for B, V, k in [(2, 12, 3), (3, 40, 7), (1, 9, 1), (2, 20, 10)]:
        logits = torch.randint(-3, 4, (B, V)).float()  # few distinct values: many ties
        _top_k_compare(fn, logits, k, f"top_k_filter(logits {_ints(logits[0])} ..., k={k})")


@exercise("ch05.top_k_filter", "k=0 means no filter: the logits come back unchanged")
def _top_k_zero(fn: Callable) -> None:
    for B, V in [(1, 5), (3, 64), (2, 151936)]:
        logits = torch.randn(B, V)
        out = fn(logits.clone(), 0)
        expect_shape(out, (B, V), f"top_k_filter(logits [{B}, {V}], k=0)")
        assert isinstance(out, torch.Tensor)
        n = int((out == NEG_INF).sum())
        expect(n == 0, f"top_k_filter(logits [{B}, {V}], k=0) removed {n} tokens; k=0 means "
                       "no top-k, so every logit stays")
        expect(torch.equal(out, logits), f"top_k_filter(logits [{B}, {V}], k=0) changed the "
                                          "logits; with k=0 they come back as they were")


@exercise("ch05.top_k_filter", "works in float32, float64, float16 and bfloat16")
def _top_k_dtypes(fn: Callable) -> None:
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        logits = (torch.randn(3, 30) * 2).to(dtype)
        _top_k_compare(fn, logits, 4, f"top_k_filter(logits [3, 30] in {dtype}, k=4)")


# --- ch05.top_p_filter ---------------------------------------------------------------------

# (B, V, p, logit scale): flat and peaked rows, small and large p, the real vocabulary size.
TOP_P_CASES = [
    (1, 10, 0.5, 1.0), (3, 20, 0.9, 2.0), (2, 100, 0.3, 3.0), (4, 50, 0.75, 0.5),
    (2, 1000, 0.95, 2.0), (2, 151936, 0.8, 1.0),
]


def _top_p_compare(fn: Callable, logits: torch.Tensor, p: float, what: str) -> None:
    want = _top_p_mask(logits, p)
    kept = _kept(fn(logits.clone(), p), logits, what)
    row = _first_bad_row(kept, want)
    if row is None:
        return
    probs = logits[row].double().softmax(-1)
    order = probs.argsort(descending=True)
    n_want = int(want[row].sum())
    n_kept = int(kept[row].sum())
    sorted_probs = probs[order]
    mass = float(probs[kept[row]].sum())
    hint = ""
    index, threshold = _crossing(logits[row : row + 1], p)
    tied = int((logits[row].double() == threshold[0, 0]).sum())
    if tied > 1 and n_kept < n_want and bool((kept[row] <= want[row]).all()) \
            and n_kept >= int(index) + 1:
        hint = (f"; {tied} tokens have the same probability as the token that crosses p, but "
                f"only {tied - (n_want - n_kept)} of them were kept: which of equal tokens "
                "survives should not depend on where a sort happened to put them, so every "
                "token as likely as the crossing token stays")
    elif n_kept == n_want - 1 and torch.equal(kept[row][order][:n_kept],
                                              torch.ones(n_kept, dtype=torch.bool)):
        hint = (f"; it dropped the token that crosses p (the one that brings the sum from "
                f"{float(sorted_probs[:n_kept].sum()):.3f} to "
                f"{float(sorted_probs[:n_want].sum()):.3f}): that token is kept")
    elif n_kept == 0:
        hint = "; it removed every token: the most likely token always stays"
    elif n_kept > 0 and not kept[row][order[0]]:
        hint = "; it removed the most likely token: keep the most likely, drop the tail"
    elif mass < p:
        hint = f"; the kept tokens hold only {mass:.3f} of the probability, less than p"
    raise CheckFailed(
        f"{what}: row {row} {_describe_row(kept[row], want[row])} (the smallest set of most "
        f"likely tokens whose probabilities sum to >= p={p}, from the softmax of the row, and "
        f"every token tied with the last of them){hint}"
    )


@exercise("ch05.top_p_filter", "keeps each row's smallest most-likely set with mass >= p")
def _top_p_values(fn: Callable) -> str:
    for B, V, p, scale in TOP_P_CASES:
        logits = _logits_away_from_p(B, V, p, scale)
        logits[-1] += 5.0  # a shift changes no probability: the filter must not care
        _top_p_compare(fn, logits, p, f"top_p_filter(logits [{B}, {V}], p={p})")
    return f"{len(TOP_P_CASES)} cases, up to V = 151936"


@exercise("ch05.top_p_filter", "keeps the token whose probability crosses p")
def _top_p_crossing(fn: Callable) -> None:
    base = torch.tensor([0.5, 0.3, 0.15, 0.05])
    for p, n in [(0.7, 2), (0.85, 3), (0.55, 2), (0.4, 1), (0.97, 4)]:
        for _ in range(3):
            perm = torch.randperm(4)
            logits = (base[perm].log() + torch.randn(()) * 3)[None]  # [1, 4], shifted
            what = (f"top_p_filter with probabilities {[round(float(x), 2) for x in base[perm]]}"
                    f" and p={p}")
            _top_p_compare(fn, logits, p, what)
            kept = fn(logits.clone(), p) != NEG_INF
            expect(int(kept.sum()) == n,
                   f"{what} should keep {n} token(s), the top ones up to and including the one "
                   f"that crosses p, got {int(kept.sum())}")


def _tied_logits(B: int, V: int, p: float, dtype: torch.dtype) -> torch.Tensor:
    """Logits [B, V] with many exact ties, a tie at the crossing token of row 0, and running sums
    clear of p."""
    for _ in range(500):
        if dtype == torch.bfloat16:  # what a model in bfloat16 gives: few distinct values
            logits = (torch.randn(B, V) * 2).to(dtype)
            if V > 1000:
                favourites = torch.randint(0, V, (B, 40))
                logits = logits.float().scatter_add_(1, favourites,
                                                     torch.full((B, 40), 12.0)).to(dtype)
        else:
            logits = torch.randint(-3, 4, (B, V)).to(dtype)
        index, threshold = _crossing(logits[:1], p)
        kept_row0 = int((logits[0].double() >= threshold[0, 0]).sum())
        if kept_row0 > int(index) + 1 and _margin_to_p(logits, p) > (1e-3 if V > 1000 else 1e-4):
            return logits  # row 0: tokens tied with the crossing one come after it in a sort
    raise AssertionError("could not draw tied logits")  # pragma: no cover


@exercise("ch05.top_p_filter", "keeps every token as likely as the one that crosses p (ties)")
def _top_p_ties(fn: Callable) -> str:
    cases = [(2, 12, 0.5, torch.float32), (3, 40, 0.8, torch.float32),
             (2, 200, 0.3, torch.float64), (2, 64, 0.9, torch.bfloat16),
             (2, 151936, 0.9, torch.bfloat16)]
    for B, V, p, dtype in cases:
        logits = _tied_logits(B, V, p, dtype)
        _top_p_compare(fn, logits, p, f"top_p_filter(logits [{B}, {V}] in {dtype} with ties, "
                                      f"p={p})")
    probs = torch.tensor([0.4, 0.2, 0.2, 0.2])  # p=0.5: the first 0.2 crosses, all three tie
    for _ in range(3):
        logits = (probs[torch.randperm(4)].log() + torch.randn(()) * 3)[None]  # [1, 4]
        kept = _kept(fn(logits.clone(), 0.5), logits, "top_p_filter")
        expect(int(kept.sum()) == 4,
               f"top_p_filter with probabilities {_ints(logits.softmax(-1)[0])} and p=0.5 kept "
               f"{int(kept.sum())} token(s): 0.4 alone is below 0.5, a 0.2 crosses it, and the "
               "other two 0.2s are just as likely, so all four stay")
    return f"{len(cases) + 3} cases, up to V = 151936 in bfloat16"


@exercise("ch05.top_p_filter", "always keeps at least the most likely token")
def _top_p_at_least_one(fn: Callable) -> None:
    for B, V, p in [(2, 10, 1e-4), (3, 100, 0.01), (1, 151936, 0.05)]:
        logits = torch.randn(B, V) * 2
        logits[:, 0] += 20  # one clear favourite, with probability far above p
        out = fn(logits.clone(), p)
        kept = _kept(out, logits, f"top_p_filter(logits [{B}, {V}], p={p})")
        n = kept.sum(-1)
        expect(bool((n == 1).all()),
               f"top_p_filter(logits [{B}, {V}], p={p}) kept {n.tolist()} tokens per row; when "
               "the most likely token alone reaches p, it is the only one kept: the most likely "
               "token always stays, so there is always something to sample")
        top = logits.argmax(-1)
        expect(bool(kept[torch.arange(B), top].all()),
               f"top_p_filter(logits [{B}, {V}], p={p}) removed the most likely token")


@exercise("ch05.top_p_filter", "p=1.0 means no filter: the logits come back unchanged")
def _top_p_one(fn: Callable) -> None:
    for B, V, peak in [(1, 5, 0.0), (3, 64, 0.0), (2, 1000, 0.0), (2, 151936, 25.0)]:
        logits = torch.randn(B, V)
        logits[:, 0] += peak  # a sure favourite: a float32 running sum is 1.0 from the start
        out = fn(logits.clone(), 1.0)
        expect_shape(out, (B, V), f"top_p_filter(logits [{B}, {V}], p=1.0)")
        assert isinstance(out, torch.Tensor)
        n = int((out == NEG_INF).sum())
        expect(n == 0, f"top_p_filter(logits [{B}, {V}], p=1.0) removed {n} tokens; p=1.0 "
                       "means no top-p, so every logit stays (a float32 running sum can reach "
                       "1.0 long before the tail ends, so at p=1.0 it cannot decide what to drop)")
        expect(torch.equal(out, logits), f"top_p_filter(logits [{B}, {V}], p=1.0) changed the "
                                          "logits; with p=1.0 they come back as they were")


@exercise("ch05.top_p_filter", "works in float64, float16 and bfloat16")
def _top_p_dtypes(fn: Callable) -> None:
    base = torch.tensor([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])  # far from p on purpose
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        rows = torch.stack([base[torch.randperm(6)].log() for _ in range(3)])  # [3, 6]
        logits = rows.to(dtype)
        _top_p_compare(fn, logits, 0.7, f"top_p_filter(logits [3, 6] in {dtype}, p=0.7)")


# --- ch05.sample ---------------------------------------------------------------------------

DRAWS = 8000  # draws per distribution in the statistical checks


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


def _tokens(out: object, B: int, what: str) -> torch.Tensor:
    if isinstance(out, torch.Tensor) and out.dim() == 0 and B == 1:
        raise CheckFailed(f"{what} should have shape (1,), got a 0-d tensor: squeeze() drops "
                          "every dimension of size 1, and with B=1 that includes the batch")
    expect_shape(out, (B,), what)
    assert isinstance(out, torch.Tensor)
    expect(out.dtype == torch.long, f"{what} should be token ids of dtype torch.long (int64), "
                                    f"got {out.dtype}")
    return out


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


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
    raise AssertionError("could not draw logits with clear top-p boundaries")  # pragma: no cover


def _call(fn: Callable, logits: torch.Tensor, t: float, k: int, p: float,
          gen: torch.Generator) -> torch.Tensor:
    what = (f"sample(logits [{logits.shape[0]}, {logits.shape[1]}], temperature={t}, top_k={k}, "
            f"top_p={p})")
    return _tokens(fn(logits.clone(), t, k, p, gen), logits.shape[0], what)


@exercise("ch05.sample", "returns Long [B], one token id per row")
def _sample_shape(fn: Callable) -> None:
    for B, V, (t, k, p) in [(1, 10, (1.0, 0, 1.0)), (4, 50, (0.0, 0, 1.0)),
                            (3, 151936, (0.8, 20, 0.9)), (2, 7, (1.0, 1, 1.0))]:
        out = _call(fn, torch.randn(B, V), t, k, p, _gen(0))
        expect(bool(((out >= 0) & (out < V)).all()),
               f"sample returned ids {out.tolist()}, outside the vocabulary 0..{V - 1}")


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
                   f"sample(logits [{B}, {V}] in {dtype}, temperature=0) should return the argmax "
                   f"of each row {want.tolist()}, got {out.tolist()}: temperature 0 means greedy "
                   "(do not divide by 0, and do not draw)")


@exercise("ch05.sample", "top_k=1, or a temperature near 0, is greedy too")
def _sample_greedy_limits(fn: Callable) -> None:
    B, V = 64, 30
    logits = torch.randn(B, V)
    top2 = logits.topk(2, dim=-1).values
    gap_ok = (top2[:, 0] - top2[:, 1]) > 0.05  # avoid near-ties for the T -> 0 case
    logits = logits[gap_ok]
    want = logits.argmax(-1)
    out = _call(fn, logits, 1.0, 1, 1.0, _gen(2))
    expect(torch.equal(out, want), "sample(..., temperature=1.0, top_k=1) should always return "
                                   "the argmax: top-k with k=1 keeps only the best token")
    out = _call(fn, logits, 1e-3, 0, 1.0, _gen(3))
    expect(torch.equal(out, want), "sample(..., temperature=0.001) should return the argmax: "
                                   "a tiny temperature puts almost all probability on it")


@exercise("ch05.sample", "never draws a token that temperature -> top-k -> top-p removed")
def _sample_support(fn: Callable) -> str:
    V = len(SHAPED)
    logits = _sample_logits(SAMPLE_CONFIGS)
    many = logits.repeat_interleave(DRAWS // 2, dim=0)  # [DRAWS, V]: two rows, many copies
    for t, k, p in SAMPLE_CONFIGS:
        out = _call(fn, many, t, k, p, _gen(4))
        allowed = _allowed(many, t, k, p)
        ok = allowed.gather(-1, out[:, None])[:, 0]
        if not ok.all():
            i = int((~ok).nonzero()[0])
            n_allowed = int(allowed[i].sum())
            raise CheckFailed(
                f"with temperature={t}, top_k={k}, top_p={p} only {n_allowed} of the {V} tokens "
                f"may be drawn, but sample drew token {int(out[i])}, which was filtered out "
                "(apply temperature first, then top-k, then top-p on the probabilities of what "
                "is left)"
            )
    return f"{len(SAMPLE_CONFIGS)} configs x {DRAWS} draws"


@exercise("ch05.sample", "draws with the probabilities of the filtered softmax")
def _sample_frequencies(fn: Callable) -> str:
    V = len(SHAPED)
    logits = _sample_logits(SAMPLE_CONFIGS)
    many = logits.repeat_interleave(DRAWS // 2, dim=0)  # [DRAWS, V]
    worst = 0.0
    for t, k, p in SAMPLE_CONFIGS:
        out = _call(fn, many, t, k, p, _gen(5))
        want = _expected_probs(logits, t, k, p)  # [2, V]
        for row in range(2):
            drawn = out[row * (DRAWS // 2):(row + 1) * (DRAWS // 2)]
            freq = torch.bincount(drawn, minlength=V).double() / drawn.numel()
            tv = 0.5 * float((freq - want[row]).abs().sum())
            worst = max(worst, tv)
            if tv > 0.05:
                raise CheckFailed(
                    f"with temperature={t}, top_k={k}, top_p={p}, the frequencies of "
                    f"{drawn.numel()} draws are {_ints(freq, 12)} but the filtered softmax is "
                    f"{_ints(want[row], 12)} (they differ by {tv:.2f} in total variation; "
                    "sampling noise is below 0.05). Divide the logits by the temperature, "
                    "filter, softmax over the vocabulary, then draw"
                )
    return f"worst total variation {worst:.3f} over {len(SAMPLE_CONFIGS)} configs"


@exercise("ch05.sample", "draws from the given generator: same seed, same tokens")
def _sample_seeded(fn: Callable) -> None:
    logits = torch.randn(200, 40)
    for t, k, p in [(1.0, 0, 1.0), (0.8, 10, 0.9)]:
        torch.manual_seed(1)
        a = _call(fn, logits, t, k, p, _gen(123))
        torch.manual_seed(2)  # the global generator must not matter
        b = _call(fn, logits, t, k, p, _gen(123))
        expect(torch.equal(a, b),
               f"two calls with generators seeded alike (temperature={t}, top_k={k}, top_p={p}) "
               "returned different tokens: every random number should come from the "
               "`generator` argument, not from torch's global generator (torch's random "
               "functions draw from the global one unless they are given another)")
        c = _call(fn, logits, t, k, p, _gen(321))
        expect(not torch.equal(a, c),
               "generators with different seeds gave the very same 200 tokens: the draw should "
               "depend on the generator")
        gen = _gen(7)
        d = _call(fn, logits, t, k, p, gen)
        e = _call(fn, logits, t, k, p, gen)
        expect(not torch.equal(d, e),
               "two calls in a row with the same generator object gave the same 200 tokens: "
               "the generator should advance as it is used")
