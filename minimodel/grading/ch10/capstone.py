"""Checks of the capstone ch10.tp_decoder_layer: one rank in this process first, then two ranks
in real processes (ranks), whose reports the other checks of one check() call share: each rank's
output and K/V against the reference layer, the two all-reduces on the wire, and each rank's
share of the matmul work."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from minimodel.grading.ch10.ranks import _PIECES, _TP_WORLD, _two_ranks
from minimodel.grading.ch10.reference import (
    _TP_TOL,
    _kv_problem,
    _out_problem,
    _rank_kv_heads,
    _tp_cases,
    _tp_one_rank,
    _tp_reference,
)
from minimodel.grading.core import CheckFailed, exercise, expect

_LAST_RUN: list = []  # [(fn, reports or the failure)]: the checks of one check() call share it


@exercise("ch10.tp_decoder_layer", "with one rank (world_size=1, no process group) it is the "
          "reference decoder layer within 1e-4, and keeps K and V of every KV head")
def _tp_one_rank_check(fn: Callable) -> None:
    _LAST_RUN.clear()  # the first check of a check() call: the process run starts afresh
    _tp_one_rank(fn)


def _tp_reports(fn: Callable) -> list[list[dict]]:
    """The two ranks' reports of fn: run by the first check that needs them, then shared by
    the other checks of the same check() call (a failure too)."""
    if _LAST_RUN and _LAST_RUN[0][0] is fn:
        reports = _LAST_RUN[0][1]
        if isinstance(reports, BaseException):
            raise reports
        return reports
    _LAST_RUN.clear()
    try:
        reports = _two_ranks(fn)
    except (CheckFailed, NotImplementedError) as e:
        _LAST_RUN.append((fn, e))
        raise
    _LAST_RUN.append((fn, reports))
    return reports


def _each(reports: list[list[dict]]) -> Iterator[tuple[int, int, dict]]:
    """(case index, rank, that rank's report of the case) for every case and rank."""
    for rank, per_case in enumerate(reports):
        for i, rep in enumerate(per_case):
            yield i, rank, rep


@exercise("ch10.tp_decoder_layer", "two gloo processes (bard layer 0; a layer whose one KV head "
          "both ranks hold): every rank returns the reference layer's output within 1e-4")
def _tp_outputs(fn: Callable) -> None:
    for i, rank, rep in _each(_tp_reports(fn)):
        problem = _out_problem(torch.from_numpy(rep["out"]), i, rank, _TP_WORLD)
        if problem:
            raise CheckFailed(problem + " With one rank it was right, so look at what the "
                              "ranks must add up and what each must hold: which rows of each "
                              "weight a rank uses, and where the partial sums are all-reduced.")


@exercise("ch10.tp_decoder_layer", "each rank keeps the K (after QK-norm and RoPE) and V of the "
          "KV heads its query heads read, replicated when there are fewer KV heads than ranks")
def _tp_kv(fn: Callable) -> None:
    for i, rank, rep in _each(_tp_reports(fn)):
        problem = _kv_problem(torch.from_numpy(rep["k"]), torch.from_numpy(rep["v"]), i, rank,
                              _TP_WORLD)
        if problem:
            raise CheckFailed(problem)


@exercise("ch10.tp_decoder_layer", "two all-reduces per layer, of [T, C] each: the first sums "
          "o_proj's partials, the second down_proj's (recorded on the wire)")
def _tp_wire(fn: Callable) -> str:
    for i, rank, rep in _each(_tp_reports(fn)):
        name, cfg, _, x = _tp_cases()[i]
        ref = _tp_reference(i)
        shapes = [s for s, _ in rep["reduces"]]
        where = f"On {name}, rank {rank} of {_TP_WORLD}"
        expect(len(shapes) == 2, (
            f"{where}: {len(shapes)} all-reduce(s) {shapes}. A Qwen3 block needs exactly two: "
            "one after the row-parallel o_proj and one after the row-parallel down_proj"
            + (". With none, no rank ever sees the others' partial sums." if not shapes else
               ".")))
        for j, ((shape, summed), branch, layer) in enumerate(
                zip(rep["reduces"], ("attn", "mlp"), ("o_proj", "down_proj"), strict=True)):
            expect(shape == tuple(x.shape), (
                f"{where}: all-reduce {j + 1} carried a tensor of shape {list(shape)}; both "
                f"carry the [T, C] = {list(x.shape)} partial sums of a row-parallel layer."))
            got = torch.from_numpy(summed)
            if torch.allclose(got, ref[branch], atol=_TP_TOL, rtol=_TP_TOL):
                continue
            hint = ""
            for extra in (x, ref["out"] - ref["mlp"]):  # the residual stream before the add
                if torch.allclose(got, ref[branch] + _TP_WORLD * extra, atol=1e-3, rtol=1e-3):
                    hint = (" It summed the residual too, once per rank: add the residual "
                            "after the all-reduce.")
            raise CheckFailed(f"{where}: all-reduce {j + 1} should sum the partial outputs of "
                              f"{layer} (the {'attention' if branch == 'attn' else 'MLP'} "
                              f"branch, before its residual add), and summed something else."
                              + hint)
    C = _tp_cases()[0][1].hidden_size
    return f"bard: 2 x {C} float32 numbers = {2 * C * 4:,d} bytes per token and layer"


@exercise("ch10.tp_decoder_layer", "each rank does about 1/W of the layer's matmul work (FLOPs "
          "counted) with your column_parallel_linear, row_parallel_linear and shard_qkv")
def _tp_work(fn: Callable) -> str:
    ratios = []
    for i, rank, rep in _each(_tp_reports(fn)):
        name, cfg, _, x = _tp_cases()[i]
        full = _tp_reference(i)["flops"]
        hkv = len(_rank_kv_heads(cfg, rank, _TP_WORLD))
        # 1/W of everything, plus the K/V rows of a replicated KV head (held by several ranks)
        extra = 2 * x.shape[0] * cfg.hidden_size * 2 * cfg.head_dim * (
            hkv - cfg.num_key_value_heads / _TP_WORLD)
        share = full / _TP_WORLD + extra
        ratios.append(rep["flops"] / share)
        expect(rep["flops"] <= 1.1 * share, (
            f"On {name}, rank {rank} of {_TP_WORLD} did {rep['flops'] / full:.2f} of the "
            f"layer's matmul FLOPs; its share is {share / full:.2f}. A rank that multiplies by "
            "the whole weights gets the right numbers, but then the ranks save nothing: each "
            "must compute only its heads and its columns of the intermediate size."))
        missing = [p for p in _PIECES if not rep["calls"].get(p)]
        expect(not missing, (
            f"tp_decoder_layer never called your {', '.join(missing)}. Build the layer from "
            "the functions of exercises 1, 2 and 4 of this notebook. Calls seen on rank "
            f"{rank}: {rep['calls'] or 'none'}."))
    return f"each rank did {max(ratios):.2f} of its share at most"
