"""Chapter 10's checks: every wrong implementation fails, every right one (in any style) passes."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from minimodel.grading import check, learner_module
from minimodel.ops import apply_rope, rms_norm, rope_cos_sin

# --- column_parallel_linear ----------------------------------------------------------------------


def col_ok(x, weight, bias, rank, world_size):
    w = weight.chunk(world_size, dim=0)[rank]
    b = None if bias is None else bias.chunk(world_size)[rank]
    return F.linear(x, w, b)


def col_ok_slices(x, weight, bias, rank, world_size):
    n = weight.shape[0] // world_size
    y = x @ weight[rank * n:(rank + 1) * n].T
    return y if bias is None else y + bias[rank * n:(rank + 1) * n]


def col_full_then_slice(x, weight, bias, rank, world_size):
    return F.linear(x, weight, bias).tensor_split(world_size, dim=-1)[rank]


def col_interleaved(x, weight, bias, rank, world_size):
    b = None if bias is None else bias[rank::world_size]
    return F.linear(x, weight[rank::world_size], b)


def col_bias_unsplit(x, weight, bias, rank, world_size):
    y = x @ weight.chunk(world_size, dim=0)[rank].T
    return y if bias is None else y + bias[: y.shape[-1]]


def col_split_inputs(x, weight, bias, rank, world_size):
    w = weight.chunk(world_size, dim=1)[rank]
    return x.chunk(world_size, dim=-1)[rank] @ w.T


def col_reversed(x, weight, bias, rank, world_size):
    return col_ok(x, weight, bias, world_size - 1 - rank, world_size)


def col_in_place(x, weight, bias, rank, world_size):
    if bias is not None:
        bias.mul_(1.0)
        weight.add_(0.0)
        x.mul_(2.0)
        x.div_(2.0)
        weight[0, 0] += 1.0
        weight[0, 0] -= 1.0
    out = col_ok(x, weight, bias, rank, world_size)
    if bias is not None:
        x.add_(1.0)
    return out


# --- row_parallel_linear -------------------------------------------------------------------------


def row_ok(x_shard, weight, bias, rank, world_size):
    y = x_shard @ weight.chunk(world_size, dim=1)[rank].T
    return y + bias if bias is not None and rank == 0 else y


def row_ok_linear(x_shard, weight, bias, rank, world_size):
    cols = weight.shape[1] // world_size
    w = weight[:, rank * cols:(rank + 1) * cols]
    return F.linear(x_shard, w, bias if rank == 0 else None)


def row_ok_einsum(x_shard, weight, bias, rank, world_size):
    w = weight.tensor_split(world_size, dim=1)[rank]
    y = torch.einsum("nc,oc->no", x_shard, w)
    if rank == 0 and bias is not None:
        y = y + bias
    return y


def row_bias_every_rank(x_shard, weight, bias, rank, world_size):
    return F.linear(x_shard, weight.chunk(world_size, dim=1)[rank], bias)


def row_bias_divided(x_shard, weight, bias, rank, world_size):
    y = x_shard @ weight.chunk(world_size, dim=1)[rank].T
    return y if bias is None else y + bias / world_size  # sums right, but not rank 0 only


def row_no_bias(x_shard, weight, bias, rank, world_size):
    return x_shard @ weight.chunk(world_size, dim=1)[rank].T


def row_interleaved(x_shard, weight, bias, rank, world_size):
    y = x_shard @ weight[:, rank::world_size].T
    return y + bias if bias is not None and rank == 0 else y


def row_wrong_rank(x_shard, weight, bias, rank, world_size):
    return row_ok(x_shard, weight, bias, (rank + 1) % world_size, world_size) \
        if world_size > 1 else row_ok(x_shard, weight, bias, rank, world_size) * 1.5


# --- vocab_parallel_embedding --------------------------------------------------------------------


def emb_ok(ids, shard, rank, world_size, vocab_size):
    start = rank * -(-vocab_size // world_size)
    mine = (ids >= start) & (ids < start + shard.shape[0])
    rows = F.embedding(torch.where(mine, ids - start, 0), shard)
    return rows * mine.unsqueeze(-1).to(shard.dtype)


def emb_ok_index(ids, shard, rank, world_size, vocab_size):
    per = (vocab_size + world_size - 1) // world_size
    local = ids - rank * per
    out = shard.new_zeros(*ids.shape, shard.shape[1])
    hit = (local >= 0) & (local < len(shard))
    out[hit] = shard[local[hit]]
    return out


def emb_ok_onehot(ids, shard, rank, world_size, vocab_size):
    per = -(-vocab_size // world_size)
    local = ids - rank * per
    onehot = (local.unsqueeze(-1) == torch.arange(len(shard))).to(shard.dtype)
    return onehot @ shard


def emb_no_mask(ids, shard, rank, world_size, vocab_size):
    start = rank * -(-vocab_size // world_size)
    return shard[(ids - start).clamp(0, shard.shape[0] - 1)]


def emb_floor_shards(ids, shard, rank, world_size, vocab_size):
    start = rank * (vocab_size // world_size)  # V // W rows each: wrong unless W divides V
    mine = (ids >= start) & (ids < start + shard.shape[0])
    return torch.where(mine.unsqueeze(-1), shard[torch.where(mine, ids - start, 0)], 0)


def emb_off_by_one(ids, shard, rank, world_size, vocab_size):
    start = rank * -(-vocab_size // world_size)
    mine = (ids >= start) & (ids <= start + shard.shape[0] - 1 - (rank == 0))
    return torch.where(mine.unsqueeze(-1), shard[torch.where(mine, ids - start, 0)], 0)


def emb_mask_but_local_ids_wrong(ids, shard, rank, world_size, vocab_size):
    start = rank * -(-vocab_size // world_size)
    mine = (ids >= start) & (ids < start + shard.shape[0])
    return torch.where(mine.unsqueeze(-1), shard[torch.where(mine, ids % shard.shape[0], 0)], 0)


def emb_strided(ids, shard, rank, world_size, vocab_size):
    mine = ids % world_size == rank  # ids dealt round-robin: not how the table was split
    return torch.where(mine.unsqueeze(-1), shard[torch.where(mine, ids // world_size, 0)
                                                 .clamp(max=len(shard) - 1)], 0)


# --- shard_qkv -----------------------------------------------------------------------------------


def qkv_ok(weight, num_heads, num_kv_heads, head_dim, rank, world_size):
    D = head_dim
    q, k, v = weight.split([num_heads * D, num_kv_heads * D, num_kv_heads * D])
    q = q.chunk(world_size)[rank]
    if num_kv_heads >= world_size:
        k, v = k.chunk(world_size)[rank], v.chunk(world_size)[rank]
    else:
        h = rank * num_kv_heads // world_size
        k, v = k[h * D:(h + 1) * D], v[h * D:(h + 1) * D]
    return torch.cat([q, k, v])


def qkv_ok_heads(weight, Hq, Hkv, D, rank, W):
    """Via head views: [H, D, C] per block."""
    C = weight.shape[1]
    q = weight[: Hq * D].view(Hq, D, C)
    k = weight[Hq * D: (Hq + Hkv) * D].view(Hkv, D, C)
    v = weight[(Hq + Hkv) * D:].view(Hkv, D, C)
    hq = Hq // W
    heads_q = list(range(rank * hq, (rank + 1) * hq))
    groups = Hq // Hkv
    heads_kv = sorted({h // groups for h in heads_q})
    return torch.cat([q[heads_q].reshape(-1, C), k[heads_kv].reshape(-1, C),
                      v[heads_kv].reshape(-1, C)])


def qkv_even_split(weight, Hq, Hkv, D, rank, W):
    return weight.chunk(W)[rank]  # the classic bug: rank 0 gets all of q, none of k and v


def qkv_kv_modulo(weight, Hq, Hkv, D, rank, W):
    q, k, v = weight.split([Hq * D, Hkv * D, Hkv * D])
    if Hkv >= W:
        return torch.cat([q.chunk(W)[rank], k.chunk(W)[rank], v.chunk(W)[rank]])
    h = rank % Hkv  # the KV head of another rank's queries
    return torch.cat([q.chunk(W)[rank], k[h * D:(h + 1) * D], v[h * D:(h + 1) * D]])


def qkv_no_replication(weight, Hq, Hkv, D, rank, W):
    q, k, v = weight.split([Hq * D, Hkv * D, Hkv * D])
    return torch.cat([q.chunk(W)[rank], k.tensor_split(W)[rank], v.tensor_split(W)[rank]])


def qkv_k_twice(weight, Hq, Hkv, D, rank, W):
    out = qkv_ok(weight, Hq, Hkv, D, rank, W)
    kv = out.shape[0] - Hq // W * D
    return torch.cat([out[: Hq // W * D + kv // 2], out[Hq // W * D: Hq // W * D + kv // 2]])


def qkv_heads_interleaved(weight, Hq, Hkv, D, rank, W):
    q, k, v = weight.split([Hq * D, Hkv * D, Hkv * D])
    C = weight.shape[1]
    qh = q.view(Hq, D, C)[rank::W].reshape(-1, C)  # heads dealt round-robin
    if Hkv >= W:
        kh, vh = k.view(Hkv, D, C)[rank::W], v.view(Hkv, D, C)[rank::W]
        return torch.cat([qh, kh.reshape(-1, C), vh.reshape(-1, C)])
    h = rank // (W // Hkv)
    return torch.cat([qh, k[h * D:(h + 1) * D], v[h * D:(h + 1) * D]])


CASES = {
    "ch10.column_parallel_linear": (
        [col_ok, col_ok_slices, col_full_then_slice],
        [col_interleaved, col_bias_unsplit, col_split_inputs, col_reversed, col_in_place],
    ),
    "ch10.row_parallel_linear": (
        [row_ok, row_ok_linear, row_ok_einsum],
        [row_bias_every_rank, row_bias_divided, row_no_bias, row_interleaved, row_wrong_rank],
    ),
    "ch10.vocab_parallel_embedding": (
        [emb_ok, emb_ok_index, emb_ok_onehot],
        [emb_no_mask, emb_floor_shards, emb_off_by_one, emb_mask_but_local_ids_wrong,
         emb_strided],
    ),
    "ch10.shard_qkv": (
        [qkv_ok, qkv_ok_heads],
        [qkv_even_split, qkv_kv_modulo, qkv_no_replication, qkv_k_twice,
         qkv_heads_interleaved],
    ),
}


@pytest.mark.parametrize("name, fn", [(n, f) for n, (ok, _) in CASES.items() for f in ok],
                         ids=lambda v: getattr(v, "__name__", v))
def test_correct_solutions_pass(name, fn):
    result = check(name, fn)
    assert result.passed, [(o.title, o.message) for o in result.outcomes if not o.passed]


@pytest.mark.parametrize("name, fn", [(n, f) for n, (_, bad) in CASES.items() for f in bad],
                         ids=lambda v: getattr(v, "__name__", v))
def test_mutants_fail(name, fn):
    assert not check(name, fn).passed


@pytest.mark.parametrize("name", list(CASES))
def test_stub_is_todo_not_an_error(name):
    def stub(*args):
        raise NotImplementedError

    result = check(name, stub)
    assert not result.passed
    assert all(o.status == "todo" for o in result.outcomes)


# --- tp_decoder_layer (the capstone): run on two real gloo processes ------------------------------
#
# The layers below are module-level functions, so the rank processes import them from this file;
# the names column_parallel_linear, row_parallel_linear and shard_qkv are the pieces the check
# watches. The solution is loaded from the solutions notebook, as a learner's would be.

ROOT = Path(__file__).resolve().parents[1]


def column_parallel_linear(x, weight, bias, rank, world_size):
    return col_ok(x, weight, bias, rank, world_size)


def row_parallel_linear(x_shard, weight, bias, rank, world_size):
    return row_ok(x_shard, weight, bias, rank, world_size)


def shard_qkv(weight, num_heads, num_kv_heads, head_dim, rank, world_size):
    return qkv_ok(weight, num_heads, num_kv_heads, head_dim, rank, world_size)


def _attend(q, k, v):
    """q [T, hq, D], k/v [T, hkv, D] -> [T, hq·D], causal, GQA, written out."""
    T, hq, D = q.shape
    k = k.repeat_interleave(hq // k.shape[1], dim=1)
    v = v.repeat_interleave(hq // v.shape[1], dim=1)
    scores = torch.einsum("thd,shd->hts", q, k) / D**0.5
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(T, hq * D)


def _tp_layer(w, cfg, x, rank, W, *, reduce_attn=True, reduce_mlp=True, residual_in_sum=False,
              o_rank=None, even_gate_up=False, reduce=None):
    """A tensor-parallel layer with switches for the mistakes below (all off: correct)."""
    T, D, eps = x.shape[0], cfg.head_dim, cfg.rms_norm_eps
    Hq, Hkv = cfg.num_attention_heads, cfg.num_key_value_heads
    reduce = reduce or (lambda t: dist.all_reduce(t) if W > 1 else None)
    h = rms_norm(x, w["input_layernorm.weight"], eps)
    hq = Hq // W
    hkv = max(1, Hkv // W)
    qkv = F.linear(h, shard_qkv(w["self_attn.qkv_proj.weight"], Hq, Hkv, D, rank, W))
    q, k, v = qkv.view(T, hq + 2 * hkv, D).split([hq, hkv, hkv], dim=1)
    q = rms_norm(q, w["self_attn.q_norm.weight"], eps)
    k = rms_norm(k, w["self_attn.k_norm.weight"], eps)
    cos, sin = rope_cos_sin(torch.arange(T), D, cfg.rope_theta)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    y = row_parallel_linear(_attend(q, k, v), w["self_attn.o_proj.weight"], None,
                            rank if o_rank is None else o_rank, W)
    if residual_in_sum:
        y = y + x
    if reduce_attn:
        reduce(y)
    x = y if residual_in_sum else x + y
    h = rms_norm(x, w["post_attention_layernorm.weight"], eps)
    if even_gate_up:  # the merged [2I, C] weight cut in W even pieces: rank 0 gets all of gate
        merged = column_parallel_linear(h, w["mlp.gate_up_proj.weight"], None, rank, W)
        gate, up = merged.chunk(2, dim=-1)
    else:
        gate, up = (column_parallel_linear(h, part, None, rank, W)
                    for part in w["mlp.gate_up_proj.weight"].chunk(2))
    y = row_parallel_linear(F.silu(gate) * up, w["mlp.down_proj.weight"], None, rank, W)
    if reduce_mlp:
        reduce(y)
    return x + y, k, v


def tp_ok_variant(weights, cfg, x, rank, world_size):
    return _tp_layer(weights, cfg, x, rank, world_size)


def tp_no_allreduce_after_down_proj(weights, cfg, x, rank, world_size):
    return _tp_layer(weights, cfg, x, rank, world_size, reduce_mlp=False)


def tp_residual_inside_the_allreduce(weights, cfg, x, rank, world_size):
    return _tp_layer(weights, cfg, x, rank, world_size, residual_in_sum=True)


def tp_o_proj_columns_of_another_rank(weights, cfg, x, rank, world_size):
    return _tp_layer(weights, cfg, x, rank, world_size, o_rank=world_size - 1 - rank)


def tp_gate_up_cut_evenly(weights, cfg, x, rank, world_size):
    return _tp_layer(weights, cfg, x, rank, world_size, even_gate_up=True)


def tp_unsharded_weights_on_every_rank(weights, cfg, x, rank, world_size):
    """Every rank runs the whole layer: right numbers, no communication, nothing saved."""
    return _tp_layer(weights, cfg, x, 0, 1)


def tp_unsharded_but_two_allreduces(weights, cfg, x, rank, world_size):
    """The whole layer on every rank, each branch all-reduced and divided by W: the sums and
    their shapes look right on the wire; the work and the KV heads give it away."""
    def mean(t):
        if world_size > 1:
            dist.all_reduce(t)
            t /= world_size
    return _tp_layer(weights, cfg, x, 0, 1, reduce=mean)


def tp_solution():
    return learner_module(ROOT / "solutions" / "ch10_tensor_parallelism.ipynb").tp_decoder_layer


TP_MUTANTS = [tp_no_allreduce_after_down_proj, tp_residual_inside_the_allreduce,
              tp_o_proj_columns_of_another_rank, tp_gate_up_cut_evenly,
              tp_unsharded_weights_on_every_rank, tp_unsharded_but_two_allreduces]


@pytest.mark.stress  # starts two rank processes per check
@pytest.mark.parametrize("get", [tp_solution, lambda: tp_ok_variant],
                         ids=["solution", "hidden_variant"])
def test_tp_layer_correct_passes(get):
    result = check("ch10.tp_decoder_layer", get())
    assert result.passed, [(o.title, o.message) for o in result.outcomes if not o.passed]
    # the check leaves no process behind: ranks and the forkserver they came from are gone
    # (multiprocessing's resource tracker, one per parent, stays, as it always does)
    deadline = time.monotonic() + 60
    while _children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _children()


def _children() -> list:
    import psutil

    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in c.cmdline()[-1]:
                out.append(c)
        except (psutil.NoSuchProcess, IndexError):
            pass
    return out


@pytest.mark.stress
@pytest.mark.parametrize("fn", TP_MUTANTS, ids=lambda f: f.__name__)
def test_tp_layer_mutants_fail(fn):
    result = check("ch10.tp_decoder_layer", fn)
    assert not result.passed
    assert result.outcomes[0].passed, "the mistake only shows with two ranks"
    failed = [o for o in result.outcomes[1:] if not o.passed]
    assert all(o.status == "fail" for o in failed), [(o.title, o.message) for o in failed]


def test_tp_stub_is_todo_without_starting_processes():
    def stub(*args):
        raise NotImplementedError

    result = check("ch10.tp_decoder_layer", stub)
    assert [o.status for o in result.outcomes] == ["todo"] * len(result.outcomes)


def test_tp_wrong_with_one_rank_fails_fast():
    def no_residual(weights, cfg, x, rank, world_size):
        out, k, v = _tp_layer(weights, cfg, x, rank, world_size)
        return out - x, k, v

    result = check("ch10.tp_decoder_layer", no_residual)
    assert [o.status for o in result.outcomes] == ["fail"] * len(result.outcomes)
    assert "first pass with one rank" in result.outcomes[1].message


def test_unsaved_notebook_edits_are_named(tmp_path):
    """A function whose saved notebook definition differs from the running one is named, so
    the message can say to save the notebook before the ranks load it."""
    from minimodel.grading.ch10.ranks import _unsaved

    live = tmp_path / "live_mod.py"
    live.write_text("def shard_qkv(w):\n    return w\n\n\ndef tp_decoder_layer(w):\n"
                    "    return shard_qkv(w)\n")
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source":
                     "def shard_qkv(w):\n    return w + 1\n\n\ndef tp_decoder_layer(w):\n"
                     "    return shard_qkv(w)\n"}], "metadata": {}, "nbformat": 4,
          "nbformat_minor": 5}
    saved = tmp_path / "ch10_saved.ipynb"
    saved.write_text(json.dumps(nb))
    spec = importlib.util.spec_from_file_location("live_mod", live)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert _unsaved(mod.tp_decoder_layer, saved) == ["shard_qkv"]


@pytest.mark.stress  # a Jupyter kernel
def test_a_kernel_whose_notebook_is_not_saved_is_told_to_save_it(tmp_path):
    """In a real kernel the layer runs from memory, but the ranks load the file: a saved file
    that differs stops the check, naming the function, before any rank starts."""
    import nbformat
    from nbclient import NotebookClient

    path = tmp_path / "ch10_tensor_parallelism.ipynb"
    path.write_text((ROOT / "solutions" / path.name).read_text(encoding="utf-8"),
                    encoding="utf-8")
    nb = nbformat.read(str(path), as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if 'check("ch10.tp_decoder_layer"' in c.source)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    with client.setup_kernel():
        for i in range(at):
            if nb.cells[i].cell_type == "code" and "check(" not in nb.cells[i].source:
                client.execute_cell(nb.cells[i], i)
        saved = json.loads(path.read_text(encoding="utf-8"))  # the layer, edited on disk only
        cell = saved["cells"][at - 1]
        cell["source"] = "".join(cell["source"]).replace("    T = x.shape[0]\n",
                                                         "    T = int(x.shape[0])\n", 1)
        path.write_text(json.dumps(saved), encoding="utf-8")
        nb.cells[at].source = ('r = check("ch10.tp_decoder_layer", tp_decoder_layer)\n'
                               'print([o.status for o in r.outcomes], r.outcomes[1].message)')
        client.execute_cell(nb.cells[at], at)
    text = "".join(o.get("text", "") for o in nb.cells[at].outputs)
    assert "['pass', 'fail', 'fail', 'fail', 'fail']" in text, text
    assert "tp_decoder_layer in ch10_tensor_parallelism.ipynb, as saved, is not what" in text
    assert "Save the notebook" in text
