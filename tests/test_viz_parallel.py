"""Chapter 10's figures: the layout they draw follows the package's sharding rules."""

from __future__ import annotations

import matplotlib
import pytest
import torch

from minimodel import layers
from minimodel.config import Qwen3Config
from minimodel.viz import parallel

matplotlib.use("Agg")


def _cfg(**kw) -> Qwen3Config:
    base = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                num_attention_heads=8, num_key_value_heads=2, head_dim=4)
    return Qwen3Config(**{**base, **kw})


@pytest.mark.parametrize("hq, hkv, world", [(8, 2, 2), (8, 2, 4), (8, 1, 4), (4, 4, 2)])
def test_heads_per_rank_are_the_layers_shards(hq, hkv, world):
    cfg = _cfg(num_attention_heads=hq, num_key_value_heads=hkv)
    lay = parallel.block_layout(cfg, world, torch.float32)
    D = cfg.head_dim
    for shard in lay.ranks:
        rows = layers.qkv_shard_rows(hq, hkv, D, shard.rank, world).tolist()
        q_heads = sorted({i // D for i in rows if i < hq * D})
        kv_heads = sorted({(i - hq * D) // D for i in rows if hq * D <= i < (hq + hkv) * D})
        assert shard.q_heads == q_heads and shard.kv_heads == kv_heads
    assert sorted(h for s in lay.ranks for h in s.q_heads) == list(range(hq))
    assert lay.kv_replicas == max(1, world // hkv)


def test_bytes_are_counted_from_the_sharded_layers():
    cfg = _cfg()
    world = 2
    lay = parallel.block_layout(cfg, world, torch.bfloat16)
    with layers.tensor_parallel(1, world), torch.device("meta"):
        from minimodel.engine.model import Qwen3DecoderLayer

        block = Qwen3DecoderLayer(cfg, 0)
    held = sum(p.numel() for p in block.parameters()) * 2
    assert lay.ranks[1].weight_bytes == held
    assert lay.ranks[1].columns == (24, 48)
    assert lay.allreduce_bytes_per_token == cfg.hidden_size * 2
    assert lay.ranks[0].kv_bytes_per_token == 2 * 1 * cfg.head_dim * 2


def test_figures_draw_and_say_what_crosses_the_wire():
    cfg = _cfg()
    fig = parallel.plot_tp_block(cfg, 4, torch.bfloat16, name="toy")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert sum("64 bytes per token" in t for t in texts) == 2  # C=32 numbers of 2 bytes, twice
    assert any("q heads 6-7; KV head 1" in t for t in texts)
    assert "each KV head on 2 ranks" in fig.axes[0].get_title()
    fig = parallel.plot_linear_splits(6, 8, 3)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("the 3 partials are summed" in t for t in texts)
    matplotlib.pyplot.close("all")
