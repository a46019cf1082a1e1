"""Checks of chapter 03 (attention and masks): causal_mask, sliding_window_mask, repeat_kv,
attention, is_causal, predict_shapes.

Shapes: B batch, T queries, S keys, C hidden, Hq query heads, Hkv KV heads, D head dim, V vocab.
Expected values come from the package itself (minimodel.ops.softmax_attention,
minimodel.reference.repeat_kv), computed in float64 where precision matters.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.ops import softmax_attention
from minimodel.reference.model import repeat_kv as ref_repeat_kv

# --- causal_mask ---------------------------------------------------------------------------

_MASK_SIZES = (1, 2, 3, 7, 16, 33)


def _masks(fn: Callable) -> list[tuple[int, torch.Tensor]]:
    out = []
    for T in _MASK_SIZES:
        m = fn(T)
        expect_shape(m, (T, T), f"causal_mask({T})")
        out.append((T, m))
    return out


@exercise("ch03.causal_mask", "is a bool [T, T] tensor for T = 1, 2, 3, 7, 16, 33")
def _mask_shape(fn: Callable) -> None:
    for T, m in _masks(fn):
        expect(
            m.dtype == torch.bool,
            f"causal_mask({T}) has dtype {m.dtype}; it should be torch.bool (True = may attend): "
            "masked_fill and ~ treat a bool mask as a rule, while a 0/1 or -inf float mask means "
            "something else to every function that receives it.",
        )


@exercise("ch03.causal_mask", "lets every token attend to itself (the diagonal is True)")
def _mask_diagonal(fn: Callable) -> None:
    for T, m in _masks(fn):
        diag = m.bool().diagonal()
        if not diag.all():
            t = int((~diag).nonzero()[0])
            raise CheckFailed(
                f"causal_mask({T})[{t}, {t}] is False: query {t} may not read its own key. "
                "The diagonal must be True: a token may read itself, and the first token has "
                "nothing else to read."
            )


@exercise("ch03.causal_mask", "never lets a query see a later key (above the diagonal is False)")
def _mask_future(fn: Callable) -> None:
    for T, m in _masks(fn):
        future = m.bool().triu(1)
        if future.any():
            t, s = (int(i) for i in future.nonzero()[0])
            hint = (
                " It looks transposed: rows are queries t, columns are keys s, and query t may "
                "read keys s <= t (the lower triangle)."
                if not m.bool().tril(-1).any()
                else ""
            )
            raise CheckFailed(
                f"causal_mask({T})[{t}, {s}] is True: query {t} could read the later token {s}."
                + hint
            )


@exercise("ch03.causal_mask", "lets every query see all earlier keys (below the diagonal is True)")
def _mask_past(fn: Callable) -> None:
    for T, m in _masks(fn):
        past = torch.ones(T, T, dtype=torch.bool).tril(-1)
        missing = past & ~m.bool()
        if missing.any():
            t, s = (int(i) for i in missing.nonzero()[0])
            raise CheckFailed(
                f"causal_mask({T})[{t}, {s}] is False: query {t} should see the earlier token {s}."
                " A causal mask hides only the future."
            )


# --- sliding_window_mask -------------------------------------------------------------------

# (T, window): a window of 1 (only itself), inside T, exactly T, beyond T
_WINDOW_CASES = ((1, 1), (5, 1), (6, 2), (7, 3), (9, 4), (16, 5), (8, 8), (5, 9), (33, 7))


def _expected_window(T: int, window: int) -> torch.Tensor:
    t = torch.arange(T)
    behind = t[:, None] - t[None, :]  # [T, T]: how far key s lies behind query t
    return (behind >= 0) & (behind < window)


def _window_mask(fn: Callable, T: int, window: int) -> torch.Tensor:
    m = fn(T, window)
    expect_shape(m, (T, T), f"sliding_window_mask({T}, {window})")
    expect(m.dtype == torch.bool,
           f"sliding_window_mask({T}, {window}) has dtype {m.dtype}; it should be torch.bool "
           "(True = may attend), like causal_mask.")
    return m


def _explain_window(m: torch.Tensor, T: int, window: int) -> None:
    want = _expected_window(T, window)
    if torch.equal(m, want):
        return
    t, s = (int(i) for i in (m != want).nonzero()[0])
    where = f"sliding_window_mask({T}, {window})[{t}, {s}] is {bool(m[t, s])}"
    if s > t:
        raise CheckFailed(f"{where}: query {t} could read the later token {s}. A sliding "
                          "window is still causal: it hides the future and the far past.")
    expected = min(window, t + 1)
    if torch.equal(m, _expected_window(T, window + 1)):
        hint = (f" Every query reads up to window + 1 = {window + 1} keys; the window counts the "
                "query itself.")
    elif window > 1 and torch.equal(m, _expected_window(T, window - 1)):
        hint = (f" Every query reads up to window - 1 = {window - 1} keys; the window counts the "
                "query itself too.")
    elif torch.equal(m, _expected_window(T, T)):
        hint = " It is the plain causal mask: the window is ignored."
    else:
        hint = ""
    raise CheckFailed(f"{where}: query {t} reads {int(m[t].sum())} keys, expected the "
                      f"{expected} keys {t - expected + 1}..{t}." + hint)


@exercise("ch03.sliding_window_mask", "is a bool [T, T] tensor for T from 1 to 33, windows 1 to 9")
def _window_shape(fn: Callable) -> None:
    for T, window in _WINDOW_CASES:
        _window_mask(fn, T, window)


@exercise("ch03.sliding_window_mask",
          "query t reads exactly keys t-window+1 .. t (itself and the window-1 before it)")
def _window_band(fn: Callable) -> None:
    drawn = [(int(T), int(torch.randint(1, int(T) + 1, ()))) for T in torch.randint(2, 40, (6,))]
    for T, window in (*_WINDOW_CASES, *drawn):
        _explain_window(_window_mask(fn, T, window), T, window)


@exercise("ch03.sliding_window_mask",
          "window 1 is the diagonal; a window of T or more is the causal mask")
def _window_edges(fn: Callable) -> None:
    for T in (1, 4, 11):
        expect(torch.equal(_window_mask(fn, T, 1), torch.eye(T, dtype=torch.bool)),
               f"sliding_window_mask({T}, 1) should be the diagonal only: with a window of one "
               "token, every token reads just itself.")
        for window in (T, T + 1, 3 * T + 2):
            _explain_window(_window_mask(fn, T, window), T, window)


@exercise("ch03.sliding_window_mask", "raises ValueError for a window below 1")
def _window_invalid(fn: Callable) -> None:
    for window in (0, -3):
        try:
            out = fn(6, window)
        except ValueError:
            continue
        what = "all False" if isinstance(out, torch.Tensor) and not out.bool().any() else "a mask"
        raise CheckFailed(
            f"sliding_window_mask(6, {window}) returned {what}. A window below 1 leaves every "
            "query with no key to read (a softmax over -inf only gives NaN): raise a ValueError "
            "that says the window must be at least 1."
        )


# --- repeat_kv -----------------------------------------------------------------------------

# (B, Hkv, S, D, groups): MHA (groups 1), GQA, MQA (Hkv 1)
_KV_CASES = ((1, 2, 5, 4, 2), (2, 3, 4, 8, 4), (1, 4, 7, 16, 1), (3, 1, 3, 8, 5), (2, 8, 2, 4, 2))


@exercise("ch03.repeat_kv", "returns [B, Hkv*groups, S, D] for MHA, GQA and MQA shapes")
def _kv_shape(fn: Callable) -> None:
    for B, Hkv, S, D, g in _KV_CASES:
        x = torch.randn(B, Hkv, S, D)
        expect_shape(fn(x, g), (B, Hkv * g, S, D), f"repeat_kv(x of shape {(B, Hkv, S, D)}, {g})")


@exercise("ch03.repeat_kv", "query head h reads KV head h // groups (order 0,0,..,1,1,..)")
def _kv_order(fn: Callable) -> None:
    for B, Hkv, S, D, g in _KV_CASES:
        x = torch.randn(B, Hkv, S, D)
        out = fn(x, g)
        expect_shape(out, (B, Hkv * g, S, D), f"repeat_kv(x of shape {(B, Hkv, S, D)}, {g})")
        for h in range(Hkv * g):
            if torch.equal(out[:, h], x[:, h // g]):
                continue
            tiled = Hkv > 1 and torch.equal(out, x.repeat(1, g, 1, 1))
            raise CheckFailed(
                f"with Hkv={Hkv}, groups={g}: output head {h} is not KV head {h // g}."
                + (
                    " Your heads are in the order 0,1,..,0,1,.. (the whole stack tiled); query "
                    "heads come in consecutive groups, so each KV head must be copied `groups` "
                    "times in place: 0,0,..,1,1,.."
                    if tiled
                    else " Head h must be an exact copy of x[:, h // groups]."
                )
            )


@exercise("ch03.repeat_kv", "keeps the dtype (float32, bfloat16, float16) and leaves x unchanged")
def _kv_dtype(fn: Callable) -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(2, 1, 3, 4).to(dtype)  # one KV head: the order cannot matter here
        before = x.clone()
        out = fn(x, 3)
        expect_shape(out, (2, 3, 3, 4), f"repeat_kv(x {dtype}, 3)")
        expect(out.dtype == dtype, f"repeat_kv on {dtype} returned {out.dtype}; keep x's dtype.")
        expect(torch.equal(x, before), "repeat_kv changed its input x; return a new tensor.")
        expect(torch.equal(out, ref_repeat_kv(x, 3)), f"repeat_kv on {dtype} changed the values.")


# --- attention -----------------------------------------------------------------------------


def _expected_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float
) -> torch.Tensor:
    """The package's attention in float64, K/V repeated to Hq heads: [B, Hq, T, D]."""
    groups = q.shape[1] // k.shape[1]
    return softmax_attention(
        q.double(), ref_repeat_kv(k.double(), groups), ref_repeat_kv(v.double(), groups),
        mask, scale,
    )


def _qkv(B: int, Hq: int, Hkv: int, T: int, S: int, D: int, dtype=torch.float32):
    q = torch.randn(B, Hq, T, D).to(dtype)
    k = torch.randn(B, Hkv, S, D).to(dtype)
    v = torch.randn(B, Hkv, S, D).to(dtype)
    return q, k, v


def _random_mask(T: int, S: int) -> torch.Tensor:
    """A random Bool [T, S] mask with at least one True per row."""
    mask = torch.rand(T, S) < 0.5
    mask[torch.arange(T), torch.randint(S, (T,))] = True
    return mask


def _diagnose(
    out: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
) -> str:
    """A hint naming the classic mistake that `out` reproduces, or "" if none does."""
    D = q.shape[-1]
    groups = q.shape[1] // k.shape[1]
    got = out.double()
    if got.isnan().any():
        return (
            " Your output contains NaN: some query had every key masked, so its softmax ran "
            "over -inf only. Is the mask inverted? True means 'may attend'."
        )

    def same(t: torch.Tensor) -> bool:
        return t.shape == got.shape and torch.allclose(got, t, atol=1e-4, rtol=1e-4)

    if same(_expected_attention(q, k, v, mask, 1.0)):
        return " It matches attention without scaling: multiply the scores by 1/sqrt(D)."
    if same(_expected_attention(q, k, v, mask, 1.0 / D)):
        return " It matches scores scaled by 1/D; the scale is 1/sqrt(D)."
    if same(_expected_attention(q, k, v, mask, math.sqrt(D))):
        return " It matches scores multiplied by sqrt(D); divide by sqrt(D) instead."
    if mask is not None:
        if mask.shape[0] == mask.shape[1] and same(_expected_attention(q, k, v, mask.T, D**-0.5)):
            return " It matches the transposed mask: mask[t, s] says whether query t reads key s."
        if (~mask).any(-1).all() and same(_expected_attention(q, k, v, ~mask, D**-0.5)):
            return (
                " It matches the inverted mask: True means 'may attend', so the scores that "
                "become -inf are those where the mask is False."
            )
        if same(_expected_attention(q, k, v, None, D**-0.5)):
            return " It matches attention with no mask at all: apply the mask to the scores."
    if groups > 1:
        tiled_k, tiled_v = k.repeat(1, groups, 1, 1), v.repeat(1, groups, 1, 1)
        if same(_expected_attention(q, tiled_k, tiled_v, mask, D**-0.5)):
            return (
                " It matches K/V heads tiled in the order 0,1,0,1: query head h reads KV head "
                "h // groups, so consecutive query heads share a KV head (0,0,1,1)."
            )
    scores = q.double() @ ref_repeat_kv(k.double(), groups).transpose(-1, -2) * D**-0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    wrong_axis = scores.softmax(dim=-2).nan_to_num(0.0) @ ref_repeat_kv(v.double(), groups)
    if same(wrong_axis):
        return (
            " It matches a softmax over the queries (dim -2); each query's weights over the "
            "keys must sum to 1, so take the softmax over the last dim."
        )
    return ""


def _compare_attention(
    fn: Callable,
    B: int, Hq: int, Hkv: int, T: int, S: int, D: int,
    mask: torch.Tensor | None,
    dtype: torch.dtype = torch.float32,
) -> None:
    q, k, v = _qkv(B, Hq, Hkv, T, S, D, dtype)
    out = fn(q, k, v, mask)
    what = (
        f"attention with B={B}, Hq={Hq}, Hkv={Hkv}, T={T}, S={S}, D={D}, "
        f"{'no mask' if mask is None else 'a mask'}, {str(dtype).replace('torch.', '')}"
    )
    expect_shape(out, (B, Hq, T, D), what)
    expected = _expected_attention(q, k, v, mask, 1.0 / math.sqrt(D))
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    ok = torch.allclose(out.double(), expected, atol=tol, rtol=tol)
    if not ok:
        worst = float((out.double() - expected).abs().max())
        raise CheckFailed(
            f"{what} is off from softmax(q k^T / sqrt(D)) v: max abs diff {worst:.3g}."
            + _diagnose(out, q, k, v, mask)
        )


@exercise("ch03.attention", "returns [B, Hq, T, D] for MHA, GQA and MQA, with and without mask")
def _attn_shape(fn: Callable) -> None:
    for B, Hq, Hkv, T, S, D in ((1, 4, 4, 3, 3, 8), (2, 4, 2, 5, 5, 16), (2, 6, 1, 4, 7, 8)):
        for mask in (None, _random_mask(T, S)):
            q, k, v = _qkv(B, Hq, Hkv, T, S, D)
            expect_shape(fn(q, k, v, mask), (B, Hq, T, D),
                         f"attention(q {tuple(q.shape)}, k {tuple(k.shape)}, v, mask)")


@exercise("ch03.attention", "without a mask equals softmax(q k^T / sqrt(D)) v (D = 4, 16, 64)")
def _attn_plain(fn: Callable) -> None:
    for B, H, T, D in ((1, 2, 5, 4), (2, 3, 6, 16), (1, 2, 4, 64)):
        _compare_attention(fn, B, H, H, T, T, D, None)


@exercise("ch03.attention", "with the causal mask, query t reads only keys 0..t")
def _attn_causal(fn: Callable) -> None:
    for B, H, T, D in ((1, 2, 6, 8), (2, 4, 9, 16)):
        _compare_attention(fn, B, H, H, T, T, D, torch.ones(T, T, dtype=torch.bool).tril())


@exercise("ch03.attention", "applies any Bool [T, S] mask (True = may attend), also with S != T")
def _attn_any_mask(fn: Callable) -> None:
    for B, H, T, S, D in ((1, 2, 4, 4, 8), (2, 3, 3, 7, 8), (1, 2, 5, 2, 4)):
        _compare_attention(fn, B, H, H, T, S, D, _random_mask(T, S))


@exercise("ch03.attention", "GQA/MQA: query head h reads KV head h // (Hq // Hkv)")
def _attn_gqa(fn: Callable) -> None:
    for B, Hq, Hkv, T, D in ((1, 4, 2, 5, 8), (2, 8, 2, 4, 16), (1, 6, 3, 3, 8), (2, 4, 1, 6, 8)):
        _compare_attention(fn, B, Hq, Hkv, T, T, D, None)
        _compare_attention(fn, B, Hq, Hkv, T, T, D, torch.ones(T, T, dtype=torch.bool).tril())


@exercise("ch03.attention", "works in bfloat16 and float16 and returns q's dtype")
def _attn_dtype(fn: Callable) -> None:
    for dtype in (torch.bfloat16, torch.float16):
        q, k, v = _qkv(2, 4, 2, 5, 5, 16, dtype)
        out = fn(q, k, v, torch.ones(5, 5, dtype=torch.bool).tril())
        expect_shape(out, (2, 4, 5, 16), f"attention in {dtype}")
        expect(out.dtype == dtype, f"attention on {dtype} inputs returned {out.dtype}; "
                                   "return q's dtype (compute in float32 if you like, then cast).")
        _compare_attention(fn, 2, 4, 2, 5, 5, 16, torch.ones(5, 5, dtype=torch.bool).tril(), dtype)


# --- is_causal -----------------------------------------------------------------------------

SeqFn = Callable[[torch.Tensor], torch.Tensor]  # [B, T, C] -> [B, T, C]


def _weights(C: int, gen: torch.Generator, n: int = 3) -> list[torch.Tensor]:
    return [torch.randn(C, C, generator=gen) / math.sqrt(C) for _ in range(n)]


def _masked_attention(
    C: int, gen: torch.Generator, allowed: Callable[[int], torch.Tensor | None]
) -> SeqFn:
    """Single-head self-attention with random projections and the mask allowed(T): [T, T]."""
    wq, wk, wv = _weights(C, gen)

    def fn(x: torch.Tensor) -> torch.Tensor:
        q, k, v = (x @ w.to(x.dtype) for w in (wq, wk, wv))  # [B, T, C]
        scores = q @ k.transpose(-1, -2) / math.sqrt(C)  # [B, T, T]
        mask = allowed(x.shape[1])
        if mask is not None:
            scores = scores.masked_fill(~mask.to(x.device), float("-inf"))
        return scores.softmax(-1) @ v

    return fn


def _tril(T: int, offset: int = 0) -> torch.Tensor:
    return torch.ones(T, T, dtype=torch.bool).tril(offset)


def _chunked(T: int, size: int = 4) -> torch.Tensor:
    """Bidirectional inside blocks of `size` tokens, causal between blocks."""
    block = torch.arange(T) // size
    return block[:, None] >= block[None, :]


def _shift(x: torch.Tensor, by: int) -> torch.Tensor:
    """out[:, t] = x[:, t - by] (zeros where that falls outside): by > 0 reads the past."""
    out = torch.zeros_like(x)
    T = x.shape[1]
    if abs(by) >= T:
        return out
    if by > 0:
        out[:, by:] = x[:, :-by]
    else:
        out[:, :by] = x[:, -by:]
    return out


def _causal_functions(C: int) -> list[tuple[str, SeqFn]]:
    gen = torch.Generator().manual_seed(1234)
    w1, w2 = torch.randn(C, 2 * C, generator=gen), torch.randn(2 * C, C, generator=gen)
    conv = torch.randn(C, 1, 3, generator=gen)
    attn = _masked_attention(C, gen, _tril)

    def mlp(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w1.to(x.dtype)) @ w2.to(x.dtype) / C

    def cummean(x: torch.Tensor) -> torch.Tensor:
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)
        return x.cumsum(1) / n[:, None]

    def causal_conv(x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x.transpose(1, 2), (2, 0))  # [B, C, T + 2], zeros on the left only
        return F.conv1d(padded, conv.to(x.dtype), groups=C).transpose(1, 2)

    def ema(x: torch.Tensor) -> torch.Tensor:
        outs, state = [], torch.zeros_like(x[:, 0])
        for t in range(x.shape[1]):
            state = 0.7 * state + 0.3 * x[:, t]
            outs.append(state)
        return torch.stack(outs, 1)

    def block(x: torch.Tensor) -> torch.Tensor:
        h = x + attn(F.layer_norm(x, (C,)))
        return h + mlp(F.layer_norm(h, (C,)))

    return [
        ("identity", lambda x: x.clone()),
        ("a position-wise MLP", mlp),
        ("cumulative mean over positions 0..t", cummean),
        ("cumulative max over positions 0..t", lambda x: x.cummax(1).values),
        ("shift right (position t outputs input t-1)", lambda x: _shift(x, 1)),
        ("causal attention", attn),
        ("a causal convolution over t-2, t-1, t", causal_conv),
        ("an exponential moving average", ema),
        ("a pre-norm block: causal attention + MLP with residuals", block),
        ("causal attention whose outputs are tiny (1e-3 scale)", lambda x: 1e-3 * attn(x)),
    ]


def _leaky_functions(C: int) -> dict[str, list[tuple[str, SeqFn]]]:
    gen = torch.Generator().manual_seed(4321)
    full = _masked_attention(C, gen, lambda T: None)
    off_by_one = _masked_attention(C, gen, lambda T: _tril(T, 1))
    transposed = _masked_attention(C, gen, lambda T: _tril(T).T)
    chunked = _masked_attention(C, gen, _chunked)
    base = _masked_attention(C, gen, _tril)  # causal; the leaks below are added to it

    def leak_first(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        if x.shape[1] > 1:
            out[:, 0] = out[:, 0] + x[:, 1]
        return out

    def leak_last(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        out[:, :-1] = out[:, :-1] + x[:, -1:]
        return out

    def leak_second_last(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        if x.shape[1] > 1:
            out[:, -2] = out[:, -2] + x[:, -1]
        return out

    def leak_two_ahead(x: torch.Tensor) -> torch.Tensor:
        return base(x) + 0.5 * _shift(x, -2)

    def leak_tiny(x: torch.Tensor) -> torch.Tensor:
        return base(x) + 1e-3 * _shift(x, -1)

    def leak_one_channel(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        nxt = _shift(x, -1)
        out[..., 0] = out[..., 0] + nxt[..., C - 1]
        return out

    def leak_relu(x: torch.Tensor) -> torch.Tensor:
        return base(x) + 0.5 * F.relu(_shift(x, -1))

    def sequence_norm(x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=1, keepdim=True)

    return {
        "clear": [
            ("attention without a mask", full),
            ("reversed cumulative sum (position t sums inputs t..T-1)",
             lambda x: x.flip(1).cumsum(1).flip(1)),
            ("shift left (position t outputs input t+1)", lambda x: _shift(x, -1)),
            ("attention with the causal mask transposed", transposed),
            ("attention whose mask is off by one (reads token t+1)", off_by_one),
        ],
        "local": [
            ("causal attention, except position 0 also reads input 1", leak_first),
            ("causal attention, except every position also reads the last input", leak_last),
            ("causal attention, except position T-2 also reads input T-1", leak_second_last),
            ("causal attention plus the input two positions ahead", leak_two_ahead),
            ("attention that is bidirectional inside blocks of 4 tokens", chunked),
        ],
        "subtle": [
            ("causal attention plus 1e-3 times the next input", leak_tiny),
            ("causal attention plus the next input's last channel, into channel 0",
             leak_one_channel),
            ("causal attention plus relu(next input)", leak_relu),
            ("subtracting the mean over the whole sequence", sequence_norm),
        ],
    }


def _verdict(fn: Callable, candidate: SeqFn, C: int, name: str) -> bool:
    result = fn(candidate, C)
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if type(result).__name__ == "bool_":  # numpy.bool_
        result = bool(result)
    if not isinstance(result, bool):
        raise CheckFailed(
            f"is_causal should return True or False, got {type(result).__name__} "
            f"{result!r} for {name!r}."
        )
    return result


def _judge(fn: Callable, cases: list[tuple[str, SeqFn]], C: int, want: bool) -> None:
    wrong = [name for name, f in cases if _verdict(fn, f, C, name) != want]
    if wrong:
        if want:
            raise CheckFailed(
                f"is_causal said False for {len(wrong)} causal function(s): "
                + "; ".join(repr(n) for n in wrong)
                + ". These never read a later position; does your test compare with a tolerance "
                "that float noise can beat, or change earlier positions too?"
            )
        raise CheckFailed(
            f"is_causal said True for {len(wrong)} leaky function(s): "
            + "; ".join(repr(n) for n in wrong)
            + ". Each lets some output read a later input: change the inputs after every "
            "position t (not only one), and compare outputs before t exactly (or with a "
            "tolerance far below 1e-3)."
        )


@exercise("ch03.is_causal", "says True for 10 causal functions (masked attention, means, ...)")
def _causal_ok(fn: Callable) -> None:
    for C in (8, 12):
        _judge(fn, _causal_functions(C), C, want=True)


@exercise("ch03.is_causal", "says False for clear leaks (no mask, transposed or off-by-one mask)")
def _leak_clear(fn: Callable) -> None:
    for C in (8, 12):
        _judge(fn, _leaky_functions(C)["clear"], C, want=False)


@exercise("ch03.is_causal", "says False for leaks at one place (first, last, second-last, ...)")
def _leak_local(fn: Callable) -> None:
    for C in (8, 12):
        _judge(fn, _leaky_functions(C)["local"], C, want=False)


@exercise("ch03.is_causal", "says False for subtle leaks (1e-3 in size, one channel, relu)")
def _leak_subtle(fn: Callable) -> None:
    for C in (8, 12):
        _judge(fn, _leaky_functions(C)["subtle"], C, want=False)


# --- predict_shapes ------------------------------------------------------------------------

SHAPE_KEYS = (
    "input_ids", "embeddings", "q", "k", "v", "scores", "attn_output", "logits",
    "next_token_logits",
)

_SHAPE_HINTS = {
    "input_ids": "token ids are [B, T].",
    "embeddings": "one C-vector per token: [B, T, C].",
    "q": "q is [B, Hq, T, D]; D is the given head_dim, which need not be C // Hq.",
    "k": "K has only Hkv heads (GQA: Hq // Hkv query heads share one): [B, Hkv, T, D].",
    "v": "V has only Hkv heads (GQA: Hq // Hkv query heads share one): [B, Hkv, T, D].",
    "scores": "one score per query and key in every query head: [B, Hq, T, T].",
    "attn_output": "o_proj maps the Hq * D head outputs back to the hidden size: [B, T, C].",
    "logits": "V scores at every position: [B, T, V].",
    "next_token_logits": "only the last position predicts the next token: [B, V].",
}


def _true_shapes(B: int, T: int, C: int, Hq: int, Hkv: int, D: int, V: int) -> dict:
    return {
        "input_ids": (B, T), "embeddings": (B, T, C), "q": (B, Hq, T, D), "k": (B, Hkv, T, D),
        "v": (B, Hkv, T, D), "scores": (B, Hq, T, T), "attn_output": (B, T, C),
        "logits": (B, T, V), "next_token_logits": (B, V),
    }


def _as_shape(value: object) -> tuple[int, ...] | None:
    """A tuple of Python ints, or None if `value` is not a sequence of integers."""
    if not isinstance(value, (tuple, list, torch.Size)):
        return None
    if any(isinstance(d, bool) or not hasattr(d, "__index__") for d in value):
        return None
    return tuple(d.__index__() for d in value)


def _not_a_shape(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tuple of ints (a shape), got a tensor of shape {tuple(value.shape)}."
    return f"a tuple of ints, got {value!r}."


def _compare_shapes(fn: Callable, config: tuple[int, ...]) -> None:
    B, T, C, Hq, Hkv, D, V = config
    got = fn(B, T, C, Hq, Hkv, D, V)
    where = f"predict_shapes(B={B}, T={T}, C={C}, Hq={Hq}, Hkv={Hkv}, D={D}, V={V})"
    expect(isinstance(got, dict), f"{where} should return a dict, got {type(got).__name__}.")
    missing = [key for key in SHAPE_KEYS if key not in got]
    expect(not missing, f"{where} is missing the key(s) {missing}.")
    for key, want in _true_shapes(*config).items():
        shape = _as_shape(got[key])
        expect(shape is not None, f"{where}[{key!r}] should be {_not_a_shape(got[key])}")
        expect(shape == want,
               f"{where}[{key!r}] is {shape}, expected {want}: {_SHAPE_HINTS[key]}")


@exercise("ch03.predict_shapes", "returns a dict with all nine keys, each a tuple of ints")
def _shapes_keys(fn: Callable) -> None:
    got = fn(2, 5, 48, 6, 3, 16, 100)
    expect(isinstance(got, dict), f"predict_shapes should return a dict, got {type(got).__name__}.")
    missing = [key for key in SHAPE_KEYS if key not in got]
    expect(not missing, f"predict_shapes is missing the key(s) {missing}; expected {SHAPE_KEYS}.")
    for key in SHAPE_KEYS:
        expect(_as_shape(got[key]) is not None,
               f"predict_shapes(...)[{key!r}] should be {_not_a_shape(got[key])}")


@exercise("ch03.predict_shapes", "gets the paper example's config as a batch of 2 prompts of "
          "5 tokens (C=32, Hq=4, Hkv=2, D=8, V=64)")
def _shapes_paper(fn: Callable) -> None:
    _compare_shapes(fn, (2, 5, 32, 4, 2, 8, 64))  # the chapter measures B=1, T=3 only


@exercise("ch03.predict_shapes", "gets every shape right for 12 configs you have not seen")
def _shapes_random(fn: Callable) -> None:
    fixed = [
        (2, 4, 32, 4, 1, 8, 64),  # MQA (the chapter measures it at B=1, T=3)
        (3, 7, 64, 4, 4, 16, 50),  # MHA, Hq * D == C
        (2, 5, 64, 4, 2, 32, 151936),  # tiny: Hq * D = 128 != C
        (1, 1, 40, 8, 2, 10, 33),  # a single token
    ]
    drawn = []
    for _ in range(8):
        Hkv = int(torch.randint(1, 5, ()))
        Hq = Hkv * int(torch.randint(1, 5, ()))
        drawn.append((
            int(torch.randint(1, 5, ())), int(torch.randint(1, 12, ())),
            int(torch.randint(8, 200, ())), Hq, Hkv, 2 * int(torch.randint(1, 40, ())),
            int(torch.randint(10, 1000, ())),
        ))
    for config in fixed + drawn:
        _compare_shapes(fn, config)
