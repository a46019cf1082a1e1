"""The benchmark runs end to end on a small model and reports what the docs quote."""

from __future__ import annotations

import json

import pytest
import torch
from checkpoints import CONFIGS

from minimodel import bench
from minimodel.kernels import native


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
    assert bench.main(["--card", "--model", str(folder), "--card-formats", "float32,bfloat16",
                       "--card-decode-tokens", "6", "--card-prefill-tokens", "24",
                       "--card-prompt", "10", "--repeats", "1", "--curve-batches", "1,2",
                       "--curve-steps", "1", "--profile-steps", "2", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    report = json.loads(lines[-1])  # the last line is the card as JSON
    assert report == json.loads(out.read_text())
    card = report["cards"]["float32"]
    cfg = Qwen3Config.from_pretrained(folder)
    assert card["parameters"] == cfg.num_parameters()
    # the weights a decode step reads: every product's (norms and the embedding table left out)
    assert card["weight_bytes"] == step_cost(cfg, 1, 0, 1, torch.float32)[1]
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
    assert card["bandwidth_bytes_per_s"] == max(card["probes"].values())  # the roof
    assert len(card["decode_runs"]) == 1 and card["bandwidth_utilisation_vs_sum_before"] > 0
    assert [p["batch"] for p in card["curve"]] == [1, 2]
    assert card["curve"][0]["step_over_batch1"] == 1.0
    assert card["kernel_choices"] and all("rows" in line for line in card["kernel_choices"])
    assert 0 < card["overhead"]["products_s"] < card["overhead"]["step_s"]
    # the inlined decode step and the model's forward, timed taking turns
    o = card["overhead"]
    assert o["step_inline_s"] > 0 and o["step_model_forward_s"] > 0
    # inlined, the model's forward (and in C, and in C stopping before the LM head)
    paths = 2 + ("step_native_s" in o) + ("step_native_without_head_s" in o)
    assert o["paired_tokens"] == paths * o["steps"]  # every one of those steps decoded a token
    if native.library() is not None and any("c_gemv" in line for line in card["kernel_choices"]):
        assert o["step_c_kernel_s"] > 0 and o["step_without_c_kernel_s"] > 0
        assert o["c_kernel_layers"] > 0 and o["c_paired_tokens"] == 2 * o["steps"]
    assert list(report["cards"]) == ["float32", "bfloat16"]
    prefix = report["prefix"]  # workloads P, small, in the first format
    assert prefix["format"] == "float32" and prefix["P1"]["same_tokens"]
    assert prefix["P1"]["on"]["prefill_tokens"] < prefix["P1"]["off"]["prefill_tokens"]
    named = {t["target"]: t for t in report["targets"]}
    assert named["prefix_p2_prefill_tokens"]["value"] == prefix["P2"]["prefill_tokens_ratio"]
    assert {(t["target"], t["format"]) for t in report["targets"]} == {
        ("mbu_float32", "float32"), ("mbu_bfloat16", "bfloat16"),
        ("batch8_step_over_batch1", "float32"), ("batch8_step_over_batch1", "bfloat16"),
        ("overhead", "float32"), ("overhead", "bfloat16"),
        ("prefix_p1_ttft_mean", "float32"), ("prefix_p1_total_time", "float32"),
        ("prefix_p2_prefill_tokens", "float32")}
    # the products with their weights in cache, at each B, over the B=1 step
    for c in report["cards"].values():
        one = c["curve"][0]["step_s"]
        for p in c["curve"]:
            assert p["products_in_cache_s"] > 0
            assert p["floor_over_batch1"] == pytest.approx(p["products_in_cache_s"] / one)
    for t in report["targets"]:
        if t["target"] == "batch8_step_over_batch1":
            assert t["floor"] == report["cards"][t["format"]]["curve"][1]["floor_over_batch1"]
    assert out.with_suffix(".png").stat().st_size > 1000
    text = "\n".join(lines[:-1])
    for words in ("ceiling", "memory-bandwidth utilisation", "matmul peak", "memory roof",
                  "kernels", "curve", "overhead", "decode steps inlined", "targets",
                  "products in cache", "their weights in cache"):
        assert words in text, words


@pytest.mark.parametrize("kind", ["float32", "bfloat16", "int8"])
def test_the_products_floor_prices_a_whole_weight_from_two_slices_in_cache(monkeypatch, kind):
    """Two slices of the weight (n / 2 and n rows) are timed through the formulation; the rows
    beyond n are priced at their difference, so what every call costs whatever its size (here
    50 us) is counted once, not once per slice's worth of rows."""
    from minimodel.bench import floor

    out, cols = 4000, 256
    weight = torch.randn(out, cols, generator=torch.Generator().manual_seed(0))
    if kind == "int8":
        from torchao.quantization import Int8WeightOnlyConfig, quantize_

        layer = torch.nn.Linear(cols, out, bias=False).to(torch.bfloat16)
        quantize_(layer, Int8WeightOnlyConfig())
        weight = layer.weight
    elif kind == "bfloat16":
        weight = weight.to(torch.bfloat16)
    timed = []

    def fake_seconds(run, x, part, packed):
        timed.append((part.shape[0], x.shape, x.dtype))
        torch.testing.assert_close(run(x, part, packed, None).float(),  # that slice's product
                                   torch.nn.functional.linear(x, weight)[:, :part.shape[0]].float(),
                                   rtol=2e-2, atol=2e-2)
        return 50e-6 + part.shape[0] * 1e-8

    monkeypatch.setattr(floor, "_call_seconds", fake_seconds)
    monkeypatch.setattr(floor, "HOT_BYTES", 1000 * cols)  # n: about 1000 rows of float32
    seconds = floor.weight_floor(weight, "linear" if kind == "int8" else "matmul_t", rows=3)
    n = timed[1][0]
    assert [t[0] for t in timed] == [n // 2, n] and n < out and n % 16 == 0
    assert all(t[1] == (3, cols) and t[2] == weight.dtype for t in timed)
    assert seconds == pytest.approx(50e-6 + out * 1e-8)
    # a weight the slice covers whole: its own time
    timed.clear()
    small = weight[:n // 2]
    assert floor.weight_floor(small, "linear", rows=1) == pytest.approx(50e-6 + (n // 2) * 1e-8)


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


def test_the_roof_is_the_fastest_of_three_streaming_probes():
    from minimodel.bench.probes import PROBES, measure_probes, roof

    rates, formulation = measure_probes(4 * 2**20, repeats=2)
    assert set(rates) == set(PROBES) and all(v > 0 for v in rates.values())
    assert roof(rates) == max(rates.values())
    assert formulation in ("linear", "matmul_t", "mkldnn", "c_gemv")


def test_a_decode_step_reads_the_weights_once_and_each_request_s_kv():
    """The curve's bytes per step are step_cost's: the weights once, plus B contexts of KV;
    and what the engine's model holds in its products is what step_cost counts as weights."""
    from minimodel.bench.curve import decode_bytes, decode_curve, dense_weight_bytes, weight_bytes
    from minimodel.engine import LLM
    from minimodel.kernels.roofline import step_cost

    llm = LLM("tiny", dtype=torch.float32, num_pages=32, page_size=4, skip_tokenizer_init=True)
    cfg = llm.cfg
    weights = weight_bytes(llm.model)
    assert weights == dense_weight_bytes(cfg, torch.float32)
    for batch in (1, 2, 8, 32):
        assert decode_bytes(cfg, weights, batch * 40, torch.float32) == step_cost(
            cfg, 1, 40, batch, torch.float32)[1]
    points = decode_curve(llm, (1, 2, 4), prompt_len=5, steps=3, vocab=1000, weights=weights)
    assert [p["batch"] for p in points] == [1, 2, 4]
    for p in points:  # 3 steps: the middle one's context, an integer
        assert p["bytes_per_step"] == step_cost(cfg, 1, int(p["context_per_request"]),
                                                p["batch"], torch.float32)[1]
        assert p["tok_per_s"] == pytest.approx(p["batch"] / p["step_s"])
    assert points[0]["bytes_per_step"] < points[1]["bytes_per_step"] < points[2]["bytes_per_step"]
    assert not llm.has_unfinished_requests()  # the curve leaves the engine idle


def test_quantized_weights_read_fewer_bytes():
    from minimodel.bench.curve import dense_weight_bytes, weight_bytes
    from minimodel.engine import LLM

    llm = LLM("tiny", dtype=torch.bfloat16, quantization="int8", num_pages=8,
              skip_tokenizer_init=True)
    dense = dense_weight_bytes(llm.cfg, torch.bfloat16)
    assert dense / 2 < weight_bytes(llm.model) < dense * 0.6  # a byte a weight + row scales


def test_quality_of_a_format_against_itself_is_exact_and_int8_is_in_range():
    from minimodel.bench.quality import format_quality, quality_report

    report = quality_report("tiny", ["bfloat16", "int8"], prompts=4, tokens=5)
    same, int8 = report["formats"]["bfloat16"], report["formats"]["int8"]
    assert same == {"logprob_diff_mean": 0.0, "logprob_diff_max": 0.0,
                    "teacher_forced_agreement": 1.0, "prefix_agreement": 1.0, "identical": 1.0}
    assert 0 <= int8["logprob_diff_mean"] <= int8["logprob_diff_max"]
    assert int8["logprob_diff_max"] > 0  # int8 weights do change the logits
    for key in ("teacher_forced_agreement", "prefix_agreement", "identical",):
        assert 0 <= int8[key] <= 1
    assert 0 <= report["baseline_self_agreement"] <= 1
    assert "int8" in format_quality([report])


def test_teacher_forcing_scores_what_free_running_generated():
    """Teacher-forced on its own greedy tokens, a float32 engine's argmax is those tokens."""
    from minimodel.bench.quality import free_running, teacher_forced
    from minimodel.engine import LLM

    llm = LLM("tiny", dtype=torch.float32, num_pages=16, skip_tokenizer_init=True)
    prompts = [[5, 6, 7, 8, 9], [100, 200, 300]]
    free = free_running(llm, prompts, 6)
    argmax, logprob = teacher_forced(llm, prompts, free)
    assert argmax.tolist() == free
    assert (logprob <= 0).all()
    _, scored = teacher_forced(llm, prompts, free, score=free)
    assert torch.allclose(scored, logprob)


def test_card_and_quality_flags():
    args = bench.parse_args(["--card", "--card-formats", "float32,int8", "--curve-batches",
                             "8,1,2,2"])
    assert args.card_formats == "float32,int8" and args.curve_batches == (1, 2, 8)
    settings = bench.settings_from_args(args)
    assert settings.curve_batches == (1, 2, 8) and settings.curve_steps == 6
    args = bench.parse_args(["--quality", "--quality-formats", "int4"])
    assert args.quality and args.quality_formats == "int4"
    assert args.quality_models == "bard,random:qwen3-0.6b"
    for bad in (["--card-formats", "int3"], ["--curve-batches", "0,1"],
                ["--curve-batches", "a"], ["--card", "--quality"],
                ["--quality-formats", "bfloat16"]):
        with pytest.raises(SystemExit) as err:
            bench.parse_args(bad)
        assert err.value.code == 2, bad


def test_prefix_workloads_run_alone_and_write_json(tmp_path, capsys):
    out = tmp_path / "prefix.json"
    assert bench.main(["--workloads", "P", "--prefix-models", "tiny", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())["prefix"][0]
    assert rep["model"] == "tiny" and rep["workloads"]["questions"] == 32
    for name in ("P1", "P2"):
        assert rep[name]["same_tokens"], name
        assert rep[name]["on"]["prefill_tokens"] < rep[name]["off"]["prefill_tokens"]
        assert rep[name]["off"]["hit_rate"] == 0 < rep[name]["on"]["hit_rate"]
    printed = capsys.readouterr().out
    assert "P1 mean TTFT at least 5x lower" in printed and "off/on" in printed
    with pytest.raises(ValueError, match="P run on their own"):
        bench.main(["--workloads", "P,A", "--out", str(out)])


def test_spec_workloads_run_alone_and_write_json(tmp_path, capsys):
    out = tmp_path / "spec.json"
    assert bench.main(["--workloads", "S", "--spec-model", "tiny", "--spec-k", "2,3",
                       "--spec-tokens", "8", "--spec-rounds", "2", "--out", str(out)]) == 0
    rep = json.loads(out.read_text())["spec"]
    assert rep["model"] == "tiny" and rep["k_values"] == [2, 3] and rep["rounds"] == 2
    for wl in ("S1", "S8"):
        assert list(rep[wl]) == ["plain", "ngram k=2", "ngram k=3"]
        assert all(r["same_tokens"] for r in rep[wl].values())
        assert rep[wl]["plain"]["speedup"] == 1.0 and rep[wl]["plain"]["draft_tokens"] == 0
        assert all(r["draft_tokens"] > 0 for n, r in rep[wl].items() if n != "plain")
        for r in rep[wl].values():  # the systems took turns: every one ran every round
            assert len(r["round_tokens_per_s"]) == len(r["round_speedups"]) == 2
            assert min(r["round_speedups"]) <= r["speedup"] <= max(r["round_speedups"])
        assert rep[wl]["plain"]["round_speedups"] == [1.0, 1.0]
    printed = capsys.readouterr().out
    assert "batch-1 decode at least 1.8x faster" in printed
    with pytest.raises(ValueError, match="S run on their own"):
        bench.main(["--workloads", "S,A", "--out", str(out)])
