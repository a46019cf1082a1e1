"""Checks for chapter 02, positions and RoPE: rope_tables, apply_rope, rope_qkv, and the
interleaved convention: rope_interleaved, interleave_permutation.

Shapes: T tokens, H heads (Hq for queries, Hkv for keys and values), D head dim, C hidden size.
Qwen3 uses the rotate-half convention: dimension i is paired with dimension i + D/2; the
interleaved one (RoFormer, GPT-J) pairs neighbours (2i, 2i+1).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape
from minimodel.ops import apply_rope, rms_norm, rope_cos_sin

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
               "with i + D/2, so columns i and i + D/2 carry the same angle")


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
    out["rotates the wrong way: every pair turns by minus its angle (a sign in the turn "
        "of the pairs is flipped)"] = apply_rope(x32, cos, -sin)
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
               f"{what}: {name} is {t.dtype}, but a 16-bit float cannot hold angles like "
               "1000 * 0.97 precisely enough; the tables are float32")
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


# --- ch02.apply_rope and ch02.rope_interleaved ---------------------------------------------
#
# The same contract and the same properties for both conventions; what differs is which two
# dimensions form a pair, and so which reference and which classic mistakes apply.


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


def rope_interleaved_reference(x: torch.Tensor, positions: torch.Tensor,
                               theta: float) -> torch.Tensor:
    """RoPE with neighbour pairs (2i, 2i+1), pair i turned by p * theta^(-2i/D): [T, H, D]."""
    cos, sin = _tables(positions, x.shape[-1], theta, interleaved=True)  # [T, D]
    x32 = x.float()
    return (x32 * cos[:, None] + _rotate_every_two(x32) * sin[:, None]).to(x.dtype)


def _rope_half_reference(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    return apply_rope(x, *rope_cos_sin(positions, x.shape[-1], theta))


def _interleaved_mistakes(x: torch.Tensor, positions: torch.Tensor,
                          theta: float) -> dict[str, object]:
    """Outputs [T, H, D] of the classic wrong interleaved variants, in float32."""
    D, T = x.shape[-1], len(positions)
    x32 = x.float()

    def turn(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        return x32 * cos[:, None] + _rotate_every_two(x32) * sin[:, None]

    cos, sin = _tables(positions, D, theta, interleaved=True)
    other_theta = 10_000.0 if theta != 10_000.0 else 1_000_000.0
    return {
        "pairs dimension i with i + D/2, Qwen3's rotate-half; this exercise pairs neighbours "
        "(2i, 2i+1)": apply_rope(x32, *rope_cos_sin(positions, D, theta)),
        "pairs neighbours, but its angles are laid out as for rotate-half, so the two "
        "dimensions of a pair turn by different angles": turn(*_tables(positions, D, theta)),
        "rotates the wrong way: every pair turns by minus its angle": turn(cos, -sin),
        "uses the exponent i/D; the frequency of pair i is theta^(-2i/D)":
            turn(*_tables(positions, D, theta, exponent=1.0, interleaved=True)),
        f"ignores theta (it looks like theta = {other_theta:g})":
            turn(*_tables(positions, D, other_theta, interleaved=True)),
        "ignores the positions it is given and uses 0, 1, ..., T-1":
            turn(*_tables(torch.arange(T), D, theta, interleaved=True)),
        "is one position ahead: position p must rotate by p * frequency":
            turn(*_tables(positions + 1, D, theta, interleaved=True)),
        "returns x unrotated": x32,
    }


def _half_pairs(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    h = t.shape[-1] // 2
    return t[..., :h], t[..., h:]


def _neighbour_pairs(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return t[..., 0::2], t[..., 1::2]


# One entry per exercise: its function's name, the reference, the mistakes to name, how to cut
# a vector into its pairs, and what the pairs are called.
CONVENTIONS = {
    "ch02.apply_rope": ("apply_rope", _rope_half_reference, _rope_mistakes, _half_pairs,
                        "(i, i + D/2)", "Qwen3 pairs dimension i with i + D/2"),
    "ch02.rope_interleaved": ("apply_rope_interleaved", rope_interleaved_reference,
                              _interleaved_mistakes, _neighbour_pairs, "(2i, 2i+1)",
                              "this convention pairs neighbours (2i, 2i+1)"),
}


def _call_rope(
    fn: Callable, x: torch.Tensor, positions: torch.Tensor, theta: float,
    label: str = "apply_rope",
) -> tuple[torch.Tensor, str]:
    T, H, D = x.shape
    what = (f"{label}(x [{T}, {H}, {D}] {str(x.dtype).replace('torch.', '')}, "
            f"positions {_pos_text(positions)}, theta {theta:g})")
    out = fn(x.clone(), positions.clone(), theta)
    expect_shape(out, (T, H, D), what)
    expect(out.dtype == x.dtype, f"{what} should return {x.dtype} like x, got {out.dtype}: "
           "the layers around RoPE work in x's dtype")
    return out, what


def _precision_hint(fn: Callable, reference: Callable, x: torch.Tensor, positions: torch.Tensor,
                    theta: float) -> str:
    """Why a 16-bit result is off: wrong math, or precision lost on the way."""
    x32 = x.float()
    try:
        out32 = fn(x32.clone(), positions.clone(), theta)
    except Exception:
        return ""
    want32 = reference(x32, positions, theta)
    if isinstance(out32, torch.Tensor) and out32.shape == want32.shape:
        if torch.allclose(out32.float(), want32, atol=ATOL, rtol=ATOL):
            return ("; the same x in float32 comes out right, so precision is lost on the way: "
                    "a 16-bit float cannot even hold position 1001, and angles, cos/sin or "
                    "products kept in 16 bits lose the digits the rotation needs")
    return "; it is off in float32 too (see the float32 check)"


def _register_rope_checks(name: str) -> None:
    label, reference, mistakes, pairs, pair_text, pairing = CONVENTIONS[name]
    source = "minimodel.ops.apply_rope" if name == "ch02.apply_rope" else "the reference"

    @exercise(name, "keeps x's shape [T, H, D] and dtype (float32, bfloat16, float16)")
    def _shape(fn: Callable) -> str:
        n = 0
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            for x, positions, theta in _rope_inputs(dtype)[::3]:
                _call_rope(fn, x, positions, theta, label)
                n += 1
        return f"{n} cases"

    @exercise(name, f"matches {source} in float32")
    def _values(fn: Callable) -> str:
        cases = _rope_inputs()
        for x, positions, theta in cases:
            out, what = _call_rope(fn, x, positions, theta, label)
            want = reference(x, positions, theta)  # [T, H, D]
            _expect_rope_close(out, want, what,
                               lambda out=out, x=x, p=positions, th=theta:
                               _hint(out, mistakes(x, p, th), ATOL), ATOL)
        return f"{len(cases)} cases"

    @exercise(name, f"matches {source} in bfloat16 and float16, within their precision")
    def _low_precision(fn: Callable) -> str:
        n = 0
        for dtype, tol in LOW_PRECISION.items():
            for x, positions, theta in _rope_inputs(dtype)[::2]:
                out, what = _call_rope(fn, x, positions, theta, label)
                want = reference(x, positions, theta)
                _expect_rope_close(out, want, what,
                                   lambda x=x, p=positions, th=theta:
                                   _precision_hint(fn, reference, x, p, th), tol)
                n += 1
        return f"{n} cases"

    @exercise(name, f"keeps the length of every {pair_text} pair: it only rotates")
    def _norms(fn: Callable) -> None:
        for x, positions, theta in _rope_inputs():
            out, what = _call_rope(fn, x, positions, theta, label)
            (a, b), (a0, b0) = pairs(out.float()), pairs(x.float())
            diff = float(((a**2 + b**2).sqrt() - (a0**2 + b0**2).sqrt()).abs().max())
            if diff > 1e-3:
                total = float((out.float().norm(dim=-1) - x.float().norm(dim=-1)).abs().max())
                why = (f" (the length of each whole vector is kept, so you rotate other pairs; "
                       f"{pairing})") if total < 1e-3 else ""
                raise CheckFailed(f"{what}: the length of a pair {pair_text} changed by up to "
                                  f"{diff:.3g}{why}")

    @exercise(name, "position 0 leaves x unchanged")
    def _zero(fn: Callable) -> None:
        for D in HEAD_DIMS:
            x = torch.randn(3, 2, D)
            out, what = _call_rope(fn, x, torch.zeros(3, dtype=torch.long), 1e6, label)
            expect_close(out, x, f"{what}: at position 0 the output", atol=1e-6, rtol=1e-6)

    @exercise(name, "the score q·k depends only on the distance m - n")
    def _relative(fn: Callable) -> str:
        n = 0
        for D in HEAD_DIMS[1:]:
            for theta in THETAS:
                q, k = torch.randn(1, 1, D), torch.randn(1, 1, D)
                m, dist = int(torch.randint(0, 500, ())), int(torch.randint(0, 50, ()))
                scores = []
                for shift in (0, 1, 100, 1000):
                    qm = fn(q.clone(), torch.tensor([m + dist + shift]), theta)
                    kn = fn(k.clone(), torch.tensor([m + shift]), theta)
                    expect_shape(qm, (1, 1, D), f"{label} of one token [1, 1, {D}]")
                    scores.append(float((qm.float() * kn.float()).sum()))
                spread = max(scores) - min(scores)
                expect(spread < 1e-3 * max(1.0, abs(scores[0])),
                       f"head_dim {D}, theta {theta:g}: q at position n + {dist} and k at n "
                       f"should give the same score for every n, got "
                       f"{[round(s, 4) for s in scores]} for n = {m}, {m + 1}, {m + 100}, "
                       f"{m + 1000}")
                n += 1
        return f"{n} (q, k) pairs, 4 shifts each"

    @exercise(name, "leaves x and positions unchanged")
    def _pure(fn: Callable) -> None:
        x, positions = torch.randn(4, 2, 8), torch.arange(4) + 3
        x0, p0 = x.clone(), positions.clone()
        fn(x, positions, 1e4)
        expect(torch.equal(x, x0), f"{label} changed the x it was given (in place)")
        expect(torch.equal(positions, p0), f"{label} changed the positions it was given")


_register_rope_checks("ch02.apply_rope")
_register_rope_checks("ch02.rope_interleaved")


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


# --- ch02.interleave_permutation -----------------------------------------------------------
#
# A checkpoint trained with rotate-half, converted for a model that uses interleaved RoPE.
# Graded on behaviour: the converted layer must give the same scores and outputs, whatever
# reordering (or sign flips) the learner found.

ATTN_KEYS = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
             "q_norm.weight", "k_norm.weight")
# (Hq, Hkv, D, C): one head first (so a mix-up between heads can be named), then GQA layouts,
# head dims 2 to 128, and hidden sizes that are not Hq * D.
PERM_SHAPES = [(1, 1, 8, 16), (1, 1, 32, 24), (2, 2, 2, 8), (2, 1, 4, 12), (4, 2, 16, 32),
               (4, 4, 64, 48), (6, 3, 32, 40), (8, 2, 128, 64)]
PERM_ATOL = 1e-4  # the same sums in another order; the mistakes are off by 0.1 or more


def _layer_weights(Hq: int, Hkv: int, D: int, C: int,
                   dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    """One attention layer's weights, Hugging Face names without the layer prefix."""
    w = {
        "q_proj.weight": torch.randn(Hq * D, C) / C**0.5,  # [Hq*D, C]
        "k_proj.weight": torch.randn(Hkv * D, C) / C**0.5,  # [Hkv*D, C]
        "v_proj.weight": torch.randn(Hkv * D, C) / C**0.5,  # [Hkv*D, C]
        "o_proj.weight": torch.randn(C, Hq * D) / (Hq * D) ** 0.5,  # [C, Hq*D]
        "q_norm.weight": 0.5 + torch.rand(D),  # [D]: every dimension its own scale, as trained
        "k_norm.weight": 0.5 + torch.rand(D),  # [D]
    }
    return {k: v.to(dtype) for k, v in w.items()}


def _attention_layer(w: dict[str, torch.Tensor], x: torch.Tensor, positions: torch.Tensor,
                     theta: float, D: int, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Qwen3's attention layer on x [T, C] -> (causal scores [Hq, T, T], output [T, C])."""
    T = x.shape[0]
    f = {k: v.float() for k, v in w.items()}
    q = (x @ f["q_proj.weight"].T).view(T, -1, D)  # [T, Hq, D]
    k = (x @ f["k_proj.weight"].T).view(T, -1, D)  # [T, Hkv, D]
    v = (x @ f["v_proj.weight"].T).view(T, -1, D)  # [T, Hkv, D]
    q, k = rms_norm(q, f["q_norm.weight"], 1e-6), rms_norm(k, f["k_norm.weight"], 1e-6)
    rope = rope_interleaved_reference if interleaved else _rope_half_reference
    q, k = rope(q, positions, theta), rope(k, positions, theta)
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)  # [T, Hq, D]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    scores = torch.einsum("thd,shd->hts", q, k) / D**0.5  # [Hq, T, T]
    probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    out = torch.einsum("hts,shd->thd", probs, v).reshape(T, -1) @ f["o_proj.weight"].T
    return scores.masked_fill(~causal, 0.0), out  # [Hq, T, T], [T, C]


def _perm_what(w: dict[str, torch.Tensor], D: int) -> str:
    Hq, C = w["q_proj.weight"].shape[0] // D, w["q_proj.weight"].shape[1]
    Hkv = w["k_proj.weight"].shape[0] // D
    return f"interleave_permutation(weights of Hq={Hq}, Hkv={Hkv}, C={C}, head_dim={D})"


def _call_perm(fn: Callable, w: dict[str, torch.Tensor], D: int) -> tuple[dict, str]:
    what = _perm_what(w, D)
    out = fn({k: v.clone() for k, v in w.items()}, D)
    expect(isinstance(out, dict), f"{what} should return a dict of weights, got "
           f"{type(out).__name__}")
    missing = [k for k in ATTN_KEYS if k not in out]
    expect(not missing, f"{what}: the result lacks {missing}; return every weight of the layer, "
           "changed or not")
    for k in ATTN_KEYS:
        expect_shape(out[k], tuple(w[k].shape), f"{what}: {k}")
        expect(out[k].dtype == w[k].dtype, f"{what}: {k} should stay {w[k].dtype}, got "
               f"{out[k].dtype}")
    return out, what


def _perm_inputs() -> list[tuple[int, int, int, int, torch.Tensor, float]]:
    """(Hq, Hkv, D, C, positions, theta): positions of a later chunk, never from 0."""
    cases = []
    for n, (Hq, Hkv, D, C) in enumerate(PERM_SHAPES):
        T = int(torch.randint(3, 9, ()))
        positions = torch.arange(T) + int(torch.randint(1, 3000, ()))
        cases.append((Hq, Hkv, D, C, positions, THETAS[n % 2]))
    return cases


def _score_hint(w: dict, out: dict, x: torch.Tensor, positions: torch.Tensor, theta: float,
                D: int, one_head_passed: bool) -> str:
    """What a converted layer whose scores are wrong most likely did."""
    def kept(key: str) -> bool:
        return torch.equal(out[key].float(), w[key].float())

    if kept("q_proj.weight") and kept("k_proj.weight"):
        return ("; q_proj and k_proj came back as they were: interleaved RoPE turns other "
                "dimensions together than rotate-half, so the same rows no longer meet their "
                "partners")
    for a, b in (("q", "k"), ("k", "q")):
        if kept(f"{a}_proj.weight"):
            return (f"; {a}_proj.weight came back as it was while {b}_proj's rows moved: a "
                    f"score multiplies dimension j of q with dimension j of k, so both need "
                    f"the same reordering")
    def rows_moved(key: str) -> bool:  # the same rows (up to sign), in another order
        a, b = out[key].float().abs().sort(0).values, w[key].float().abs().sort(0).values
        return torch.equal(a, b)

    for a in ("q", "k"):  # with D = 2 nothing has to move
        if D > 2 and kept(f"{a}_norm.weight") and rows_moved(f"{a}_proj.weight"):
            return (f"; {a}_norm.weight stayed where it was while the rows of {a}_proj moved: "
                    f"each of its D weights scales one dimension of a head, so it belongs with "
                    f"that dimension")
    backwards, _ = _attention_layer(w, x, -positions, theta, D, interleaved=False)
    ours, _ = _attention_layer(out, x, positions, theta, D, interleaved=True)
    if torch.allclose(ours, backwards, atol=PERM_ATOL, rtol=PERM_ATOL):
        return ("; every pair turns the opposite way (the scores are rotate-half's at minus the "
                "positions): within each pair the two dimensions sit in swapped order")
    if one_head_passed and w["q_proj.weight"].shape[0] > D:
        return ("; it is right with one head and wrong with several: each head is D rows of "
                "its own, and the reordering happens inside every head")
    return ("; the reordering does not bring the two dimensions of each rotate-half pair "
            "(i, i + D/2) to where interleaved RoPE turns them together, at frequency f_i")


def _output_hint(w: dict, out: dict) -> str:
    v_moved = not torch.equal(out["v_proj.weight"].float(), w["v_proj.weight"].float())
    o_moved = not torch.equal(out["o_proj.weight"].float(), w["o_proj.weight"].float())
    if v_moved and not o_moved:
        return ("; v_proj's rows moved but o_proj's columns did not, so o_proj reads every "
                "value dimension from the wrong place (and RoPE never touches v)")
    if o_moved and not v_moved:
        return ("; o_proj's columns moved but v_proj's rows did not, so o_proj reads every "
                "value dimension from the wrong place (and RoPE never touches v)")
    return "; v_proj and o_proj no longer fit together: column j of o_proj reads value dim j"


@exercise("ch02.interleave_permutation",
          "returns the six weights of the layer with their shapes and dtypes")
def _perm_shape(fn: Callable) -> str:
    n = 0
    for dtype in (torch.float32, torch.bfloat16):
        for Hq, Hkv, D, C in PERM_SHAPES:
            _call_perm(fn, _layer_weights(Hq, Hkv, D, C, dtype), D)
            n += 1
    return f"{n} layers"


@exercise("ch02.interleave_permutation",
          "with interleaved RoPE, every q·k score equals rotate-half's (head dims 2 to 128, GQA)")
def _perm_scores(fn: Callable) -> str:
    one_head_passed = False
    cases = _perm_inputs()
    for Hq, Hkv, D, C, positions, theta in cases:
        for dtype in (torch.float32, torch.bfloat16):
            w = _layer_weights(Hq, Hkv, D, C, dtype)
            x = torch.randn(len(positions), C)  # [T, C]
            out, what = _call_perm(fn, w, D)
            want, _ = _attention_layer(w, x, positions, theta, D, interleaved=False)
            got, _ = _attention_layer(out, x, positions, theta, D, interleaved=True)
            if not torch.allclose(got, want, atol=PERM_ATOL, rtol=PERM_ATOL):
                worst = float((got - want).abs().max())
                raise CheckFailed(
                    f"{what}, positions {_pos_text(positions)}, theta {theta:g}: the scores of "
                    f"the converted layer with interleaved RoPE differ from the original's "
                    f"with rotate-half by up to {worst:.3g}"
                    + _score_hint(w, out, x, positions, theta, D, one_head_passed)
                )
            one_head_passed = one_head_passed or Hq == 1
    return f"{len(cases) * 2} layers, float32 and bfloat16 weights"


@exercise("ch02.interleave_permutation",
          "with interleaved RoPE, the layer's output equals rotate-half's")
def _perm_output(fn: Callable) -> str:
    cases = _perm_inputs()
    for Hq, Hkv, D, C, positions, theta in cases:
        w = _layer_weights(Hq, Hkv, D, C)
        x = torch.randn(len(positions), C)
        out, what = _call_perm(fn, w, D)
        want_scores, want = _attention_layer(w, x, positions, theta, D, interleaved=False)
        got_scores, got = _attention_layer(out, x, positions, theta, D, interleaved=True)
        if not torch.allclose(got, want, atol=PERM_ATOL, rtol=PERM_ATOL):
            same_scores = torch.allclose(got_scores, want_scores, atol=PERM_ATOL, rtol=PERM_ATOL)
            raise CheckFailed(
                f"{what}, positions {_pos_text(positions)}, theta {theta:g}: the output of the "
                f"converted layer differs from the original's by up to "
                f"{float((got - want).abs().max()):.3g}"
                + (_output_hint(w, out) if same_scores else " (its scores differ already: see "
                   "the check of the scores)")
            )
    return f"{len(cases)} layers"


@exercise("ch02.interleave_permutation", "leaves the given weights unchanged")
def _perm_pure(fn: Callable) -> None:
    w = _layer_weights(4, 2, 16, 32)
    before = {k: v.clone() for k, v in w.items()}
    fn(w, 16)
    changed = [k for k in ATTN_KEYS if not torch.equal(w[k], before[k])]
    expect(not changed, f"interleave_permutation changed the weights it was given: {changed} "
           "(the original checkpoint must stay usable)")
