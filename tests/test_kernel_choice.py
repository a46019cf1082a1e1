"""The CPU products chosen per shape (minimodel/kernels/matmul.py, engine/kernel_choice.py):
every formulation computes F.linear's product, each row count runs its bucket's choice, the
choices are measured once per machine and read back, and CUDA is left alone."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F

import minimodel as mm
from minimodel.engine.kernel_choice import choose_kernels, packed_bytes, unbind_kernels
from minimodel.engine.model import PackedQwen3ForCausalLM
from minimodel.engine.quantization import _torchao, linear_layers
from minimodel.home import minimodel_home
from minimodel.kernels import matmul, native
from minimodel.kernels.matmul import (
    FORMULATIONS,
    ROW_BUCKETS,
    Formulation,
    KernelTable,
    LinearKernels,
    candidates,
    row_bucket,
    time_formulations,
)


@pytest.fixture(autouse=True)
def own_home(tmp_path, monkeypatch):
    """Each test measures into its own cache folder."""
    monkeypatch.setenv("MINIMODEL_HOME", str(tmp_path / "home"))


def weight(out: int, inp: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    return (torch.randn(out, inp, generator=torch.Generator().manual_seed(seed)) / inp**0.5
            ).to(dtype)


def test_a_onednn_that_cannot_pack_this_dtype_is_not_offered_and_the_engine_still_starts(
        monkeypatch):
    """oneDNN's bfloat16 linear needs AVX-512 or AVX-NE-CONVERT; on a CPU without them packing
    raises. Such a CPU, on any machine: the formulation is left out and the LLM starts."""
    def refuse(w):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support ...")

    monkeypatch.setattr(matmul, "_pack_mkldnn", refuse)
    matmul._mkldnn_runs.cache_clear()
    try:
        for dtype in (torch.float32, torch.bfloat16):
            assert "mkldnn" not in candidates(weight(64, 32, dtype))
        llm = mm.LLM("tiny", dtype=torch.bfloat16, skip_tokenizer_init=True, num_pages=16)
        assert llm.kernel_choices and all(
            "mkldnn" not in c.describe() for c in llm.kernel_choices)
        out = llm.generate([[1, 2, 3]], mm.SamplingParams(temperature=0, max_tokens=3))
        assert len(out[0].token_ids) == 3
    finally:
        matmul._mkldnn_runs.cache_clear()  # the next test asks the real oneDNN again


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows", [1, 2, 3, 8, 17, 32])
def test_every_formulation_computes_f_linear(dtype, rows):
    w = weight(1000, 96, dtype)
    bias = torch.randn(1000).to(dtype)
    x = torch.randn(rows, 96).to(dtype)
    names = candidates(w)
    assert names[0] == "linear" and "matmul_t" in names
    # oneDNN's bfloat16 linear needs AVX-512 or AVX-NE-CONVERT: offered where torch says so
    takes = torch.backends.mkldnn.is_available() and (
        dtype == torch.float32 or torch.ops.mkldnn._is_mkldnn_bf16_supported())
    assert ("mkldnn" in names) == takes
    for name in names:
        f = FORMULATIONS[name]
        packed = f.pack(w) if f.pack else None
        for b in (None, bias):
            want = F.linear(x, w, b)
            got = f.run(x, w, packed, b)
            assert got.shape == want.shape and got.dtype == want.dtype, name
            # float32: the same sums in another order. bfloat16: (W @ x.T) is rounded before the
            # bias is added, so an output near 0 may differ by a rounding of the larger terms
            fp32 = dtype == torch.float32
            atol = 1e-5 if fp32 else 2**-8 * want.abs().max().item()
            torch.testing.assert_close(got, want, atol=atol, rtol=1.3e-6 if fp32 else 1.6e-2,
                                       msg=f"{name}, {rows} rows, bias {b is not None}")


def test_the_int8_formulations_compute_torchaos_product():
    layer = torch.nn.Linear(128, 300, bias=False).to(torch.bfloat16)
    ao = _torchao()
    ao.quantize_(layer, ao.Int8WeightOnlyConfig())
    w = layer.weight
    assert candidates(w)[:2] == ["linear", "int8pack"]
    assert candidates(w)[2:] == (["c_gemv"] if native.library() else [])
    x = torch.randn(5, 128).to(torch.bfloat16)
    # the exact product of the int8 weight and its per-row scales, in float32; the two bfloat16
    # kernels round at other places (before or after scaling), each within bfloat16's steps
    exact = F.linear(x.float(), w.qdata.float() * w.scale.float().reshape(-1, 1))
    atol = 2**-7 * exact.abs().max().item()
    for name in candidates(w)[1:]:
        got = FORMULATIONS[name].run(x, w, FORMULATIONS[name].pack(w), None)
        torch.testing.assert_close(got.float(), exact, atol=atol, rtol=1.6e-2, msg=name)
    torch.testing.assert_close(F.linear(x, w).float(), exact, atol=atol, rtol=1.6e-2)


def test_each_row_count_runs_its_buckets_choice(monkeypatch):
    calls = []

    def spy(x, w, packed, bias):
        calls.append(x.shape[0])
        return F.linear(x, w, bias)

    monkeypatch.setitem(FORMULATIONS, "spy", Formulation("spy", spy, None, "records its rows"))
    w = weight(64, 32, torch.float32)
    kernels = LinearKernels(w, {b: ("spy" if b == 4 else "linear") for b in ROW_BUCKETS})
    for rows in (1, 2, 3, 4, 5, 8, 65, 100):
        x = torch.randn(rows, 32)
        torch.testing.assert_close(kernels(x, w, None), F.linear(x, w))
    assert calls == [3, 4], "rows 3 and 4 are bucket 4's; 5-8 bucket 8's; above 64 F.linear"
    assert [row_bucket(r) for r in (1, 2, 3, 4, 5, 32, 33, 64, 65)] == [1, 2, 4, 4, 8, 32, 64, 64,
                                                                        None]
    x3 = torch.randn(2, 3, 32)  # not [rows, in]: F.linear
    torch.testing.assert_close(kernels(x3, w, None), F.linear(x3, w))
    assert calls == [3, 4]


def test_time_formulations_times_each_name_and_the_table_keeps_the_fastest(monkeypatch):
    w = weight(256, 64, torch.float32)
    seconds = time_formulations(w, 4, candidates(w), repeats=2)
    assert set(seconds) == set(candidates(w)) and all(s > 0 for s in seconds.values())
    # the table keeps, per bucket, the name with the fewest seconds
    fake = {"linear": 3.0, "matmul_t": 1.0, "mkldnn": 2.0, "c_gemv": 1.5}
    monkeypatch.setattr(matmul, "time_formulations",
                        lambda w, rows, names, repeats, packed, cold: {n: fake[n] for n in names})
    table = KernelTable()
    chosen = table.measure(w)
    assert chosen == dict.fromkeys(ROW_BUCKETS, "matmul_t")


def test_choices_are_measured_at_two_starts_then_read_from_home(monkeypatch):
    measured = []
    real = KernelTable.measure

    def counting(self, w, repeats=5, packed=None):
        measured.append(tuple(w.shape))
        return real(self, w, repeats=1, packed=packed)

    monkeypatch.setattr(KernelTable, "measure", counting)
    first = mm.LLM("tiny", num_pages=8, skip_tokenizer_init=True)
    shapes = {tuple(m.weight.shape) for _, m in linear_layers(first.model)}
    assert sorted(measured) == sorted(shapes), "each distinct shape measured once"
    assert all(c.measured for c in first.kernel_choices)
    path = KernelTable().path
    assert path.is_file() and path.parent == minimodel_home() / "kernels"
    saved = json.loads(path.read_text())["choices"]
    assert len(saved) == len(shapes)
    for _, module in linear_layers(first.model):
        assert module.kernels is not None
    measured.clear()
    second = mm.LLM("tiny", num_pages=8, skip_tokenizer_init=True)  # soon after: read back
    assert measured == [] and not any(c.measured for c in second.kernel_choices)
    assert [c.choices for c in second.kernel_choices] == [c.choices for c in first.kernel_choices]
    monkeypatch.setattr(matmul, "SECOND_SITTING_AFTER_S", 0.0)  # as if 10 minutes had passed
    mm.LLM("tiny", num_pages=8, skip_tokenizer_init=True)
    assert sorted(measured) == sorted(shapes), "each shape measured a second time"
    assert all(len(when) == 2 for when in json.loads(path.read_text())["sittings"].values())
    measured.clear()
    mm.LLM("tiny", num_pages=8, skip_tokenizer_init=True)
    assert measured == [], "after two sittings the choice is settled"
    off = mm.LLM("tiny", num_pages=8, skip_tokenizer_init=True, tune_kernels=False)
    assert off.kernel_choices == [] and measured == []
    assert all(m.kernels is None for _, m in linear_layers(off.model))


def test_a_busy_sitting_costs_nothing_once_the_second_one_is_taken(monkeypatch):
    """The first sitting's choice serves until a start SECOND_SITTING_AFTER_S later measures
    again; each formulation then keeps its best time of both sittings, in either order."""
    w = weight(64, 32, torch.float32)
    busy = {"linear": 3.0, "matmul_t": 5.0, "mkldnn": 6.0, "c_gemv": 7.0}  # others held the cores
    quiet = {"linear": 3.2, "matmul_t": 1.0, "mkldnn": 2.0, "c_gemv": 1.1}
    best = dict.fromkeys(ROW_BUCKETS, "matmul_t")  # the fewest seconds of either sitting

    def timings(times):
        monkeypatch.setattr(matmul, "time_formulations",
                            lambda w, rows, names, repeats, packed, cold: {
                                n: times[n] for n in names})

    for first, second in ((busy, quiet), (quiet, busy)):
        now = [1000.0]
        clock = lambda now=now: now[0]  # noqa: E731
        timings(first)
        table = KernelTable(clock=clock)
        assert table.get(w) is None
        chosen = table.measure(w)
        table.save()
        now[0] += matmul.SECOND_SITTING_AFTER_S - 1  # not yet: the first choice serves
        assert KernelTable(clock=clock).get(w) == chosen
        now[0] += 1
        table = KernelTable(clock=clock)
        assert table.get(w) is None, "time for the second sitting"
        timings(second)
        assert table.measure(w) == best
        table.save()
        now[0] += 1e6
        assert KernelTable(clock=clock).get(w) == best, "settled"
        table.path.unlink()


def test_a_table_naming_what_cannot_run_here_is_measured_again():
    w = weight(64, 32, torch.float32)
    table = KernelTable()
    table.choices[table.key(w)] = {str(b): "no-such-kernel" for b in ROW_BUCKETS}
    table.save()
    assert KernelTable().get(w) is None
    table.choices[table.key(w)] = {"1": "linear"}  # buckets missing
    assert table.get(w) is None


def test_another_thread_count_is_another_table():
    threads = torch.get_num_threads()
    first = KernelTable().path
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        assert KernelTable().path != first
    finally:
        torch.set_num_threads(threads)


def test_an_unwritable_home_only_costs_a_measurement(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("MINIMODEL_HOME", str(blocker / "home"))
    w = weight(64, 32, torch.float32)
    table = KernelTable()
    table.measure(w, repeats=1)
    table.save()  # no error
    assert KernelTable().get(w) is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_bound_model_computes_the_same_logits(dtype):
    folder = mm.resolve_model("tiny")
    model = PackedQwen3ForCausalLM.from_pretrained(folder, dtype, torch.device("cpu"),
                                                   max_positions=64)
    hidden = torch.randn(40, model.cfg.hidden_size).to(dtype)
    want = [model.compute_logits(hidden[:n]) for n in (1, 2, 5, 40)]
    want_layer = [model.model.layers[0].mlp.gate_up_proj(hidden[:n]) for n in (1, 3, 16)]
    report = choose_kernels(model)
    assert {c.shape for c in report} == {tuple(m.weight.shape) for _, m in linear_layers(model)}
    for n, w in zip((1, 2, 5, 40), want):
        torch.testing.assert_close(model.compute_logits(hidden[:n]), w)
    for n, w in zip((1, 3, 16), want_layer):
        torch.testing.assert_close(model.model.layers[0].mlp.gate_up_proj(hidden[:n]), w)
    assert packed_bytes(model) >= 0
    unbind_kernels(model)
    assert all(m.kernels is None for _, m in linear_layers(model))


def test_off_the_cpu_nothing_is_bound():
    folder = mm.resolve_model("tiny")
    model = PackedQwen3ForCausalLM.from_pretrained(folder, torch.float32, torch.device("cpu"),
                                                   max_positions=64).to("meta")
    assert choose_kernels(model) == []
    assert all(m.kernels is None for _, m in linear_layers(model))
    assert not (minimodel_home() / "kernels").exists()
    assert candidates(torch.empty(4, 4, device="meta")) == ["linear"]


def test_info_lists_the_choices(capsys):
    from minimodel.__main__ import kernel_rows

    assert kernel_rows()[0] == ("c kernel", f"gemv.c {native.status()}")
    assert "none measured yet" in kernel_rows()[1][1]
    mm.LLM("tiny", num_pages=8, skip_tokenizer_init=True)
    rows = kernel_rows()
    assert str(KernelTable().path) in rows[1][1]
    assert any("151936x64:float32: " in value and "rows" in value for _, value in rows[2:])


def test_home_is_this_tests_own():
    assert os.environ["MINIMODEL_HOME"].endswith("home")


def test_timings_read_copies_of_w_that_no_cache_holds():
    w = weight(256, 128, torch.float32)  # 128 KiB: 512 copies would pass 64 MiB; at most MAX
    names = candidates(w)
    packed: dict[str, object] = {}
    weights, packs = matmul.cold_set(w, names, packed)
    assert weights[0] is w
    assert len(weights) == min(matmul.MAX_COPIES, matmul.COLD_BYTES // w.nbytes)
    assert len({t.data_ptr() for t in weights}) == len(weights), "each copy its own memory"
    assert all(torch.equal(t, w) for t in weights)
    for name in names:
        assert len(packs[name]) == len(weights)
        assert packs[name][0] is packed.get(name), "W's own pack, kept for the layer"
    big = weight(8192, 4096, torch.float32)  # 128 MiB: W alone
    assert len(matmul.cold_set(big, ["linear"])[0]) == 1
