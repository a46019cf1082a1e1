"""Checks of ch06.generate, the greedy loop without a cache: one model call per new token on
the whole sequence so far, the argmax of the last position, a stop right after EOS.

The model is a fake (FakeModel): a deterministic function from a prefix to the next token,
dressed up as `forward_all(ids [1, T]) -> logits [1, T, V]`, that keeps every call it gets.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.grading.ch06.common import _expect_token_list
from minimodel.grading.common import clip, first_difference
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import tr


class FakeModel:
    """A stand-in for a model: `forward_all(ids [1, T]) -> logits [1, T, V]`, float32.

    The token after a prefix is a hash of the whole prefix (every id and its position), so a
    loop that shows the model anything but the whole sequence gets other tokens. Each position
    predicts its own next token, so reading the wrong position shows too. Every call is kept.
    """

    def __init__(self, vocab_size: int, salt: int, offset: int = 0) -> None:
        self.V = vocab_size
        self.salt = salt
        self.offset = offset  # shifts every prediction: lets a check choose the first token
        self.calls: list[list[int]] = []

    def hash(self, prefix: list[int]) -> int:
        """A hash of every id of `prefix` and its position, salted."""
        h = self.salt
        for i, t in enumerate(prefix):
            h = (h * 1_000_003 + t * 7919 + i) % (2**61 - 1)
        return h

    def next_token(self, prefix: list[int]) -> int:
        """The token the model predicts after `prefix` (the argmax of its logits)."""
        return (self.hash(prefix) + self.offset) % self.V

    def __call__(self, ids: object) -> torch.Tensor:
        """forward_all: logits [1, T, V] whose argmax at each position is next_token of the prefix
        up to it; ids must be Long [1, T]."""
        if not isinstance(ids, torch.Tensor):
            raise CheckFailed(tr("forward_all was called with a {kind}; it takes a LongTensor of "
                                 "ids [1, T]", kind=type(ids).__name__))
        if ids.dim() != 2 or ids.shape[0] != 1:
            raise CheckFailed(tr("forward_all was called with shape {shape}; it takes ids [1, T] "
                                 "(one sequence: keep the batch dimension)",
                                 shape=tuple(ids.shape)))
        if ids.dtype != torch.long:
            raise CheckFailed(tr("forward_all was called with {dtype} ids; token ids are "
                                 "torch.long", dtype=ids.dtype))
        seq = [int(t) for t in ids[0]]
        self.calls.append(seq)
        T = len(seq)
        gen = torch.Generator().manual_seed(self.salt * 131 + T)
        logits = torch.rand(1, T, self.V, generator=gen)  # [1, T, V], values in [0, 1)
        for t in range(T):
            logits[0, t, self.next_token(seq[: t + 1])] += 2.0  # a clear argmax per position
        return logits

    def greedy(self, prompt: list[int], max_new_tokens: int, eos_id: int | None) -> list[int]:
        """What a correct loop returns."""
        seq, out = list(prompt), []
        for _ in range(max_new_tokens):
            token = self.next_token(seq)
            out.append(token)
            seq.append(token)
            if token == eos_id:
                break
        return out


def _case(V: int, T: int) -> tuple[FakeModel, list[int]]:
    """A fake model with a random salt, and a random prompt of T ids."""
    salt = int(torch.randint(1, 2**30, ()))
    return FakeModel(V, salt), torch.randint(0, V, (T,)).tolist()


def _run(fn: Callable, model: FakeModel, prompt: list[int], n: int,
         eos_id: int | None) -> list[int]:
    """fn(model, prompt [1, T], n, eos_id), checked to be a list of ints; the model's calls
    are those of this run only."""
    tokens = torch.tensor([prompt], dtype=torch.long)  # [1, T]
    model.calls.clear()
    out = fn(model, tokens.clone(), n, eos_id)
    what = tr("generate(prompt of {T} tokens, max_new_tokens={n}, eos_id={eos_id})",
              T=len(prompt), n=n, eos_id=eos_id)
    return _expect_token_list(out, what, tr("a list of ints"), tr(" (use int(token))"))


# (V, prompt length, max_new_tokens)
GEN_CASES = [(50, 1, 1), (100, 4, 6), (1000, 7, 12), (151936, 3, 5), (20, 9, 15)]


@exercise("ch06.generate", "returns max_new_tokens new token ids (a list of ints) without EOS")
def _gen_length(fn: Callable) -> None:
    for V, T, n in GEN_CASES:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, n, None)
        if len(out) == T + n and out[:T] == prompt:
            raise CheckFailed(tr("generate returned the prompt too; return only the new tokens"))
        expect(len(out) == n, tr("with max_new_tokens={n} and no EOS, generate should return {n} "
                                 "tokens, got {got}", n=n, got=len(out)))


@exercise("ch06.generate", "each new token is the argmax of the last position's logits")
def _gen_greedy(fn: Callable) -> None:
    for V, T, n in GEN_CASES:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, n, None)
        want = model.greedy(prompt, n, None)
        if out != want:
            k = first_difference(out, want)
            raise CheckFailed(tr(
                "with a prompt of {T} tokens (V={V}), the greedy tokens are {want}, got {got} "
                "(first difference at new token {k}): the next token is the argmax, over the "
                "vocabulary, of the logits at the last position (the only position that has read "
                "the whole sequence)", T=T, V=V, want=clip(want), got=clip(out), k=k))


@exercise("ch06.generate", "every call shows the model the whole sequence so far")
def _gen_whole_sequence(fn: Callable) -> None:
    for V, T, n in GEN_CASES[1:]:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, n, None)
        seq = prompt + out
        for i, seen in enumerate(model.calls[: len(out)]):
            want = seq[: T + i]
            if seen != want:
                raise CheckFailed(tr(
                    "call {i} of the model got {n} token(s) {seen}; it should get the prompt and "
                    "the {i} token(s) generated so far ({want} tokens): without a cache the model "
                    "needs the whole sequence every step", i=i, n=len(seen), seen=clip(seen, 6),
                    want=len(want)))


@exercise("ch06.generate", "calls the model once per new token, never more")
def _gen_calls(fn: Callable) -> None:
    for V, T, n in GEN_CASES:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, n, None)
        expect(len(model.calls) == len(out),
               tr("generate made {calls} model calls for {n} new tokens (max_new_tokens={limit}); "
                  "one call per token: no extra call after the last one",
                  calls=len(model.calls), n=len(out), limit=n))


@exercise("ch06.generate", "max_new_tokens=0 returns [] and never calls the model")
def _gen_zero(fn: Callable) -> None:
    for V, T in [(50, 1), (1000, 6)]:
        model, prompt = _case(V, T)
        out = _run(fn, model, prompt, 0, None)
        expect(not model.calls, tr("generate(max_new_tokens=0) called the model {n} time(s); "
                                   "with nothing to generate it should not run the model at all",
                                   n=len(model.calls)))
        expect(out == [], tr("generate(max_new_tokens=0) should return [], got {got}",
                             got=clip(out)))


@exercise("ch06.generate", "stops right after EOS, and EOS is part of the output")
def _gen_eos(fn: Callable) -> None:
    for V, T, n, j in [(100, 3, 10, 0), (1000, 5, 12, 3), (151936, 2, 9, 6), (500, 4, 8, 7)]:
        model, prompt = _case(V, T)
        eos = model.greedy(prompt, n, None)[j]
        want = model.greedy(prompt, n, eos)
        out = _run(fn, model, prompt, n, eos)
        if out == want[:-1]:
            raise CheckFailed(tr("generate stopped at EOS but left it out: expected {want} "
                                 "ending with EOS {eos}, got {got}; EOS is a generated token and "
                                 "belongs to the output", want=clip(want), eos=eos,
                                 got=clip(out)))
        expect(out == want, tr("with eos_id={eos}, generate should return {want} (stop right "
                               "after EOS, EOS included), got {got}", eos=eos, want=clip(want),
                               got=clip(out)))
        expect(len(model.calls) == len(want),
               tr("generate called the model {calls} times for {n} tokens ending with EOS; after "
                  "EOS there is nothing more to compute", calls=len(model.calls), n=len(want)))


@exercise("ch06.generate", "eos_id=0 is a token like any other; EOS in the prompt is not a stop")
def _gen_eos_edge(fn: Callable) -> None:
    model, prompt = _case(300, 4)
    model.offset = -model.hash(prompt) % model.V  # the first new token is 0
    out = _run(fn, model, prompt, 5, 0)
    expect(out == [0], tr("with eos_id=0 and the model's first token 0, generate should return "
                          "[0], got {got}: 0 is a real token id, even though Python treats it as "
                          "false", got=clip(out)))
    for V, T, n in [(50, 5, 6), (1000, 3, 8)]:
        model, prompt = _case(V, T)
        for eos in range(V):  # an EOS in the prompt that the loop then never produces
            prompt[1] = eos
            want = model.greedy(prompt, n, None)
            if eos not in want:
                break
        out = _run(fn, model, prompt, n, eos)
        expect(out == want, tr("the prompt holds EOS ({eos}) at position 1; only a generated "
                               "EOS stops the loop, so generate should return {want}, got {got}",
                               eos=eos, want=clip(want), got=clip(out)))

