"""`bard-draft`, bard's drafter for speculative decoding: the shipped weights and their pinned
checksum, a real Qwen3 folder over a compact vocabulary (transformers loads it and gives the
engine's logits), the map between its rows and the tokenizer's ids, and what it is for: bard
with it writes exactly bard's greedy text."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

import minimodel as mm
from minimodel import checkpoints
from minimodel.checkpoints import DRAFT_DIR, DRAFT_SHA256, weights_checksum
from minimodel.engine.speculative import DRAFT_VOCAB, CachedLM, VocabMap, load_language_model


@pytest.fixture(scope="module")
def folder():
    return mm.resolve_model("bard-draft")


def test_shipped_weights_match_the_pinned_checksum():
    assert weights_checksum(load_file(str(DRAFT_DIR / "model.safetensors"))) == DRAFT_SHA256


def test_is_a_small_qwen3_over_the_seen_ids(folder):
    draft = mm.Qwen3Config.from_pretrained(folder)
    bard = mm.Qwen3Config.from_pretrained(mm.resolve_model("bard"))
    vocab = json.loads((folder / DRAFT_VOCAB).read_text())
    assert vocab["target_vocab_size"] == bard.vocab_size
    assert draft.vocab_size == len(vocab["ids"]) + 1  # the seen ids and the shared class
    assert len(set(vocab["ids"])) == len(vocab["ids"]) and max(vocab["ids"]) < bard.vocab_size
    assert draft.hidden_size < bard.hidden_size
    assert draft.num_hidden_layers < bard.num_hidden_layers
    tok = mm.load_tokenizer(folder)  # bard's tokenizer files, added like bard's
    assert tok.decode(tok.encode("床前明月光")) == "床前明月光"


def test_logits_equal_transformers(folder):
    ids = torch.tensor([[0, 5, 17, 300, 2, 9, 1000, 4]])  # rows of the compact vocabulary
    hf = transformers.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    model, vocab = load_language_model(folder)
    lm = CachedLM(model)  # no vocabulary map: the draft's own rows
    with torch.no_grad():
        want = hf(ids).logits[0]
    assert (lm.extend(ids[0].tolist()) - want).abs().max().item() <= 1e-4


def test_the_map_between_rows_and_token_ids(folder):
    _, vocab = load_language_model(folder)
    assert vocab is not None
    S = len(vocab.ids)
    rows = torch.arange(S)
    assert torch.equal(vocab.to_draft(vocab.ids), rows)
    unseen = next(i for i in range(vocab.target_vocab_size) if i not in set(vocab.ids.tolist()))
    assert vocab.to_draft(torch.tensor([unseen])).item() == S
    logits = torch.randn(2, S + 1)
    full = vocab.to_target(logits)
    assert full.shape == (2, vocab.target_vocab_size)
    assert torch.equal(full[:, vocab.ids], logits[:, :-1])
    assert torch.isinf(full[:, unseen]).all()  # an id without a row is never proposed


def test_a_damaged_weights_file_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "shipped"
    fake.mkdir()
    for name in ("config.json", "generation_config.json", DRAFT_VOCAB):
        (fake / name).write_bytes((DRAFT_DIR / name).read_bytes())
    sd = load_file(str(DRAFT_DIR / "model.safetensors"))
    sd["model.norm.weight"] = sd["model.norm.weight"] + 1
    save_file(sd, str(fake / "model.safetensors"))
    monkeypatch.setattr(checkpoints, "DRAFT_DIR", fake)
    monkeypatch.setenv("MINIMODEL_HOME", str(tmp_path / "home"))
    with pytest.raises(ValueError, match="checksum"):
        mm.resolve_model("bard-draft")
    assert not (tmp_path / "home" / "models" / "bard-draft").exists()


def test_bard_with_its_drafter_writes_bards_greedy_text():
    prompts = ["ROMEO.\n", "床前明月光，", "HAMLET.\nTo be, or not to be"]
    sp = mm.SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    want = mm.LLM("bard", tune_kernels=False).generate(prompts, sp)
    llm = mm.LLM("bard", speculative_model="bard-draft", num_speculative_tokens=4,
                 tune_kernels=False)
    got = llm.generate(prompts, sp)
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert llm.spec_decode_stats()["acceptance_rate"] > 0.1  # it predicts bard (chance: ~0)


def test_the_drafter_scores_and_proposes_only_its_head_rows():
    """draft_vocab.json names the 4,096 rows the engine's drafter scores (the ids bard writes
    most often): its head is that tall, and no draft, greedy or sampled, is another id."""
    spec = json.loads((DRAFT_DIR / DRAFT_VOCAB).read_text())
    llm = mm.LLM("bard", speculative_model="bard-draft", num_speculative_tokens=3,
                 tune_kernels=False)
    d = llm.speculator.drafter
    assert len(spec["head_rows"]) == 4096 and d.head.shape == (128, 4096)  # [C, K]: x @ head
    assert torch.equal(d.head_ids, torch.tensor(spec["ids"])[spec["head_rows"]])
    proposed = []
    propose = d.propose

    def spy(seqs, ks):
        drafts, probs = propose(seqs, ks)
        proposed.append((drafts, probs))
        return drafts, probs

    d.propose = spy
    llm.generate(["ROMEO.\n", "床前明月光，"],
                 [mm.SamplingParams(temperature=0, max_tokens=24),
                  mm.SamplingParams(temperature=0.8, max_tokens=24, seed=0)])
    allowed = set(d.head_ids.tolist())
    assert proposed and all(t in allowed for drafts, _ in proposed for ds in drafts for t in ds)
    sampled = [q for _, probs in proposed for q in probs if q is not None]
    assert sampled
    for q in sampled:
        outside = q.clone()
        outside[:, d.head_ids] = 0
        assert outside.abs().sum() == 0 and torch.allclose(q.sum(-1), q.new_ones(len(q)))


def test_head_rows_outside_the_table_are_refused():
    with pytest.raises(ValueError, match="head_rows must be rows of the 3 ids"):
        VocabMap([5, 9, 11], 20, head_rows=[0, 3])
    vocab = VocabMap([5, 9, 11], 20, head_rows=[2, 0])
    out = vocab.to_target(torch.tensor([[1.0, 2.0]]), vocab.ids[vocab.head_rows])
    assert out[0, 11] == 1.0 and out[0, 5] == 2.0 and torch.isinf(out[0, 9])


def test_a_changed_vocabulary_file_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "shipped"
    fake.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (fake / name).write_bytes((DRAFT_DIR / name).read_bytes())
    spec = json.loads((DRAFT_DIR / DRAFT_VOCAB).read_text())
    spec["head_rows"] = spec["head_rows"][:100]
    (fake / DRAFT_VOCAB).write_text(json.dumps(spec) + "\n")
    monkeypatch.setattr(checkpoints, "DRAFT_DIR", fake)
    monkeypatch.setenv("MINIMODEL_HOME", str(tmp_path / "home"))
    with pytest.raises(ValueError, match="draft_vocab.json has sha256"):
        mm.resolve_model("bard-draft")
