"""What several of chapter 04's checks share: the half-precision dtypes they try, the tolerance
of each dtype, and how a dtype is written in a message."""

from __future__ import annotations

import torch

_HALF = (torch.bfloat16, torch.float16)
_TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _name(dtype: torch.dtype) -> str:
    """"bfloat16" for torch.bfloat16."""
    return str(dtype).replace("torch.", "")
