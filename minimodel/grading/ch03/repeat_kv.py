"""Checks of ch03.repeat_kv: each KV head copied `groups` times in place, so that query head h
reads KV head h // groups, compared with minimodel.reference's repeat_kv.

Shapes: B batch, Hkv KV heads, S keys, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import tr
from minimodel.reference.model import repeat_kv as ref_repeat_kv

# (B, Hkv, S, D, groups): MHA (groups 1), GQA, MQA (Hkv 1)
_KV_CASES = ((1, 2, 5, 4, 2), (2, 3, 4, 8, 4), (1, 4, 7, 16, 1), (3, 1, 3, 8, 5), (2, 8, 2, 4, 2))


@exercise("ch03.repeat_kv", "returns [B, Hkv*groups, S, D] for MHA, GQA and MQA shapes")
def _kv_shape(fn: Callable) -> None:
    for B, Hkv, S, D, g in _KV_CASES:
        x = torch.randn(B, Hkv, S, D)
        expect_shape(fn(x, g), (B, Hkv * g, S, D),
                     tr("repeat_kv(x of shape {shape}, {groups})", shape=(B, Hkv, S, D), groups=g))


@exercise("ch03.repeat_kv", "query head h reads KV head h // groups (order 0,0,..,1,1,..)")
def _kv_order(fn: Callable) -> None:
    for B, Hkv, S, D, g in _KV_CASES:
        x = torch.randn(B, Hkv, S, D)
        out = fn(x, g)
        expect_shape(out, (B, Hkv * g, S, D),
                     tr("repeat_kv(x of shape {shape}, {groups})", shape=(B, Hkv, S, D), groups=g))
        for h in range(Hkv * g):
            if torch.equal(out[:, h], x[:, h // g]):
                continue
            tiled = Hkv > 1 and torch.equal(out, x.repeat(1, g, 1, 1))
            hint = (
                tr(" Your heads are in the order 0,1,..,0,1,.. (the whole stack tiled); query "
                   "heads come in consecutive groups, so each KV head must be copied `groups` "
                   "times in place: 0,0,..,1,1,..")
                if tiled
                else tr(" Head h must be an exact copy of x[:, h // groups].")
            )
            raise CheckFailed(tr(
                "with Hkv={Hkv}, groups={groups}: output head {h} is not KV head {kv}.{hint}",
                Hkv=Hkv, groups=g, h=h, kv=h // g, hint=hint))


@exercise("ch03.repeat_kv", "keeps the dtype (float32, bfloat16, float16) and leaves x unchanged")
def _kv_dtype(fn: Callable) -> None:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        x = torch.randn(2, 1, 3, 4).to(dtype)  # one KV head: the order cannot matter here
        before = x.clone()
        out = fn(x, 3)
        expect_shape(out, (2, 3, 3, 4), f"repeat_kv(x {dtype}, 3)")
        expect(out.dtype == dtype, tr("repeat_kv on {dtype} returned {got}; keep x's dtype.",
                                      dtype=dtype, got=out.dtype))
        expect(torch.equal(x, before), tr("repeat_kv changed its input x; return a new tensor."))
        expect(torch.equal(out, ref_repeat_kv(x, 3)),
               tr("repeat_kv on {dtype} changed the values.", dtype=dtype))
