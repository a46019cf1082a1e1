"""An OpenAI-compatible HTTP server around one LLM (chapter 11).

    python -m minimodel serve --model bard --port 8000

Routes: POST /v1/completions, POST /v1/chat/completions (both with `stream: true` as
server-sent events ending with `data: [DONE]`), GET /v1/models, GET /health.

Modules, one idea each:
    engine_loop.py  the engine thread: one LLM, continuous batching over every open request;
                    handlers send it adds and aborts and wait on their own queue
    protocol.py     OpenAI's request bodies and errors; their fields -> SamplingParams
    app.py          the FastAPI routes: read, check, hand on
    transport.py    bodies with a limit and a deadline, errors as JSON, the API key, event streams
    prompts.py      prompts and chat messages -> token ids, in a worker thread
    respond.py      submit one request's completions; collect them, or stream their events
    answers.py      OpenAI's shapes: choices, chunks, usage, log-probabilities
    server.py       serve() for the command line, Server for a background thread
"""

from minimodel.serve.app import create_app
from minimodel.serve.engine_loop import EngineLoop
from minimodel.serve.server import Server, serve

__all__ = ["EngineLoop", "Server", "create_app", "serve"]
