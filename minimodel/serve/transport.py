"""HTTP plumbing the routes share: errors answered as OpenAI's JSON from inside the route, a
body read with a size limit and a deadline, the API key, event streams that cancel their job
however they end, and waiting for a result while watching for the client to go.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from sse_starlette import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Receive, Scope, Send

from minimodel.serve.engine_loop import Job
from minimodel.serve.protocol import APIError

log = logging.getLogger("minimodel.serve")
T = TypeVar("T")

MAX_BODY_BYTES = 32 << 20  # a larger body is refused (413) before it is read
BODY_TIMEOUT_S = 30.0  # a body must arrive within this (408)
SHUTDOWN_GRACE_S = 5.0  # open streams get this long to send their last events at shutdown


def server_error(err: Exception) -> JSONResponse:
    """A 500 with OpenAI's error body, the exception logged with its traceback."""
    log.error("request failed", exc_info=err)
    return JSONResponse(APIError(500, f"Internal error: {err!r}", "server_error").body(),
                        status_code=500)


class AnswerErrors(APIRoute):
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
                return server_error(err)

        return answer


def answer_errors(app: FastAPI) -> None:
    """Every error of `app` answered as OpenAI's JSON body; routes added after this answer
    their own unexpected exceptions (AnswerErrors)."""
    app.router.route_class = AnswerErrors

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
    async def unexpected(request: Request, err: Exception) -> JSONResponse:
        # Only what fails outside a route gets here (routes answer their own, AnswerErrors).
        return server_error(err)


class BodyReader:
    """Reads a request's body: at most max_bytes of it (413), within timeout_s (408), so that
    a client that sends headers and then nothing holds no handler."""

    def __init__(self, max_bytes: int = MAX_BODY_BYTES,
                 timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def read(self, request: Request) -> bytes:
        too_large = APIError(413, f"The request body is larger than {self.max_bytes} bytes, "
                             "the most this server reads; send a shorter prompt.",
                             code="request_too_large")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            raise too_large
        chunks: list[bytes] = []
        size = 0

        async def read() -> None:
            nonlocal size
            async for chunk in request.stream():
                size += len(chunk)
                if size > self.max_bytes:
                    raise too_large
                chunks.append(chunk)

        try:
            await asyncio.wait_for(read(), self.timeout_s)
        except asyncio.TimeoutError:
            raise APIError(408, f"The request body did not arrive within {self.timeout_s:g} s "
                           f"({size} bytes came); send it whole.", code="request_timeout") from None
        return b"".join(chunks)


class ApiKey:
    """A route dependency: a request without `Authorization: Bearer <key>` is a 401 (no key
    set: every request passes)."""

    def __init__(self, key: str | None) -> None:
        self.key = key

    async def __call__(self, request: Request) -> None:
        if self.key is None:
            return
        given = request.headers.get("authorization", "")
        if not secrets.compare_digest(given.encode(), f"Bearer {self.key}".encode()):
            raise APIError(401, "Missing or wrong API key: send the header "
                           "'Authorization: Bearer <key>'.", code="invalid_api_key")


class EventStream(EventSourceResponse):
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


async def unless_disconnected(request: Request, work: Awaitable[T]) -> T | None:
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
