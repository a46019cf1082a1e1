"""Checks of ch09.merge_states: two attention states (o, lse) over parts of the keys -> the state
over all of them.

The expected values are the merge in float64 (_merge64), or attention over the whole key set.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch09.common import _TOL, _close, _pair, _unchanged, _worst
from minimodel.grading.ch09.reference import _attention64, _qkv
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import Text, tr


def _merge64(o_a, lse_a, o_b, lse_b) -> tuple[torch.Tensor, torch.Tensor]:
    lse = torch.logaddexp(lse_a.double(), lse_b.double())
    w_a, w_b = torch.exp(lse_a.double() - lse), torch.exp(lse_b.double() - lse)
    w_a, w_b = w_a.nan_to_num(0.0), w_b.nan_to_num(0.0)
    return o_a.double() * w_a[..., None] + o_b.double() * w_b[..., None], lse


def _call_merge(fn: Callable, o_a, lse_a, o_b, lse_b, what: str):
    copies = tuple(t.clone() for t in (o_a, lse_a, o_b, lse_b))
    o, lse = _pair(fn(o_a, lse_a, o_b, lse_b), what)
    _unchanged((o_a, lse_a, o_b, lse_b), copies, what)
    T, H, D = o_a.shape
    expect_shape(o, (T, H, D), tr("{what}: o", what=what))
    expect_shape(lse, (T, H), tr("{what}: lse", what=what))
    return o, lse


def _merge_hint(o, lse, o_a, lse_a, o_b, lse_b) -> Text | str:
    """The classic mistake (o, lse) shows (a hint that starts with a space), or ''."""
    if not (bool(o.isfinite().all()) and bool(lse.isfinite().all())):
        return tr(" It holds inf or nan: exp(lse) overflows float32 above about 88.7 (and "
                  "underflows to 0 below about -103, so 0/0). Only differences of lse values "
                  "should meet an exp, taken against the larger of the two.")
    want_o, want_lse = _merge64(o_a, lse_a, o_b, lse_b)
    base2 = torch.logaddexp2(lse_a.double(), lse_b.double())
    if _close(lse, base2, 1e-4) and not _close(lse, want_lse, 1e-4):
        return tr(" The lse matches a base-2 merge (log2 of 2^a + 2^b). The states here hold "
                  "natural logs: merge with exp and log.")
    if _close(o, (o_a.double() + o_b.double()) / 2, 1e-4):
        return tr(" The output is the plain average of the two: each side counts in proportion "
                  "to its share of the total exp-sum, which its lse gives.")
    if _close(lse, torch.maximum(lse_a, lse_b).double(), 1e-4):
        return tr(" The lse is the larger of the two; the merged lse is the log of the sum of "
                  "both exp-sums, a little above the larger one.")
    if _close(lse, lse_a.double() + lse_b.double(), 1e-4):
        return tr(" The lse is the sum of the two; the exp-sums add, so their logs do not.")
    return ""


def _merge_case(fn: Callable, o_a, lse_a, o_b, lse_b, what: str, tol: float = _TOL) -> None:
    o, lse = _call_merge(fn, o_a, lse_a, o_b, lse_b, what)
    want_o, want_lse = _merge64(o_a, lse_a, o_b, lse_b)
    if _close(o, want_o, tol) and _close(lse, want_lse, tol):
        return
    worst = max(_worst(o, want_o), _worst(lse, want_lse))
    raise CheckFailed(tr("{what} is off by up to {worst:.3g} from the state over both key "
                         "sets.{hint}", what=what, worst=worst,
                         hint=_merge_hint(o, lse, o_a, lse_a, o_b, lse_b)))


@exercise("ch09.merge_states", "the states of two parts of the keys merge into the state of "
          "all of them (SDPA over the whole)")
def _merge_halves(fn: Callable) -> str:
    for _ in range(5):
        T, Hkv, D = int(torch.randint(1, 6, ())), int(torch.randint(1, 4, ())), 16
        Hq = Hkv * int(torch.randint(1, 4, ()))
        S = int(torch.randint(2, 30, ()))
        cut = int(torch.randint(1, S, ()))
        q, k, v = _qkv(T, S, Hq, Hkv, D, 2.0)
        o_a, lse_a = _attention64(q, k[:cut], v[:cut], None)
        o_b, lse_b = _attention64(q, k[cut:], v[cut:], None)
        what = tr("merge_states of attention over keys 0..{end_a} and {cut}..{end} "
                  "(o [{T}, {Hq}, {D}])", end_a=cut - 1, cut=cut, end=S - 1, T=T, Hq=Hq, D=D)
        o, lse = _call_merge(fn, o_a.float(), lse_a.float(), o_b.float(), lse_b.float(), what)
        want_o, want_lse = _attention64(q, k, v, None)
        if not (_close(o, want_o) and _close(lse, want_lse)):
            worst = max(_worst(o, want_o), _worst(lse, want_lse))
            raise CheckFailed(tr("{what} is off by up to {worst:.3g} from attention over all "
                                 "{S} keys.{hint}", what=what, worst=worst, S=S,
                                 hint=_merge_hint(o, lse, o_a, lse_a, o_b, lse_b)))
    return tr("5 random cuts")


def _states(T: int, H: int, D: int, lse_center: float, spread: float):
    return (torch.randn(T, H, D), lse_center + torch.randn(T, H) * spread,
            torch.randn(T, H, D), lse_center + torch.randn(T, H) * spread)


@exercise("ch09.merge_states", "stable for lse values in the thousands (and far below zero)")
def _merge_large(fn: Callable) -> None:
    for center in (3000.0, 1000.0, -2000.0):
        o_a, lse_a, o_b, lse_b = _states(4, 3, 8, center, 2.0)
        _merge_case(fn, o_a, lse_a, o_b, lse_b, tr("merge_states with lse values around "
                                                   "{center:g}", center=center), tol=1e-4)


@exercise("ch09.merge_states", "one side far larger: the merge is that side; an empty side "
          "(lse = -inf) changes nothing")
def _merge_lopsided(fn: Callable) -> None:
    o_a, lse_a, o_b, lse_b = _states(3, 2, 8, 0.0, 1.0)
    _merge_case(fn, o_a, lse_a + 200.0, o_b, lse_b,
                tr("merge_states with lse_a 200 above lse_b"))
    empty = torch.full_like(lse_b, float("-inf"))
    _merge_case(fn, o_a, lse_a, torch.zeros_like(o_b), empty,
                tr("merge_states with an empty second state (o_b = 0, lse_b = -inf)"))
    _merge_case(fn, torch.zeros_like(o_a), empty, o_b, lse_b,
                tr("merge_states with an empty first state (o_a = 0, lse_a = -inf)"))


@exercise("ch09.merge_states", "order does not matter: merge(a, b) = merge(b, a), and three "
          "chunks merge the same either way")
def _merge_order(fn: Callable) -> None:
    T, Hq, Hkv, D, S = 3, 4, 2, 8, 24
    q, k, v = _qkv(T, S, Hq, Hkv, D)
    parts = [_attention64(q, k[a:b], v[a:b], None) for a, b in ((0, 5), (5, 17), (17, 24))]
    parts = [(o.float(), lse.float()) for o, lse in parts]
    (o1, l1), (o2, l2), (o3, l3) = parts
    want_o, want_lse = _attention64(q, k, v, None)
    for name, (o, lse) in (
        ("merge(merge(c1, c2), c3)", fn(*_pair(fn(o1, l1, o2, l2), "merge_states"), o3, l3)),
        ("merge(c1, merge(c2, c3))", fn(o1, l1, *_pair(fn(o2, l2, o3, l3), "merge_states"))),
        ("merge(c3, merge(c2, c1))", fn(o3, l3, *_pair(fn(o2, l2, o1, l1), "merge_states"))),
    ):
        expect(_close(o, want_o) and _close(lse, want_lse),
               tr("{name} over three chunks of 24 keys is off by up to {worst:.3g} from "
                  "attention over all of them", name=name,
                  worst=max(_worst(o, want_o), _worst(lse, want_lse))))


@exercise("ch09.merge_states", "bfloat16 outputs with float32 lse (FlashInfer's attention "
          "states) and float64")
def _merge_dtypes(fn: Callable) -> None:
    o_a, lse_a, o_b, lse_b = _states(5, 4, 16, 10.0, 3.0)
    _merge_case(fn, o_a.bfloat16(), lse_a, o_b.bfloat16(), lse_b,
                tr("merge_states with bfloat16 o and float32 lse"), tol=2e-2)
    _merge_case(fn, o_a.double(), lse_a.double(), o_b.double(), lse_b.double(),
                tr("merge_states in float64"))
