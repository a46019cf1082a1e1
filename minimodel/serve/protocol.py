"""The OpenAI wire format: request bodies, errors, and how their fields map to SamplingParams.

Requests are parsed strictly (a number where a string belongs is an error, not a guess); fields
of the OpenAI API that this server does not implement are rejected with a clear 400 when they
would change the answer, and ignored otherwise (`user`, `store`, `metadata`, ...).
"""

from __future__ import annotations

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


class _Body(BaseModel):
    # strict: JSON types must match (no "0.5" for a number, no true for an integer);
    # extra="allow": fields we do not use are accepted, as OpenAI clients send some.
    model_config = ConfigDict(strict=True, extra="allow")


class StreamOptions(_Body):
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
    skip_special_tokens: bool | None = None  # leave control tokens (<|im_end|>) out of the text
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None


class CompletionRequest(_SamplingBody):
    prompt: str | list[str] | list[int] | list[list[int]]
    logprobs: int | None = None  # OpenAI: how many alternatives; here only the chosen token's
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None


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
    tools: list[Any] | None = None


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


def check_fields(req: CompletionRequest | ChatCompletionRequest) -> None:
    """Reject what no choice could run: n < 1, and the fields that would change the answer in
    ways this engine cannot (penalties, logit_bias, echo, suffix, best_of, tools)."""
    if req.n < 1:
        raise bad_request(f"n must be an integer >= 1, got {req.n!r}.", param="n")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name) not in (None, 0, 0.0):
            raise bad_request(f"{name} is not supported (only 0).", param=name)
    if req.logit_bias:
        raise bad_request("logit_bias is not supported.", param="logit_bias")
    if isinstance(req, CompletionRequest):
        if req.echo:
            raise bad_request("echo is not supported.", param="echo")
        if req.suffix:
            raise bad_request("suffix is not supported.", param="suffix")
        if req.best_of not in (None, 1):
            raise bad_request("best_of is not supported (only 1).", param="best_of")
    if isinstance(req, ChatCompletionRequest) and req.tools:
        raise bad_request("tools are not supported.", param="tools")


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
    logprobs = req.logprobs
    if isinstance(req, CompletionRequest) and logprobs is not None and not (
            0 <= logprobs <= MAX_LOGPROBS):
        raise bad_request(f"logprobs must be an integer from 0 to {MAX_LOGPROBS}, got "
                          f"{logprobs}.", param="logprobs")
    if isinstance(req, ChatCompletionRequest) and req.top_logprobs is not None and not (
            0 <= req.top_logprobs <= MAX_LOGPROBS):
        raise bad_request(f"top_logprobs must be an integer from 0 to {MAX_LOGPROBS}, got "
                          f"{req.top_logprobs}.", param="top_logprobs")
    if req.seed is not None and req.seed >= 0 and req.seed + req.n - 1 > INT64_MAX:
        raise bad_request(f"seed must be at most 2**63 - n (choice j draws from seed + j), got "
                          f"{req.seed}.", param="seed")
    top_k = 0 if req.top_k in (None, -1) else req.top_k
    try:
        return SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            top_k=top_k,
            max_new_tokens=max_tokens_default if max_tokens is None else max_tokens,
            stop=req.stop,
            seed=None if req.seed is None else req.seed + choice,
            ignore_eos=req.ignore_eos,
            logprobs=wants_logprobs(req),
        )
    except ValueError as err:
        message = str(err)
        match = _FIELD.search(message)
        field = match.group(1) if match else None
        param = _PARAM.get(field, field) if field else None
        if field:
            message = message.replace(f"SamplingParams.{field}", param or field)
        raise bad_request(message, param=param) from None


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
