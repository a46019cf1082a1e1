"""The no-cache generation loop: every step runs the model over the whole sequence again."""

from __future__ import annotations

import torch
from torch import nn

from minimodel.sampling import Sampler, SamplingParams


@torch.no_grad()
def generate(
    model: nn.Module,
    input_ids: torch.Tensor,
    max_new_tokens: int = 32,
    eos_token_id: int | list[int] | None = None,
    sampling: SamplingParams | None = None,
    attention_mask: torch.Tensor | None = None,
) -> list[list[int]]:
    """Generate up to `max_new_tokens` per row; returns each row's new tokens, EOS included.

    input_ids: Long [B, T] (left-pad a ragged batch and pass attention_mask [B, T]).
    Each step recomputes logits for all T + t tokens and keeps only the last position: the
    cost of step t grows with the whole prefix, which is what the KV cache removes.
    `sampling=None` is greedy; `max_new_tokens=0` never calls the model.
    """
    sampling = sampling or SamplingParams(temperature=0.0)
    eos = set([eos_token_id] if isinstance(eos_token_id, int) else (eos_token_id or []))
    B = input_ids.shape[0]
    sampler = Sampler(input_ids.device)
    generators = [sampler.make_generator(sampling.seed) for _ in range(B)]
    ids = input_ids
    mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
    new: list[list[int]] = [[] for _ in range(B)]
    done = [False] * B
    for _ in range(max_new_tokens):
        logits = model(ids, attention_mask=mask)[:, -1, :]  # [B, V]: only the last position
        tokens, _ = sampler(logits, [sampling] * B, generators)
        for b in range(B):
            if not done[b]:
                new[b].append(int(tokens[b]))
                done[b] = int(tokens[b]) in eos
        if all(done):
            break
        ids = torch.cat([ids, tokens[:, None]], dim=1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
    return new
