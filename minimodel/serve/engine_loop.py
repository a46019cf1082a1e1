"""One engine, many clients: the LLM runs in its own thread; HTTP handlers talk to it by messages.

    HTTP handlers (asyncio)          engine thread (owns the LLM)
    ------------------------         --------------------------------------------
    job.submit(ids, params)  --->    inbox: llm.add_request(...)  (ValueError -> 400)
    job.cancel()             --->    inbox: llm.abort(rid)        (pages freed now)
                                     loop: llm.step() over every open request
    await job.updates()      <---    after each step: each request's new token ids

Only the engine thread touches the LLM, so the engine needs no locks. Handlers wait on their
own asyncio queue; the engine thread fills it with `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from minimodel.engine.llm import LLM, StepError
from minimodel.engine.outputs import RequestOutput
from minimodel.sampling import SamplingParams

if TYPE_CHECKING:
    from minimodel.serve.metrics import ServerMetrics

log = logging.getLogger("minimodel.serve")
_SERVED: weakref.WeakSet[LLM] = weakref.WeakSet()  # LLMs that an engine thread steps now


@dataclass
class Update:
    """What the engine thread tells a job after a step, about one of its requests."""

    index: int  # which of the job's requests (the choice index)
    token_ids: list[int]  # tokens generated since the previous update
    logprobs: list[float] | None  # their log-probabilities, with params.logprobs
    output: RequestOutput | None = None  # set on the last update of a finished request
    error: str | None = None  # set when the request failed: the engine or the server stopped
    status: int = 500  # the HTTP status of an error
    # per token, its top-N alternatives as (token id, log p), with params.logprobs = N
    top_logprobs: list[list[tuple[int, float]]] | None = None

    @property
    def final(self) -> bool:
        return self.output is not None or self.error is not None


class ServerBusy(Exception):
    """More requests than the server accepts at once (HTTP 429)."""


class EngineStopped(Exception):
    """The engine thread is not running, or the LLM can no longer run steps (HTTP 503)."""


class NeverAdmitted(ValueError):
    """More requests in one HTTP request than the server ever holds at once (HTTP 400)."""


class _Route:
    """Where the updates of one request go: a job's queue on an event loop."""

    def __init__(self, job: Job, index: int) -> None:
        self.job, self.index = job, index
        self.sent = 0  # generated tokens already posted

    def post(self, update: Update) -> None:
        try:
            self.job.loop.call_soon_threadsafe(self.job.queue.put_nowait, update)
        except RuntimeError:  # the event loop is closed: nobody is listening any more
            pass


class EngineLoop:
    """Runs `llm` in a thread; `job()` opens a group of requests for one HTTP request.

    max_requests: requests in the server at once (running and waiting); beyond it
    `Job.submit` raises ServerBusy, which the server answers with HTTP 429.
    """

    def __init__(self, llm: LLM, max_requests: int = 256) -> None:
        if not isinstance(max_requests, int) or max_requests < 1:
            raise ValueError(f"max_requests must be an integer >= 1, got {max_requests!r}.")
        self.llm = llm
        self.max_requests = max_requests
        self._inbox: queue.SimpleQueue[tuple] = queue.SimpleQueue()
        self._routes: dict[int, _Route] = {}  # engine thread only
        self._num_requests = 0  # requests admitted and not yet released (lock-protected)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopped = False  # stop() was called: no new requests
        self._closed = False  # the thread has left its loop: the inbox is read no more
        self.num_steps = 0  # engine steps run so far
        self.metrics: ServerMetrics | None = None  # set by the app: /metrics counts jobs here

    # --- life cycle (any thread) -------------------------------------------------------

    def start(self) -> None:
        """Start the engine thread (once); a RuntimeError if another one steps this LLM."""
        if self._thread is not None:
            return
        if self.llm in _SERVED:
            raise RuntimeError("This LLM is already served by another engine loop: one thread "
                               "at a time may step it. Close the other server first.")
        _SERVED.add(self.llm)
        self._thread = threading.Thread(target=self._run, name="minimodel-engine", daemon=True)
        self._thread.start()

    def begin_stop(self) -> None:
        """Take no new requests and fail the open ones with 503, without waiting: what a
        shutdown does first, so that every client gets its answer while connections last."""
        with self._lock:
            self._stopped = True
        if self._thread is not None:
            self._send(("stop",))

    def stop(self, timeout: float = 30.0) -> None:
        """Fail every open request with 503, end the thread and wait for it."""
        with self._lock:
            self._stopped = True
        if self._thread is not None:
            self._send(("stop",))
            self._thread.join(timeout)
            self._thread = None
            _SERVED.discard(self.llm)

    def abort(self, request_id: int) -> None:
        """Ask the engine thread to abort a request (thread-safe; a no-op once it finished)."""
        self._send(("abort", request_id))

    def _send(self, msg: tuple) -> None:
        """Post a message to the engine thread; an add raises EngineStopped once it is gone."""
        with self._lock:
            if self._closed:
                if msg[0] == "add":
                    raise EngineStopped("The server is shutting down.")
                return
            self._inbox.put(msg)

    @property
    def is_alive(self) -> bool:
        """The engine thread runs and takes requests (see `unavailable` for the LLM itself)."""
        return self._thread is not None and self._thread.is_alive() and not self._stopped

    @property
    def unavailable(self) -> str | None:
        """Why no request can be served now, or None: the server is stopping, the engine
        thread is gone, or the LLM is closed (a tensor-parallel worker died, for one)."""
        if self._stopped:
            return "The server is shutting down."
        if self._thread is None or not self._thread.is_alive():
            return "The engine thread is not running."
        closed = self.llm.runner.closed
        if closed:
            return f"The engine is closed ({closed}); restart the server."
        return None

    @property
    def num_requests(self) -> int:
        """Requests in the server now: admitted and not yet finished or cancelled."""
        return self._num_requests

    def stats(self) -> dict[str, int | float]:
        """A snapshot of the engine's queues, KV pool and prefix cache (read without stopping
        it): free_pages counts the cached pages no request holds (evictable_pages), which the
        pool lends again when it needs them."""
        sched, pool = self.llm.scheduler, self.llm.allocator
        prefix = self.llm.prefix_cache_stats()
        return {"requests": self._num_requests, "running": len(sched.running),
                "waiting": len(sched.waiting), "free_pages": pool.num_free,
                "num_pages": pool.num_pages, "steps": self.num_steps,
                "cached_pages": prefix["cached_pages"],
                "evictable_pages": prefix["evictable_pages"],
                "prefix_cache_hit_rate": prefix["hit_rate"]}

    def job(self) -> Job:
        """A group of requests answered together (the choices of one HTTP request)."""
        return Job(self, asyncio.get_running_loop())

    # --- admission (event-loop side) ----------------------------------------------------

    def check_count(self, n: int) -> None:
        """NeverAdmitted if n requests could never be in the server at once."""
        if n > self.max_requests:
            raise NeverAdmitted(
                f"This request asks for {n} completions (prompts x n), but the server holds "
                f"at most {self.max_requests} at once (--max-requests); send fewer prompts or "
                "a smaller n.")

    def _admit(self, n: int) -> None:
        self.check_count(n)
        reason = self.unavailable
        with self._lock:
            if self._stopped or reason:
                raise EngineStopped(reason or "The server is shutting down.")
            if self._num_requests + n > self.max_requests:
                raise ServerBusy(f"The server holds {self._num_requests} requests, its limit is "
                                 f"{self.max_requests}; retry later.")
            self._num_requests += n

    def _release(self, n: int) -> None:
        with self._lock:
            self._num_requests -= n

    # --- the engine thread ---------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                try:
                    if not self._handle_inbox(block=not self._routes):
                        break
                    if self._routes:
                        self._step()
                except Exception as err:  # a fault of this loop must not end the server
                    log.exception("engine loop failed")
                    self._fail(list(self._routes), err)
        finally:
            with self._lock:
                self._closed = True
            stopping = "The server is shutting down."
            for rid, route in list(self._routes.items()):
                self.llm.abort(rid)
                route.post(Update(route.index, [], None, error=stopping, status=503))
            self._routes.clear()
            while not self._inbox.empty():  # adds that came in after the last read
                msg = self._inbox.get()
                if msg[0] == "add":
                    self._resolve(msg[3], msg[4], EngineStopped(stopping))

    def _handle_inbox(self, block: bool) -> bool:
        """Apply what the handlers sent (adds, aborts); False when told to stop."""
        while True:
            try:
                msg = self._inbox.get(block=block)
            except queue.Empty:
                return True
            block = False
            if msg[0] == "stop":
                return False
            if msg[0] == "add":
                self._add(*msg[1:])
            elif msg[0] == "abort" and self._routes.pop(msg[1], None) is not None:
                self.llm.abort(msg[1])

    def _add(self, prompt: list[int], params: SamplingParams, route: _Route,
             future: asyncio.Future) -> None:
        try:
            rid = self.llm.add_request(prompt, params)
        except Exception as err:  # ValueError: a bad request (400); anything else: 500
            self._resolve(route, future, err)
            return
        self._routes[rid] = route
        self._resolve(route, future, rid)

    def _resolve(self, route: _Route, future: asyncio.Future, result: int | Exception) -> None:
        """Hand the request id (or the error) to the waiting handler, on its event loop."""
        def settle() -> None:
            if future.done():  # the handler stopped waiting: nobody wants this request
                if isinstance(result, int):
                    self.abort(result)
            elif isinstance(result, Exception):
                future.set_exception(result)
            else:
                future.set_result(result)

        try:
            route.job.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the handler's event loop is gone
            if isinstance(result, int):
                self.abort(result)

    def _step(self) -> None:
        self.num_steps += 1
        try:
            finished = self.llm.step()
        except StepError as err:  # the server outlives a failed step; so do other requests
            log.exception("engine step failed")
            self._fail([r for r in err.request_ids if r in self._routes], err.__cause__ or err)
            return
        done = {o.request_id: o for o in finished}
        for rid, route in list(self._routes.items()):
            out = done.get(rid)
            if out is not None:
                wanted = out.logprobs is not None
                route.post(Update(
                    route.index, out.token_ids[route.sent:],
                    out.logprobs[route.sent:] if wanted else None, output=out,
                    top_logprobs=out.top_logprobs[route.sent:] if wanted else None))
                del self._routes[rid]
                continue
            seq = self.llm.get_request(rid)
            if seq is not None and seq.num_output_tokens > route.sent:
                wanted = seq.params.num_logprobs is not None
                route.post(Update(
                    route.index, seq.output_token_ids[route.sent:],
                    seq.logprobs[route.sent:] if wanted else None,
                    top_logprobs=seq.top_logprobs[route.sent:] if wanted else None))
                route.sent = seq.num_output_tokens

    def _fail(self, request_ids: list[int], err: Exception) -> None:
        """Abort these requests and tell their handlers: HTTP 500, or an error event; 503 if
        the engine can serve no more (a closed tensor-parallel LLM)."""
        closed = self.llm.runner.closed
        status = 503 if closed else 500
        for rid in request_ids:
            self.llm.abort(rid)
            route = self._routes.pop(rid)
            route.post(Update(route.index, [], None, status=status,
                              error=f"The engine failed on this request: {err!r}"))


class Job:
    """The requests of one HTTP request: submit them, read their updates, cancel them."""

    def __init__(self, engine: EngineLoop, loop: asyncio.AbstractEventLoop) -> None:
        self.engine, self.loop = engine, loop
        self.queue: asyncio.Queue[Update] = asyncio.Queue()
        self.request_ids: list[int] = []
        self._open: set[int] = set()  # indexes of requests without a final update
        self._admitted = 0

    async def submit(self, requests: list[tuple[list[int], SamplingParams]]) -> None:
        """Queue every request, or none: a ValueError (a request the engine rejects) cancels
        the ones already queued. ServerBusy / EngineStopped when the server cannot take them."""
        self.engine._admit(len(requests))
        self._admitted = len(requests)
        try:
            for index, (prompt, params) in enumerate(requests):
                future = self.loop.create_future()
                self.engine._send(("add", prompt, params, _Route(self, index), future))
                self.request_ids.append(await future)
                self._open.add(index)
                if self.engine.metrics is not None:
                    self.engine.metrics.prompt(len(prompt))
        except BaseException:
            self.cancel()
            raise

    async def updates(self) -> AsyncIterator[Update]:
        """Every update of every request, until each one has had its final update."""
        metrics = self.engine.metrics
        while self._open:
            update = await self.queue.get()
            if update.final:
                self._open.discard(update.index)
            if metrics is not None:
                metrics.generated(len(update.token_ids))
                if update.output is not None:
                    metrics.finished(update.output)
            yield update
        self.cancel()  # nothing left to abort; releases the admission

    def cancel(self) -> None:
        """Abort what is still running (its pages are freed before the next step) and give
        the admission back. Safe to call more than once, from the event loop."""
        for index in self._open:
            self.engine.abort(self.request_ids[index])
        if self.engine.metrics is not None:
            self.engine.metrics.aborted(len(self._open))
        self._open.clear()
        if self._admitted:
            self.engine._release(self._admitted)
            self._admitted = 0
