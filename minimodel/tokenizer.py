"""The Qwen3 tokenizer: byte-level BPE over the `tokenizers` library, plus the chat template.

Text becomes token ids in four steps, each one a field of `tokenizer.json`:

1. added tokens: control tokens such as `<|im_start|>` or `<think>` are cut out of the text first
   and become one id each (151643..151668);
2. normalizer: the rest of the text is put in Unicode NFC form ("e" + U+0301 becomes "é");
3. pre-tokenizer: a regex splits the text into words, numbers (one digit each), punctuation runs
   and whitespace runs, and each piece is written as bytes, one printable character per byte;
4. model: byte-pair encoding merges adjacent symbols inside each piece, lowest rank first, until
   no listed merge applies.

A folder without its own `tokenizer.json` uses Qwen3's, rebuilt offline (`minimodel.bpe`); the
chat template is rendered by `minimodel.chat_template`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from minimodel import hub
from minimodel.bpe import qwen3_tokenizer_dir
from minimodel.chat_template import DEFAULT_ENABLE_THINKING, render
from minimodel.config import eos_token_ids, read_json_object

__all__ = ["DEFAULT_ENABLE_THINKING", "Tokenizer", "load_tokenizer"]


class Tokenizer:
    """Qwen3's tokenizer: `encode`, `decode` and `apply_chat_template`.

    A thin layer over a `tokenizers.Tokenizer` (the Rust library behind transformers' fast
    tokenizers), loaded from a folder's `tokenizer.json` plus `tokenizer_config.json`.

    Sizes, which are three different numbers for Qwen3:
      - `vocab_size` (151,643): byte-level BPE tokens, without the added control tokens;
      - `len(tok)` (151,669): every token id the tokenizer knows, control tokens included;
      - the model's `vocab_size` in config.json (151,936): the embedding has spare rows past the
        last token. `decode` turns those ids into "" (as transformers does); ids that are
        negative or past the model's rows raise a ValueError.
    """

    def __init__(
        self,
        tokenizer: Any,
        config: dict[str, Any] | None = None,
        eos_token_ids: Sequence[int] | None = None,
        model_vocab_size: int | None = None,
        name_or_path: str = "",
    ) -> None:
        self._tok = tokenizer
        self.config: dict[str, Any] = dict(config or {})
        self.name_or_path = name_or_path
        self._len = int(tokenizer.get_vocab_size(with_added_tokens=True))
        self.model_vocab_size = max(self._len, int(model_vocab_size or 0))
        added = tokenizer.get_added_tokens_decoder()  # {id: AddedToken}
        self._special_tokens = {tok.content: int(i) for i, tok in sorted(added.items())}
        self.chat_template: str | None = self.config.get("chat_template")
        if eos_token_ids is None:
            eos = self.eos_token_id
            eos_token_ids = [] if eos is None else [eos]
        self._eos_token_ids = [int(i) for i in eos_token_ids]

    @classmethod
    def from_folder(
        cls, folder: str | os.PathLike[str], tokenizer_file: str | os.PathLike[str] | None = None
    ) -> Tokenizer:
        """Load from a folder's tokenizer.json, tokenizer_config.json, generation_config.json
        (for the EOS ids) and config.json (for the model's vocab_size); only tokenizer.json is
        required. `tokenizer_file` replaces the folder's tokenizer.json."""
        from tokenizers import Tokenizer as HFTokenizer

        folder = Path(folder)
        tokenizer_json = Path(tokenizer_file) if tokenizer_file else folder / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise FileNotFoundError(f"{folder} has no tokenizer.json")
        config = read_json_object(folder / "tokenizer_config.json")
        if config is None and tokenizer_file:
            config = read_json_object(Path(tokenizer_file).parent / "tokenizer_config.json")
        model = read_json_object(folder / "config.json") or {}
        eos_ids = eos_token_ids(folder) or None  # none given: the tokenizer's eos token
        try:
            backend = HFTokenizer.from_file(str(tokenizer_json))
        except Exception as err:  # the Rust library raises plain Exceptions for a bad file
            raise ValueError(f"{tokenizer_json} is not a valid tokenizer.json ({err}); restore "
                             "it (download the model again) or delete it to use Qwen3's own "
                             "tokenizer.") from None
        return cls(
            backend,
            config,
            eos_token_ids=eos_ids,
            model_vocab_size=model.get("vocab_size"),
            name_or_path=str(folder),
        )

    # -- text <-> ids ---------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`. Control tokens written in the text (`<|im_end|>`, `<think>`)
        become their single ids, as Qwen's tokenizers do by default."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}")
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` of each text, in parallel threads."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """The text of token ids. Byte sequences that are not valid UTF-8 (a token that ends
        inside a character) become U+FFFD. With `skip_special_tokens`, the special control
        tokens (`<|im_end|>`, ...) are left out; `<think>` and the tool tokens are kept.

        Ids in the model's spare embedding rows (len(self) <= id < model_vocab_size) have no
        text and decode to "". Other ids outside the vocabulary raise a ValueError.
        """
        checked = []
        for token_id in ids:
            i = int(token_id)
            if i < 0 or i >= self.model_vocab_size:
                raise ValueError(
                    f"token id {i} is outside the vocabulary (0..{self._len - 1}, model rows up "
                    f"to {self.model_vocab_size - 1})"
                )
            if i < self._len:
                checked.append(i)
        return self._tok.decode(checked, skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        """The id of one token string (byte-level form, e.g. "Ġhello"), or None."""
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """The token string of one id (byte-level form: a leading space shows as "Ġ"), or None."""
        return self._tok.id_to_token(int(token_id))

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str | None]:
        """`id_to_token` of each id."""
        return [self.id_to_token(i) for i in ids]

    # -- special tokens and sizes ---------------------------------------------------------

    def _named_token(self, key: str) -> str | None:
        value = self.config.get(key)
        if isinstance(value, dict):  # older configs store AddedToken dicts
            value = value.get("content")
        return value if isinstance(value, str) else None

    def _named_id(self, key: str) -> int | None:
        token = self._named_token(key)
        return None if token is None else self.token_to_id(token)

    @property
    def eos_token_id(self) -> int | None:
        """The id of tokenizer_config's `eos_token` (`<|im_end|>` = 151645 for Qwen3)."""
        token_id = self._named_id("eos_token")
        if token_id is None and getattr(self, "_eos_token_ids", None):
            return self._eos_token_ids[0]
        return token_id

    @property
    def eos_token_ids(self) -> list[int]:
        """Every id that ends generation: generation_config.json's `eos_token_id` when the
        folder has one (Qwen3: [151645, 151643]), else the tokenizer's eos token."""
        return list(self._eos_token_ids)

    @property
    def pad_token_id(self) -> int | None:
        """The id of the padding token (`<|endoftext|>` = 151643 for Qwen3)."""
        return self._named_id("pad_token")

    @property
    def bos_token_id(self) -> int | None:
        """The id of the beginning-of-text token: None for Qwen3, which has none."""
        return self._named_id("bos_token")

    @property
    def special_tokens(self) -> dict[str, int]:
        """Every added control token (special or not), text -> id, in id order."""
        return dict(self._special_tokens)

    @property
    def vocab_size(self) -> int:
        """The number of BPE tokens, without the added tokens (as transformers' `vocab_size`)."""
        return int(self._tok.get_vocab_size(with_added_tokens=False))

    def __len__(self) -> int:
        """The number of token ids, added tokens included (151,669 for Qwen3)."""
        return self._len

    def __repr__(self) -> str:
        return f"Tokenizer({self.name_or_path!r}, len={self._len})"

    # -- chat -------------------------------------------------------------------------------

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: bool = True,
        enable_thinking: bool = DEFAULT_ENABLE_THINKING,
        tokenize: bool = False,
        tools: list[dict[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> str | list[int]:
        """Render a conversation with the folder's chat template, exactly as
        `transformers.AutoTokenizer.apply_chat_template(..., tokenize=False)` does.

        `messages` are dicts with `role` ("system", "user", "assistant", "tool") and `content`;
        assistant turns may carry `reasoning_content` and `tool_calls`. With
        `add_generation_prompt`, the text ends with the header of a new assistant turn; with
        `enable_thinking=False` too, Qwen3's template adds an empty `<think>` block so that the
        model answers without reasoning. Returns the text, or its ids with `tokenize=True`.
        """
        if not self.chat_template:
            raise ValueError(f"{self.name_or_path or 'this tokenizer'} has no chat_template")
        variables: dict[str, Any] = {}
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            token = self._named_token(key)
            if token is not None:
                variables[key] = token
        text = render(self.chat_template, messages, add_generation_prompt, enable_thinking,
                      tools, **{**variables, **template_kwargs})
        return self.encode(text) if tokenize else text


def _looks_like_path(path: str | os.PathLike[str]) -> bool:
    """True for Path objects and strings that name a place on disk, not a model name."""
    if not isinstance(path, str):
        return True
    return os.path.isabs(path) or path.startswith((".", "~"))


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """The tokenizer of a checkpoint folder, or of a model name such as "tiny".

    Uses the folder's own tokenizer.json when it has one; otherwise Qwen3's tokenizer is built
    offline (once, into `$MINIMODEL_HOME/tokenizer/`) and loaded from there, with the folder's
    tokenizer_config.json and generation_config.json when present. A name that is not a folder
    goes through `minimodel.hub.resolve_model`.
    """
    folder = Path(path).expanduser()
    if not folder.is_dir():
        if _looks_like_path(path):
            kind = "is not a folder" if folder.exists() else "does not exist"
            raise FileNotFoundError(f"Cannot load a tokenizer: {str(path)!r} {kind}.")
        folder = Path(hub.resolve_model(str(path)))
    if (folder / "tokenizer.json").is_file():
        return Tokenizer.from_folder(folder)
    return Tokenizer.from_folder(folder, tokenizer_file=qwen3_tokenizer_dir() / "tokenizer.json")
