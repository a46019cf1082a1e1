"""Checks of chapter 10 (tensor parallelism): column_parallel_linear, row_parallel_linear,
vocab_parallel_embedding, shard_qkv, and the capstone tp_decoder_layer.

For the first four the ranks are simulated in one process: a function gets `rank` and
`world_size` and returns what that rank computes or holds; "all_reduce" is the sum of the ranks'
results. The capstone runs in real processes: two ranks started with multiprocessing's
forkserver (a clean server process that imports torch once and forks each rank from itself, so
no rank inherits the caller's threads, and a second check starts in seconds), joined in a gloo
process group, each loading the learner's function (from the saved notebook, with
`learner_module`, or from its module). The ranks are always stopped when a check ends; the
server stays, idle, until the calling process exits.

Shapes: N or T tokens, C in-features (hidden), O out-features, W ranks (world_size), V
vocabulary, Hq / Hkv query / KV heads, D head dim, I intermediate size.
"""

from __future__ import annotations

import ast
import datetime
import functools
import importlib
import inspect
import math
import queue
import shutil
import sys
import tempfile
import textwrap
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from minimodel.config import Qwen3Config
from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape

_DTYPES = (torch.float32, torch.float64)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _tol(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-10


# --- column_parallel_linear ----------------------------------------------------------------------

_COL_CASES = [(3, 8, 12, 2), (1, 16, 16, 4), (5, 6, 24, 3), (4, 10, 8, 1), (2, 12, 40, 8)]


def _col_case(i: int, dtype: torch.dtype, bias: bool):
    N, C, O, W = _COL_CASES[i]
    g = _gen(100 + i)
    x = torch.randn(N, C, generator=g, dtype=dtype)
    w = torch.randn(O, C, generator=g, dtype=dtype)
    b = torch.randn(O, generator=g, dtype=dtype) if bias else None
    return x, w, b, W


@exercise("ch10.column_parallel_linear", "rank r returns its [N, O/W] slice of x @ W.T + b, "
                                         "ranks in order")
def _col_values(fn: Callable) -> None:
    for i in range(len(_COL_CASES)):
        for dtype, bias in ((torch.float32, True), (torch.float64, False)):
            x, w, b, W = _col_case(i, dtype, bias)
            full = F.linear(x, w, b)
            O = w.shape[0]
            for rank in range(W):
                got = fn(x, w, b, rank, W)
                want = full[:, rank * O // W:(rank + 1) * O // W]
                expect_shape(got, tuple(want.shape),
                             f"column_parallel_linear(x {tuple(x.shape)}, weight {tuple(w.shape)}"
                             f", rank={rank}, world_size={W})")
                expect_close(got, want, f"rank {rank} of {W} (weight {tuple(w.shape)}, "
                             f"bias {'yes' if bias else 'None'})", atol=_tol(dtype),
                             rtol=_tol(dtype))


@exercise("ch10.column_parallel_linear", "the W slices, side by side, are the full product")
def _col_cat(fn: Callable) -> None:
    x, w, b, W = _col_case(4, torch.float32, True)
    parts = [fn(x, w, b, r, W) for r in range(W)]
    expect_close(torch.cat(parts, dim=-1), F.linear(x, w, b), "cat(ranks' outputs, dim=-1)")


@exercise("ch10.column_parallel_linear", "leaves x, weight and bias unchanged")
def _col_pure(fn: Callable) -> None:
    x, w, b, W = _col_case(0, torch.float32, True)
    copies = (x.clone(), w.clone(), b.clone())
    fn(x, w, b, 1, W)
    expect(all(torch.equal(a, c) for a, c in zip((x, w, b), copies, strict=True)),
           "column_parallel_linear changed one of its inputs in place")


# --- row_parallel_linear -------------------------------------------------------------------------

_ROW_CASES = [(3, 8, 6, 2), (1, 16, 16, 4), (5, 24, 7, 3), (2, 40, 12, 8), (4, 10, 8, 1)]


def _row_case(i: int, dtype: torch.dtype, bias: bool):
    N, C, O, W = _ROW_CASES[i]
    g = _gen(200 + i)
    x = torch.randn(N, C, generator=g, dtype=dtype)
    w = torch.randn(O, C, generator=g, dtype=dtype)
    b = torch.randn(O, generator=g, dtype=dtype) * 3 if bias else None
    return x, w, b, W


def _row_partials(fn: Callable, x, w, b, W) -> list[torch.Tensor]:
    parts = []
    for rank in range(W):
        x_r = x.chunk(W, dim=-1)[rank].clone()
        got = fn(x_r, w, b, rank, W)
        expect_shape(got, (x.shape[0], w.shape[0]),
                     f"row_parallel_linear(x_shard {tuple(x_r.shape)}, weight {tuple(w.shape)}, "
                     f"rank={rank}, world_size={W})")
        parts.append(got)
    return parts


@exercise("ch10.row_parallel_linear", "the ranks' partial sums add up to x @ W.T + b "
                                      "(the all-reduce)")
def _row_sum(fn: Callable) -> None:
    for i in range(len(_ROW_CASES)):
        for dtype, bias in ((torch.float32, True), (torch.float64, False)):
            x, w, b, W = _row_case(i, dtype, bias)
            parts = _row_partials(fn, x, w, b, W)
            expect_close(torch.stack(parts).sum(0), F.linear(x, w, b),
                         f"sum over {W} ranks (weight {tuple(w.shape)}, bias "
                         f"{'yes' if bias else 'None'})", atol=10 * _tol(dtype),
                         rtol=10 * _tol(dtype))


@exercise("ch10.row_parallel_linear", "rank r multiplies its input slice by its weight columns;"
                                      " the bias is added once, by rank 0")
def _row_each(fn: Callable) -> None:
    for i in range(len(_ROW_CASES)):
        x, w, b, W = _row_case(i, torch.float32, True)
        parts = _row_partials(fn, x, w, b, W)
        cols = w.shape[1] // W
        for rank, got in enumerate(parts):
            x_r = x[:, rank * cols:(rank + 1) * cols]
            want = x_r @ w[:, rank * cols:(rank + 1) * cols].T + (b if rank == 0 else 0)
            if not torch.allclose(got, want, atol=1e-5, rtol=1e-5):
                if torch.allclose(got, x_r @ w[:, rank * cols:(rank + 1) * cols].T + b,
                                  atol=1e-5, rtol=1e-5):
                    raise CheckFailed(f"rank {rank} of {W} added the bias too: summed over the "
                                      f"ranks it would count {W} times.")
                expect_close(got, want, f"rank {rank} of {W}'s partial sum")


# --- vocab_parallel_embedding --------------------------------------------------------------------

_EMB_CASES = [(10, 4, 2), (101, 8, 2), (64, 6, 4), (7, 3, 3), (30, 5, 8), (12, 4, 1)]


def _emb_case(i: int, dtype: torch.dtype):
    V, C, W = _EMB_CASES[i]
    g = _gen(300 + i)
    table = torch.randn(V, C, generator=g, dtype=dtype)
    ids = torch.randint(0, V, (3, 9), generator=g)
    ids[0, :2] = torch.tensor([0, V - 1])
    Vp = -(-V // W)
    for r in range(W):  # each shard's first and last id, and the first id past it
        for t in (r * Vp, r * Vp + Vp - 1, (r + 1) * Vp):
            if t < V:
                ids[1, (r * 3 + (t - r * Vp) % 3) % 9] = t
    return table, ids, W


def _shard(table: torch.Tensor, rank: int, W: int) -> torch.Tensor:
    Vp = -(-table.shape[0] // W)
    return table[rank * Vp:(rank + 1) * Vp].clone()


@exercise("ch10.vocab_parallel_embedding", "each rank returns its rows for the ids it holds "
                                           "and zeros for the others")
def _emb_each(fn: Callable) -> None:
    for i in range(len(_EMB_CASES)):
        for dtype in _DTYPES:
            table, ids, W = _emb_case(i, dtype)
            V = table.shape[0]
            Vp = -(-V // W)
            for rank in range(W):
                shard = _shard(table, rank, W)
                got = fn(ids, shard, rank, W, V)
                mine = (ids >= rank * Vp) & (ids < rank * Vp + shard.shape[0])
                want = torch.where(mine.unsqueeze(-1), table[ids], 0)
                expect_shape(got, (*ids.shape, table.shape[1]),
                             f"vocab_parallel_embedding(ids {tuple(ids.shape)}, shard "
                             f"{tuple(shard.shape)}, rank={rank}, world_size={W}, V={V})")
                if not torch.equal(got, want):
                    wrong = (got != want).any(-1)
                    bad = int(ids[wrong][0])
                    raise CheckFailed(
                        f"rank {rank} of {W} (V={V}, its shard holds ids {rank * Vp}.."
                        f"{rank * Vp + shard.shape[0] - 1}) is wrong for id {bad}: "
                        + ("it belongs to this rank" if mine[wrong][0] else
                           "it belongs to another rank, so this rank's row must be zeros"))


@exercise("ch10.vocab_parallel_embedding", "summed over the ranks (the all-reduce) it is the "
                                           "lookup table[ids], also when W does not divide V")
def _emb_sum(fn: Callable) -> None:
    for i in range(len(_EMB_CASES)):
        table, ids, W = _emb_case(i, torch.float32)
        total = sum(fn(ids, _shard(table, r, W), r, W, table.shape[0]) for r in range(W))
        expect_close(total, table[ids], f"sum over {W} ranks (V={table.shape[0]})", atol=0,
                     rtol=0)


@exercise("ch10.vocab_parallel_embedding", "leaves ids and the shard unchanged")
def _emb_pure(fn: Callable) -> None:
    table, ids, W = _emb_case(1, torch.float32)
    shard = _shard(table, 1, W)
    copies = (ids.clone(), shard.clone())
    fn(ids, shard, 1, W, table.shape[0])
    expect(torch.equal(ids, copies[0]) and torch.equal(shard, copies[1]),
           "vocab_parallel_embedding changed ids or the shard in place")


# --- shard_qkv -----------------------------------------------------------------------------------

_QKV_CASES = [  # (Hq, Hkv, D, C, W): KV heads split, or fewer KV heads than ranks (replicated)
    (4, 2, 3, 5, 2), (8, 4, 2, 6, 4), (4, 1, 4, 3, 2), (8, 2, 2, 4, 4), (16, 2, 1, 3, 8),
    (6, 6, 2, 4, 3), (2, 2, 5, 3, 1), (12, 3, 2, 4, 6),
]


def _qkv_reference(w, Hq, Hkv, D, rank, W):
    q, k, v = w.split([Hq * D, Hkv * D, Hkv * D])
    hq = Hq // W
    q_r = q[rank * hq * D:(rank + 1) * hq * D]
    if Hkv >= W:
        hkv = Hkv // W
        first = rank * hkv
    else:
        hkv, first = 1, rank // (W // Hkv)
    return torch.cat([q_r, k[first * D:(first + hkv) * D], v[first * D:(first + hkv) * D]])


def _qkv_weight(Hq, Hkv, D, C, dtype, seed):
    # rows numbered, so a wrong row is easy to name: row i of the merged matrix starts with i
    w = torch.randn((Hq + 2 * Hkv) * D, C, generator=_gen(seed), dtype=dtype)
    w[:, 0] = torch.arange(w.shape[0], dtype=dtype)
    return w


def _row_names(Hq, Hkv, D) -> list[str]:
    return ([f"q head {h}" for h in range(Hq) for _ in range(D)]
            + [f"k head {h}" for h in range(Hkv) for _ in range(D)]
            + [f"v head {h}" for h in range(Hkv) for _ in range(D)])


@exercise("ch10.shard_qkv", "rank r holds its query heads, then the KV heads they read, for k "
                            "and for v")
def _qkv_split(fn: Callable) -> None:
    for i, (Hq, Hkv, D, C, W) in enumerate(_QKV_CASES):
        if Hkv < W:
            continue
        _compare_qkv(fn, Hq, Hkv, D, C, W, torch.float32, 400 + i)


@exercise("ch10.shard_qkv", "with fewer KV heads than ranks, each rank holds the one KV head "
                            "its query heads read (replicated)")
def _qkv_replicated(fn: Callable) -> None:
    for i, (Hq, Hkv, D, C, W) in enumerate(_QKV_CASES):
        if Hkv >= W:
            continue
        _compare_qkv(fn, Hq, Hkv, D, C, W, torch.float64, 500 + i)


def _compare_qkv(fn, Hq, Hkv, D, C, W, dtype, seed) -> None:
    w = _qkv_weight(Hq, Hkv, D, C, dtype, seed)
    names = _row_names(Hq, Hkv, D)
    for rank in range(W):
        want = _qkv_reference(w, Hq, Hkv, D, rank, W)
        got = fn(w.clone(), Hq, Hkv, D, rank, W)
        expect_shape(got, tuple(want.shape),
                     f"shard_qkv(weight {tuple(w.shape)}, Hq={Hq}, Hkv={Hkv}, D={D}, "
                     f"rank={rank}, world_size={W})")
        if not torch.equal(got, want):
            j = int((got != want).any(-1).nonzero()[0])
            src = got[j, 0]
            held = names[int(src)] if float(src).is_integer() and 0 <= src < len(names) \
                else "a row that is not in the weight"
            raise CheckFailed(f"rank {rank} of {W} (Hq={Hq}, Hkv={Hkv}, D={D}): its row {j} "
                              f"should be {names[int(want[j, 0])]}, got {held}")


@exercise("ch10.shard_qkv", "its q/k/v blocks, as the layer splits them, give the rank's heads "
                            "of the full projection")
def _qkv_product(fn: Callable) -> None:
    Hq, Hkv, D, C, W = 8, 2, 4, 16, 2
    w = torch.randn((Hq + 2 * Hkv) * D, C, generator=_gen(7))
    x = torch.randn(3, C, generator=_gen(8))
    full_q, full_k, _ = F.linear(x, w).split([Hq * D, Hkv * D, Hkv * D], dim=-1)
    for rank in range(W):
        q, k, _ = F.linear(x, fn(w, Hq, Hkv, D, rank, W)).split(
            [Hq // W * D, Hkv // W * D, Hkv // W * D], dim=-1)
        expect_close(q, full_q.view(3, Hq, D)[:, rank * Hq // W:(rank + 1) * Hq // W].reshape(
            3, -1), f"rank {rank}'s queries")
        expect_close(k, full_k.view(3, Hkv, D)[:, rank:rank + 1].reshape(3, -1),
                     f"rank {rank}'s keys")


# --- tp_decoder_layer (the capstone) ------------------------------------------------------------
#
# The learner's tp_decoder_layer(weights, cfg, x, rank, world_size) -> (out, k, v) is one Qwen3
# decoder layer on one rank: `weights` is the whole layer in the engine's merged layout (every
# rank loaded the checkpoint), x [T, C] one sequence at positions 0..T-1. It returns the layer's
# output [T, C] (the same on every rank) and the K (after QK-norm and RoPE) and V [T, hkv, D] of
# the KV heads this rank keeps in its cache. With world_size=1 there is no process group.
# With two ranks it runs in two processes (forkserver) joined by gloo; every torch.distributed
# all_reduce is recorded there (shape and the summed result), and the matmul FLOPs and the calls
# of the learner's three pieces are counted.

_TP_TOL = 1e-4
_TP_WORLD = 2
_STARTUP_S = 300.0  # start the server (imports torch), load the notebook: generous under load
_STRAGGLER_S = 90.0  # a rank still running this long after another finished is stuck
_COLLECTIVE_S = 120  # gloo's own limit on one collective
_PIECES = ("column_parallel_linear", "row_parallel_linear", "shard_qkv")
_LAST_RUN: list = []  # [(fn, reports or the failure)]: the checks of one check() call share it
# One KV head and four query heads: two ranks must both hold (replicate) the KV head; Hq·D ≠ C.
_REPLICATED = Qwen3Config(
    vocab_size=64, hidden_size=48, intermediate_size=96, num_hidden_layers=1,
    num_attention_heads=4, num_key_value_heads=1, head_dim=16, rope_theta=10_000.0,
)


def _engine_layout(hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One layer's Hugging Face weights -> the engine's names (q/k/v and gate/up merged)."""
    return {
        "input_layernorm.weight": hf["input_layernorm.weight"],
        "self_attn.qkv_proj.weight": torch.cat([hf[f"self_attn.{n}_proj.weight"]
                                                for n in "qkv"]),
        "self_attn.q_norm.weight": hf["self_attn.q_norm.weight"],
        "self_attn.k_norm.weight": hf["self_attn.k_norm.weight"],
        "self_attn.o_proj.weight": hf["self_attn.o_proj.weight"],
        "post_attention_layernorm.weight": hf["post_attention_layernorm.weight"],
        "mlp.gate_up_proj.weight": torch.cat([hf["mlp.gate_proj.weight"],
                                              hf["mlp.up_proj.weight"]]),
        "mlp.down_proj.weight": hf["mlp.down_proj.weight"],
    }


@functools.cache
def _tp_cases() -> tuple[tuple[str, Qwen3Config, dict[str, torch.Tensor], torch.Tensor], ...]:
    """(name, config, the layer's weights in the engine's layout, x [T, C]) for bard's layer 0
    and for a random layer with one KV head."""
    from safetensors import safe_open

    from minimodel.hub import resolve_model
    from minimodel.weights import safetensors_files

    path = resolve_model("bard")
    bard = Qwen3Config.from_pretrained(path)
    prefix = "model.layers.0."
    hf = {}
    for file in safetensors_files(path):
        with safe_open(str(file), framework="pt") as f:
            hf.update({n[len(prefix):]: f.get_tensor(n).float() for n in f.keys()
                       if n.startswith(prefix)})
    g = _gen(1010)
    c = _REPLICATED
    C, I, D = c.hidden_size, c.intermediate_size, c.head_dim  # noqa: E741
    shapes = {"self_attn.q_proj.weight": (c.q_size, C), "self_attn.k_proj.weight": (c.kv_size, C),
              "self_attn.v_proj.weight": (c.kv_size, C), "self_attn.o_proj.weight": (C, c.q_size),
              "mlp.gate_proj.weight": (I, C), "mlp.up_proj.weight": (I, C),
              "mlp.down_proj.weight": (C, I)}
    rnd = {n: torch.randn(s, generator=g) / math.sqrt(s[1]) for n, s in shapes.items()}
    for n, size in (("input_layernorm", C), ("post_attention_layernorm", C),
                    ("self_attn.q_norm", D), ("self_attn.k_norm", D)):
        rnd[f"{n}.weight"] = 1 + 0.2 * torch.randn(size, generator=g)
    return (("bard layer 0", bard, _engine_layout(hf), torch.randn(7, bard.hidden_size,
                                                                     generator=g)),
            ("a layer with 1 KV head", c, _engine_layout(rnd), torch.randn(5, C, generator=g)))


@functools.cache
def _tp_reference(i: int) -> dict[str, torch.Tensor]:
    """The package's reference decoder layer on case i: its output, its two branches (what
    each all-reduce must sum), K after QK-norm and RoPE and V of every KV head, its FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    from minimodel.ops import apply_rope, rms_norm, rope_cos_sin
    from minimodel.reference.model import Qwen3DecoderLayer, causal_mask

    _, cfg, w, x = _tp_cases()[i]
    T, D = x.shape[0], cfg.head_dim
    layer = Qwen3DecoderLayer(cfg)
    q, k, v = w["self_attn.qkv_proj.weight"].split([cfg.q_size, cfg.kv_size, cfg.kv_size])
    gate, up = w["mlp.gate_up_proj.weight"].chunk(2)
    layer.load_state_dict({
        "input_layernorm.weight": w["input_layernorm.weight"],
        "post_attention_layernorm.weight": w["post_attention_layernorm.weight"],
        "self_attn.q_proj.weight": q, "self_attn.k_proj.weight": k, "self_attn.v_proj.weight": v,
        "self_attn.o_proj.weight": w["self_attn.o_proj.weight"],
        "self_attn.q_norm.weight": w["self_attn.q_norm.weight"],
        "self_attn.k_norm.weight": w["self_attn.k_norm.weight"],
        "mlp.gate_proj.weight": gate, "mlp.up_proj.weight": up,
        "mlp.down_proj.weight": w["mlp.down_proj.weight"]})
    cos, sin = rope_cos_sin(torch.arange(T), D, cfg.rope_theta)
    mask = causal_mask(T)[None, None]
    with torch.no_grad():
        xb, cb, sb = x[None], cos[None], sin[None]
        with FlopCounterMode(display=False) as flops:
            out = layer(xb, cb, sb, mask)[0]
        attn = layer.self_attn(layer.input_layernorm(xb), cb, sb, mask)[0]
        mlp = layer.mlp(layer.post_attention_layernorm(x + attn))
        h = layer.input_layernorm(x)
        keys = rms_norm((h @ k.T).view(T, -1, D), w["self_attn.k_norm.weight"], cfg.rms_norm_eps)
        keys = apply_rope(keys, cos, sin)
        values = (h @ v.T).view(T, -1, D)
    return {"out": out, "attn": attn, "mlp": mlp, "k": keys, "v": values,
            "flops": flops.get_total_flops()}


def _rank_kv_heads(cfg: Qwen3Config, rank: int, world: int) -> list[int]:
    from minimodel.layers import local_heads

    _, hkv, replicas = local_heads(cfg.num_attention_heads, cfg.num_key_value_heads, world)
    first = rank // replicas * hkv
    return list(range(first, first + hkv))


def _call_layer(fn: Callable, i: int, rank: int, world: int) -> tuple[torch.Tensor, ...]:
    """Run the learner's layer on case i; check the types and shapes it returns."""
    name, cfg, w, x = _tp_cases()[i]
    given = dict(w)
    with torch.no_grad():
        got = fn(given, cfg, x.clone(), rank, world)
    what = f"tp_decoder_layer on {name} (T={x.shape[0]}), rank {rank} of {world}"
    expect(isinstance(got, tuple) and len(got) == 3,
           f"{what} returned {type(got).__name__}; return a tuple (out, k, v)")
    out, k, v = got
    expect_shape(out, tuple(x.shape), f"{what}: out")
    for t, n in ((k, "k"), (v, "v")):
        expect(isinstance(t, torch.Tensor), f"{what}: {n} should be a torch.Tensor, got "
                                            f"{type(t).__name__}")
    expect(given.keys() == w.keys() and all(given[n] is w[n] for n in w),
           f"{what} changed the weights dict; read it, don't modify it")
    return out.detach(), k.detach(), v.detach()


def _out_problem(out: torch.Tensor, i: int, rank: int, world: int) -> str | None:
    ref = _tp_reference(i)
    if torch.allclose(out, ref["out"], atol=_TP_TOL, rtol=_TP_TOL):
        return None
    name = _tp_cases()[i][0]
    err = float((out - ref["out"]).abs().nan_to_num(float("inf")).max())
    return (f"On {name}, rank {rank} of {world}: max |out - the reference layer| = {err:.3g} "
            f"(tolerance {_TP_TOL}).")


def _kv_problem(k: torch.Tensor, v: torch.Tensor, i: int, rank: int, world: int) -> str | None:
    name, cfg, _, _ = _tp_cases()[i]
    ref = _tp_reference(i)
    heads = _rank_kv_heads(cfg, rank, world)
    T, D = ref["k"].shape[0], cfg.head_dim
    for got, n in ((k, "k"), (v, "v")):
        expect_shape(got, (T, len(heads), D), (
            f"On {name}, rank {rank} of {world}: {n} (the {len(heads)} KV head(s) of "
            f"{cfg.num_key_value_heads} that this rank keeps in its cache)"))
    for got, full, what in ((k, ref["k"], "K (after k_norm and RoPE)"), (v, ref["v"], "V")):
        want = full[:, heads]
        if not torch.allclose(got, want, atol=_TP_TOL, rtol=_TP_TOL):
            others = [h for h in range(cfg.num_key_value_heads)
                      if torch.allclose(got[:, 0], full[:, h], atol=_TP_TOL, rtol=_TP_TOL)]
            held = f"its first is KV head {others[0]}" if others else "it is no KV head's"
            return (f"On {name} (Hq={cfg.num_attention_heads}, Hkv={cfg.num_key_value_heads}), "
                    f"rank {rank} of {world} should keep the {what} of KV head(s) {heads}, the "
                    f"one(s) its query heads read; {held}.")
    return None


@exercise("ch10.tp_decoder_layer", "with one rank (world_size=1, no process group) it is the "
          "reference decoder layer within 1e-4, and keeps K and V of every KV head")
def _tp_one_rank_check(fn: Callable) -> None:
    _LAST_RUN.clear()  # the first check of a check() call: the process run starts afresh
    _tp_one_rank(fn)


def _tp_one_rank(fn: Callable) -> None:
    for i in range(len(_tp_cases())):
        out, k, v = _call_layer(fn, i, 0, 1)
        problem = _out_problem(out, i, 0, 1) or _kv_problem(k, v, i, 0, 1)
        if problem:
            raise CheckFailed(problem + " With one rank your layer is the whole layer: check "
                              "the norms, RoPE (positions 0..T-1), the causal attention of "
                              "each query head on its KV head, and both residual adds.")


# --- running the layer on two real processes ----------------------------------------------------


def _function_ref(fn: Callable) -> tuple[str, str, str]:
    """How a rank process finds fn: ("notebook", path, name) or ("module", module, name)."""
    from minimodel.grading.learner import PREFIX, find_notebook

    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__name__", "")
    if module == "__main__":
        try:
            path = find_notebook("ch10")
        except FileNotFoundError as e:
            raise CheckFailed(
                "The two ranks run in new processes, which cannot see this one's memory: each "
                "loads tp_decoder_layer from your saved ch10 notebook, and none was found here. "
                f"{e}") from None
        return "notebook", str(path.resolve()), name
    if module.startswith(PREFIX):
        return "notebook", str(sys.modules[module].__file__), name
    if "<locals>" in getattr(fn, "__qualname__", "<locals>"):
        raise CheckFailed("Define tp_decoder_layer at the top level: the two ranks run in new "
                          "processes, which look it up by name.")
    return "module", module, fn.__qualname__


def _unsaved(fn: Callable, notebook: Path) -> list[str]:
    """The functions (tp_decoder_layer and its pieces) whose saved definition in the notebook
    differs from the one this process runs."""
    from minimodel.grading.learner import definitions_source, is_learner_function

    saved = {}
    for node in ast.parse(definitions_source(notebook)).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            saved[node.name] = ast.dump(node)  # a later definition replaces an earlier one
    differ = []
    for name in (fn.__name__, *_PIECES):
        live = fn if name == fn.__name__ else fn.__globals__.get(name)
        if not is_learner_function(live):
            continue
        try:
            live_src = textwrap.dedent(inspect.getsource(live))
        except (OSError, TypeError):
            continue
        tree = ast.parse(live_src).body
        if tree and ast.dump(tree[0]) != saved.get(name):
            differ.append(name)
    return differ


def _resolve(ref: tuple[str, str, str]) -> Callable:
    kind, where, name = ref
    if kind == "notebook":
        from minimodel.grading.learner import learner_module

        obj: object = learner_module(Path(where))
    else:
        obj = importlib.import_module(where)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj  # type: ignore[return-value]


def _rank_main(rank: int, world: int, init_method: str, ref: tuple[str, str, str],
               results) -> None:
    """One rank, in its own process: join the group, run every case, report to the parent."""
    import torch.distributed as dist
    from torch.utils.flop_counter import FlopCounterMode

    from minimodel.grading.learner import spy_calls

    torch.set_num_threads(1)
    try:
        original = dist.all_reduce
        seen: list[tuple[tuple[int, ...], torch.Tensor]] = []

        def recorded(tensor, *args, **kwargs):
            work = original(tensor, *args, **kwargs)
            seen.append((tuple(tensor.shape), tensor.detach().clone()))
            return work

        dist.all_reduce = recorded  # before the notebook loads: `from ... import` sees it too
        fn = _resolve(ref)
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=_COLLECTIVE_S))
        report = []
        for i in range(len(_tp_cases())):
            seen.clear()
            with spy_calls(inspect.unwrap(fn)) as calls, FlopCounterMode(display=False) as fl:
                out, k, v = _call_layer(fn, i, rank, world)
            report.append({"out": out.numpy(), "k": k.numpy(), "v": v.numpy(),
                           "reduces": [(s, t.numpy()) for s, t in seen],
                           "flops": fl.get_total_flops(), "calls": dict(calls)})
        results.put(("ok", rank, report))
        dist.destroy_process_group()
    except NotImplementedError:
        results.put(("todo", rank, ""))
    except CheckFailed as e:
        results.put(("fail", rank, str(e)))
    except BaseException:
        results.put(("error", rank, traceback.format_exc(limit=-6)))


def _stop(procs: list) -> None:
    for p in procs:
        if p.pid is not None:
            p.join(5 if p.exitcode is None else 0)
    for p in procs:
        if p.pid is not None and p.is_alive():
            p.terminate()
            p.join(5)
        if p.pid is not None and p.is_alive():
            p.kill()
            p.join(5)


def _stop_forkserver() -> None:
    """End the forkserver the ranks came from, so that a check leaves no process behind (the
    next check starts a new one). `_stop` is the standard library's own way to end it."""
    from multiprocessing import forkserver

    stop = getattr(forkserver._forkserver, "_stop", None)
    if stop is not None:
        stop()


def _two_ranks(fn: Callable) -> list[list[dict]]:
    """Run the learner's layer on every case in _TP_WORLD processes -> each rank's report."""
    import multiprocessing as mp

    try:  # a stub is "not implemented yet" and a wrong layer fails here, cheaply
        _tp_one_rank(fn)
    except CheckFailed:
        raise CheckFailed("Not run on two processes: it must first pass with one rank (the "
                          "first check).") from None
    ref = _function_ref(fn)
    if ref[0] == "notebook" and fn.__module__ == "__main__":
        differ = _unsaved(fn, Path(ref[1]))
        expect(not differ, (
            f"{', '.join(differ)} in {Path(ref[1]).name}, as saved, "
            f"{'is' if len(differ) == 1 else 'are'} not what this kernel runs. The two ranks "
            "are new processes: each loads your functions from the saved notebook. Save the "
            "notebook (Ctrl-S) and run this check again."))
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # the server imports torch once; ranks fork from it
    results = ctx.Queue()
    folder = tempfile.mkdtemp(prefix="minimodel-ch10-")
    init_method = f"file://{folder}/rendezvous"
    procs = [ctx.Process(target=_rank_main, args=(r, _TP_WORLD, init_method, ref, results),
                         name=f"ch10-rank{r}", daemon=True) for r in range(_TP_WORLD)]
    reports: dict[int, list[dict]] = {}
    try:
        for p in procs:
            p.start()
        deadline, first_done = time.monotonic() + _STARTUP_S, None
        while len(reports) < _TP_WORLD:
            try:
                kind, rank, payload = results.get(timeout=0.5)
            except queue.Empty:
                now = time.monotonic()
                gone = [p for r, p in enumerate(procs) if r not in reports
                        and p.exitcode is not None]
                if gone:
                    raise CheckFailed(f"Rank process {gone[0].name} exited with code "
                                      f"{gone[0].exitcode} before it reported.") from None
                if first_done is not None and now - first_done > _STRAGGLER_S:
                    waiting = [r for r in range(_TP_WORLD) if r not in reports]
                    raise CheckFailed(
                        f"Rank(s) {waiting} were still running {_STRAGGLER_S:.0f} s after rank "
                        f"{sorted(reports)[0]} had finished: most likely waiting in an "
                        "all-reduce that the other rank never made. Every rank must call "
                        "all_reduce the same number of times, in the same order.") from None
                if now > deadline:
                    raise CheckFailed(f"The {_TP_WORLD} ranks did not finish within "
                                      f"{_STARTUP_S:.0f} s.") from None
                continue
            if kind == "todo":
                raise NotImplementedError
            if kind == "fail":
                raise CheckFailed(payload)
            if kind == "error":
                raise CheckFailed(f"On rank {rank} of {_TP_WORLD} your layer raised:\n{payload}")
            reports[rank] = payload
            first_done = first_done or time.monotonic()
    finally:
        _stop(procs)
        results.close()
        shutil.rmtree(folder, ignore_errors=True)
        _stop_forkserver()
    return [reports[r] for r in range(_TP_WORLD)]


def _tp_reports(fn: Callable) -> list[list[dict]]:
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


def _each(reports: list[list[dict]]):
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
