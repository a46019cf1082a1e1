"""minimodel: Qwen3 inference built step by step, from tokens to a paged-KV engine.

    import minimodel as mm
    path = mm.resolve_model("tiny")
    llm = mm.LLM(path)
    print(llm.generate(["Hello"], mm.SamplingParams(max_new_tokens=8))[0].text)
"""

from __future__ import annotations

import logging

# torchao logs, when it is imported (by the engine's quantization, or by transformers when it
# loads a checkpoint), the GPU-only extensions it cannot load on a CPU machine, and torch logs a
# deprecation from torchao's pytree set-up: nothing this package uses. Errors only, unless the
# program chose these loggers' levels itself.
for _name in ("torchao", "torch.utils._pytree"):
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.ERROR)

from minimodel import reference  # noqa: E402
from minimodel.config import ConfigError, Qwen3Config  # noqa: E402
from minimodel.hub import resolve_model  # noqa: E402
from minimodel.sampling import SamplingParams  # noqa: E402
from minimodel.tokenizer import Tokenizer, load_tokenizer  # noqa: E402
from minimodel.weights import WeightsError  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "Qwen3Config",
    "SamplingParams",
    "Tokenizer",
    "WeightsError",
    "load_tokenizer",
    "reference",
    "resolve_model",
]


def __getattr__(name: str):
    # The engine pulls in more machinery; import it only when it is asked for.
    if name in ("LLM", "RequestOutput"):
        from minimodel import engine

        return getattr(engine, name)
    if name == "grading":
        import importlib

        return importlib.import_module("minimodel.grading")
    raise AttributeError(f"module 'minimodel' has no attribute {name!r}")
