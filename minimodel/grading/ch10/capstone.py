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
from minimodel.grading.i18n import Text, tr

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
            raise CheckFailed(tr("{problem} With one rank it was right, so look at what the "
                                 "ranks must add up and what each must hold: which rows of each "
                                 "weight a rank uses, and where the partial sums are "
                                 "all-reduced.", problem=problem))


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
def _tp_wire(fn: Callable) -> Text:
    for i, rank, rep in _each(_tp_reports(fn)):
        name, cfg, _, x = _tp_cases()[i]
        ref = _tp_reference(i)
        shapes = [s for s, _ in rep["reduces"]]
        where = tr("On {name}, rank {rank} of {world}", name=name, rank=rank, world=_TP_WORLD)
        none = tr(" With none, no rank ever sees the others' partial sums.") if not shapes else ""
        expect(len(shapes) == 2, tr(
            "{where}: {n} all-reduce(s) {shapes}. A Qwen3 block needs exactly two: one after the "
            "row-parallel o_proj and one after the row-parallel down_proj.{none}", where=where,
            n=len(shapes), shapes=shapes, none=none))
        for j, ((shape, summed), branch, layer) in enumerate(
                zip(rep["reduces"], ("attn", "mlp"), ("o_proj", "down_proj"), strict=True)):
            expect(shape == tuple(x.shape), tr(
                "{where}: all-reduce {j} carried a tensor of shape {shape}; both carry the "
                "[T, C] = {want} partial sums of a row-parallel layer.", where=where, j=j + 1,
                shape=list(shape), want=list(x.shape)))
            got = torch.from_numpy(summed)
            if torch.allclose(got, ref[branch], atol=_TP_TOL, rtol=_TP_TOL):
                continue
            hint = ""
            for extra in (x, ref["out"] - ref["mlp"]):  # the residual stream before the add
                if torch.allclose(got, ref[branch] + _TP_WORLD * extra, atol=1e-3, rtol=1e-3):
                    hint = tr(" It summed the residual too, once per rank: add the residual "
                              "after the all-reduce.")
            part = tr("the attention branch") if branch == "attn" else tr("the MLP branch")
            raise CheckFailed(tr("{where}: all-reduce {j} should sum the partial outputs of "
                                 "{layer} ({part}, before its residual add), and summed "
                                 "something else.{hint}", where=where, j=j + 1, layer=layer,
                                 part=part, hint=hint))
    C = _tp_cases()[0][1].hidden_size
    return tr("bard: 2 x {C} float32 numbers = {nbytes:,d} bytes per token and layer", C=C,
              nbytes=2 * C * 4)


@exercise("ch10.tp_decoder_layer", "each rank does about 1/W of the layer's matmul work (FLOPs "
          "counted) with your column_parallel_linear, row_parallel_linear and shard_qkv")
def _tp_work(fn: Callable) -> Text:
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
        expect(rep["flops"] <= 1.1 * share, tr(
            "On {name}, rank {rank} of {world} did {did:.2f} of the layer's matmul FLOPs; its "
            "share is {share:.2f}. A rank that multiplies by the whole weights gets the right "
            "numbers, but then the ranks save nothing: each must compute only its heads and its "
            "columns of the intermediate size.", name=name, rank=rank, world=_TP_WORLD,
            did=rep["flops"] / full, share=share / full))
        missing = [p for p in _PIECES if not rep["calls"].get(p)]
        seen = (tr("Calls seen on rank {rank}: {calls}.", rank=rank, calls=rep["calls"])
                if rep["calls"] else tr("Calls seen on rank {rank}: none.", rank=rank))
        expect(not missing, tr(
            "tp_decoder_layer never called your {missing}. Build the layer from the functions of "
            "exercises 1, 2 and 4 of this notebook. {seen}", missing=", ".join(missing),
            seen=seen))
    return tr("each rank did {ratio:.2f} of its share at most", ratio=max(ratios))
