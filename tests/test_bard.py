"""`bard`, the course's trained Qwen3: the shipped weights, transformers parity, what it learned,
and the exact small softmax it was trained with."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
import transformers
from safetensors.torch import load_file

import minimodel as mm
from minimodel import checkpoints, train
from minimodel.checkpoints import BARD_DIR, BARD_SHA256, weights_checksum


@pytest.fixture(scope="module")
def folder():
    return mm.resolve_model("bard")


@pytest.fixture(scope="module")
def llm(folder):
    return mm.LLM(folder, device="cpu", dtype=torch.float32)


def test_shipped_weights_match_the_pinned_checksum():
    assert weights_checksum(load_file(str(BARD_DIR / "model.safetensors"))) == BARD_SHA256


def test_is_a_real_qwen3_folder(folder):
    cfg = mm.Qwen3Config.from_pretrained(folder)
    assert cfg.vocab_size == 151936 and cfg.tie_word_embeddings
    assert cfg.num_attention_heads > cfg.num_key_value_heads  # GQA
    names = load_file(str(folder / "model.safetensors")).keys()
    assert "model.layers.0.self_attn.q_norm.weight" in names and "lm_head.weight" not in names
    gen = json.loads((folder / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [151645, 151643]
    tok = mm.load_tokenizer(folder)
    assert len(tok) == 151669 and tok.decode(tok.encode("我爱datawhale")) == "我爱datawhale"


def test_resolves_offline_into_a_fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MINIMODEL_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = mm.resolve_model("bard")
    assert path.parent.parent == tmp_path
    assert weights_checksum(load_file(str(path / "model.safetensors"))) == BARD_SHA256
    assert (path / "tokenizer.json").is_file()


def test_a_damaged_weights_file_is_refused(tmp_path, monkeypatch):
    fake = tmp_path / "shipped"
    fake.mkdir()
    for name in ("config.json", "generation_config.json"):
        (fake / name).write_bytes((BARD_DIR / name).read_bytes())
    sd = load_file(str(BARD_DIR / "model.safetensors"))
    sd["model.norm.weight"] = sd["model.norm.weight"] + 1
    from safetensors.torch import save_file

    save_file(sd, str(fake / "model.safetensors"))
    monkeypatch.setattr(checkpoints, "BARD_DIR", fake)
    monkeypatch.setenv("MINIMODEL_HOME", str(tmp_path / "home"))
    with pytest.raises(ValueError, match="checksum"):
        mm.resolve_model("bard")
    assert not (tmp_path / "home" / "models" / "bard").exists()  # nothing half-built is left


def test_logits_equal_transformers(folder):
    tok = mm.load_tokenizer(folder)
    texts = ["ROMEO.\nBut soft, what light through yonder window breaks?",
             "《春晓》\n作者：孟浩然\n春眠不觉晓，处处闻啼鸟。\n夜来风雨声，"]
    ids = torch.tensor([tok.encode(t)[:12] for t in texts])
    ref = mm.reference.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32)
    hf = transformers.Qwen3ForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        want = hf(ids).logits
    assert (ref(ids) - want).abs().max().item() <= 1e-4


def test_unseen_ids_share_one_row(folder):
    table = load_file(str(folder / "model.safetensors"))["model.embed_tokens.weight"]
    tok = mm.load_tokenizer(folder)
    seen = {*tok.encode("To be, or not to be"), *tok.encode("床前明月光")}
    rows, counts = torch.unique(table, dim=0, return_counts=True)
    shared = rows[counts.argmax()]
    assert counts.max().item() > 100_000  # most of the vocabulary never occurs in the corpus
    assert not any(torch.equal(table[i], shared) for i in seen)


def test_a_poem_ends_by_itself(llm):
    out = llm.generate(["《春晓》\n作者：孟浩然\n春眠不觉晓，处处闻啼鸟。\n"],
                       mm.SamplingParams(temperature=0.0, max_new_tokens=60))[0]
    assert out.finish_reason == "stop" and out.token_ids[-1] in (151643, 151645)


# Famous poems of tang300, chosen before phase 3 was measured (`train.evaluate.FAMOUS`): from
# the first half-line alone, greedy decoding writes the rest of the poem and stops
# (docs/bard.md, "Phase 3").
FAMOUS_POEMS = [
    "床前明月光，疑是地上霜。\n举头望明月，低头思故乡。",
    "春眠不觉晓，处处闻啼鸟。\n夜来风雨声，花落知多少。",
    "红豆生南国，春来发几枝。\n愿君多采撷，此物最相思。",
    "月落乌啼霜满天，江枫渔火对愁眠。\n姑苏城外寒山寺，夜半钟声到客船。",
    "故人西辞黄鹤楼，烟花三月下扬州。\n孤帆远影碧空尽，惟见长江天际流。",
    "白日依山尽，黄河入海流。\n欲穷千里目，更上一层楼。",
    "千山鸟飞绝，万径人踪灭。\n孤舟蓑笠翁，独钓寒江雪。",
    "慈母手中线，游子身上衣。\n临行密密缝，意恐迟迟归。\n谁言寸草心，报得三春晖。",
]


@pytest.mark.parametrize("poem", FAMOUS_POEMS, ids=lambda p: p[:p.index("，")])
def test_a_famous_poem_is_recited_from_its_first_half_line(llm, poem):
    half = poem[: poem.index("，") + 1]
    out = llm.generate([half], mm.SamplingParams(temperature=0.0, max_tokens=60))[0]
    assert out.text.strip() == poem[len(half):] and out.finish_reason == "stop"


# Whole first lines continue into their real next lines (phase 2 already knew these two).
KNOWN_LINES = [
    ("白日依山尽，黄河入海流。", "欲穷千里目，更上一层楼。"),
    ("月落乌啼霜满天，江枫渔火对愁眠。", "姑苏城外寒山寺，夜半钟声到客船。"),
]


@pytest.mark.parametrize("first, second", KNOWN_LINES)
def test_a_known_first_line_continues_into_its_real_next_line(llm, first, second):
    out = llm.generate([first + "\n"], mm.SamplingParams(temperature=0.0, max_new_tokens=30))[0]
    assert llm.tokenizer.decode(out.token_ids).split("\n")[0] == second


def test_small_softmax_is_the_full_vocabulary_loss():
    """The compact training loss equals the cross-entropy of the exported full model."""
    cfg = dataclasses.replace(train.BARD, vocab_size=50, hidden_size=16, intermediate_size=24,
                              num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                              head_dim=8, torch_dtype="float32")
    seen = [3, 7, 8, 20, 41]
    torch.manual_seed(0)
    model = train.BardTrainer(cfg, seen)
    lut = train.compact_ids(seen, cfg.vocab_size)
    full_ids = torch.tensor([[3, 7, 8, 20, 41, 7, 3], [8, 8, 41, 20, 3, 7, 20]])
    # 11 and 49 are ids the "corpus" never had: their targets go to the shared class
    targets_full = torch.tensor([[7, 8, 20, 41, 7, 3, 11], [8, 41, 20, 3, 7, 20, 49]])
    loss = model.loss(lut[full_ids], lut[targets_full])
    ref = mm.reference.Qwen3ForCausalLM(cfg)
    result = ref.load_state_dict(model.state_dict_full(), strict=False)
    assert result.missing_keys == ["lm_head.weight"] and not result.unexpected_keys  # tied
    logits = ref(full_ids)
    want = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets_full.flatten())
    assert abs(loss.item() - want.item()) < 1e-5
    assert math.isclose(model.log_unseen, math.log(cfg.vocab_size - len(seen)))


def test_corpus_parsers(tmp_path):
    text = "THE SONNETS\n\n\nI\n\nFrom fairest\ncreatures\n\nII\n\nWhen forty\n"
    sonnets = train.split_sonnets(text)
    assert sonnets == ["I\n\nFrom fairest\ncreatures\n", "II\n\nWhen forty\n"]
    (tmp_path / "tang300.u8").write_text(
        "\x1b[32m《送别》\x1b[m\n\x1b[33m作者：王维\x1b[m\n下马饮君酒，问君何所之。\n%\n",
        encoding="utf-8")
    (tmp_path / "song100.u8").write_text(
        "题目:《塞上》\n作者:柳开（９４６－９９９）\n鸣骹直上一千尺，天静无风声更干。\n%\n",
        encoding="utf-8")
    poems = train.chinese_poems(tmp_path)
    assert [(p.title, p.author, p.lines) for p in poems] == [
        ("送别", "王维", ["下马饮君酒，问君何所之。"]),
        ("塞上", "柳开", ["鸣骹直上一千尺，天静无风声更干。"]),
    ]
    assert poems[0].text == "《送别》\n作者：王维\n下马饮君酒，问君何所之。\n"
    play = ("HAMLET\n\nACT I.\n\nScene I. Elsinore.\n\nBer.\nWho's there?\n\n"
            "Scene II. A room.\n\nKing.\nNow.\n")
    docs = train.split_play("HAMLET", play)
    assert docs[1].startswith("HAMLET\n\nACT I.\n\nScene I. Elsinore.")
    assert "Who's there?" in docs[1]
    assert docs[2].startswith("HAMLET\n\nScene II. A room.") and docs[2].endswith("Now.\n")


def test_phase_three_starts_from_the_published_weights(tmp_path):
    """`train --init M --cycle-start s`: the run begins at step s with M's weights, not random
    ones; a model of another shape is refused."""
    from minimodel.checkpoints import DRAFT_DIR
    from minimodel.train.trainer import load_teacher

    seen = json.loads((DRAFT_DIR / "draft_vocab.json").read_text())["ids"]
    g = torch.Generator().manual_seed(0)
    stream = [seen[i] for i in torch.randint(0, len(seen), (200,), generator=g).tolist()]
    torch.save({"streams": {"a": {"train": stream, "val": stream}}, "seen": seen},
               tmp_path / "c.pt")
    tc = train.TrainConfig(shape="bard-draft", init="bard-draft", cycle_start=650, steps=651,
                           corpus="c.pt", mix=(1.0,), batch_size=1, seq_len=16, lr=1e-12,
                           warmup=1, eval_every=10_000)
    train.train(tmp_path, tc)
    state = torch.load(tmp_path / "ckpt.pt", weights_only=False)
    assert state["step"] == 651 and state["tokens"] == 16
    start = load_teacher("bard-draft", seen).state_dict()
    for name, value in start.items():
        assert torch.allclose(state["model"][name], value, atol=1e-6), name
    other = tmp_path / "other"
    other.mkdir()
    (other / "c.pt").write_bytes((tmp_path / "c.pt").read_bytes())
    with pytest.raises(ValueError, match="is not a bard-draft"):
        train.train(other, dataclasses.replace(tc, init="bard"))
