"""Checks of ch03.is_causal: the learner's test must say True for causal sequence functions and
False for leaky ones, from clear leaks (no mask) to subtle ones (1e-3 in size, one channel).

Shapes: B batch, T tokens, C channels; a sequence function maps [B, T, C] to [B, T, C].
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.ch03.common import _tril
from minimodel.grading.core import CheckFailed, exercise
from minimodel.grading.i18n import Text, join, tr

SeqFn = Callable[[torch.Tensor], torch.Tensor]  # [B, T, C] -> [B, T, C]
# The functions below are named the way a message quotes them (in quotes, as repr writes a
# string), so that the Chinese table quotes them its own way.


def _weights(C: int, gen: torch.Generator, n: int = 3) -> list[torch.Tensor]:
    """`n` random [C, C] projections from `gen`."""
    return [torch.randn(C, C, generator=gen) / math.sqrt(C) for _ in range(n)]


def _masked_attention(
    C: int, gen: torch.Generator, allowed: Callable[[int], torch.Tensor | None]
) -> SeqFn:
    """Single-head self-attention with random projections and the mask allowed(T): [T, T]."""
    wq, wk, wv = _weights(C, gen)

    def fn(x: torch.Tensor) -> torch.Tensor:
        q, k, v = (x @ w.to(x.dtype) for w in (wq, wk, wv))  # [B, T, C]
        scores = q @ k.transpose(-1, -2) / math.sqrt(C)  # [B, T, T]
        mask = allowed(x.shape[1])
        if mask is not None:
            scores = scores.masked_fill(~mask.to(x.device), float("-inf"))
        return scores.softmax(-1) @ v

    return fn


def _chunked(T: int, size: int = 4) -> torch.Tensor:
    """Bidirectional inside blocks of `size` tokens, causal between blocks."""
    block = torch.arange(T) // size
    return block[:, None] >= block[None, :]


def _shift(x: torch.Tensor, by: int) -> torch.Tensor:
    """out[:, t] = x[:, t - by] (zeros where that falls outside): by > 0 reads the past."""
    out = torch.zeros_like(x)
    T = x.shape[1]
    if abs(by) >= T:
        return out
    if by > 0:
        out[:, by:] = x[:, :-by]
    else:
        out[:, :by] = x[:, -by:]
    return out


def _causal_functions(C: int) -> list[tuple[Text, SeqFn]]:
    """(name, function) of sequence functions that never read a later position."""
    gen = torch.Generator().manual_seed(1234)
    w1, w2 = torch.randn(C, 2 * C, generator=gen), torch.randn(2 * C, C, generator=gen)
    conv = torch.randn(C, 1, 3, generator=gen)
    attn = _masked_attention(C, gen, _tril)

    def mlp(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x @ w1.to(x.dtype)) @ w2.to(x.dtype) / C

    def cummean(x: torch.Tensor) -> torch.Tensor:
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)
        return x.cumsum(1) / n[:, None]

    def causal_conv(x: torch.Tensor) -> torch.Tensor:
        padded = F.pad(x.transpose(1, 2), (2, 0))  # [B, C, T + 2], zeros on the left only
        return F.conv1d(padded, conv.to(x.dtype), groups=C).transpose(1, 2)

    def ema(x: torch.Tensor) -> torch.Tensor:
        outs, state = [], torch.zeros_like(x[:, 0])
        for t in range(x.shape[1]):
            state = 0.7 * state + 0.3 * x[:, t]
            outs.append(state)
        return torch.stack(outs, 1)

    def block(x: torch.Tensor) -> torch.Tensor:
        h = x + attn(F.layer_norm(x, (C,)))
        return h + mlp(F.layer_norm(h, (C,)))

    return [
        (tr("'identity'"), lambda x: x.clone()),
        (tr("'a position-wise MLP'"), mlp),
        (tr("'cumulative mean over positions 0..t'"), cummean),
        (tr("'cumulative max over positions 0..t'"), lambda x: x.cummax(1).values),
        (tr("'shift right (position t outputs input t-1)'"), lambda x: _shift(x, 1)),
        (tr("'causal attention'"), attn),
        (tr("'a causal convolution over t-2, t-1, t'"), causal_conv),
        (tr("'an exponential moving average'"), ema),
        (tr("'a pre-norm block: causal attention + MLP with residuals'"), block),
        (tr("'causal attention whose outputs are tiny (1e-3 scale)'"), lambda x: 1e-3 * attn(x)),
    ]


def _leaky_functions(C: int) -> dict[str, list[tuple[Text, SeqFn]]]:
    """(name, function) of sequence functions that read a later position, by how hard the
    leak is to find: clear, local, subtle."""
    gen = torch.Generator().manual_seed(4321)
    full = _masked_attention(C, gen, lambda T: None)
    off_by_one = _masked_attention(C, gen, lambda T: _tril(T, 1))
    transposed = _masked_attention(C, gen, lambda T: _tril(T).T)
    chunked = _masked_attention(C, gen, _chunked)
    base = _masked_attention(C, gen, _tril)  # causal; the leaks below are added to it

    def leak_first(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        if x.shape[1] > 1:
            out[:, 0] = out[:, 0] + x[:, 1]
        return out

    def leak_last(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        out[:, :-1] = out[:, :-1] + x[:, -1:]
        return out

    def leak_second_last(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        if x.shape[1] > 1:
            out[:, -2] = out[:, -2] + x[:, -1]
        return out

    def leak_two_ahead(x: torch.Tensor) -> torch.Tensor:
        return base(x) + 0.5 * _shift(x, -2)

    def leak_tiny(x: torch.Tensor) -> torch.Tensor:
        return base(x) + 1e-3 * _shift(x, -1)

    def leak_one_channel(x: torch.Tensor) -> torch.Tensor:
        out = base(x)
        nxt = _shift(x, -1)
        out[..., 0] = out[..., 0] + nxt[..., C - 1]
        return out

    def leak_relu(x: torch.Tensor) -> torch.Tensor:
        return base(x) + 0.5 * F.relu(_shift(x, -1))

    def sequence_norm(x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(dim=1, keepdim=True)

    return {
        "clear": [
            (tr("'attention without a mask'"), full),
            (tr("'reversed cumulative sum (position t sums inputs t..T-1)'"),
             lambda x: x.flip(1).cumsum(1).flip(1)),
            (tr("'shift left (position t outputs input t+1)'"), lambda x: _shift(x, -1)),
            (tr("'attention with the causal mask transposed'"), transposed),
            (tr("'attention whose mask is off by one (reads token t+1)'"), off_by_one),
        ],
        "local": [
            (tr("'causal attention, except position 0 also reads input 1'"), leak_first),
            (tr("'causal attention, except every position also reads the last input'"),
             leak_last),
            (tr("'causal attention, except position T-2 also reads input T-1'"),
             leak_second_last),
            (tr("'causal attention plus the input two positions ahead'"), leak_two_ahead),
            (tr("'attention that is bidirectional inside blocks of 4 tokens'"), chunked),
        ],
        "subtle": [
            (tr("'causal attention plus 1e-3 times the next input'"), leak_tiny),
            (tr("\"causal attention plus the next input's last channel, into channel 0\""),
             leak_one_channel),
            (tr("'causal attention plus relu(next input)'"), leak_relu),
            (tr("'subtracting the mean over the whole sequence'"), sequence_norm),
        ],
    }


def _verdict(fn: Callable, candidate: SeqFn, C: int, name: Text) -> bool:
    """The learner's is_causal(candidate, C) as a bool; fails unless it is one."""
    result = fn(candidate, C)
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        result = result.item()
    if type(result).__name__ == "bool_":  # numpy.bool_
        result = bool(result)
    if not isinstance(result, bool):
        raise CheckFailed(tr(
            "is_causal should return True or False, got {type} {result!r} for {name}.",
            type=type(result).__name__, result=result, name=name))
    return result


def _judge(fn: Callable, cases: list[tuple[Text, SeqFn]], C: int, want: bool) -> None:
    """is_causal must say `want` for every function of `cases`; the failure lists the others."""
    wrong = [name for name, f in cases if _verdict(fn, f, C, name) != want]
    if not wrong:
        return
    named = join(tr("; "), wrong)
    if want:
        raise CheckFailed(tr(
            "is_causal said False for {n} causal function(s): {named}. These never read a later "
            "position; does your test compare with a tolerance that float noise can beat, or "
            "change earlier positions too?", n=len(wrong), named=named))
    raise CheckFailed(tr(
        "is_causal said True for {n} leaky function(s): {named}. Each lets some output read a "
        "later input: change the inputs after every position t (not only one), and compare "
        "outputs before t exactly (or with a tolerance far below 1e-3).", n=len(wrong),
        named=named))


@exercise("ch03.is_causal", "says True for 10 causal functions (masked attention, means, ...)")
def _causal_ok(fn: Callable) -> None:
    for C in (8, 12):
        _judge(fn, _causal_functions(C), C, want=True)


@exercise("ch03.is_causal", "says False for clear leaks (no mask, transposed or off-by-one mask)")
def _leak_clear(fn: Callable) -> None:
    for C in (8, 12):
        _judge(fn, _leaky_functions(C)["clear"], C, want=False)


@exercise("ch03.is_causal", "says False for leaks at one place (first, last, second-last, ...)")
def _leak_local(fn: Callable) -> None:
    for C in (8, 12):
        _judge(fn, _leaky_functions(C)["local"], C, want=False)


@exercise("ch03.is_causal", "says False for subtle leaks (1e-3 in size, one channel, relu)")
def _leak_subtle(fn: Callable) -> None:
    for C in (8, 12):
        _judge(fn, _leaky_functions(C)["subtle"], C, want=False)
