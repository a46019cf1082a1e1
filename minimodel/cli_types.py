"""Argument types of the command line (`python -m minimodel ...` and `... bench`).

Each one turns a string into a value or raises argparse.ArgumentTypeError with what was wrong,
so that a bad argument is one line of usage error (exit 2) before any model is loaded.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable


def int_at_least(low: int) -> Callable[[str], int]:
    """An integer >= low."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


positive_int = int_at_least(1)


def int64(text: str) -> int:
    """Any integer that fits 64 bits (a seed: negative ones too, as vLLM takes)."""
    value = int_at_least(-(2**63))(text)
    if value > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"must fit in 64 bits (at most 2**63 - 1), got {value}")
    return value


def port(text: str) -> int:
    """A TCP port, 0..65535 (0: any free port)."""
    value = int_at_least(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"a port is 0..65535, got {value}")
    return value


def device(text: str) -> str:
    """'cpu', 'cuda' or 'cuda:N', and a CUDA device only when torch sees one."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cpu, cuda or cuda:N")
    if text.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(
                f"{text!r}: no CUDA device is visible (torch.cuda.is_available() is False); "
                "use --device cpu")
        count, index = torch.cuda.device_count(), int(text.partition(":")[2] or 0)
        if index >= count:
            raise argparse.ArgumentTypeError(
                f"{text!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    return text


def device_kind(text: str) -> str:
    """'cpu' or 'cuda' (the first GPU), checked as `device` checks it: for the benchmark."""
    if text not in ("cpu", "cuda"):
        raise argparse.ArgumentTypeError(f"{text!r}: the benchmark runs on cpu or cuda")
    return device(text)


def names(valid: tuple[str, ...], upper: bool = False) -> Callable[[str], str]:
    """A comma-separated list of names, each one of `valid` (given back comma-separated)."""

    def parse(text: str) -> str:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if upper:
            items = [item.upper() for item in items]
        unknown = [item for item in items if item not in valid]
        if not items or unknown:
            raise argparse.ArgumentTypeError(
                f"{text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; choose "
                f"from {','.join(valid)} (comma-separated)")
        return ",".join(items)

    parse.__name__ = "list"
    return parse
