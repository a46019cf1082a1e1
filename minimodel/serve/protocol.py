"""The OpenAI wire format: request bodies, errors, and how their fields map to SamplingParams.

Requests are parsed strictly (a number where a string belongs is an error, not a guess). Every
field is either honoured or refused with a 400 whose `param` names it: the fields below are
honoured; IGNORED lists the few that change no answer (`user`, `store`, `metadata`, ...) and
are accepted; NEUTRAL the ones accepted only with the value that changes nothing (`tools: []`,
`logit_bias: {}`, ...); any other field is refused by name.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from minimodel.sampling import INT64_MAX, SamplingParams

ROLES = ("system", "user", "assistant", "tool")  # the roles Qwen3's chat template renders
MAX_LOGPROBS = 20  # the most alternatives a request may ask for (OpenAI's top_logprobs limit)


class APIError(Exception):
    """An error answered with an OpenAI-style body: {"error": {message, type, param, code}}."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


# Fields that change no answer of this server: accepted and ignored.
IGNORED = frozenset({
    "user", "store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier",
    "request_id",  # vLLM's: the response has its own id
    "add_special_tokens",  # Qwen3's tokenizer adds no special tokens either way
    "spaces_between_special_tokens",  # byte-level decoding puts no spaces between any tokens
})
# Fields accepted only with a value that changes nothing; any other value is refused.
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "logit_bias": (None, {}), "suffix": (None, ""), "echo": (None, False),  # chat's echo
    "tools": (None, []), "tool_choice": (None, "none"), "functions": (None, []),
    "function_call": (None, "none"), "parallel_tool_calls": (None,),
    "response_format": (None, {"type": "text"}), "modalities": (None, ["text"]),
    "audio": (None,), "prediction": (None,), "reasoning_effort": (None,),
    "verbosity": (None,), "web_search_options": (None,),
    "add_generation_prompt": (None, True), "continue_final_message": (None, False),
    "use_beam_search": (None, False),
    "prompt_logprobs": (None,), "allowed_token_ids": (None,), "bad_words": (None, []),
    "truncate_prompt_tokens": (None,), "guided_json": (None,), "guided_regex": (None,),
    "guided_choice": (None,), "guided_grammar": (None,), "structured_outputs": (None,),
    "priority": (None, 0), "logits_processors": (None,), "return_tokens_as_token_ids": (None,
                                                                                    False),
}
# The engine's sampling fields that OpenAI's API does not have (vLLM's extra parameters).
ENGINE_FIELDS = ("presence_penalty", "frequency_penalty", "repetition_penalty", "min_p",
                 "min_tokens", "stop_token_ids")


class _Body(BaseModel):
    # strict: JSON types must match (no "0.5" for a number, no true for an integer);
    # extra="allow": every other field is looked at by check_fields (refused or ignored).
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Body):
    model_config = ConfigDict(strict=True, extra="forbid")
    include_usage: bool = False


class _SamplingBody(_Body):
    """The fields that completions and chat completions share."""

    model: str | None = None
    max_tokens: int | None = None  # None: 16 for completions, the rest of the context for chat
    temperature: float | None = None  # None: 1.0, as OpenAI
    top_p: float | None = None
    top_k: int | None = None  # not in OpenAI's API (vLLM's extra field); 0 or -1 = off
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True  # leave control tokens (<|im_end|>) out of the text
    include_stop_str_in_output: bool = False  # keep the stop string that ended it in the text
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    min_p: float | None = None
    min_tokens: int | None = None
    stop_token_ids: list[int] | None = None


class CompletionRequest(_SamplingBody):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None  # the chosen token's log-probability and this many alternatives
    best_of: int | None = None  # only None or n: n answers are n answers
    echo: bool = False  # the prompt's text before each choice's text


class ContentPart(_Body):
    type: str
    text: str | None = None


class ChatMessage(_Body):
    role: str
    content: str | list[ContentPart] | None = None


class ChatCompletionRequest(_SamplingBody):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    enable_thinking: bool | None = None  # Qwen3's switch; also read from chat_template_kwargs
    chat_template_kwargs: dict[str, Any] | None = None


class TokenizeRequest(_Body):
    """POST /tokenize (vLLM's): a prompt, or chat messages through the chat template."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_generation_prompt: bool = True
    enable_thinking: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False


class DetokenizeRequest(_Body):
    """POST /detokenize (vLLM's): token ids -> their text."""

    model: str | None = None
    tokens: list[int]


def parse(model: type[_Body], body: bytes) -> Any:
    """Validate a JSON body; malformed JSON or a wrong field is a 400 naming the field."""
    try:
        return model.model_validate_json(body)
    except ValidationError as err:
        first = err.errors()[0]
        if first["type"] == "json_invalid":
            raise bad_request(f"The body is not valid JSON: {first['msg']}") from None
        loc = [str(part) for part in first["loc"]]
        if not loc:
            raise bad_request(f"The body must be a JSON object: {first['msg']}") from None
        raise bad_request(f"{loc[0]}: {first['msg']}", param=loc[0]) from None


def check_extra(req: _Body) -> None:
    """Refuse, by name, a field that is neither honoured nor harmless (see IGNORED, NEUTRAL)."""
    for name, value in sorted((req.model_extra or {}).items()):
        if name in IGNORED:
            continue
        if name not in NEUTRAL:
            raise bad_request(f"{name} is not supported by this server.", param=name)
        if value not in NEUTRAL[name]:
            allowed = " or ".join(json_text(v) for v in NEUTRAL[name])
            raise bad_request(f"{name} is not supported by this server (only {allowed}).",
                              param=name)


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def check_fields(req: CompletionRequest | ChatCompletionRequest) -> None:
    """Reject what no choice could run: n < 1, best_of other than n, a field this server
    refuses, a sampling field the engine does not have (unless neutral)."""
    check_extra(req)
    if req.n < 1:
        raise bad_request(f"n must be an integer >= 1, got {req.n!r}.", param="n")
    if isinstance(req, CompletionRequest) and req.best_of not in (None, req.n):
        raise bad_request(f"best_of must equal n ({req.n}): this server returns every answer "
                          f"it generates, got {req.best_of}.", param="best_of")
    if isinstance(req, CompletionRequest) and req.echo and req.logprobs is not None:
        raise bad_request("echo with logprobs would need the prompt tokens' log-probabilities, "
                          "which this engine does not compute: ask for one or the other.",
                          param="echo")
    if isinstance(req, CompletionRequest) and req.logprobs is not None and not (
            0 <= req.logprobs <= MAX_LOGPROBS):
        raise bad_request(f"logprobs must be an integer from 0 to {MAX_LOGPROBS}, got "
                          f"{req.logprobs}.", param="logprobs")
    if isinstance(req, ChatCompletionRequest) and req.top_logprobs is not None and not (
            0 <= req.top_logprobs <= MAX_LOGPROBS):
        raise bad_request(f"top_logprobs must be an integer from 0 to {MAX_LOGPROBS}, got "
                          f"{req.top_logprobs}.", param="top_logprobs")
    if isinstance(req, ChatCompletionRequest) and req.top_logprobs and not req.logprobs:
        raise bad_request("top_logprobs needs logprobs: true.", param="top_logprobs")


_FIELD = re.compile(r"SamplingParams\.(\w+)")
_PARAM = {"max_new_tokens": "max_tokens"}  # SamplingParams' name -> the API's name


def sampling_params(req: CompletionRequest | ChatCompletionRequest,
                    max_tokens_default: int, choice: int = 0) -> SamplingParams:
    """The SamplingParams of choice `choice` of a request; a 400 naming the field if invalid.

    Choice j of a seeded request with n > 1 draws from seed + j, so that the n answers differ
    and each is reproducible.
    """
    check_fields(req)
    for name in ("temperature", "top_p"):
        value = getattr(req, name)
        if value is not None and not math.isfinite(value):
            raise bad_request(f"{name} must be a finite number, got {value!r}.", param=name)
    max_tokens = req.max_tokens
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        max_tokens = req.max_completion_tokens
    if req.seed is not None and req.seed >= 0 and req.seed + req.n - 1 > INT64_MAX:
        raise bad_request(f"seed must be at most 2**63 - n (choice j draws from seed + j), got "
                          f"{req.seed}.", param="seed")
    top_k = 0 if req.top_k in (None, -1) else req.top_k
    engine_fields = {name: getattr(req, name) for name in ENGINE_FIELDS
                     if getattr(req, name) is not None}
    try:
        return SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=top_k,
            max_new_tokens=max_tokens_default if max_tokens is None else max_tokens,
            stop=req.stop,
            seed=None if req.seed is None else req.seed + choice,
            ignore_eos=req.ignore_eos,
            skip_special_tokens=req.skip_special_tokens,
            include_stop_str_in_output=req.include_stop_str_in_output,
            logprobs=num_alternatives(req) or wants_logprobs(req),
            **engine_fields,
        )
    except ValueError as err:
        message = str(err)
        match = _FIELD.search(message)
        field = match.group(1) if match else None
        param = _PARAM.get(field, field) if field else None
        if field:
            message = message.replace(f"SamplingParams.{field}", param or field)
        raise bad_request(message, param=param) from None


def num_alternatives(req: CompletionRequest | ChatCompletionRequest) -> int:
    """How many most likely tokens to return beside each chosen one."""
    if isinstance(req, CompletionRequest):
        return req.logprobs or 0
    return req.top_logprobs or 0 if req.logprobs else 0


def wants_logprobs(req: CompletionRequest | ChatCompletionRequest) -> bool:
    """Completions ask with an integer (0 too), chat completions with true."""
    if isinstance(req, CompletionRequest):
        return req.logprobs is not None
    return req.logprobs


def check_roles(messages: list[ChatMessage]) -> None:
    """A role the chat template does not render would vanish from the prompt: a 400."""
    for i, message in enumerate(messages):
        if message.role not in ROLES:
            raise bad_request(f"messages[{i}].role is {message.role!r}; the roles are "
                              f"{', '.join(map(repr, ROLES))}.", param="messages")


def message_dicts(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Chat messages as the chat template takes them: content parts joined into one text."""
    if not messages:
        raise bad_request("messages must hold at least one message.", param="messages")
    out = []
    for i, message in enumerate(messages):
        content = message.content
        if isinstance(content, list):
            texts = []
            for part in content:
                if part.type != "text" or part.text is None:
                    raise bad_request(f"messages[{i}]: only text content parts are supported, "
                                      f"got type {part.type!r}.", param="messages")
                texts.append(part.text)
            content = "".join(texts)
        extra = {k: v for k, v in (message.model_extra or {}).items() if v is not None}
        out.append({**extra, "role": message.role, "content": content or ""})
    return out
