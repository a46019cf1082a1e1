"""Checks of ch04.merge_qkv: the rows of w_q, w_k and w_v stacked into one weight, so that one
matmul and a split give q, k and v.

Shapes: C hidden, Hq query heads, Hkv KV heads, D head dim.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch04.common import _name
from minimodel.grading.core import CheckFailed, exercise, expect, expect_shape
from minimodel.grading.i18n import tr

# (C, Hq, Hkv, D): MHA, GQA, MQA, and Hq * D != C as in Qwen3
_QKV_CASES = ((32, 4, 4, 8), (64, 4, 2, 32), (48, 6, 1, 16), (40, 8, 2, 10))


def _qkv_weights(
    C: int, Hq: int, Hkv: int, D: int, dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random (w_q [Hq*D, C], w_k [Hkv*D, C], w_v [Hkv*D, C])."""
    return (torch.randn(Hq * D, C).to(dtype), torch.randn(Hkv * D, C).to(dtype),
            torch.randn(Hkv * D, C).to(dtype))


@exercise("ch04.merge_qkv", "returns [(Hq + 2*Hkv) * D, C] for MHA, GQA, MQA and Hq*D != C")
def _merge_shape(fn: Callable) -> None:
    for C, Hq, Hkv, D in _QKV_CASES:
        expect_shape(fn(*_qkv_weights(C, Hq, Hkv, D)), ((Hq + 2 * Hkv) * D, C),
                     tr("merge_qkv for C={C}, Hq={Hq}, Hkv={Hkv}, D={D}", C=C, Hq=Hq, Hkv=Hkv,
                        D=D))


@exercise("ch04.merge_qkv", "one matmul x @ W.T then a split gives q, k, v (in that order)")
def _merge_matmul(fn: Callable) -> None:
    for C, Hq, Hkv, D in _QKV_CASES:
        w_q, w_k, w_v = _qkv_weights(C, Hq, Hkv, D)
        merged = fn(w_q, w_k, w_v)
        where = tr("merge_qkv for C={C}, Hq={Hq}, Hkv={Hkv}, D={D}", C=C, Hq=Hq, Hkv=Hkv, D=D)
        expect_shape(merged, ((Hq + 2 * Hkv) * D, C), where)
        x = torch.randn(3, C)
        q, k, v = (x @ merged.T).split([Hq * D, Hkv * D, Hkv * D], dim=-1)
        for name, got, w in (("q", q, w_q), ("k", k, w_k), ("v", v, w_v)):
            if not torch.allclose(got, x @ w.T, atol=1e-4, rtol=1e-4):
                raise CheckFailed(tr(
                    "{where}: the {name} slice of x @ merged.T is not x @ w_{name}.T. Stack the "
                    "rows of w_q, then w_k, then w_v along dim 0 (the order of "
                    "PACKED_MODULES['qkv_proj']).", where=where, name=name))


@exercise("ch04.merge_qkv", "keeps the weights' dtype and values exactly (bfloat16)")
def _merge_dtype(fn: Callable) -> None:
    w_q, w_k, w_v = _qkv_weights(64, 4, 2, 32, torch.bfloat16)
    merged = fn(w_q, w_k, w_v)
    expect_shape(merged, (256, 64), tr("merge_qkv of bfloat16 weights"))
    expect(merged.dtype == torch.bfloat16,
           tr("merge_qkv of bfloat16 weights returned {dtype}; keep their dtype.",
              dtype=_name(merged.dtype)))
    expect(torch.equal(merged, torch.cat([w_q, w_k, w_v])),
           tr("merge_qkv changed the weights' values: the merged weight holds the rows of w_q, "
              "then w_k, then w_v, exactly as they are (no transpose, no arithmetic)."))
