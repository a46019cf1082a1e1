"""Answers the checks compare with, written apart from the package on purpose: a bug in the
package must not pass its own check. Helpers more than one chapter's grader needs live here
once."""

from __future__ import annotations

import torch


def bottom_right(q_len: int, kv_len: int) -> torch.Tensor:
    """Bool [Q, K]: new token j (the (K-Q+j)-th of the sequence) sees keys 0..K-Q+j."""
    return torch.arange(kv_len)[None, :] <= (kv_len - q_len + torch.arange(q_len))[:, None]
