"""The C kernel (minimodel/kernels/gemv.c): built once per machine, equal to the float64 product
within float tolerance for every weight kind, row count and ragged shape, refused input refused
clearly, and left out of the choice where no compiler can build it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from minimodel.engine.quantization import _torchao
from minimodel.kernels import native
from minimodel.kernels.matmul import FORMULATIONS, candidates

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler on this machine")


def lib():
    found = native.library()
    assert found is not None, native.status()
    return found


def data(out: int, inp: int, rows: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(out, inp, generator=g) / inp**0.5, torch.randn(rows, inp, generator=g),
            torch.randn(out, generator=g))


def int8(w: torch.Tensor, scale_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    scale = (w.abs().amax(1) / 127).to(scale_dtype)
    return (w / scale.float()[:, None]).round().clamp(-128, 127).to(torch.int8), scale


def test_it_builds_here_and_says_how():
    lib()
    assert native.status().startswith("built with ")
    assert "float lanes" in native.status()


# ragged shapes: outputs not a multiple of the 8 or 16 lanes, odd inputs (pairs are padded)
SHAPES = [(1, 1), (37, 33), (300, 96), (1000, 255), (64, 1024)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["float32", "bfloat16", "int8:float32", "int8:bfloat16"])
def test_every_kind_computes_the_product(shape, kind):
    out, inp = shape
    for rows in (1, 2, 3, 4, 5, 8, 9, 17, 64):
        w, x, bias = data(out, inp, rows, seed=rows)
        act = torch.bfloat16 if kind.endswith("bfloat16") else torch.float32
        x = x.to(act)
        if kind.startswith("int8"):
            q, scale = int8(w, act)
            packed = native.pack(q, scale, act)
            exact_w = q.double() * scale.double()[:, None]
        else:
            packed = native.pack(w.to(act))
            exact_w = w.to(act).double()
        for b in (None, bias.to(act)):
            exact = x.double() @ exact_w.T + (0 if b is None else b.double())
            got = native.gemv(x, packed, b)
            assert got.shape == (rows, out) and got.dtype == act
            # float32: sums in another order; bfloat16: one rounding of the float32 sum
            tol = 1e-5 if act == torch.float32 else 2**-8
            scale_of = exact.abs().amax().item() + 1
            err = (got.double() - exact).abs().max().item()
            assert err <= tol * scale_of, f"{kind} {shape} rows {rows}: {err}"


def test_pairs_and_plain_layouts_agree():
    w, x, _ = data(200, 130, 6)
    w, x = w.to(torch.bfloat16), x.to(torch.bfloat16)
    plain = native.pack(w, activations=torch.float32)  # no pairs: float sums of converted weights
    assert not plain.pairs
    paired = native.pack(w)
    assert paired.pairs == bool(lib().mm_has_pairs())
    a, b = native.gemv(x, plain), native.gemv(x, paired)
    # bfloat16 products are exact in float32 either way: only the order of the sums differs
    assert (a.float() - b.float()).abs().max().item() <= 2**-7 * a.float().abs().max().item()


def quads() -> bool:
    return lib().mm_quads_max_in() > 0


def words() -> bool:
    return bool(lib().mm_has_words())


needs_words = pytest.mark.skipif(native.library() is None or not words(),
                                 reason="int8 word products are for AVX2 CPUs without AVX-512")


def int8_layout(act: torch.dtype) -> int:
    """The layout an int8 weight takes here: integer products where the CPU has them (quads
    with AVX512_VNNI; words with AVX2 alone, for bfloat16 activations), else bfloat16 pairs or
    plain floats."""
    if quads():
        return native.QUADS
    if act == torch.bfloat16 and words():
        return native.WORDS
    return native.PAIRS if act == torch.bfloat16 and lib().mm_has_pairs() else native.PLAIN


@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16])
def test_every_layout_offered_computes_the_same_product(act):
    """An int8 and a bfloat16 weight packed in each layout this CPU's build offers (pack's
    choice first), and a layout it does not offer refused with what it does."""
    w, x, bias = data(70, 300, 5)
    x, bias = x.to(act), bias.to(act)
    for weight, scale in (int8(w, act), (w.to(torch.bfloat16), None)):
        offered = native.layouts(native.KINDS[weight.dtype], 300, act)
        assert offered[-1] == native.PLAIN
        assert native.pack(weight, scale, act).layout == offered[0]
        if weight.dtype == torch.int8:
            assert offered[0] == int8_layout(act)
        base = None
        for layout in offered:
            got = native.gemv(x, native.pack(weight, scale, act, layout=layout), bias).double()
            base = got if base is None else base
            tol = 1e-5 if act == torch.float32 else 2**-7
            assert (got - base).abs().max().item() <= tol * (base.abs().max().item() + 1)
        missing = [n for n in native.LAYOUT_NAMES if n not in offered]
        for layout in missing:
            with pytest.raises(ValueError, match="it offers .*plain"):
                native.pack(weight, scale, act, layout=layout)


@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16])
def test_int8_weights_take_integer_products_where_the_cpu_has_them(act):
    w, x, bias = data(300, 1000, 6)
    q, scale = int8(w, act)
    packed = native.pack(q, scale, act)
    assert packed.layout == int8_layout(act)
    # one input far larger than the rest: the activations' scales follow the row's largest
    x[:, 7] = 1000
    x = x.to(act)
    exact_w = q.double() * scale.double()[:, None]
    exact = x.double() @ exact_w.T + bias.to(act).double()
    got = native.gemv(x, packed, bias.to(act)).double()
    # quads: P bytes an input; words: a 16-bit integer an input (gemv.c)
    if act == torch.float32:
        # each input off by at most 2^-21 of the row's largest, plus float32's sums
        bound = 2.0**-21 * 1000 * exact_w.abs().sum(1) + 1e-6 * exact.abs()
    else:
        # bfloat16: the inputs of at least 1/32 (quads) or 1/64 (words) of the largest are
        # exact, the others off by at most 2^-14 (quads) or 1/32767 (words) of it; then the
        # result is rounded to bfloat16
        share, off = (64, 1 / 32767) if packed.layout == native.WORDS else (32, 2.0**-14)
        small = (x.double().abs() < 1000 / share).double()
        bound = off * 1000 * small @ exact_w.abs().T + 2**-8 * exact.abs()
    assert ((got - exact).abs() <= bound).all()


@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16])
def test_a_zero_row_gives_the_bias_and_a_row_with_inf_or_nan_gives_nan(act):
    w, x, bias = data(40, 64, 4)
    q, scale = int8(w, act)
    packed = native.pack(q, scale, act)
    x[1] = 0
    x[2, 5] = float("inf")
    x[3, 9] = float("nan")
    x, bias = x.to(act), bias.to(act)
    got = native.gemv(x, packed, bias)
    assert torch.equal(got[1], bias)
    if packed.layout in (native.QUADS, native.WORDS):  # integers have no inf: the row is NaN
        assert got[2:].isnan().all()
    else:
        assert not got[2:].isfinite().all(dim=1).any()
    exact = x[0].double() @ (q.double() * scale.double()[:, None]).T + bias.double()
    tol = 1e-5 if act == torch.float32 else 2**-8
    assert (got[0].double() - exact).abs().max().item() <= tol * (exact.abs().max().item() + 1)


@pytest.mark.parametrize("act", [torch.float32, torch.bfloat16])
def test_an_int8_weight_too_wide_for_int32_sums_is_packed_otherwise_and_still_right(act):
    top = lib().mm_quads_max_in()
    inp = (top or 65536) + 4  # 255 * 128 * inputs would overflow the quads' int32 sums
    g = torch.Generator().manual_seed(3)
    q = torch.randint(-128, 128, (3, inp), generator=g, dtype=torch.int8)
    scale = torch.full((3,), 0.01)
    x = (torch.rand(2, inp, generator=g) + 1).to(act)  # of one sign: the sums grow with inputs
    packed = native.pack(q, scale, act)
    # words add up 256 pairs at a time in int32, then in float32: any width
    want = int8_layout(act)
    assert packed.layout == (native.PLAIN if want == native.QUADS else want)
    exact = x.double() @ (q.double() * 0.01).T
    got = native.gemv(x, packed).double()
    tol = 1e-5 if act == torch.float32 else 2**-8
    assert (got - exact).abs().max().item() <= tol * (exact.abs().max().item() + 1)


@needs_words
def test_words_add_up_exactly_at_the_edge_of_int32():
    """Every weight -128 and every input 255, the row's largest, written as 255 * 128: each pair
    adds 2 * 128 * 32640 in size, 256 pairs (the int32 sums' chunk) come within 2^23 of 2^31,
    and twice as many would overflow. Inputs around the 512 a chunk holds, outputs around the
    groups of 4 blocks of 8 and the 8 blocks a row takes at once, rows around the 4 at a time."""
    for inp in (2, 511, 512, 513, 1024, 1537):
        for out in (1, 8, 31, 33, 64, 65):
            for rows in (1, 4, 5, 9):
                q = torch.full((out, inp), -128, dtype=torch.int8)
                scale = torch.full((out,), 2.0**-7)
                x = torch.full((rows, inp), 255.0, dtype=torch.bfloat16)
                got = native.gemv(x, native.pack(q, scale, torch.bfloat16)).double()
                # -255 * inp exactly in float32, then rounded to bfloat16
                want = torch.full((rows, out), -255.0 * inp).to(torch.bfloat16).double()
                assert torch.equal(got, want), (inp, out, rows)


@needs_words
def test_words_keep_tiny_and_huge_rows():
    """A row's scale is a power of two from its largest input: rows near the ends of bfloat16's
    range (where 1 over the scale is no float) come out right too."""
    g = torch.Generator().manual_seed(5)
    q = torch.randint(-127, 128, (20, 50), generator=g, dtype=torch.int8)
    scale = torch.rand(20, generator=g) + 0.5
    base = torch.randn(3, 50, generator=g)
    exact_w = q.double() * scale.double()[:, None]
    for factor in (2.0**-120, 2.0**-100, 1.0, 2.0**100):
        x = (base * factor).to(torch.bfloat16)
        got = native.gemv(x, native.pack(q, scale, torch.bfloat16)).double()
        exact = x.double() @ exact_w.T
        err = (got - exact).abs().max().item()
        assert err <= 2**-7 * exact.abs().max().item(), (factor, err)
    with pytest.raises(ValueError, match="bfloat16 on the CPU"):  # packed for bfloat16 only
        native.gemv(x.float(), native.pack(q, scale, torch.bfloat16))


def test_the_result_does_not_depend_on_the_thread_count():
    w, x, _ = data(4096, 256, 3)
    packed = native.pack(w)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = native.gemv(x, packed)
        torch.set_num_threads(max(2, threads))
        many = native.gemv(x, packed)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, many), "each output is one thread's sum, in the same order"


def test_bad_input_is_refused_and_says_what_to_pass():
    w, x, _ = data(40, 24, 2)
    packed = native.pack(w.to(torch.bfloat16))
    before = packed.data.clone()
    with pytest.raises(ValueError, match=r"x \[rows, 24\]"):
        native.gemv(torch.randn(2, 25), native.pack(w))
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        native.gemv(x.double(), native.pack(w))
    if packed.pairs:
        with pytest.raises(ValueError, match="bfloat16 on the CPU"):
            native.gemv(x, packed)  # float32 x on a weight packed for bfloat16 activations
    with pytest.raises(ValueError, match="per-row scale"):
        native.pack(w.to(torch.int8))
    with pytest.raises(ValueError, match="one per output row"):
        native.pack(w.to(torch.int8), torch.ones(39))
    with pytest.raises(ValueError, match="2-D CPU"):
        native.pack(w.double())
    assert torch.equal(packed.data, before)
    torch.testing.assert_close(native.gemv(x.to(torch.bfloat16), packed).float(),
                               (x.to(torch.bfloat16) @ w.to(torch.bfloat16).T).float(),
                               atol=2e-2, rtol=2e-2)


def test_it_is_a_candidate_for_plain_and_int8_weights():
    assert "c_gemv" in candidates(torch.randn(64, 32))
    assert "c_gemv" in candidates(torch.randn(64, 32).to(torch.bfloat16))
    assert "c_gemv" not in candidates(torch.randn(64, 32).half())
    layer = torch.nn.Linear(64, 48, bias=False).to(torch.bfloat16)
    ao = _torchao()
    ao.quantize_(layer, ao.Int8WeightOnlyConfig())
    w = layer.weight
    assert "c_gemv" in candidates(w)
    x = torch.randn(3, 64).to(torch.bfloat16)
    got = FORMULATIONS["c_gemv"].run(x, w, FORMULATIONS["c_gemv"].pack(w), None)
    exact = x.double() @ (w.qdata.double() * w.scale.double().reshape(-1, 1)).T
    assert (got.double() - exact).abs().max().item() <= 2**-8 * (exact.abs().max().item() + 1)


PROBE = """
import json, torch
from minimodel.kernels import native
from minimodel.kernels.matmul import candidates
print(json.dumps({"status": native.status(), "candidates": candidates(torch.randn(8, 8))}))
"""


def probe(home, **env) -> dict:
    run = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "MINIMODEL_HOME": str(home), **env})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_built_once_then_loaded_from_home(tmp_path):
    first = probe(tmp_path)
    built = list((tmp_path / "kernels" / "native").glob("gemv-*.so"))
    assert first["status"].startswith("built with ") and len(built) == 1
    stamp = built[0].stat().st_mtime_ns
    second = probe(tmp_path)
    assert second == first and built[0].stat().st_mtime_ns == stamp, "not rebuilt"
    assert "c_gemv" in first["candidates"]


@pytest.mark.parametrize("env, says", [
    ({"CC": "no-such-compiler"}, "no C compiler found"),
    ({"CC": "false"}, "could not build gemv.c"),
    ({"MINIMODEL_NATIVE": "0"}, "off (MINIMODEL_NATIVE=0)"),
])
def test_without_a_build_it_is_left_out_and_says_why(tmp_path, env, says):
    found = probe(tmp_path, **env)
    assert says in found["status"]
    assert "c_gemv" not in found["candidates"] and "linear" in found["candidates"]
    assert not list((tmp_path / "kernels" / "native").glob("gemv-*.so"))


def test_the_card_times_steps_with_and_without_it_taking_turns():
    """bench/overhead.py swaps each layer that chose the C kernel for the next fastest of the
    same timings, and times steps both ways; the tokens go on from one step to the next."""
    import minimodel as mm
    from minimodel.bench.overhead import step_profile
    from minimodel.engine.kernel_choice import KernelChoice, capturable_kernels, kernels_without
    from minimodel.engine.quantization import linear_layers
    from minimodel.kernels.matmul import ROW_BUCKETS, LinearKernels

    llm = mm.LLM("tiny", num_pages=32, skip_tokenizer_init=True, tune_kernels=False)
    seconds = {str(b): {"linear": 3.0, "matmul_t": 2.0, "c_gemv": 1.0} for b in ROW_BUCKETS}
    layers = linear_layers(llm.model)
    for _, module in layers:
        module.kernels = LinearKernels(module.weight, dict.fromkeys(ROW_BUCKETS, "c_gemv"))
    llm.model.kernel_choices = [KernelChoice((1, 1), "float32", [name for name, _ in layers],
                                             dict.fromkeys(ROW_BUCKETS, "c_gemv"), True, seconds)]
    swaps = kernels_without(llm.model, {"c_gemv"})
    assert len(swaps) == len(layers)
    assert all(set(other.choices.values()) == {"matmul_t"} for _, _, other in swaps)
    o = step_profile(llm, steps=2, prompt_len=8, vocab=llm.model.cfg.vocab_size)
    assert o["step_c_kernel_s"] > 0 and o["step_without_c_kernel_s"] > 0
    assert o["c_kernel_layers"] == len(layers) and o["c_paired_tokens"] == 4
    assert all(module.kernels is mine for module, mine, _ in swaps), "put back"
    # a CUDA graph records torch ops: before a capture the C kernel gives way to the next fastest
    capturable_kernels(llm.model)
    assert all(set(module.kernels.choices.values()) == {"matmul_t"} for _, module in layers)


def test_the_profiler_sees_each_call_into_c_as_an_op_of_its_own():
    """native.labelled names a C call for torch.profiler (bench/overhead.py splits a step by
    those names): a product inside a labelled step counts as a product, not as overhead."""
    from torch.profiler import ProfilerActivity, profile

    from minimodel.bench.overhead import STEP_LABEL, split_events

    packed = native.pack(torch.randn(64, 32))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with native.labelled(STEP_LABEL):
            native.gemv(torch.randn(2, 32), packed)
            torch.zeros(3)  # overhead
    part, others = split_events(prof.events())
    assert part["step_us"] > part["products_us"] > 0
    assert native.PROFILER_LABEL not in others and "aten::zeros" in others
