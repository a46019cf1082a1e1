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

The rooms: transport.py (bodies, errors, the API key, event streams), prompts.py (prompts ->
token ids), respond.py (submit, collect or stream), answers.py (OpenAI's shapes); this file
holds the routes and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from minimodel.serve.answers import Kind
from minimodel.serve.engine_loop import EngineLoop, NeverAdmitted
from minimodel.serve.metrics import ServerMetrics
from minimodel.serve.prompts import PromptReader, prompt_list
from minimodel.serve.protocol import (
    APIError,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
    bad_request,
    check_extra,
    check_fields,
    parse,
    sampling_params,
)
from minimodel.serve.reasoning import prompt_opens_think
from minimodel.serve.respond import Reply, answer
from minimodel.serve.transport import (
    BODY_TIMEOUT_S,
    MAX_BODY_BYTES,
    SHUTDOWN_GRACE_S,
    ApiKey,
    BodyReader,
    answer_errors,
)
from minimodel.tokenizer import load_tokenizer

__all__ = ["BODY_TIMEOUT_S", "MAX_BODY_BYTES", "REASONING_PARSERS", "SHUTDOWN_GRACE_S",
           "Routes", "create_app"]

REASONING_PARSERS = ("qwen3",)  # --reasoning-parser: Qwen3's <think> block -> reasoning_content


class Routes:
    """The handlers of one server: each reads its body, checks it, and answers."""

    def __init__(self, engine: EngineLoop, model_name: str, prompts: PromptReader,
                 body: BodyReader, reasoning_parser: str | None) -> None:
        self.engine = engine
        self.model_name = model_name
        self.prompts = prompts
        self.tokenizer = prompts.tokenizer
        self.body = body
        self.reasoning_parser = reasoning_parser
        self.metrics = ServerMetrics(engine, model_name)
        engine.metrics = self.metrics

    @property
    def max_model_len(self) -> int:
        return self.prompts.max_model_len

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.model_name:
            raise APIError(404, f"The model {name!r} does not exist here; this server serves "
                           f"{self.model_name!r} (see /v1/models).", "invalid_request_error",
                           param="model", code="model_not_found")

    def check_count(self, n: int) -> None:
        """One HTTP request asks for n completions: more than the server ever holds is a 400
        (a 429 would tell the client to retry what can never be admitted)."""
        try:
            self.engine.check_count(n)
        except NeverAdmitted as err:
            raise bad_request(str(err), param="n") from None

    async def health(self) -> JSONResponse:
        """200 when the server can answer requests; 503 with the reason when it cannot."""
        reason = self.engine.unavailable
        body = {"status": "ok" if reason is None else "unavailable", "model": self.model_name,
                **self.engine.stats()}
        if reason is not None:
            body["reason"] = reason
        return JSONResponse(body, status_code=200 if reason is None else 503)

    async def metrics_text(self) -> Response:
        """The server's metrics in Prometheus' text format (see metrics.py)."""
        return PlainTextResponse(generate_latest(self.metrics.registry),
                                 media_type=CONTENT_TYPE_LATEST)

    async def tokenize(self, request: Request) -> dict:
        """vLLM's /tokenize: {prompt} or {messages, add_generation_prompt} -> the token ids
        the engine would run, with their count and the context length."""
        req: TokenizeRequest = parse(TokenizeRequest, await self.body.read(request))
        self.check_model(req.model)
        check_extra(req)
        if (req.prompt is None) == (req.messages is None):
            raise bad_request("Give either prompt or messages.", param="prompt")
        if req.messages is not None:
            ids, _ = await self.prompts.chat(req.messages, req.chat_template_kwargs,
                                             req.enable_thinking, req.add_generation_prompt)
        else:
            ids = await self.prompts.text(req.prompt)
        return {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids,
                "token_strs": self.tokenizer.convert_ids_to_tokens(ids)
                if req.return_token_strs else None}

    async def detokenize(self, request: Request) -> dict:
        """vLLM's /detokenize: {tokens} -> {prompt}, their text."""
        req: DetokenizeRequest = parse(DetokenizeRequest, await self.body.read(request))
        self.check_model(req.model)
        check_extra(req)
        try:
            text = await self.prompts.off_loop(self.tokenizer.decode, req.tokens)
        except ValueError as err:
            raise bad_request(f"tokens: {err}", param="tokens") from None
        return {"prompt": text}

    async def models(self) -> dict:
        """The one model served, with its context length."""
        return {"object": "list", "data": [{
            "id": self.model_name, "object": "model", "created": int(time.time()),
            "owned_by": "minimodel", "max_model_len": self.max_model_len}]}

    async def completions(self, request: Request) -> Response:
        """/v1/completions: every prompt n times, text (with its prompt's if `echo`)."""
        req: CompletionRequest = parse(CompletionRequest, await self.body.read(request))
        self.check_model(req.model)
        check_fields(req)
        texts = prompt_list(req.prompt)
        self.check_count(len(texts) * req.n)
        prompts = await self.prompts.completion(texts)
        requests = [(ids, sampling_params(req, 16, j)) for ids in prompts for j in range(req.n)]
        self.prompts.check_context(requests)
        # echo: each choice's text starts with its prompt's (the prompt as sent, or its ids'
        # text), as OpenAI's legacy completions and vLLM do
        echoed = ([t if isinstance(t, str) else self.tokenizer.decode(ids)
                   for t, ids in zip(texts, prompts, strict=True) for _ in range(req.n)]
                  if req.echo else None)
        reply = Reply.to(req, Kind(chat=False), self.model_name, "prompt", echoed)
        return await answer(request, self.engine, self.tokenizer, reply, requests, prompts)

    async def chat_completions(self, request: Request) -> Response:
        """/v1/chat/completions: the messages through the chat template, n answers."""
        req: ChatCompletionRequest = parse(ChatCompletionRequest, await self.body.read(request))
        self.check_model(req.model)
        check_fields(req)
        self.check_count(req.n)
        ids, thinking = await self.prompts.chat(req.messages, req.chat_template_kwargs,
                                                req.enable_thinking)
        requests = [(ids, sampling_params(req, self.prompts.context_left(ids), j))
                    for j in range(req.n)]
        self.prompts.check_context(requests)
        opened = prompt_opens_think(self.tokenizer.decode(ids[-4:]))
        kind = Kind(chat=True, thinking=thinking if self.reasoning_parser else None,
                    opened=opened)
        reply = Reply.to(req, kind, self.model_name, "messages")
        return await answer(request, self.engine, self.tokenizer, reply, requests, [ids])


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
    # The HTTP side's own tokenizer: it tokenises prompts and detokenises answers here, while
    # the engine thread only runs steps (and checks stop strings with its own).
    prompts = PromptReader(load_tokenizer(engine.llm.folder), engine.llm.max_model_len)
    routes = Routes(engine, model_name, prompts, BodyReader(max_body_bytes, body_timeout_s),
                    reasoning_parser)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            engine.stop()
            prompts.close()

    app = FastAPI(title="minimodel", summary="An OpenAI-compatible server around one LLM.",
                  lifespan=lifespan)
    answer_errors(app)
    app.state.engine = engine
    keyed = [Depends(ApiKey(api_key))]
    app.add_api_route("/health", routes.health, methods=["GET"])
    app.add_api_route("/metrics", routes.metrics_text, methods=["GET"])
    app.add_api_route("/tokenize", routes.tokenize, methods=["POST"], dependencies=keyed)
    app.add_api_route("/detokenize", routes.detokenize, methods=["POST"], dependencies=keyed)
    app.add_api_route("/v1/models", routes.models, methods=["GET"], dependencies=keyed)
    app.add_api_route("/v1/completions", routes.completions, methods=["POST"],
                      dependencies=keyed)
    app.add_api_route("/v1/chat/completions", routes.chat_completions, methods=["POST"],
                      dependencies=keyed)
    return app
