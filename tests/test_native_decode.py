"""A whole decode step in one call into C (engine/native_decode.py over kernels/decode.c):
the model's decode forward within float rounding (the same hidden states and the same K/V in
the same pool slots), for one request and several of different lengths across page
boundaries, on tiny, bard and shapes they lack (q/k/v biases, one and eight query heads per KV
head, a head dim that fills no whole vector, twelve query heads per KV head), in float32 and
bfloat16; when it runs (`can_run`: the measured timings), and that the engine generates the
same with it as without it."""

from __future__ import annotations

import pytest
import torch
from checkpoints import DECODE_SHAPES, decode_shape_folders, prefilled_twins

from minimodel.config import Qwen3Config
from minimodel.engine import LLM
from minimodel.engine.attention import build_metadata, decode_metadata
from minimodel.engine.kernel_choice import KernelChoice
from minimodel.engine.native_decode import SAVED_PER_LAYER_S, SLACK, NativeDecoder
from minimodel.engine.quantization import linear_layers, quantize_model
from minimodel.engine.speculative import load_language_model
from minimodel.kernels import native
from minimodel.kernels.matmul import ROW_BUCKETS, LinearKernels
from minimodel.sampling import SamplingParams

pytestmark = pytest.mark.skipif(native.library() is None,
                                reason=f"no C kernel on this machine: {native.status()}")
PAGE = 4
# How far the C step may be from the model's: float32 sums in another order; in bfloat16 a
# value rounded the other way at one point moves later ones by a bfloat16 step (2^-8 of it).
TOLERANCE = {torch.float32: dict(rtol=1e-4, atol=1e-4),
             torch.bfloat16: dict(rtol=4e-2, atol=4e-2)}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from minimodel.checkpoints import random_state_dict_torch, write_checkpoint

    out = {"tiny": "tiny", "bard": "bard", **decode_shape_folders(tmp_path_factory)}
    # head_dim 24 fills no whole vector of 8 or 16 floats, and 12 query heads share a KV head:
    # the scalar path of decode.c's attention
    cfg = Qwen3Config(vocab_size=300, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                      num_attention_heads=12, num_key_value_heads=1, head_dim=24,
                      max_position_embeddings=128, torch_dtype="float32")
    folder = tmp_path_factory.mktemp("odd-head-dim")
    write_checkpoint(folder, cfg, random_state_dict_torch(cfg, seed=5))
    out["odd-head-dim"] = folder
    return out


def bind_c(model) -> None:
    """Every product on the C kernel at every row bucket."""
    for _, module in linear_layers(model):
        module.kernels = LinearKernels(module.weight, dict.fromkeys(ROW_BUCKETS, "c_gemv"))


CASES = [("tiny", dtype, lens) for dtype in (torch.float32, torch.bfloat16)
         for lens in ([9], [1], [8], [5, 12, 1], [3, 4, 16, 7])]
CASES += [("bard", dtype, lens) for dtype in (torch.float32, torch.bfloat16)
          for lens in ([9], [5, 12, 1], [40, 36, 48])]  # the last: attention on threads
CASES += [(name, dtype, lens) for name in [*DECODE_SHAPES, "odd-head-dim"]
          for dtype in (torch.float32, torch.bfloat16) for lens in ([6], [5, 12, 1])]
CASES = [(*case, None) for case in CASES]
# int8 weights (torchao's), packed in quads where the CPU has integer products
CASES += [(name, dtype, [5, 12, 1], "int8") for name in ("tiny", "bard")
          for dtype in (torch.float32, torch.bfloat16)]


@pytest.mark.parametrize("name, dtype, prompt_lens, quantization", CASES)
@torch.inference_mode()
def test_the_c_step_is_the_models_decode_step_within_rounding(folders, name, dtype,
                                                               prompt_lens, quantization):
    model, _ = load_language_model(folders[name], dtype=dtype, max_positions=128)
    quantize_model(model, quantization)
    bind_c(model)
    gen = torch.Generator().manual_seed(sum(prompt_lens))
    vocab = model.cfg.vocab_size
    # two caches with the same pages: one decoded by the model, one by the C step
    caches, tables = prefilled_twins(model, prompt_lens, dtype, gen, PAGE)
    step = NativeDecoder(model, caches[1][1])
    lens = list(prompt_lens)
    for _ in range(4):  # four decode steps, a token per request
        ids = torch.randint(0, vocab, (len(lens),), generator=gen)
        lens = [n + 1 for n in lens]
        md = decode_metadata(tables, lens, PAGE)
        assert step.can_run(md)
        caches[0][1].plan(md)
        want = model(ids, md.positions, caches[0][1])
        got = step(ids, md)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got.float(), want.float(), **TOLERANCE[dtype])
        for a, b in zip(caches[0][0].pools, caches[1][0].pools, strict=True):
            torch.testing.assert_close(b.float(), a.float(), **TOLERANCE[dtype])
        # the model's K/V and the C step's are one pool: continue both from the model's
        for a, b in zip(caches[0][0].pools, caches[1][0].pools, strict=True):
            b.copy_(a)
    assert step.product_s > 0


@torch.inference_mode()
def test_a_wrong_kv_head_or_page_changes_the_result():
    """The comparison above can fail: a step that reads another request's pages differs."""
    model, _ = load_language_model("tiny", max_positions=64)
    bind_c(model)
    gen = torch.Generator().manual_seed(1)
    caches, tables = prefilled_twins(model, [7, 7], torch.float32, gen, PAGE)
    step = NativeDecoder(model, caches[1][1])
    ids = torch.tensor([3, 3])
    caches[0][1].plan(md := decode_metadata(tables, [8, 8], PAGE))
    want = model(ids, md.positions, caches[0][1])
    swapped = step(ids, decode_metadata(tables[::-1], [8, 8], PAGE))
    assert not torch.allclose(swapped, want, **TOLERANCE[torch.float32])


def choice_table(model, seconds: dict[str, float]) -> None:
    """Every product chose the fastest of `seconds` at every bucket, with these timings."""
    layers = linear_layers(model)
    best = min(seconds, key=seconds.__getitem__)
    for _, module in layers:
        module.kernels = LinearKernels(module.weight, dict.fromkeys(ROW_BUCKETS, best))
    model.kernel_choices = [KernelChoice(
        (1, 1), "float32", [name for name, _ in layers], dict.fromkeys(ROW_BUCKETS, best), True,
        {str(b): dict(seconds) for b in ROW_BUCKETS})]


@torch.inference_mode()
def test_it_runs_where_the_c_products_cost_no_more_than_slack_times_the_chosen_or_little_more():
    model, _ = load_language_model("tiny", max_positions=64)
    gen = torch.Generator().manual_seed(2)
    caches, tables = prefilled_twins(model, [5], torch.float32, gen, PAGE)
    step = NativeDecoder(model, caches[1][1])
    md = decode_metadata(tables, [6], PAGE)
    assert not step.can_run(md)  # nothing bound: F.linear everywhere, no timings
    choice_table(model, {"linear": 3.0, "c_gemv": 1.0})
    assert step.can_run(md)
    choice_table(model, {"matmul_t": 1.0, "c_gemv": SLACK * 0.99})  # a little slower: runs,
    assert step.can_run(md)  # on packs of its own
    caches[0][1].plan(md)
    want = model(torch.tensor([4]), md.positions, caches[0][1])
    torch.testing.assert_close(step(torch.tensor([4]), md), want, **TOLERANCE[torch.float32])
    choice_table(model, {"matmul_t": 1.0, "c_gemv": SLACK * 1.01})
    assert not step.can_run(md)
    with pytest.raises(ValueError, match="can_run"):
        step(torch.tensor([4]), md)
    # far slower than SLACK allows, but by less than SAVED_PER_LAYER_S a layer (4 products): runs
    small = SAVED_PER_LAYER_S / 4
    choice_table(model, {"matmul_t": small, "c_gemv": small * 1.9})
    assert step.can_run(md)
    choice_table(model, {"matmul_t": small, "c_gemv": small * 2.1})
    assert not step.can_run(md)
    bind_c(model)  # chosen, timings not at hand for this choice: the same product either way
    model.kernel_choices = []
    assert step.can_run(md)
    assert not step.can_run(build_metadata(tables, [6], [2], PAGE))  # not a decode step
    many = [[p] for p in range(ROW_BUCKETS[-1] + 1)]
    assert not step.can_run(decode_metadata(many, [1] * len(many), PAGE))  # past the buckets


@torch.inference_mode()
def test_a_step_the_c_code_refuses_raises_and_writes_nothing():
    model, _ = load_language_model("tiny", max_positions=16)
    bind_c(model)
    gen = torch.Generator().manual_seed(3)
    caches, tables = prefilled_twins(model, [5], torch.float32, gen, PAGE)
    step = NativeDecoder(model, caches[1][1])
    before = [p.clone() for p in caches[1][0].pools]
    md = decode_metadata(tables, [6], PAGE)
    md.kv_lens = [len(tables[0]) * PAGE + 1]  # more tokens than its pages hold
    with pytest.raises(ValueError, match="refused"):
        step(torch.tensor([4]), md)
    vocab = model.cfg.vocab_size
    md = decode_metadata(tables, [6], PAGE)
    for ids in (torch.tensor([vocab]), torch.tensor([-1])):  # no such token
        with pytest.raises(ValueError, match="out of range"):
            step(ids, md)
    with pytest.raises(ValueError, match="one token per request"):
        step(torch.tensor([4, 5]), md)
    past = decode_metadata([[63, 64]], [6], PAGE)  # the pool has 64 pages: 0..63
    with pytest.raises(ValueError, match="out of range"):
        step(torch.tensor([4]), past)
    assert all(torch.equal(a, b) for a, b in zip(before, caches[1][0].pools, strict=True))
    far = decode_metadata([list(range(8))], [20], PAGE)
    with pytest.raises(ValueError, match="RoPE tables"):
        step(torch.tensor([4]), far)
    step(torch.tensor([4]), md)  # and a good step still runs


class Counted:
    """A NativeDecoder that notes the batch size of each step it runs: `calls` (the hidden
    states only) and `greedy` (through the LM head to the tokens)."""

    def __init__(self, step):
        self.step, self.calls, self.greedy_calls = step, [], []

    def can_run(self, metadata):
        return self.step.can_run(metadata)

    def head_runs_here(self, metadata):
        return self.step.head_runs_here(metadata)

    def head_runs(self, requests):
        return self.step.head_runs(requests)

    def __call__(self, ids, metadata):
        self.calls.append(len(metadata.kv_lens))
        return self.step(ids, metadata)

    def greedy(self, ids, metadata, score=True):
        self.greedy_calls.append(len(metadata.kv_lens))
        return self.step.greedy(ids, metadata, score)

    def greedy_lists(self, ids, kv_lens, page_tables):
        self.greedy_calls.append(len(kv_lens))
        return self.step.greedy_lists(ids, kv_lens, page_tables)


def c_engine(dtype, head: str = "c_gemv"):
    """tiny, every product on the C kernel but the LM head's (`head`)."""
    llm = LLM("tiny", dtype=dtype, max_model_len=256, num_pages=64, page_size=16,
              tune_kernels=False)
    bind_c(llm.model)
    lm_head = llm.model.lm_head
    lm_head.kernels = LinearKernels(lm_head.weight, dict.fromkeys(ROW_BUCKETS, head))
    return llm


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("head", ["c_gemv", "linear"])
def test_the_engine_generates_the_same_with_and_without_the_c_step(dtype, head):
    """The engine's decode steps in C, against the inlined torch step: in float32 the same
    greedy tokens; in both, every decode step of the batch ran in C, through the LM head to
    the tokens where the head chose the C kernel, else to the hidden states. One request
    first, then three that end one after another: the steps of 1, 3, 2, 1 requests."""
    prompts = [[5, 9, 2, 7] * k for k in (1, 5, 9)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in (20, 12, 6)]
    llm = c_engine(dtype, head)
    first = llm.generate([[3, 1, 4]], params[0], use_tqdm=False)
    counted = llm.runner.native = Counted(llm.runner.native)
    with_c = llm.generate(prompts, params, use_tqdm=False)
    ran = counted.greedy_calls if head == "c_gemv" else counted.calls
    assert ran == [3] * 5 + [2] * 6 + [1] * 8  # every decode step, of the requests left
    assert not (counted.calls if head == "c_gemv" else counted.greedy_calls)
    plain = c_engine(dtype, head)  # a fresh engine: no prefix cached by the other run
    plain.runner.native = None
    first_without = plain.generate([[3, 1, 4]], params[0], use_tqdm=False)
    without = plain.generate(prompts, params, use_tqdm=False)
    if dtype == "float32":
        assert [o.token_ids for o in first + with_c] == [
            o.token_ids for o in first_without + without]
    assert [len(o.token_ids) for o in with_c] == [len(o.token_ids) for o in without] == [
        20, 12, 6]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@torch.inference_mode()
def test_the_c_step_through_the_lm_head_is_the_steps_hidden_then_greedy(dtype):
    """NativeDecoder.greedy: the same hidden states as the step without the head, and the
    argmax of the model's own logits of them with its log_softmax; the same K/V written."""
    model, _ = load_language_model("bard", dtype=dtype, max_positions=128)
    bind_c(model)
    gen = torch.Generator().manual_seed(11)
    caches, tables = prefilled_twins(model, [5, 12, 1], dtype, gen, PAGE)
    plain, fused = NativeDecoder(model, caches[0][1]), NativeDecoder(model, caches[1][1])
    lens = [5, 12, 1]
    for _ in range(3):
        ids = torch.randint(0, model.cfg.vocab_size, (3,), generator=gen)
        lens = [n + 1 for n in lens]
        md = decode_metadata(tables, lens, PAGE)
        assert fused.head_runs_here(md)
        want = plain(ids, md)
        tokens, logprobs, hidden = fused.greedy(ids, md)
        assert torch.equal(hidden, want)  # the same code up to the head
        # the step again, unscored (it writes the same K/V into the same slots): the same tokens
        assert fused.greedy(ids, md, score=False)[:2] == (tokens, None)
        # and from the scheduler's lists, no metadata tensors: the same tokens and hidden
        listed, hidden2 = fused.greedy_lists(ids.tolist(), lens, tables)
        assert listed == tokens and torch.equal(hidden2, hidden)
        logits = model.compute_logits(hidden)
        assert tokens == logits.argmax(-1).tolist()
        torch.testing.assert_close(
            torch.tensor(logprobs, dtype=torch.float64),
            logits.double().log_softmax(-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0],
            rtol=0, atol=3e-5)
        for a, b in zip(caches[0][0].pools, caches[1][0].pools, strict=True):
            assert torch.equal(a, b)
    assert fused.product_s > plain.product_s  # the head's product counted too
    fused.through_head = False  # as the bench card times the steps without it
    assert fused.can_run(md) and not fused.head_runs_here(md)
    fused.through_head = True
    # a head bound to another formulation for a bucket: not there
    head = model.lm_head
    head.kernels = LinearKernels(head.weight, {**dict.fromkeys(ROW_BUCKETS, "c_gemv"),
                                               8: "linear"})
    assert fused.head_runs_here(decode_metadata(tables, lens, PAGE))  # 3 rows: bucket 4
    five_tables, five_lens = [*tables, [40, 41], [44, 45]], [*lens, 3, 2]
    five = decode_metadata(five_tables, five_lens, PAGE)  # bucket 8
    assert fused.can_run(five) and not fused.head_runs_here(five)
    with pytest.raises(ValueError, match="head_runs_here"):
        fused.greedy(torch.tensor([1, 2, 3, 4, 5]), five)
    with pytest.raises(ValueError, match="head_runs"):
        fused.greedy_lists([1, 2, 3, 4, 5], five_lens, five_tables)
    with pytest.raises(ValueError, match="one token per request"):
        fused.greedy_lists([1, 2], lens, tables)


def test_the_runner_goes_to_c_only_for_plain_greedy_steps_and_the_sampler_decides_the_rest():
    llm = c_engine("float32")
    counted = llm.runner.native = Counted(llm.runner.native)
    prompt = [5, 9, 2, 7] * 3
    for params in (SamplingParams(temperature=0.0, max_tokens=6, logprobs=1),
                   SamplingParams(temperature=0.0, max_tokens=6, repetition_penalty=1.3),
                   SamplingParams(temperature=0.0, max_tokens=6, min_tokens=3),
                   SamplingParams(temperature=0.8, max_tokens=6, seed=1)):
        llm.generate([prompt], params, use_tqdm=False)
    assert not counted.greedy_calls and len(counted.calls) == 4 * 5  # hidden states only
    greedy = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    llm.generate([prompt, prompt[:5]], [greedy, SamplingParams(temperature=0.7, max_tokens=6)],
                 use_tqdm=False)
    assert not counted.greedy_calls  # one request of the batch samples
    want = llm.generate([prompt], greedy, use_tqdm=False)[0].token_ids
    assert len(counted.greedy_calls) == 5
    real = counted.greedy_lists

    def unscored(ids, kv_lens, page_tables):  # as for a row whose largest logit is inf
        tokens, hidden = real(ids, kv_lens, page_tables)
        return [-1] * len(tokens), hidden

    counted.greedy_lists = unscored
    got = llm.generate([prompt], greedy, use_tqdm=False)[0]
    assert got.token_ids == want  # the sampler chose, from the logits of the same hidden


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, vocab", [(1, 151936), (5, 1000), (3, 7), (8, 33)])
def test_greedy_is_torchs_argmax_and_log_softmax(dtype, rows, vocab):
    gen = torch.Generator().manual_seed(rows * vocab)
    logits = (torch.randn(rows, vocab, generator=gen) * 4).to(dtype)
    if vocab > 20:  # a tie: the first of equal maxima wins
        logits[0, vocab - 3] = logits[0, 5] = logits[0].max() + 1
        logits[-1, 2] = float("-inf")
    tokens, logprobs = native.greedy(logits)
    assert torch.equal(tokens, logits.argmax(-1))
    unscored, none = native.greedy(logits, score=False)
    assert torch.equal(unscored, tokens) and none is None
    want = logits.double().log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
    # float32 sums of e^x over the row, in lanes (and on a long row, in a part per thread):
    # torch's own float32 log_softmax is 1.7e-5 from float64 on the longest row here
    torch.testing.assert_close(logprobs.double(), want, rtol=0, atol=3e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", ["rising", "falling", "late peak"])
def test_greedy_scores_a_row_whose_largest_keeps_moving(dtype, shape):
    """The pass sums e^(x - top) block by block against the largest seen so far, scaling the
    sum down when a block raises it: a row that rises all along raises it in every block (and
    in each thread's part), one that falls never does, a late peak does once, far along."""
    V = 151936
    row = {"rising": torch.linspace(-60, 40, V), "falling": torch.linspace(40, -60, V),
           "late peak": torch.linspace(-5, 5, V).sin() * 3}[shape]
    if shape == "late peak":
        row[V - 1000] = 30.0
    logits = torch.stack([row, row.flip(0)]).to(dtype)
    tokens, logprobs = native.greedy(logits)
    assert torch.equal(tokens, logits.argmax(-1))
    want = logits.double().log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
    torch.testing.assert_close(logprobs.double(), want, rtol=0, atol=3e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_takes_the_first_of_equal_maxima_wherever_they_stand(dtype):
    """One pass keeps, in each vector lane, the largest value and where it first stood: ties
    in one lane, across lanes, in the tail past the last whole vector, and rows of -inf."""
    V = 16 * 7 + 5  # whole vectors of 8 or 16 lanes, then a tail of 5
    rows = []
    for first, second in [(3, 3 + 16), (3 + 16, 3), (20, 7), (7, 20), (40, V - 2), (V - 4, V - 1),
                          (0, V - 1), (V - 1, V - 1), (5, 13)]:
        row = torch.zeros(V)
        row[first] = row[second] = 2.0
        rows.append(row)
    rows.append(torch.full((V,), float("-inf")))  # all -inf: the first
    tail = torch.full((V,), float("-inf"))
    tail[V - 3] = -1.0  # the only finite value, in the tail
    rows.append(tail)
    late = torch.zeros(V)
    late[V - 2] = float("nan")  # a NaN in the tail is the largest
    rows.append(late)
    logits = torch.stack(rows).to(dtype)
    tokens, logprobs = native.greedy(logits)
    assert tokens.tolist() == logits.argmax(-1).tolist()
    finite = torch.isfinite(logits.max(-1).values) & ~logits.isnan().any(-1)
    want = logits.double().log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
    torch.testing.assert_close(logprobs.double()[finite], want[finite], rtol=0, atol=3e-5)
    assert logprobs[~finite].isnan().all()


def test_greedy_marks_rows_it_cannot_score():
    logits = torch.zeros(3, 40)
    logits[0, 7] = float("nan")  # torch.argmax: a NaN is the largest
    logits[1, 9] = float("inf")
    logits[2] = float("-inf")
    tokens, logprobs = native.greedy(logits)
    assert tokens.tolist() == logits.argmax(-1).tolist() == [7, 9, 0]
    assert logprobs.isnan().all()
    logits[0, 7] = 5.0  # now the first row can be decided
    assert native.greedy(logits, score=False)[0].tolist() == [7, -1, -1]  # not the others
    assert native.greedy(torch.zeros(2, 3, 4)) is None  # not [B, V]


def test_the_sampler_takes_the_c_pass_only_for_plain_greedy_rows_and_agrees_with_torch(
        monkeypatch):
    from minimodel.engine.native_decode import GreedySampler
    from minimodel.sampling import Sampler

    gen = torch.Generator().manual_seed(9)
    logits = torch.randn(4, 5000, generator=gen).bfloat16()
    calls = []
    real = native.greedy

    def counted(x):
        calls.append(x.shape[0])
        return real(x)

    monkeypatch.setattr(native, "greedy", counted)
    sampler = GreedySampler()
    greedy = [SamplingParams(temperature=0.0)] * 4
    tokens, logprobs = sampler(logits, greedy)
    assert calls == [4]
    assert torch.equal(tokens, logits.float().argmax(-1))
    want = logits.float().log_softmax(-1).gather(-1, tokens[:, None])[:, 0]
    torch.testing.assert_close(logprobs, want, rtol=1e-6, atol=1e-6)
    # asking for top logprobs takes torch's path: the same tokens and log-probabilities
    tokens2, logprobs2 = sampler(logits, [SamplingParams(temperature=0.0, logprobs=2)] * 4)
    assert calls == [4] and torch.equal(tokens2, tokens)
    torch.testing.assert_close(logprobs2, want, rtol=0, atol=0)
    assert all(top is not None and len(top) == 2 for top in sampler.last_top_logprobs)
    sampler(logits, greedy)
    assert sampler.last_top_logprobs == [None] * 4
    nan = logits.clone()
    nan[1, 3] = float("nan")  # the C pass cannot score it: torch's path decides, as before
    tokens3, logprobs3 = sampler(nan, greedy)
    assert int(tokens3[1]) == 3 and logprobs3[1].isnan()
    llm = LLM("tiny", num_pages=8, skip_tokenizer_init=True, tune_kernels=False)
    assert type(llm.runner.sampler) is GreedySampler  # the engine's, on a CPU
    assert isinstance(llm.runner.sampler, Sampler)
