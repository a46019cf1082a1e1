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


def _config(llm: LLM, model_name: str, api_key: str | None, max_requests: int,
            log_level: str, **kw: Any) -> tuple[uvicorn.Config, EngineLoop]:
    engine = EngineLoop(llm, max_requests=max_requests)
    app = create_app(engine, model_name, api_key=api_key)
    # Streams that are still open at shutdown get 5 s, then they are cancelled (and aborted).
    config = uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5,
                            access_log=log_level in ("debug", "trace"), **kw)
    return config, engine


def serve(llm: LLM, model_name: str, host: str = "127.0.0.1", port: int = 8000,
          api_key: str | None = None, max_requests: int = 256, log_level: str = "info") -> None:
    """Serve until Ctrl-C (or SIGTERM): what `python -m minimodel serve` runs."""
    config, _ = _config(llm, model_name, api_key, max_requests, log_level, host=host, port=port)
    server = uvicorn.Server(config)
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

    `start()` returns once it accepts connections; `close()` fails the requests still open
    (503), stops the engine thread and the server thread and waits for both.
    """

    def __init__(self, llm: LLM, model_name: str | None = None, host: str = "127.0.0.1",
                 port: int = 0, api_key: str | None = None, max_requests: int = 256,
                 log_level: str = "warning") -> None:
        self.llm = llm
        self.model_name = model_name or llm.folder.name
        self.host = host
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((host, port))
        self.port = self._socket.getsockname()[1]
        config, self.engine = _config(llm, self.model_name, api_key, max_requests, log_level)
        self._server = uvicorn.Server(config)
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
