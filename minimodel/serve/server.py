"""Running the app: `serve()` for the command line, `Server` for a background thread.

    with Server(mm.LLM("bard")) as server:       # tests and notebooks
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
"""

from __future__ import annotations

import signal
import socket
import threading
import time
from typing import Any

import uvicorn

from minimodel.engine.llm import LLM
from minimodel.serve.app import create_app
from minimodel.serve.engine_loop import EngineLoop
from minimodel.serve.transport import BODY_TIMEOUT_S, MAX_BODY_BYTES, SHUTDOWN_GRACE_S


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, which tells the engine first when a shutdown begins (SIGINT,
    SIGTERM): every open request is answered with a 503 (a stream: an error event and
    [DONE]) while its connection is still there, instead of being cut off."""

    def __init__(self, config: uvicorn.Config, engine: EngineLoop) -> None:
        super().__init__(config)
        self.engine = engine

    def handle_exit(self, sig: int, frame: Any) -> None:
        self.engine.begin_stop()
        super().handle_exit(sig, frame)


def default_model_name(llm: LLM) -> str:
    """The name a server of `llm` answers to by default: the repo id of a Hugging Face
    snapshot (models--Qwen--Qwen3-0.6B/snapshots/<hash> -> Qwen/Qwen3-0.6B), else the folder's
    name ("bard", "tiny")."""
    folder = llm.folder
    repo = folder.parent.parent.name
    if folder.parent.name == "snapshots" and repo.startswith("models--"):
        return repo.removeprefix("models--").replace("--", "/")
    return folder.name


def _server(llm: LLM, model_name: str, api_key: str | None, max_requests: int,
            log_level: str, max_body_bytes: int, body_timeout_s: float,
            reasoning_parser: str | None = None, **kw: Any) -> _Uvicorn:
    engine = EngineLoop(llm, max_requests=max_requests)
    app = create_app(engine, model_name, api_key=api_key, max_body_bytes=max_body_bytes,
                     body_timeout_s=body_timeout_s, reasoning_parser=reasoning_parser)
    # Open streams get SHUTDOWN_GRACE_S to send their last events; uvicorn waits a little
    # longer for every handler before it cancels what is left.
    config = uvicorn.Config(app, log_level=log_level,
                            timeout_graceful_shutdown=int(SHUTDOWN_GRACE_S) + 5,
                            access_log=log_level in ("debug", "trace"), **kw)
    return _Uvicorn(config, engine)


def serve(llm: LLM, model_name: str, host: str = "127.0.0.1", port: int = 8000,
          api_key: str | None = None, max_requests: int = 256, log_level: str = "info",
          max_body_bytes: int = MAX_BODY_BYTES, body_timeout_s: float = BODY_TIMEOUT_S,
          reasoning_parser: str | None = None) -> None:
    """Serve until Ctrl-C (or SIGTERM): what `python -m minimodel serve` runs."""
    server = _server(llm, model_name, api_key, max_requests, log_level, max_body_bytes,
                     body_timeout_s, reasoning_parser, host=host, port=port)
    if threading.current_thread() is not threading.main_thread():
        server.run()
        return
    # uvicorn shuts down cleanly on SIGINT/SIGTERM, then raises the same signal again for the
    # handler it found; with these no-op handlers, a clean shutdown ends the process with 0.
    quiet = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for sig, handler in quiet.items():
            signal.signal(sig, handler)


class Server:
    """The server in a background thread of this process, on a free port by default.

    model_name: what clients send as `model` (default: the model's name, see
    default_model_name). reasoning_parser: "qwen3" splits Qwen3's thinking into
    reasoning_content (vLLM's --reasoning-parser qwen3); None leaves it in content.
    `start()` returns once it accepts connections; `close()` fails the requests still open
    (503), stops the engine thread and the server thread and waits for both.
    """

    def __init__(self, llm: LLM, model_name: str | None = None, host: str = "127.0.0.1",
                 port: int = 0, api_key: str | None = None, max_requests: int = 256,
                 log_level: str = "warning", max_body_bytes: int = MAX_BODY_BYTES,
                 body_timeout_s: float = BODY_TIMEOUT_S,
                 reasoning_parser: str | None = None) -> None:
        self.llm = llm
        self.model_name = model_name or default_model_name(llm)
        self.host = host
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port = self._socket.getsockname()[1]
        try:
            self._server = _server(llm, self.model_name, api_key, max_requests, log_level,
                                   max_body_bytes, body_timeout_s, reasoning_parser)
        except BaseException:
            self._socket.close()
            raise
        self.engine = self._server.engine
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 60.0) -> Server:
        try:  # here, so that an LLM served twice is an error in the caller's thread
            self.engine.start()
        except RuntimeError:
            self._socket.close()
            raise
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="minimodel-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("The server did not start; see the log above.")
            time.sleep(0.01)
        return self

    def close(self) -> None:
        self.engine.stop()  # open requests end now (503), so no connection keeps it waiting
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
        self._socket.close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
