"""The real server some of chapter 11's checks run against, and how they talk to it.

`served` starts the server of minimodel.serve on the tiny model (real tokenizer, random weights),
127.0.0.1 and a free port: one server for each check that needs one, closed when it is done.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator

import httpx

from minimodel.grading.core import expect
from minimodel.grading.i18n import tr


@functools.lru_cache(maxsize=1)
def _tiny_llm():
    """The tiny model's engine, built once per process and shared by every server."""
    from minimodel.engine.llm import LLM

    return LLM("tiny", device="cpu", num_pages=512, max_num_seqs=32)


@contextlib.contextmanager
def served() -> Iterator[object]:
    """A server of the tiny model (real tokenizer, random weights) on 127.0.0.1 and a free
    port, for one check; closed when the check is done, so that nothing is left running."""
    from minimodel.serve import Server

    with Server(_tiny_llm(), model_name="tiny") as server:
        yield server


def _on_server(check: Callable) -> Callable[[Callable], str]:
    """A check that runs against its own server: check(fn, server)."""

    @functools.wraps(check)
    def run(fn: Callable) -> str:
        with served() as server:
            return check(fn, server)

    return run


def _post_stream(server, path: str, body: dict) -> list[bytes]:
    """The raw bytes of a streamed answer of `server`, in the chunks httpx gave."""
    body = {"model": server.model_name, "stream": True, **body}
    with httpx.stream("POST", server.url + path, json=body, timeout=120) as response:
        expect(response.status_code == 200,
               tr("the server answered {status}", status=response.status_code))
        return list(response.iter_raw())


def _post(server, path: str, body: dict) -> dict:
    """The JSON answer of `server` to a request that is not streamed."""
    r = httpx.post(server.url + path, json={"model": server.model_name, **body}, timeout=120)
    expect(r.status_code == 200, tr("the server answered {status}: {text}", status=r.status_code,
                                    text=r.text[:200]))
    return r.json()


def _live_events(response: httpx.Response) -> Iterator[dict]:
    """The events of a live response, each handed out as soon as it has come."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            if line == "data: [DONE]":
                return
            yield json.loads(line[len("data: "):])
