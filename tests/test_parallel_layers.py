"""Tensor-parallel layers: two real processes (gloo, CPU) against the one-rank layers, and the
sharding rules checked in one process."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp
from parallel_checks import layer_equality

from minimodel import layers
from minimodel.config import Qwen3Config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.stress  # two processes and a TCP rendezvous
def test_sharded_layers_equal_unsharded_in_two_processes():
    mp.spawn(layer_equality, args=(2, f"tcp://127.0.0.1:{free_port()}"), nprocs=2, join=True)


def test_one_rank_layers_are_the_plain_layers():
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(3, 8, generator=g), torch.randn(6, 8, generator=g)
    lin = layers.RowParallelLinear(8, 6)
    lin.weight_loader(lin.weight, w)
    assert torch.equal(lin(x), torch.nn.functional.linear(x, w))


def test_qkv_shards_are_per_block_not_even_rows():
    # Hq=4, Hkv=2, D=1: rows q0 q1 q2 q3 k0 k1 v0 v1; rank 1 of 2 holds q2 q3 k1 v1
    assert layers.qkv_shard_rows(4, 2, 1, 1, 2).tolist() == [2, 3, 5, 7]
    # Hkv=1 < 2 ranks: both ranks hold the one KV head (replicated)
    assert layers.qkv_shard_rows(4, 1, 1, 1, 2).tolist() == [2, 3, 4, 5]


def test_local_heads_and_replication():
    assert layers.local_heads(8, 2, 2) == (4, 1, 1)
    assert layers.local_heads(8, 2, 4) == (2, 1, 2)
    assert layers.local_heads(4, 1, 2) == (2, 1, 2)
    with pytest.raises(layers.TPConfigError, match="num_attention_heads"):
        layers.local_heads(6, 2, 4)
    with pytest.raises(layers.TPConfigError, match="not a multiple"):
        layers.local_heads(12, 4, 6)


def _cfg(**kw) -> Qwen3Config:
    base = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=2, head_dim=4)
    base.update(kw)
    return Qwen3Config(**base)


@pytest.mark.parametrize("size, kw, message", [
    (0, {}, "integer >= 1"),
    ("2", {}, "integer >= 1"),
    (2, {"num_attention_heads": 3, "num_key_value_heads": 1}, "num_attention_heads"),
    (2, {"intermediate_size": 33}, "intermediate_size"),
    (3, {}, "this machine has 2"),
])
def test_bad_sizes_are_clear_errors(size, kw, message):
    with pytest.raises(layers.TPConfigError, match=message):
        layers.check_tensor_parallel_size(size, _cfg(**kw), "cpu", available=2)
