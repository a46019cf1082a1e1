"""Checks for chapter 02, positions and RoPE: rope_tables, apply_rope, rope_qkv.

Shapes: T tokens, H heads (Hq for queries, Hkv for keys and values), D head dim.
Qwen3 uses the rotate-half convention: dimension i is paired with dimension i + D/2.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape
from minimodel.ops import apply_rope, rope_cos_sin

HEAD_DIMS = (2, 8, 32, 64, 128)
THETAS = (10_000.0, 1_000_000.0)
# float32 angles of positions up to ~2000 carry about 2e-4 rad of rounding, and two correct
# implementations may round differently; the classic mistakes are off by 0.1 to 2.
ATOL = 2e-3
LOW_PRECISION = {torch.bfloat16: 3e-2, torch.float16: 5e-3}  # x in [-4, 4]: a few ulps


def _positions() -> list[torch.Tensor]:
    """Position vectors: from 0, a later chunk, a single decode step, and unsorted ones."""
    return [
        torch.arange(7),  # a prompt
        torch.arange(5) + 37,  # the next chunk of a prompt
        torch.tensor([1000]),  # one decode step, far into a sequence
        torch.randint(0, 2048, (9,)),  # packed tokens of several sequences: any order
    ]


def _cases() -> list[tuple[torch.Tensor, int, float]]:
    return [(p, D, theta) for D in HEAD_DIMS for theta in THETAS for p in _positions()]


def _pos_text(positions: torch.Tensor) -> str:
    pos = positions.tolist()
    return str(pos) if len(pos) <= 6 else "[" + ", ".join(map(str, pos[:5])) + ", ...]"


def _describe(positions: torch.Tensor, D: int, theta: float) -> str:
    return f"positions {_pos_text(positions)}, head_dim {D}, theta {theta:g}"


# --- the mistakes learners make, to name them in a failure message -------------------------


def _tables(positions: torch.Tensor, D: int, theta: float, exponent: float = 2.0,
            interleaved: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [T, D] in float32, optionally built the wrong way."""
    i = torch.arange(D // 2, dtype=torch.float32)
    inv_freq = theta ** (-exponent * i / D)  # [D/2]
    angles = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    if interleaved:
        angles = angles.repeat_interleave(2, dim=-1)  # [a0, a0, a1, a1, ...]
    else:
        angles = torch.cat([angles, angles], dim=-1)  # [a0 .. a_{D/2-1}, a0 .. a_{D/2-1}]
    return angles.cos(), angles.sin()


INTERLEAVED = ("pairs neighbours (2i, 2i+1) as in the RoFormer paper; Qwen3 pairs dimension i "
               "with i + D/2, so the D/2 angles are laid out twice: [a0 .. a(D/2-1), a0 .. "
               "a(D/2-1)]")


def _table_mistakes(positions: torch.Tensor, D: int, theta: float) -> dict[str, tuple]:
    T = len(positions)
    other_theta = 10_000.0 if theta != 10_000.0 else 1_000_000.0
    cos, sin = _tables(positions, D, theta)
    return {
        INTERLEAVED: _tables(positions, D, theta, interleaved=True),
        "uses the exponent i/D; the frequency of pair i is theta^(-2i/D)":
            _tables(positions, D, theta, exponent=1.0),
        "uses theta^(+2i/D); the frequency of pair i is theta^(-2i/D), slower for larger i":
            _tables(positions, D, theta, exponent=-2.0),
        f"ignores theta (it looks like theta = {other_theta:g})":
            _tables(positions, D, other_theta),
        "ignores the positions it is given and uses 0, 1, ..., T-1":
            _tables(torch.arange(T), D, theta),
        "is one position ahead: position p must rotate by p * frequency":
            _tables(positions + 1, D, theta),
        "swaps cos and sin": (sin, cos),
        "negates sin in the second half; the minus sign belongs to rotate_half, the table "
        "repeats the same angles": (cos, torch.cat([sin[:, : D // 2], -sin[:, D // 2 :]], -1)),
        "negates sin in the first half; the minus sign belongs to rotate_half, the table "
        "repeats the same angles": (cos, torch.cat([-sin[:, : D // 2], sin[:, D // 2 :]], -1)),
    }


def _rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([-x2, x1], dim=-1).flatten(-2)


def _rope_mistakes(x: torch.Tensor, positions: torch.Tensor, theta: float) -> dict[str, object]:
    """Outputs [T, H, D] of the classic wrong apply_rope variants, in float32."""
    D = x.shape[-1]
    x32 = x.float()
    out = {}
    for hint, (cos, sin) in _table_mistakes(positions, D, theta).items():
        out[hint] = apply_rope(x32, cos, sin)
    cos, sin = _tables(positions, D, theta, interleaved=True)
    out[INTERLEAVED] = x32 * cos[:, None] + _rotate_every_two(x32) * sin[:, None]
    cos, sin = rope_cos_sin(positions, D, theta)
    out["rotates the wrong way: it should be x * cos + rotate_half(x) * sin with "
        "rotate_half([x1, x2]) = [-x2, x1]"] = apply_rope(x32, cos, -sin)
    out["returns x unrotated"] = x32
    return out


def _hint(actual: torch.Tensor, mistakes: dict[str, object], atol: float) -> str:
    """"; it <what went wrong>" for the first known mistake that `actual` matches, else ""."""
    for hint, wrong in mistakes.items():
        if isinstance(wrong, tuple):
            continue
        assert isinstance(wrong, torch.Tensor)
        if wrong.shape == actual.shape and torch.allclose(actual.float(), wrong, atol=atol):
            return "; it " + hint
    return ""


def _expect_rope_close(actual: object, expected: torch.Tensor, what: str, hint: Callable[[], str],
                       atol: float) -> None:
    try:
        expect_close(actual, expected, what, atol=atol, rtol=atol)
    except CheckFailed as e:
        extra = hint() if isinstance(actual, torch.Tensor) and actual.shape == expected.shape \
            else ""
        raise CheckFailed(str(e) + extra) from None


# --- ch02.rope_tables ----------------------------------------------------------------------


def _call_tables(
    fn: Callable, positions: torch.Tensor, D: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor, str]:
    out = fn(positions.clone(), D, theta)
    what = f"rope_tables({_describe(positions, D, theta)})"
    expect(isinstance(out, (tuple, list)) and len(out) == 2,
           f"{what} should return a tuple (cos, sin), got {type(out).__name__}")
    cos, sin = out
    T = len(positions)
    for name, t in (("cos", cos), ("sin", sin)):
        expect_shape(t, (T, D), f"{what}: {name} [T, D] (each of the D/2 angles appears twice)")
        expect(t.dtype.is_floating_point, f"{what}: {name} should be a float tensor, "
               f"got {t.dtype}")
        expect(t.dtype not in LOW_PRECISION,
               f"{what}: {name} is {t.dtype}; build the tables in float32 (angles like "
               "1000 * 0.97 need more digits than a 16-bit float has)")
    return cos, sin, what


@exercise("ch02.rope_tables", "returns (cos, sin), each float [T, D], for several T and D")
def _tables_shape(fn: Callable) -> str:
    cases = _cases()
    for positions, D, theta in cases:
        _call_tables(fn, positions, D, theta)
    return f"{len(cases)} cases"


@exercise("ch02.rope_tables", "position 0 gives cos = 1 and sin = 0 (no rotation)")
def _tables_zero(fn: Callable) -> None:
    for D in HEAD_DIMS:
        cos, sin, what = _call_tables(fn, torch.zeros(3, dtype=torch.long), D, 1e6)
        expect(torch.allclose(cos.float(), torch.ones(3, D)) and
               torch.allclose(sin.float(), torch.zeros(3, D), atol=1e-6),
               f"{what}: at position 0 every cos should be 1 and every sin 0, got cos "
               f"{cos[0, :4].tolist()}... and sin {sin[0, :4].tolist()}...")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float rounding (vectorised and scalar cos may differ in the last bit)."""
    return torch.allclose(a.float(), b.float(), atol=1e-6, rtol=0)


@exercise("ch02.rope_tables", "the two halves are equal: dimension i pairs with i + D/2")
def _tables_halves(fn: Callable) -> None:
    for positions, D, theta in _cases():
        cos, sin, what = _call_tables(fn, positions, D, theta)
        h = D // 2
        if not (_same(cos[:, :h], cos[:, h:]) and _same(sin[:, :h], sin[:, h:])):
            why = ""
            if D > 2 and _same(cos[:, 0::2], cos[:, 1::2]):
                why = "; your table " + INTERLEAVED
            elif _same(cos[:, :h], cos[:, h:]) and _same(sin[:, :h], -sin[:, h:]):
                why = ("; your sin halves differ in sign: the minus sign belongs to "
                       "rotate_half, the table repeats the same angles")
            raise CheckFailed(f"{what}: columns i and i + D/2 should hold the same angle{why}")


@exercise("ch02.rope_tables",
          "matches minimodel.ops.rope_cos_sin for thetas 1e4 and 1e6 and any positions")
def _tables_values(fn: Callable) -> str:
    cases = _cases()
    for positions, D, theta in cases:
        cos, sin, what = _call_tables(fn, positions, D, theta)
        want_cos, want_sin = rope_cos_sin(positions, D, theta)  # [T, D] float32
        mistakes = _table_mistakes(positions, D, theta)

        def hint(cos=cos, sin=sin, mistakes=mistakes) -> str:
            for text, (c, s) in mistakes.items():
                if torch.allclose(cos.float(), c, atol=ATOL) and \
                        torch.allclose(sin.float(), s, atol=ATOL):
                    return "; it " + text
            return ""

        _expect_rope_close(cos, want_cos, f"{what}: cos", hint, ATOL)
        _expect_rope_close(sin, want_sin, f"{what}: sin", hint, ATOL)
    return f"{len(cases)} cases"


# --- ch02.apply_rope -----------------------------------------------------------------------


def _rope_inputs(
    dtype: torch.dtype = torch.float32,
) -> list[tuple[torch.Tensor, torch.Tensor, float]]:
    """(x [T, H, D], positions [T], theta) over heads, head dims, thetas and positions."""
    cases = []
    for n, (positions, D, theta) in enumerate(_cases()):
        H = (1, 2, 4)[n % 3]
        x = (torch.randn(len(positions), H, D).clamp(-4, 4)).to(dtype)  # [T, H, D]
        cases.append((x, positions, theta))
    return cases


def _call_rope(
    fn: Callable, x: torch.Tensor, positions: torch.Tensor, theta: float
) -> tuple[torch.Tensor, str]:
    T, H, D = x.shape
    what = (f"apply_rope(x [{T}, {H}, {D}] {str(x.dtype).replace('torch.', '')}, "
            f"positions {_pos_text(positions)}, theta {theta:g})")
    out = fn(x.clone(), positions.clone(), theta)
    expect_shape(out, (T, H, D), what)
    expect(out.dtype == x.dtype, f"{what} should return {x.dtype} like x, got {out.dtype} "
           "(compute in float32 if you like, then cast back)")
    return out, what


@exercise("ch02.apply_rope", "keeps x's shape [T, H, D] and dtype (float32, bfloat16, float16)")
def _rope_shape(fn: Callable) -> str:
    n = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for x, positions, theta in _rope_inputs(dtype)[::3]:
            _call_rope(fn, x, positions, theta)
            n += 1
    return f"{n} cases"


@exercise("ch02.apply_rope", "matches minimodel.ops.apply_rope in float32")
def _rope_values(fn: Callable) -> str:
    cases = _rope_inputs()
    for x, positions, theta in cases:
        out, what = _call_rope(fn, x, positions, theta)
        want = apply_rope(x, *rope_cos_sin(positions, x.shape[-1], theta))  # [T, H, D]
        _expect_rope_close(out, want, what,
                           lambda out=out, x=x, p=positions, th=theta:
                           _hint(out, _rope_mistakes(x, p, th), ATOL), ATOL)
    return f"{len(cases)} cases"


def _precision_hint(fn: Callable, x: torch.Tensor, positions: torch.Tensor, theta: float) -> str:
    """Why a 16-bit result is off: wrong math, or precision lost on the way."""
    x32 = x.float()
    try:
        out32 = fn(x32.clone(), positions.clone(), theta)
    except Exception:
        return ""
    want32 = apply_rope(x32, *rope_cos_sin(positions, x.shape[-1], theta))
    if isinstance(out32, torch.Tensor) and out32.shape == want32.shape:
        if torch.allclose(out32.float(), want32, atol=ATOL, rtol=ATOL):
            return ("; the same x in float32 comes out right, so precision is lost on the way: "
                    "build the angles and cos/sin in float32 (bfloat16 cannot even hold "
                    "position 1001), and round only the result to x's dtype")
    return "; it is off in float32 too (see the float32 check)"


@exercise("ch02.apply_rope", "matches minimodel.ops.apply_rope in bfloat16 and float16, "
          "within their precision")
def _rope_low_precision(fn: Callable) -> str:
    n = 0
    for dtype, tol in LOW_PRECISION.items():
        for x, positions, theta in _rope_inputs(dtype)[::2]:
            out, what = _call_rope(fn, x, positions, theta)
            want = apply_rope(x, *rope_cos_sin(positions, x.shape[-1], theta))
            _expect_rope_close(out, want, what,
                               lambda x=x, p=positions, th=theta: _precision_hint(fn, x, p, th),
                               tol)
            n += 1
    return f"{n} cases"


def _pair_lengths(t: torch.Tensor) -> torch.Tensor:
    """[..., D] -> [..., D/2]: the length of each (i, i + D/2) pair."""
    h = t.shape[-1] // 2
    t = t.float()
    return (t[..., :h] ** 2 + t[..., h:] ** 2).sqrt()


@exercise("ch02.apply_rope", "keeps the length of every (i, i + D/2) pair: it only rotates")
def _rope_norms(fn: Callable) -> None:
    for x, positions, theta in _rope_inputs():
        out, what = _call_rope(fn, x, positions, theta)
        diff = float((_pair_lengths(out) - _pair_lengths(x)).abs().max())
        if diff > 1e-3:
            total = float((out.float().norm(dim=-1) - x.float().norm(dim=-1)).abs().max())
            why = (" (the length of each whole vector is kept, so you rotate other pairs; "
                   "Qwen3 pairs dimension i with i + D/2)") if total < 1e-3 else ""
            raise CheckFailed(f"{what}: the length of a pair (x[i], x[i + D/2]) changed by up "
                              f"to {diff:.3g}{why}")


@exercise("ch02.apply_rope", "position 0 leaves x unchanged")
def _rope_zero(fn: Callable) -> None:
    for D in HEAD_DIMS:
        x = torch.randn(3, 2, D)
        out, what = _call_rope(fn, x, torch.zeros(3, dtype=torch.long), 1e6)
        expect_close(out, x, f"{what}: at position 0 the output", atol=1e-6, rtol=1e-6)


@exercise("ch02.apply_rope", "the score q·k depends only on the distance m - n")
def _rope_relative(fn: Callable) -> str:
    n = 0
    for D in HEAD_DIMS[1:]:
        for theta in THETAS:
            q, k = torch.randn(1, 1, D), torch.randn(1, 1, D)
            m, dist = int(torch.randint(0, 500, ())), int(torch.randint(0, 50, ()))
            scores = []
            for shift in (0, 1, 100, 1000):
                qm = fn(q.clone(), torch.tensor([m + dist + shift]), theta)
                kn = fn(k.clone(), torch.tensor([m + shift]), theta)
                expect_shape(qm, (1, 1, D), f"apply_rope of one token [1, 1, {D}]")
                scores.append(float((qm.float() * kn.float()).sum()))
            spread = max(scores) - min(scores)
            expect(spread < 1e-3 * max(1.0, abs(scores[0])),
                   f"head_dim {D}, theta {theta:g}: q at position n + {dist} and k at n should "
                   f"give the same score for every n, got {[round(s, 4) for s in scores]} for "
                   f"n = {m}, {m + 1}, {m + 100}, {m + 1000}")
            n += 1
    return f"{n} (q, k) pairs, 4 shifts each"


@exercise("ch02.apply_rope", "leaves x and positions unchanged")
def _rope_pure(fn: Callable) -> None:
    x, positions = torch.randn(4, 2, 8), torch.arange(4) + 3
    x0, p0 = x.clone(), positions.clone()
    fn(x, positions, 1e4)
    expect(torch.equal(x, x0), "apply_rope changed the x it was given (in place)")
    expect(torch.equal(positions, p0), "apply_rope changed the positions it was given")


# --- ch02.rope_qkv -------------------------------------------------------------------------

QKV_SHAPES = [(5, 4, 2, 32), (1, 8, 2, 64), (6, 2, 2, 8), (3, 16, 8, 128)]  # (T, Hq, Hkv, D)


def _qkv_inputs(dtype: torch.dtype = torch.float32) -> list[tuple]:
    cases = []
    for (T, Hq, Hkv, D), theta in zip(QKV_SHAPES, (1e6, 1e4, 1e6, 1e4), strict=True):
        positions = torch.arange(T) + int(torch.randint(0, 300, ()))  # not starting at 0
        q = torch.randn(T, Hq, D).to(dtype)
        k, v = torch.randn(T, Hkv, D).to(dtype), torch.randn(T, Hkv, D).to(dtype)
        cases.append((q, k, v, positions, theta))
    return cases


def _call_qkv(
    fn: Callable, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    positions: torch.Tensor, theta: float,
) -> tuple[tuple, str]:
    T, Hq, D = q.shape
    Hkv = k.shape[1]
    what = (f"rope_qkv(q [{T}, {Hq}, {D}], k and v [{T}, {Hkv}, {D}], positions "
            f"{_pos_text(positions)}, theta {theta:g})")
    out = fn(q.clone(), k.clone(), v.clone(), positions.clone(), theta)
    expect(isinstance(out, (tuple, list)) and len(out) == 3,
           f"{what} should return a tuple (q, k, v), got {type(out).__name__}")
    for name, got, given in zip("qkv", out, (q, k, v), strict=True):
        expect_shape(got, tuple(given.shape), f"{what}: {name}")
        expect(got.dtype == given.dtype, f"{what}: {name} should stay {given.dtype}, "
               f"got {got.dtype}")
    return out, what


@exercise("ch02.rope_qkv", "returns (q, k, v) with their shapes and dtypes (Hq != Hkv)")
def _qkv_shape(fn: Callable) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        for case in _qkv_inputs(dtype):
            _call_qkv(fn, *case)


@exercise("ch02.rope_qkv", "q and k are rotated at their positions, like minimodel.ops")
def _qkv_rotated(fn: Callable) -> None:
    for q, k, v, positions, theta in _qkv_inputs():
        (q2, k2, _), what = _call_qkv(fn, q, k, v, positions, theta)
        cos, sin = rope_cos_sin(positions, q.shape[-1], theta)
        for name, got, given in (("q", q2, q), ("k", k2, k)):
            if torch.allclose(got.float(), given.float()):
                raise CheckFailed(f"{what}: {name} came back unrotated; RoPE turns both q and k")
            _expect_rope_close(got, apply_rope(given, cos, sin), f"{what}: {name}",
                               lambda got=got, given=given, p=positions, th=theta:
                               _hint(got, _rope_mistakes(given, p, th), ATOL), ATOL)


@exercise("ch02.rope_qkv", "v comes back unchanged: values carry content, not position")
def _qkv_v(fn: Callable) -> None:
    for q, k, v, positions, theta in _qkv_inputs():
        (_, _, v2), what = _call_qkv(fn, q, k, v, positions, theta)
        expect(torch.equal(v2, v), f"{what}: v should come back exactly as it was given; RoPE "
               "rotates q and k only, so that scores depend on distance while the values "
               "that get mixed stay the same at every position")
