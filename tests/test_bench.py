"""The benchmark runs end to end on a small model and reports what the docs quote."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoints import CONFIGS

from minimodel import bench


def test_make_requests_is_seeded_and_in_range():
    a = bench.make_requests(16, (32, 256), (16, 128), seed=0, vocab=1000)
    b = bench.make_requests(16, (32, 256), (16, 128), seed=0, vocab=1000)
    assert [r.prompt for r in a] == [r.prompt for r in b]
    assert all(32 <= len(r.prompt) <= 256 and 16 <= r.max_new_tokens <= 128 for r in a)
    assert len({len(r.prompt) for r in a}) > 8  # lengths really vary


def test_bench_runs_and_writes_json_and_plot(small_checkpoint, tmp_path, capsys):
    folder = small_checkpoint(**CONFIGS["gqa2-tied-hd!=C"], max_position_embeddings=512)
    out = tmp_path / "bench.json"
    assert bench.main(["--model", str(folder), "--dtype", "float32", "--a-requests", "3",
                       "--c-tokens", "8", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    res = report["results"]["float32"]
    assert res["engine"]["kv_pool"]["ok"]
    assert set(res["ratios"]) == {"A_throughput_vs_transformers", "B_decode_vs_transformers",
                                  "B_ttft_transformers_over_engine", "C_speedup_vs_no_cache"}
    assert res["engine"]["A"]["output_tokens"] == res["transformers"]["A"]["output_tokens"]
    assert all(v > 0 for v in res["ratios"].values())
    assert out.with_suffix(".png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "A throughput" in printed and "instead of 256" in printed


def test_bench_card_measures_the_ceiling_and_ends_with_json(small_checkpoint, tmp_path, capsys):
    from minimodel.config import Qwen3Config
    from minimodel.kernels.roofline import step_cost

    folder = small_checkpoint(**CONFIGS["gqa2-tied-hd!=C"], max_position_embeddings=512)
    out = tmp_path / "card.json"
    assert bench.main(["--card", "--model", str(folder), "--dtype", "float32",
                       "--card-decode-tokens", "6", "--card-prefill-tokens", "24",
                       "--card-prompt", "10", "--repeats", "1", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    report = json.loads(lines[-1])  # the last line is the card as JSON
    assert report == json.loads(out.read_text())
    card = report["cards"]["float32"]
    cfg = Qwen3Config.from_pretrained(folder)
    assert card["parameters"] == cfg.num_parameters()
    assert card["weight_bytes"] == 4 * cfg.num_parameters()
    assert card["kv_bytes_per_token"] == cfg.kv_bytes_per_token(torch.float32)
    assert card["decode_context_tokens"] == 10 + 6 // 2
    assert card["decode_bytes_per_token"] == step_cost(cfg, 1, 13, 1, torch.float32)[1]
    assert card["decode_ceiling_tok_per_s"] == pytest.approx(
        card["bandwidth_bytes_per_s"] / card["decode_bytes_per_token"])
    assert card["bandwidth_utilisation"] == pytest.approx(
        card["decode_tok_per_s"] / card["decode_ceiling_tok_per_s"])
    assert card["prefill_flops"] == step_cost(cfg, 24, 24, 1, torch.float32)[0]
    assert card["prefill_fraction_of_matmul_peak"] == pytest.approx(
        card["prefill_flops_per_s"] / card["matmul_flops_per_s"])
    assert all(card[k] > 0 for k in ("bandwidth_bytes_per_s", "matmul_flops_per_s",
                                      "decode_tok_per_s", "prefill_flops_per_s"))
    text = "\n".join(lines[:-1])
    assert "ceiling" in text and "memory-bandwidth utilisation" in text and "matmul peak" in text


def test_the_layer_step_runs_the_engine_layer_over_its_own_pages():
    """A prefill of a whole prompt reads none of the noise in the pool; a decode step reads
    kv_len - 1 cached tokens of it, through the page tables the step planned."""
    from minimodel.bench.layer_step import LayerStep
    from minimodel.config import Qwen3Config

    cfg = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=8)
    layer = LayerStep(cfg, page_size=4)
    for q_len, kv_len, batch, reads_cache in ((7, 7, 2, False), (1, 10, 3, True)):
        run = layer.prepare(q_len=q_len, kv_len=kv_len, batch=batch)
        assert layer.kv_cache.num_pages == batch * -(-kv_len // 4)
        first = run()
        assert first.shape == (batch * q_len, 64) and torch.isfinite(first).all()
        layer.kv_cache.pools[0].normal_()  # other noise in every slot
        assert torch.equal(run(), first) != reads_cache, (q_len, kv_len)
