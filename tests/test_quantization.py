"""Weight-only quantization (engine/quantization.py): LLM(..., quantization="int8" | "int4")
stores every linear layer and the LM head through torchao, keeps the embedding exact, and runs
with sampling, the CLI and tensor parallelism as before."""

from __future__ import annotations

import pytest
import torch

import minimodel as mm
from minimodel.__main__ import _dtype, build_parser
from minimodel.engine.quantization import linear_layers


@pytest.fixture(autouse=True)
def own_home(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMODEL_HOME", str(tmp_path / "home"))


ENGINE = dict(dtype="bfloat16", num_pages=32, page_size=4, skip_tokenizer_init=True)


@pytest.mark.parametrize("method, kind", [("int8", "Int8Tensor"), ("int4", "Int4OpaqueTensor")])
def test_linear_layers_and_head_quantized_embedding_exact(method, kind):
    plain = mm.LLM("tiny", **ENGINE)
    llm = mm.LLM("tiny", quantization=method, **ENGINE)
    assert llm.quantization == method
    layers = linear_layers(llm.model)
    assert len(layers) == 4 * llm.cfg.num_hidden_layers + 1  # qkv, o, gate_up, down; the head
    for name, module in layers:
        assert type(module.weight).__name__ == kind, name
    embed = llm.model.model.embed_tokens.weight
    assert type(embed) in (torch.Tensor, torch.nn.Parameter)
    assert torch.equal(embed, plain.model.model.embed_tokens.weight)
    assert llm.model.lm_head.weight is not embed  # tied in the checkpoint: the head has a copy
    # each quantized weight is the float one to within half a quantization step of its row
    # (int8: one scale per row) or group (int4); checked against the unquantized model
    for (name, q), (_, f) in zip(layers, linear_layers(plain.model), strict=True):
        eye = torch.eye(f.weight.shape[1], dtype=f.weight.dtype)
        dequantized = torch.nn.functional.linear(eye, q.weight).t()  # through its own kernel
        error = (dequantized.float() - f.weight.float()).abs()
        step = f.weight.float().abs().amax(dim=1, keepdim=True) / (127 if method == "int8"
                                                                      else 7)
        assert (error <= step).all(), f"{name}: off by more than a quantization step"
    out = llm.generate([[1, 2, 3, 4, 5]], mm.SamplingParams(max_tokens=6, temperature=0,
                                                           logprobs=True))[0]
    assert len(out.token_ids) == 6 and all(lp <= 0 for lp in out.logprobs)


def test_quantized_sampling_is_seeded_and_greedy_is_repeatable():
    llm = mm.LLM("tiny", quantization="int8", **ENGINE)
    seeded = mm.SamplingParams(max_tokens=8, temperature=1.0, seed=7)
    a, b = (llm.generate([[5, 6, 7]], seeded)[0].token_ids for _ in range(2))
    assert a == b
    greedy = mm.SamplingParams(max_tokens=8, temperature=0)
    both = llm.generate([[5, 6, 7], [9, 9]], greedy)
    alone = llm.generate([[5, 6, 7]], greedy)[0]
    assert both[0].token_ids == alone.token_ids  # batched with another request or alone


@pytest.mark.parametrize("bad, message", [
    (dict(quantization="fp8"), "quantization must be None, 'int8' or 'int4'"),
    (dict(quantization=8), "quantization must be None, 'int8' or 'int4'"),
    (dict(tune_kernels="yes"), "tune_kernels must be True or False"),
])
def test_bad_settings_are_named(bad, message):
    with pytest.raises(ValueError, match=message):
        mm.LLM("tiny", **bad)


def test_the_cli_passes_quantization_and_computes_in_bfloat16():
    args = build_parser().parse_args(["serve", "tiny", "--quantization", "int8"])
    assert args.quantization == "int8"
    assert _dtype("cpu", args.dtype, args.quantization) == torch.bfloat16
    assert _dtype("cpu", "float32", "int8") == "float32"  # --dtype wins
    assert _dtype("cpu", "auto", None) == torch.float32
    args = build_parser().parse_args(["generate", "hi", "--quantization", "int4"])
    assert args.quantization == "int4"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--quantization", "fp8"])


@pytest.mark.stress
def test_two_ranks_quantize_their_own_shards():
    """Each rank quantizes its shard: the column-split layers' rows match one rank's exactly,
    the row-split layers' scales cover half a row, so the two runs agree to int8's precision.

    In float32, so that every product formulation the kernel tuner may pick gives the same
    digits (in bfloat16 even the unquantized one- and two-rank runs of tiny differ by up to
    0.1 in a logprob, and which formulation wins depends on the machine's load)."""
    prompts = [[1, 2, 3, 4, 5, 6, 7], [8, 9], [5, 5, 5, 5], list(range(100, 1000, 100))]
    sp = mm.SamplingParams(max_tokens=1, temperature=0, logprobs=True)
    engine = dict(ENGINE, dtype="float32")
    exact = mm.LLM("tiny", **engine).generate(prompts, sp)
    one = mm.LLM("tiny", quantization="int8", **engine).generate(prompts, sp)
    with mm.LLM("tiny", quantization="int8", tensor_parallel_size=2, **engine) as llm:
        two = llm.generate(prompts, sp)
        assert llm.quantization == "int8"
    for e, a, b in zip(exact, one, two, strict=True):
        assert len(b.token_ids) == 1
        assert e.token_ids == a.token_ids == b.token_ids
        # int8's own error against float32 reaches ~0.13 here; the two ranks' half-row
        # scales move a logprob by ~0.03 (a rank that skipped quantizing or used the other
        # rank's scales would be off by far more)
        assert abs(b.logprobs[0] - e.logprobs[0]) < 0.2
        assert abs(a.logprobs[0] - b.logprobs[0]) < 0.06
