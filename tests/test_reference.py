"""The naive reference model against transformers' Qwen3ForCausalLM on the same weights."""

from __future__ import annotations

import pytest
import torch
import transformers
from checkpoints import CONFIGS, write_small_checkpoint

import minimodel as mm

ATOL = 1e-4


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def pair(request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    folder = write_small_checkpoint(tmp, **CONFIGS[request.param])
    ref = mm.reference.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    hf = transformers.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return ref, hf


def test_logits_match_transformers(pair):
    ref, hf = pair
    ids = torch.randint(0, ref.cfg.vocab_size, (3, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (ref(ids) - hf(ids).logits).abs().max().item()
    assert diff <= ATOL, f"max abs logit diff {diff:.2e}"


@pytest.mark.parametrize("side", ["left", "right"])
def test_padded_batch_matches_transformers(pair, side):
    ref, hf = pair
    g = torch.Generator().manual_seed(2)
    lengths = [11, 4, 8]
    T = max(lengths)
    ids = torch.randint(0, ref.cfg.vocab_size, (len(lengths), T), generator=g)
    mask = torch.zeros(len(lengths), T, dtype=torch.long)
    for b, n in enumerate(lengths):
        if side == "left":
            mask[b, T - n:] = 1
        else:
            mask[b, :n] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ours = ref(ids, attention_mask=mask)
        theirs = hf(ids, attention_mask=mask, position_ids=positions).logits
    real = mask.bool()
    assert (ours - theirs).abs()[real].max().item() <= ATOL
    # and each row equals that sequence run alone, unpadded
    for b in range(len(lengths)):
        alone = ref(ids[b][real[b]][None])[0]
        assert (ours[b][real[b]] - alone).abs().max().item() <= ATOL


def test_causality(pair):
    """Changing tokens after position t leaves the logits at positions <= t unchanged."""
    ref, _ = pair
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, ref.cfg.vocab_size, (2, 12), generator=g)
    for t in (0, 5, 10):
        changed = ids.clone()
        changed[:, t + 1:] = torch.randint(0, ref.cfg.vocab_size, changed[:, t + 1:].shape,
                                           generator=g)
        a, b = ref(ids), ref(changed)
        assert torch.equal(a[:, : t + 1], b[:, : t + 1])
        assert not torch.allclose(a[:, t + 1:], b[:, t + 1:])


def test_greedy_generate_matches_transformers(pair):
    ref, hf = pair
    g = torch.Generator().manual_seed(4)
    ids = torch.randint(0, ref.cfg.vocab_size, (2, 7), generator=g)
    theirs = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=12, pad_token_id=0, eos_token_id=None)[:, 7:]
    ours = mm.reference.generate(ref, ids, max_new_tokens=12)
    assert ours == theirs.tolist()


def test_generate_stops_at_eos_and_includes_it(pair):
    ref, _ = pair
    ids = torch.randint(0, ref.cfg.vocab_size, (1, 5), generator=torch.Generator().manual_seed(5))
    free = mm.reference.generate(ref, ids, max_new_tokens=10)[0]
    eos = free[3]
    stopped = mm.reference.generate(ref, ids, max_new_tokens=10, eos_token_id=eos)[0]
    assert stopped == free[: free.index(eos) + 1]
    assert stopped[-1] == eos


def test_left_padded_generate_matches_each_row_alone(pair):
    ref, _ = pair
    g = torch.Generator().manual_seed(6)
    rows = [torch.randint(0, ref.cfg.vocab_size, (n,), generator=g) for n in (9, 3)]
    T = 9
    ids = torch.zeros(2, T, dtype=torch.long)
    mask = torch.zeros(2, T, dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, T - len(r):] = r
        mask[b, T - len(r):] = 1
    batched = mm.reference.generate(ref, ids, max_new_tokens=6, attention_mask=mask)
    alone = [mm.reference.generate(ref, r[None], max_new_tokens=6)[0] for r in rows]
    assert batched == alone


def test_max_new_tokens_zero_calls_no_model():
    calls = []

    class Spy(torch.nn.Module):
        def forward(self, ids, attention_mask=None):
            calls.append(ids.shape)
            raise AssertionError("the model must not be called")

    assert mm.reference.generate(Spy(), torch.zeros(2, 3, dtype=torch.long),
                                 max_new_tokens=0) == [[], []]
    assert calls == []


def test_ids_outside_vocab_are_an_error(pair):
    ref, _ = pair
    with pytest.raises(ValueError, match="outside the vocabulary"):
        ref(torch.tensor([[1, ref.cfg.vocab_size]]))


def test_seeded_sampling_is_reproducible(pair):
    ref, _ = pair
    ids = torch.randint(0, ref.cfg.vocab_size, (1, 4), generator=torch.Generator().manual_seed(7))
    params = mm.SamplingParams(temperature=1.0, top_k=50, seed=123)
    a = mm.reference.generate(ref, ids, max_new_tokens=8, sampling=params)
    b = mm.reference.generate(ref, ids, max_new_tokens=8, sampling=params)
    c = mm.reference.generate(ref, ids, max_new_tokens=8,
                              sampling=mm.SamplingParams(temperature=1.0, top_k=50, seed=124))
    assert a == b
    assert a != c
