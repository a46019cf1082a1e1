"""minimodel: Qwen3 inference built step by step, from tokens to a paged-KV engine.

    import minimodel as mm
    path = mm.resolve_model("tiny")
    llm = mm.LLM(path)
    print(llm.generate(["Hello"], mm.SamplingParams(max_new_tokens=8))[0].text)
"""

from __future__ import annotations

from minimodel import reference
from minimodel.config import ConfigError, Qwen3Config
from minimodel.hub import resolve_model
from minimodel.sampling import SamplingParams
from minimodel.tokenizer import Tokenizer, load_tokenizer
from minimodel.weights import WeightsError

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
