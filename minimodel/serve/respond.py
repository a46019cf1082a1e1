"""Answering one HTTP request's completions: submit them to the engine thread, then either
collect them into one JSON body or send a server-sent event per step that brings text,
then the finish reasons, the usage if asked for, and `data: [DONE]`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from minimodel.engine.detokenizer import TextStream
from minimodel.engine.outputs import RequestOutput
from minimodel.sampling import SamplingParams
from minimodel.serve.answers import (
    Kind,
    chat_logprobs,
    choice_text,
    completion_logprobs,
    usage_body,
)
from minimodel.serve.engine_loop import (
    EngineLoop,
    EngineStopped,
    Job,
    NeverAdmitted,
    ServerBusy,
    Update,
)
from minimodel.serve.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    bad_request,
    num_alternatives,
    wants_logprobs,
)
from minimodel.serve.reasoning import ReasoningSplit
from minimodel.serve.transport import EventStream, unless_disconnected
from minimodel.tokenizer import Tokenizer


@dataclass(frozen=True)
class Reply:
    """How one HTTP request is answered, read from its body once.

    kind: completions or chat (and how chat splits reasoning); prompt_param: the field an
    engine's refusal of the prompt names; echoed: per choice, the prompt text its text
    starts with (completions' `echo`)."""

    kind: Kind
    model_name: str
    prompt_param: str
    stream: bool
    include_usage: bool
    logprobs: bool
    alternatives: int
    echoed: list[str] | None = None

    @classmethod
    def to(cls, req: CompletionRequest | ChatCompletionRequest, kind: Kind, model_name: str,
           prompt_param: str, echoed: list[str] | None = None) -> Reply:
        return cls(kind, model_name, prompt_param, bool(req.stream),
                   bool(req.stream_options and req.stream_options.include_usage),
                   wants_logprobs(req), num_alternatives(req), echoed)

    def logprobs_of(self, tokenizer: Tokenizer, ids: list[int], logprobs: list[float] | None,
                    top: list | None, offset: int = 0) -> dict[str, Any]:
        """The `logprobs` object of these tokens of one choice, in the kind's shape."""
        if self.kind.chat:
            return chat_logprobs(tokenizer, ids, logprobs or [], top, self.alternatives)
        return completion_logprobs(tokenizer, ids, logprobs or [], offset, top,
                                   self.alternatives)


async def answer(request: Request, engine: EngineLoop, tokenizer: Tokenizer, reply: Reply,
                 requests: list[tuple[list[int], SamplingParams]],
                 prompts: list[list[int]]) -> Response:
    """Submit the requests of one HTTP request and answer: JSON, or a stream of events."""
    job = engine.job()
    try:
        await job.submit(requests)
    except NeverAdmitted as err:
        raise bad_request(str(err), param="n") from None
    except ValueError as err:
        raise bad_request(str(err), param=reply.prompt_param) from None
    except ServerBusy as err:
        raise APIError(429, str(err), "rate_limit_error", code="too_many_requests") from None
    except EngineStopped as err:
        raise APIError(503, str(err), "server_error", code="unavailable") from None
    meta = {"id": reply.kind.id_prefix + uuid.uuid4().hex, "created": int(time.time()),
            "model": reply.model_name}
    prompt_tokens = sum(len(p) for p in prompts)
    if reply.stream:
        texts = [choice_text(tokenizer, params) for _, params in requests]
        return EventStream(_events(job, reply, meta, texts, tokenizer, prompt_tokens), job)
    try:
        outputs = await unless_disconnected(request, _collect(job, len(requests)))
    finally:
        job.cancel()
    if outputs is None:  # the client is gone: nobody reads this
        return Response(status_code=499)
    choices = []
    for i, out in enumerate(outputs):
        lp = (reply.logprobs_of(tokenizer, out.token_ids, out.logprobs,
                                out.top_logprobs) if reply.logprobs else None)
        text = out.text if reply.echoed is None else reply.echoed[i] + out.text
        choices.append(reply.kind.choice(i, text, lp, out.finish_reason))
    completion_tokens = sum(len(o.token_ids) for o in outputs)
    cached_tokens = sum(o.metrics.cached_tokens for o in outputs)
    return JSONResponse({**meta, "object": reply.kind.object, "choices": choices,
                         "usage": usage_body(prompt_tokens, completion_tokens, cached_tokens)})


def _update_error(update: Update) -> APIError:
    """The error a failed request is answered with (503: the server cannot serve now)."""
    kind = "server_error" if update.status >= 500 else "invalid_request_error"
    return APIError(update.status, update.error or "", kind,
                    code="unavailable" if update.status == 503 else None)


async def _collect(job: Job, n: int) -> list[RequestOutput]:
    outputs: list[RequestOutput | None] = [None] * n
    async for update in job.updates():
        if update.error is not None:
            raise _update_error(update)
        if update.output is not None:
            outputs[update.index] = update.output
    return outputs  # type: ignore[return-value]


async def _events(job: Job, reply: Reply, meta: dict, texts: list[TextStream],
                  tokenizer: Tokenizer, prompt_tokens: int) -> AsyncIterator[dict[str, str]]:
    """The event stream: a chunk per step that brings text, the finish reasons, [DONE]."""
    kind = reply.kind

    def event(choices: list[dict], usage: dict | None = None) -> dict[str, str]:
        chunk = {**meta, "object": kind.chunk_object, "choices": choices}
        if reply.include_usage:
            chunk["usage"] = usage
        return {"data": _json(chunk)}

    if kind.chat:  # OpenAI opens each chat choice with its role
        yield event([kind.chunk_choice(i, "", None, None, role=True) for i in range(len(texts))])
    if reply.echoed is not None:  # each completion choice opens with its prompt's text
        yield event([kind.chunk_choice(i, text, None, None)
                     for i, text in enumerate(reply.echoed)])
    completion_tokens = cached_tokens = 0
    offsets = [0] * len(texts)
    splits = ([ReasoningSplit(kind.thinking, kind.opened) for _ in texts]
              if kind.thinking is not None else None)
    try:
        async for update in job.updates():
            if update.error is not None:  # an error event, then [DONE], as vLLM ends one
                yield {"data": _json(_update_error(update).body())}
                yield {"data": "[DONE]"}
                return
            i, text = update.index, texts[update.index]
            finish = update.output.finish_reason if update.output is not None else None
            delta = (text.flush(update.output.text) if update.output is not None
                     else text.push(update.token_ids))
            completion_tokens += len(update.token_ids)
            if update.output is not None:
                cached_tokens += update.output.metrics.cached_tokens
            lp = None
            if reply.logprobs and update.token_ids:
                lp = reply.logprobs_of(tokenizer, update.token_ids, update.logprobs,
                                       update.top_logprobs, offsets[i])
                if not kind.chat:
                    offsets[i] = lp["text_offset"][-1] + len(lp["tokens"][-1])
            reasoning = ""
            if splits is not None:
                reasoning, delta = splits[i].push(delta)
                if finish is not None:
                    rest = splits[i].flush()
                    reasoning, delta = reasoning + rest[0], delta + rest[1]
            if not delta and not reasoning and finish is None and lp is None:
                continue  # a token that completes no character yet
            yield event([kind.chunk_choice(i, delta, lp, finish, reasoning=reasoning)])
        if reply.include_usage:
            yield event([], usage_body(prompt_tokens, completion_tokens, cached_tokens))
        yield {"data": "[DONE]"}
    finally:
        job.cancel()


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
