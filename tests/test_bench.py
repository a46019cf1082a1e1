"""The benchmark runs end to end on a small model and reports what the docs quote."""

from __future__ import annotations

import json

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
