"""Checks of ch06.my_writer, the capstone: the learner's own loop (generate), model (chapter 04's
my_qwen3_forward) and sampler (chapter 05's sample) on the course's model bard, token for token
what the engine writes (reference.py).
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from minimodel.grading.ch06.common import _expect_token_list
from minimodel.grading.ch06.reference import WRITER_NEW, _bard, _pick_prompts
from minimodel.grading.common import clip, first_difference
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import tr
from minimodel.grading.learner import PREFIX, is_learner_function, spy_calls


def _write(fn: Callable, ids: tuple[int, ...], n: int, eos_id: int | None = None,
           **sampling: object) -> list[int]:
    """fn(bard's weights, config, prompt [1, T], n, eos_id, **sampling), checked to be a list of
    ints."""
    weights, cfg, _, _ = _bard()
    out = fn(dict(weights), cfg, torch.tensor([ids]), n, eos_id, **sampling)
    what = f"my_writer(..., max_new_tokens={n}, eos_id={eos_id})"
    return _expect_token_list(out, what, tr("a list of ints (the new token ids)"))


@exercise("ch06.my_writer", "greedy: token for token what mm.LLM(...).generate writes on bard")
def _writer_greedy(fn: Callable) -> str:
    tok = _bard()[2]
    cases = 0
    for ids, want in _pick_prompts(3):
        n = int(torch.randint(WRITER_NEW - 4, WRITER_NEW + 1, ()))
        out = _write(fn, ids, n)
        want = list(want[:n])
        if out == want:
            cases += 1
            continue
        prompt = tok.decode(list(ids))
        if out == want[:-1]:
            raise CheckFailed(tr("for {prompt!r} with max_new_tokens={n}, my_writer returned "
                                 "{short} tokens, one short of the engine's {n}: the last new "
                                 "token is missing from the result", prompt=prompt, n=n,
                                 short=n - 1))
        if len(out) != n:
            raise CheckFailed(tr("for {prompt!r} with max_new_tokens={n} and no EOS, my_writer "
                                 "returned {got} tokens instead of {n}", prompt=prompt, n=n,
                                 got=len(out)))
        k = first_difference(out, want)
        raise CheckFailed(tr(
            "for {prompt!r} the engine writes {want!r}, your code {got!r} (first different "
            "token: new token {k}, {got_k} instead of {want_k}). The loop's own check passes on "
            "fake models, so look at the model: does my_qwen3_forward of chapter 04 pass its "
            "check, is it given the whole sequence, and is the greedy path (temperature 0) the "
            "plain argmax?", prompt=prompt, want=tok.decode(want), got=tok.decode(out), k=k,
            got_k=out[k], want_k=want[k]))
    return tr("{n} prompts of bard, {low} to {high} new tokens each", n=cases,
              low=WRITER_NEW - 4, high=WRITER_NEW)


@exercise("ch06.my_writer", "stops right after EOS, and EOS is part of the result")
def _writer_eos(fn: Callable) -> None:
    ids, path = _pick_prompts(1)[0]
    j = int(torch.randint(2, WRITER_NEW - 3, ()))
    eos = path[j]
    want = list(path[: path.index(eos) + 1])
    out = _write(fn, ids, WRITER_NEW, eos_id=eos)
    if out == want[:-1]:
        raise CheckFailed(tr("with eos_id={eos} my_writer stopped before the EOS token: it is a "
                             "generated token and belongs to the result", eos=eos))
    went_on = len(out) > len(want) and out[: len(want)] == want
    hint = tr(": it went on after EOS (does eos_id reach your generate?)") if went_on else ""
    expect(out == want, tr("with eos_id={eos}, which the model writes as new token {j}, "
                           "my_writer should return {want}, got {got}{hint}", eos=eos,
                           j=len(want) - 1, want=clip(want, 12), got=clip(out, 12), hint=hint))


@exercise("ch06.my_writer", "runs your generate and your my_qwen3_forward, once per token")
def _writer_spy(fn: Callable) -> None:
    ids, _ = _pick_prompts(1)[0]
    with spy_calls(fn) as calls:
        out = _write(fn, ids, 3)
    expect(calls["generate"] >= 1,
           tr("my_writer never called generate, the loop you wrote in this notebook: the "
              "capstone is your own loop driving your own model"))
    expect(calls["my_qwen3_forward"] >= len(out) > 0,
           tr("my_writer made {calls} call(s) of my_qwen3_forward (from your chapter 04 notebook) "
              "for {n} new tokens: the logits must come from your model, run on the whole "
              "sequence at every step, not from the package's", calls=calls["my_qwen3_forward"],
              n=len(out)))


@contextmanager
def _draws(fn: Callable) -> Iterator[list[int] | None]:
    """The token ids the learner's `sample` returns while the block runs, in order (None when
    no `sample` of theirs is in reach: a name of `fn`'s notebook or of a learner module it holds).
    Use it inside spy_calls, so that the spy still counts the calls."""
    scope = inspect.unwrap(fn).__globals__
    spaces = [scope] + [vars(m) for m in list(scope.values())
                        if isinstance(m, types.ModuleType) and m.__name__.startswith(PREFIX)]
    found = [(ns, ns["sample"]) for ns in spaces
             if callable(ns.get("sample")) and is_learner_function(inspect.unwrap(ns["sample"]))]
    drawn: list[int] = []

    def recorder(f: Callable) -> Callable:
        @functools.wraps(f)
        def sample(*args: object, **kwargs: object) -> object:
            out = f(*args, **kwargs)
            if isinstance(out, torch.Tensor):
                drawn.extend(int(x) for x in out.reshape(-1).tolist())
            return out

        return sample

    for ns, f in found:
        ns["sample"] = recorder(f)
    try:
        yield drawn if found else None
    finally:
        for ns, f in reversed(found):
            ns["sample"] = f


def _not_drawn(out: list[int], drawn: list[int]) -> int | None:
    """The first new token that is not the token sample drew for it, or None. One draw per
    token: they must be equal; with more draws, out must come out of them in order."""
    if len(drawn) == len(out):
        return None if out == drawn else first_difference(out, drawn)
    j = 0
    for i, token in enumerate(out):
        while j < len(drawn) and drawn[j] != token:
            j += 1
        if j == len(drawn):
            return i
        j += 1
    return None


@exercise("ch06.my_writer", "sampling: your generate keeps the tokens your sample draws, from "
                            "the top-k, seeded")
def _writer_sampling(fn: Callable) -> str:
    _, _, tok, model = _bard()
    ids, path = _pick_prompts(1)[0]
    n, t, k = 6, 1.5, 5
    seeds = [int(s) for s in torch.randint(0, 2**31, (2,))]
    runs = []
    for seed in seeds:
        with spy_calls(fn) as calls, _draws(fn) as drawn:
            a = _write(fn, ids, n, None, temperature=t, top_k=k, top_p=1.0,
                       generator=torch.Generator().manual_seed(seed))
        expect(len(a) == n, tr("sampling with max_new_tokens={n} and no EOS should give {n} "
                               "tokens, got {got}", n=n, got=len(a)))
        expect(calls["sample"] >= n,
               tr("my_writer made {calls} call(s) of sample (from your chapter 05 notebook) for "
                  "{n} sampled tokens: with temperature > 0 each token is drawn by your sampler",
                  calls=calls["sample"], n=n))
        expect(calls["generate"] >= 1,
               tr("with temperature > 0 my_writer never called generate: sampled text, too, "
                  "comes out of the loop you wrote in exercise 1, not out of a second loop"))
        wrong = _not_drawn(a, drawn) if drawn is not None else None
        if wrong is not None:
            raise CheckFailed(tr(
                "with temperature={t}, new token {i} of my_writer is {token} ({text!r}), which is "
                "not the token your sample drew for that step: the token the loop keeps must be "
                "the one sample returned", t=t, i=wrong, token=a[wrong],
                text=tok.decode([a[wrong]])))
        runs.append(a)
        with torch.inference_mode():
            logits = model(torch.tensor([list(ids) + a]))[0, len(ids) - 1 : -1]  # [n, V]
        kth = logits.topk(k, dim=-1).values[:, -1]
        chosen = logits.gather(-1, torch.tensor(a)[:, None])[:, 0]
        bad = (chosen < kth - 1e-3).nonzero()
        if len(bad):
            i = int(bad[0])
            raise CheckFailed(tr("with top_k={k}, new token {i} ({text!r}) is not among the "
                                 "model's {k} most likely tokens at that step: hand temperature, "
                                 "top_k and top_p to your sample", k=k, i=i,
                                 text=tok.decode([a[i]])))
    again = _write(fn, ids, n, None, temperature=t, top_k=k, top_p=1.0,
                   generator=torch.Generator().manual_seed(seeds[0]))
    expect(again == runs[0], tr("two runs with generators seeded alike gave different tokens: "
                                "hand the generator to your sample"))
    greedy = [list(path[:n])] * 2
    expect(runs != greedy, tr("with temperature={t} and top_k={k} every token of two seeded runs "
                              "was the greedy one: the sampling settings do not reach the draw",
                              t=t, k=k))
    return tr("2 seeds x {n} tokens at temperature {t}, top-k {k}", n=n, t=t, k=k)
