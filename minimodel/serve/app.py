"""The HTTP side: OpenAI's routes around one EngineLoop (FastAPI; sse-starlette for streams).

What a request goes through:
    read the body (413 past max_body_bytes, 408 if it does not arrive within body_timeout_s)
    -> parse the JSON (400 if malformed) -> check model name, sampling fields, roles (400)
    -> tokenise in a worker thread, never on the event loop (the chat template for chat; a
       text that must be longer than the context is a 400 before any tokenising)
    -> admit (429 when the server is full; 400 if it could never hold that many)
    -> the engine thread queues it (400 if the engine rejects the prompt)
    -> token ids come back step by step -> detokenise, hold back a possible stop string
    -> JSON at the end, or one server-sent event per step, then `data: [DONE]`.
A client that disconnects is aborted: its pages are freed before the engine's next step.
Every error is an OpenAI-style JSON body answered from inside the request path, so the
connection stays usable (keep-alive) after a 500 too; a stream that fails, or that the server
shuts down, ends with an error event and then `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

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
from minimodel.serve.metrics import ServerMetrics
from minimodel.serve.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
    bad_request,
    check_extra,
    check_fields,
    check_roles,
    message_dicts,
    num_alternatives,
    parse,
    sampling_params,
    wants_logprobs,
)
from minimodel.serve.reasoning import ReasoningSplit, prompt_opens_think
from minimodel.tokenizer import DEFAULT_ENABLE_THINKING, Tokenizer, load_tokenizer

log = logging.getLogger("minimodel.serve")
T = TypeVar("T")

MAX_BODY_BYTES = 32 << 20  # a larger body is refused (413) before it is read
BODY_TIMEOUT_S = 30.0  # a body must arrive within this (408)
SHUTDOWN_GRACE_S = 5.0  # open streams get this long to send their last events at shutdown
REASONING_PARSERS = ("qwen3",)  # --reasoning-parser: Qwen3's <think> block -> reasoning_content


def _server_error(err: Exception) -> JSONResponse:
    log.error("request failed", exc_info=err)
    return JSONResponse(APIError(500, f"Internal error: {err!r}", "server_error").body(),
                        status_code=500)


class _AnswerErrors(APIRoute):
    """A route that answers an unexpected exception with a 500 JSON body itself.

    Left to Starlette, such an exception reaches ServerErrorMiddleware, which sends the 500
    and then raises again, so uvicorn drops the connection: a client that reuses it (keep-
    alive, as openai's pool does) then meets a reset. Answered here, the connection lives on.
    Errors with a status of their own (APIError, HTTPException, validation) pass through to
    their handlers, which answer without raising.
    """

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except (APIError, StarletteHTTPException, RequestValidationError):
                raise
            except Exception as err:
                return _server_error(err)

        return answer


class _EventStream(EventSourceResponse):
    """Server-sent events that cancel their job however the response ends: finished, the
    client gone (sse-starlette notices the disconnect and stops the stream), or shutdown.

    At shutdown sse-starlette would cut the stream at once; with a grace period it waits
    while the engine fails the request (503), so the stream ends with an error event and
    `data: [DONE]` as any failed stream does."""

    def __init__(self, events: AsyncIterator[dict[str, str]], job: Job) -> None:
        # "data: {...}\n\n" and nothing else, as OpenAI sends: no keep-alive comments either
        super().__init__(events, sep="\n", ping=0, shutdown_event=anyio.Event(),
                         shutdown_grace_period=SHUTDOWN_GRACE_S)
        self.job = job

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.job.cancel()


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone (the body is read already: only disconnects come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
    """The result of `work`, or None (and `work` cancelled) if the client goes first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
    return task.result() if task.done() and not task.cancelled() else None


def _longest_token_bytes(tokenizer: Tokenizer) -> int:
    """The most UTF-8 bytes one token stands for: a text of B bytes has >= B / this tokens."""
    longest = 1
    for i in range(len(tokenizer)):
        piece = tokenizer.id_to_token(i)  # byte-level: one character per byte
        if piece is not None:
            longest = max(longest, len(piece.encode("utf-8")))
    return longest


def create_app(engine: EngineLoop, model_name: str, api_key: str | None = None,
               max_body_bytes: int = MAX_BODY_BYTES,
               body_timeout_s: float = BODY_TIMEOUT_S,
               reasoning_parser: str | None = None) -> FastAPI:
    """The FastAPI app around `engine`; its lifespan starts and stops the engine thread.

    max_body_bytes: larger request bodies get a 413 before they are read.
    body_timeout_s: a body that has not fully arrived by then gets a 408 (and the connection
    is closed), so that a client that sends headers and then nothing holds no handler.
    reasoning_parser: "qwen3" puts the text of Qwen3's <think> block into reasoning_content
    (as vLLM's --reasoning-parser qwen3); None (the default, as vLLM's) leaves it in content.
    """
    if reasoning_parser not in (None, *REASONING_PARSERS):
        raise ValueError(f"reasoning_parser must be None or one of {REASONING_PARSERS}, got "
                         f"{reasoning_parser!r}.")
    llm = engine.llm
    metrics = ServerMetrics(engine, model_name)
    engine.metrics = metrics
    # The HTTP side's own tokenizer: it tokenises prompts and detokenises answers here, while
    # the engine thread only runs steps (and checks stop strings with its own).
    tokenizer = load_tokenizer(llm.folder)
    longest_token = _longest_token_bytes(tokenizer)
    # Tokenising a long prompt takes a while: one worker thread does it, off the event loop,
    # so that other clients (and /health) are answered meanwhile.
    tokenizing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minimodel-tokenize")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            engine.stop()
            tokenizing.shutdown(wait=True, cancel_futures=True)

    app = FastAPI(title="minimodel", summary="An OpenAI-compatible server around one LLM.",
                  lifespan=lifespan)
    app.router.route_class = _AnswerErrors
    app.state.engine = engine

    async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(tokenizing, lambda: fn(*args, **kwargs))

    def check_text_length(text: str, param: str) -> None:
        """A text whose bytes need more tokens than the context holds, even if every token
        were the vocabulary's longest, is refused before it is tokenised."""
        size = len(text.encode("utf-8", errors="replace"))
        if size > llm.max_model_len * longest_token:
            raise bad_request(
                f"The {param} has {size} bytes of text, more than {llm.max_model_len} tokens "
                f"of this model's context can hold (at most {longest_token} bytes a token); "
                "shorten it.", param=param)

    async def read_body(request: Request) -> bytes:
        """The body, at most max_body_bytes of it, within body_timeout_s."""
        too_large = APIError(413, f"The request body is larger than {max_body_bytes} bytes, "
                             "the most this server reads; send a shorter prompt.",
                             code="request_too_large")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body_bytes:
            raise too_large
        chunks: list[bytes] = []
        size = 0

        async def read() -> None:
            nonlocal size
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_body_bytes:
                    raise too_large
                chunks.append(chunk)

        try:
            await asyncio.wait_for(read(), body_timeout_s)
        except asyncio.TimeoutError:
            raise APIError(408, f"The request body did not arrive within {body_timeout_s:g} s "
                           f"({size} bytes came); send it whole.", code="request_timeout") from None
        return b"".join(chunks)

    @app.exception_handler(APIError)
    async def api_error(request: Request, err: APIError) -> JSONResponse:
        headers = {"Retry-After": "1"} if err.status == 429 else {}
        if err.status in (408, 413):  # the body was not read to its end: this connection ends
            headers["Connection"] = "close"
        return JSONResponse(err.body(), status_code=err.status, headers=headers)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, err: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return JSONResponse(APIError(err.status_code, str(err.detail), kind).body(),
                            status_code=err.status_code)

    @app.exception_handler(Exception)
    async def server_error(request: Request, err: Exception) -> JSONResponse:
        # Only what fails outside a route gets here (routes answer their own, _AnswerErrors).
        return _server_error(err)

    async def check_api_key(request: Request) -> None:
        if api_key is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {api_key}".encode()):
            raise APIError(401, "Missing or wrong API key: send the header "
                           "'Authorization: Bearer <key>'.", code="invalid_api_key")

    def check_model(name: str | None) -> None:
        if name is not None and name != model_name:
            raise APIError(404, f"The model {name!r} does not exist here; this server serves "
                           f"{model_name!r} (see /v1/models).", "invalid_request_error",
                           param="model", code="model_not_found")

    async def chat_prompt(messages: list, chat_template_kwargs: dict | None,
                          enable_thinking: bool | None,
                          add_generation_prompt: bool = True) -> tuple[list[int], bool]:
        """Chat messages through the chat template -> (token ids, thinking on)."""
        check_roles(messages)
        dicts = message_dicts(messages)
        check_text_length("".join(m["content"] for m in dicts), "messages")
        kwargs = dict(chat_template_kwargs or {})
        taken = sorted(kwargs.keys() & {"messages", "add_generation_prompt", "tokenize"})
        if taken:
            raise bad_request(f"chat_template_kwargs may not set {', '.join(taken)}: the server "
                              "sets these itself.", param="chat_template_kwargs")
        thinking = kwargs.pop("enable_thinking", DEFAULT_ENABLE_THINKING)
        if enable_thinking is not None:
            thinking = enable_thinking
        if not isinstance(thinking, bool):
            raise bad_request(f"enable_thinking must be true or false, got {thinking!r}.",
                              param="chat_template_kwargs")
        try:
            ids = await off_loop(tokenizer.apply_chat_template, dicts,
                                 add_generation_prompt=add_generation_prompt,
                                 enable_thinking=thinking, tokenize=True, **kwargs)
        except Exception as err:  # the template rejects the conversation
            raise bad_request(f"messages: the chat template cannot render them: {err}",
                              param="messages") from None
        return ids, thinking

    def check_count(n: int) -> None:
        """One HTTP request asks for n completions: more than the server ever holds is a 400
        (a 429 would tell the client to retry what can never be admitted)."""
        try:
            engine.check_count(n)
        except NeverAdmitted as err:
            raise bad_request(str(err), param="n") from None

    def context_left(prompt: list[int]) -> int:
        return max(llm.max_model_len - len(prompt), 0)

    def check_context(requests: list[tuple[list[int], SamplingParams]]) -> None:
        """Prompt + max_tokens must fit the context, as OpenAI requires (a prompt that alone
        is too long gets the engine's own message)."""
        for ids, params in requests:
            if len(ids) <= llm.max_model_len < len(ids) + params.max_new_tokens:
                raise bad_request(
                    f"This model's context is {llm.max_model_len} tokens: the prompt has "
                    f"{len(ids)} and max_tokens asks for {params.max_new_tokens} more; lower "
                    "max_tokens or shorten the prompt.", param="max_tokens")

    @app.get("/health")
    async def health() -> JSONResponse:
        """200 when the server can answer requests; 503 with the reason when it cannot."""
        reason = engine.unavailable
        body = {"status": "ok" if reason is None else "unavailable", "model": model_name,
                **engine.stats()}
        if reason is not None:
            body["reason"] = reason
        return JSONResponse(body, status_code=200 if reason is None else 503)

    @app.get("/metrics")
    async def metrics_text() -> Response:
        """The server's metrics in Prometheus' text format (see metrics.py)."""
        return PlainTextResponse(generate_latest(metrics.registry),
                                 media_type=CONTENT_TYPE_LATEST)

    @app.post("/tokenize", dependencies=[Depends(check_api_key)])
    async def tokenize(request: Request) -> dict:
        """vLLM's /tokenize: {prompt} or {messages, add_generation_prompt} -> the token ids
        the engine would run, with their count and the context length."""
        req: TokenizeRequest = parse(TokenizeRequest, await read_body(request))
        check_model(req.model)
        check_extra(req)
        if (req.prompt is None) == (req.messages is None):
            raise bad_request("Give either prompt or messages.", param="prompt")
        if req.messages is not None:
            ids, _ = await chat_prompt(req.messages, req.chat_template_kwargs,
                                       req.enable_thinking, req.add_generation_prompt)
        else:
            check_text_length(req.prompt, "prompt")
            ids = await off_loop(tokenizer.encode, req.prompt)
        return {"count": len(ids), "max_model_len": llm.max_model_len, "tokens": ids,
                "token_strs": tokenizer.convert_ids_to_tokens(ids) if req.return_token_strs
                else None}

    @app.post("/detokenize", dependencies=[Depends(check_api_key)])
    async def detokenize(request: Request) -> dict:
        """vLLM's /detokenize: {tokens} -> {prompt}, their text."""
        req: DetokenizeRequest = parse(DetokenizeRequest, await read_body(request))
        check_model(req.model)
        check_extra(req)
        try:
            text = await off_loop(tokenizer.decode, req.tokens)
        except ValueError as err:
            raise bad_request(f"tokens: {err}", param="tokens") from None
        return {"prompt": text}

    @app.get("/v1/models", dependencies=[Depends(check_api_key)])
    async def models() -> dict:
        return {"object": "list", "data": [{
            "id": model_name, "object": "model", "created": int(time.time()),
            "owned_by": "minimodel", "max_model_len": llm.max_model_len}]}

    @app.post("/v1/completions", dependencies=[Depends(check_api_key)])
    async def completions(request: Request) -> Response:
        req: CompletionRequest = parse(CompletionRequest, await read_body(request))
        check_model(req.model)
        check_fields(req)
        texts = _prompt_list(req.prompt)
        check_count(len(texts) * req.n)
        for text in texts:
            if isinstance(text, str):
                check_text_length(text, "prompt")
        prompts = await off_loop(_completion_prompts, texts, tokenizer)
        requests = [(ids, sampling_params(req, 16, j)) for ids in prompts for j in range(req.n)]
        check_context(requests)
        # echo: each choice's text starts with its prompt's (the prompt as sent, or its ids'
        # text), as OpenAI's legacy completions and vLLM do
        echoed = ([t if isinstance(t, str) else tokenizer.decode(ids)
                   for t, ids in zip(texts, prompts, strict=True) for _ in range(req.n)]
                  if req.echo else None)
        return await _answer(request, engine, tokenizer, Kind(chat=False), req, requests,
                             prompts, model_name, "prompt", echoed)

    @app.post("/v1/chat/completions", dependencies=[Depends(check_api_key)])
    async def chat_completions(request: Request) -> Response:
        req: ChatCompletionRequest = parse(ChatCompletionRequest, await read_body(request))
        check_model(req.model)
        check_fields(req)
        check_count(req.n)
        ids, thinking = await chat_prompt(req.messages, req.chat_template_kwargs,
                                          req.enable_thinking)
        requests = [(ids, sampling_params(req, context_left(ids), j)) for j in range(req.n)]
        check_context(requests)
        opened = prompt_opens_think(tokenizer.decode(ids[-4:]))
        kind = Kind(chat=True, thinking=thinking if reasoning_parser else None, opened=opened)
        return await _answer(request, engine, tokenizer, kind, req, requests,
                             [ids], model_name, "messages")

    return app


def _prompt_list(prompt: Any) -> list[str | list[int]]:
    """A prompt, a list of prompts, token ids or a list of them -> a list of prompts."""
    if isinstance(prompt, str):
        prompts: list[Any] = [prompt]
    elif prompt and all(isinstance(t, int) for t in prompt):
        prompts = [prompt]
    else:
        prompts = list(prompt)
    if not prompts:
        raise bad_request("prompt is empty: give at least one token.", param="prompt")
    return prompts


def _completion_prompts(prompts: list[str | list[int]], tokenizer: Tokenizer) -> list[list[int]]:
    """Text prompts tokenised, token-id prompts as they are (a 400 if one is empty)."""
    out = [tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompts]
    if any(not ids for ids in out):
        raise bad_request("prompt is empty: give at least one token.", param="prompt")
    return out


async def _answer(request: Request, engine: EngineLoop, tokenizer: Tokenizer, kind: Kind,
                  req: CompletionRequest | ChatCompletionRequest,
                  requests: list[tuple[list[int], SamplingParams]], prompts: list[list[int]],
                  model_name: str, prompt_param: str,
                  echoed: list[str] | None = None) -> Response:
    """Submit the requests of one HTTP request and answer: JSON, or a stream of events."""
    job = engine.job()
    try:
        await job.submit(requests)
    except NeverAdmitted as err:
        raise bad_request(str(err), param="n") from None
    except ValueError as err:
        raise bad_request(str(err), param=prompt_param) from None
    except ServerBusy as err:
        raise APIError(429, str(err), "rate_limit_error", code="too_many_requests") from None
    except EngineStopped as err:
        raise APIError(503, str(err), "server_error", code="unavailable") from None
    meta = {"id": kind.id_prefix + uuid.uuid4().hex, "created": int(time.time()),
            "model": model_name}
    logprobs = wants_logprobs(req)
    prompt_tokens = sum(len(p) for p in prompts)
    if req.stream:
        usage = bool(req.stream_options and req.stream_options.include_usage)
        texts = [choice_text(tokenizer, params) for _, params in requests]
        events = _events(job, kind, meta, texts, tokenizer, logprobs, num_alternatives(req),
                         prompt_tokens, usage, echoed)
        return _EventStream(events, job)
    try:
        outputs = await _unless_disconnected(request, _collect(job, len(requests)))
    finally:
        job.cancel()
    if outputs is None:  # the client is gone: nobody reads this
        return Response(status_code=499)
    choices = []
    for i, out in enumerate(outputs):
        lp = None
        if logprobs:
            ids, lps = out.token_ids, out.logprobs or []
            top, n = getattr(out, "top_logprobs", None), num_alternatives(req)
            lp = (chat_logprobs(tokenizer, ids, lps, top, n) if kind.chat
                  else completion_logprobs(tokenizer, ids, lps, top=top, n=n))
        text = out.text if echoed is None else echoed[i] + out.text
        choices.append(kind.choice(i, text, lp, out.finish_reason))
    completion_tokens = sum(len(o.token_ids) for o in outputs)
    return JSONResponse({**meta, "object": kind.object, "choices": choices,
                         "usage": usage_body(prompt_tokens, completion_tokens)})


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


async def _events(job: Job, kind: Kind, meta: dict, texts: list[TextStream],
                  tokenizer: Tokenizer, logprobs: bool, alternatives: int, prompt_tokens: int,
                  include_usage: bool,
                  echoed: list[str] | None = None) -> AsyncIterator[dict[str, str]]:
    """The event stream: a chunk per step that brings text, the finish reasons, [DONE]."""

    def event(choices: list[dict], usage: dict | None = None) -> dict[str, str]:
        chunk = {**meta, "object": kind.chunk_object, "choices": choices}
        if include_usage:
            chunk["usage"] = usage
        return {"data": _json(chunk)}

    if kind.chat:  # OpenAI opens each chat choice with its role
        yield event([kind.chunk_choice(i, "", None, None, role=True) for i in range(len(texts))])
    if echoed is not None:  # each completion choice opens with its prompt's text
        yield event([kind.chunk_choice(i, text, None, None) for i, text in enumerate(echoed)])
    completion_tokens = 0
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
            delta = (text.finish(update.output.text) if update.output is not None
                     else text.push(update.token_ids))
            completion_tokens += len(update.token_ids)
            lp = None
            if logprobs and update.token_ids:
                lps, top = update.logprobs or [], update.top_logprobs
                if kind.chat:
                    lp = chat_logprobs(tokenizer, update.token_ids, lps, top, alternatives)
                else:
                    lp = completion_logprobs(tokenizer, update.token_ids, lps, offsets[i], top,
                                             alternatives)
                    offsets[i] = lp["text_offset"][-1] + len(lp["tokens"][-1])
            reasoning = ""
            if splits is not None:
                reasoning, delta = splits[i].push(delta)
                if finish is not None:
                    rest = splits[i].finish()
                    reasoning, delta = reasoning + rest[0], delta + rest[1]
            if not delta and not reasoning and finish is None and lp is None:
                continue  # a token that completes no character yet
            yield event([kind.chunk_choice(i, delta, lp, finish, reasoning=reasoning)])
        if include_usage:
            yield event([], usage_body(prompt_tokens, completion_tokens))
        yield {"data": "[DONE]"}
    finally:
        job.cancel()


def _json(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
