"""Checks of ch13.speculative_step, the capstone: one round of speculative decoding for one
sequence, the learner's accept_greedy and rejection_sample doing the verification.

    speculative_step(target: CachedLM, draft: CachedLM, tokens: list[int], k: int,
                     temperature: float = 0.0, generator: torch.Generator | None = None)
        -> list[int]

- greedy: two small random Qwen3s on the engine's paged cache (common.small_lm) must give
  exactly the tokens of plain greedy decoding of the target, for k = 1..4;
- after every step the target's cache holds exactly tokens + new[:-1], the drafter's a prefix
  of that (at least `tokens`), and neither keeps a page past its tokens;
- sampled: with stand-in models of known distributions (common.TableLM), the first two tokens
  generated follow the target's joint distribution (chi-square, false-alarm rate 1e-4);
- it calls the learner's own accept_greedy and rejection_sample.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from minimodel.engine.kv_cache import pages_needed
from minimodel.engine.speculative import CachedLM
from minimodel.grading.ch13.common import (
    SMALL_V,
    TableLM,
    as_tokens,
    expect_distribution,
    plain_greedy,
    single_threaded,
    small_lm,
    table_pair,
)
from minimodel.grading.common import clip, first_difference
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import Text, join, tr
from minimodel.grading.learner import spy_calls

NEW_TOKENS = 16
# The titles below write SAMPLED_TRIALS, TEMPERATURE and common.FALSE_ALARM out: a title is a
# literal, the key of its Chinese in zh/ch13.py.
SAMPLED_TRIALS = 2500
TEMPERATURE = 0.8


def _expect_caches(lm: CachedLM, role: str, want: list[int], at_least: int,
                   what: Text) -> None:
    held = lm.tokens
    if role == "target":
        expect(held == want, tr(
            "{what}: the target's cache holds {n} tokens afterwards, {end} at its end; it should "
            "hold exactly tokens + new[:-1] ({want} tokens, ending {want_end}). {rollback}The "
            "last new token has no K/V yet: the next step computes it.",
            what=what, n=len(held), end=clip(held[-6:]), want=len(want),
            want_end=clip(want[-6:]),
            rollback=tr("The K/V of rejected drafts must be given back: truncate the cache to "
                        "the tokens that stay. ") if len(held) > len(want) else ""))
    else:
        expect(at_least <= len(held) <= len(want) and held == want[:len(held)], tr(
            "{what}: the drafter's cache holds {n} tokens afterwards, ending {end}; it should "
            "hold a prefix of tokens + new[:-1] ({want} tokens), at least the {at_least} tokens "
            "of `tokens`: {advice}",
            what=what, n=len(held), end=clip(held[-6:]), want=len(want), at_least=at_least,
            advice=tr("truncate away the drafts that were rejected.") if len(held) > at_least
            else tr("keep the K/V of the context it has computed.")))
    pages = pages_needed(len(held), lm.page_size)
    expect(len(lm.page_table) == pages and
           lm.allocator.num_free == lm.allocator.num_pages - pages,
           tr("{what}: the {role}'s cache holds {n} tokens but {held} pages ({lent} lent), not "
              "{pages}: use CachedLM.truncate, which gives the pages past the kept tokens back",
              what=what, role=tr("target") if role == "target" else tr("draft"), n=len(held),
              held=len(lm.page_table), lent=lm.allocator.num_pages - lm.allocator.num_free,
              pages=pages))


def _step(fn: Callable, target: CachedLM, draft: CachedLM, tokens: list[int], k: int,
          temperature: float = 0.0, generator: torch.Generator | None = None) -> list[int]:
    """One call of the learner's step, its result and both caches checked."""
    what = tr("speculative_step(target, draft, tokens ({n} tokens), k={k}{temperature})",
              n=len(tokens), k=k,
              temperature=f", temperature={temperature}" if temperature else "")
    new = as_tokens(fn(target, draft, list(tokens), k, temperature, generator), what)
    expect(1 <= len(new) <= k + 1,
           tr("{what} returned {n} tokens; a step emits 1 to k + 1 = {most}", what=what,
              n=len(new), most=k + 1))
    want = list(tokens) + new[:-1]
    _expect_caches(target, "target", want, len(tokens), what)
    _expect_caches(draft, "draft", want, len(tokens), what)
    return new


def _generate(fn: Callable, target: CachedLM, draft: CachedLM, prompt: list[int], k: int,
              n: int, temperature: float = 0.0,
              generator: torch.Generator | None = None) -> tuple[list[int], int]:
    """At least n new tokens by repeated steps; (the tokens, the number of steps)."""
    tokens, steps = list(prompt), 0
    while len(tokens) - len(prompt) < n:
        tokens += _step(fn, target, draft, tokens, k, temperature, generator)
        steps += 1
    return tokens[len(prompt):], steps


def _greedy_prompts(count: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, the target's plain greedy continuation) for prompts whose greedy choices are
    clear (no near tie that rounding in a batch of k + 1 rows could flip)."""
    found = []
    while len(found) < count:
        prompt = torch.randint(0, SMALL_V, (int(torch.randint(2, 10, ())),)).tolist()
        want, gap = plain_greedy(small_lm("target"), prompt, NEW_TOKENS)
        if gap > 1e-3:
            found.append((prompt, want))
    return found


@exercise("ch13.speculative_step", "greedy, two small random Qwen3s on the engine's paged cache "
                                   "(k = 1..4, three prompts): exactly the tokens of plain greedy "
                                   "decoding, and both caches right after every step")
@single_threaded
def _greedy(fn: Callable) -> str:
    accepted = 0
    for prompt, want in _greedy_prompts(3):
        for k in (1, 2, 3, 4):
            target, draft = small_lm("target", page_size=4), small_lm("draft", page_size=3)
            got, steps = _generate(fn, target, draft, prompt, k, NEW_TOKENS)
            got = got[:NEW_TOKENS]
            if got != want:
                i = first_difference(got, want)
                raise CheckFailed(tr(
                    "k = {k}, prompt {prompt}: {got} instead of plain greedy decoding's {want}, "
                    "from new token {i} on. At temperature 0 every emitted token must be the "
                    "target's argmax after everything before it: accept drafts while they equal "
                    "it, then add the target's own token.", k=k, prompt=clip(prompt),
                    got=clip(got, 16), want=clip(want, 16), i=i))
            accepted += len(got) - steps
    expect(accepted > 0, tr("no draft was ever accepted, though the drafter agrees with the "
                            "target most of the time: compare each draft with the target's "
                            "argmax at its own position"))
    return tr("the same tokens for every prompt and k")


@exercise("ch13.speculative_step", "caches after every step, greedy and sampled, page sizes 1 "
                                   "to 4 (stand-in models): the target holds tokens + new[:-1], "
                                   "no rejected draft keeps its K/V or its page")
@single_threaded
def _caches(fn: Callable) -> str:
    g = torch.Generator().manual_seed(5)
    steps = 0
    for S in (1, 2, 4):
        for k in (1, 2, 4):
            for temperature in (0.0, TEMPERATURE):
                tt, dt = table_pair(6, g)
                target, draft = TableLM(tt, page_size=S), TableLM(dt, page_size=S + 1)
                prompt = torch.randint(0, 6, (int(torch.randint(1, 7, (), generator=g)),),
                                       generator=g).tolist()
                _, n = _generate(fn, target, draft, prompt, k, 24, temperature, g)
                steps += n
    return tr("{n} steps", n=steps)


def _exact_joint(target: TableLM, prompt: list[int]) -> torch.Tensor:
    """P(first two new tokens = (x, y)) under the target at TEMPERATURE, float64 [V, V]."""
    first = target.distribution(prompt, TEMPERATURE)
    return torch.stack([first[x] * target.distribution(prompt + [x], TEMPERATURE)
                        for x in range(target.V)])


@exercise("ch13.speculative_step", "sampled (temperature 0.8, k = 1 and 3, stand-in models): "
                                   "the first two tokens follow the target's joint distribution "
                                   "(chi-square over 2500 runs, false-alarm rate 0.0001)")
@single_threaded
def _sampled(fn: Callable) -> str:
    g = torch.Generator().manual_seed(6)
    notes = []
    for k, prompt in ((1, [2, 3]), (3, [0, 3, 1])):
        tt, dt = table_pair(4, g, scale=1.5, noise=0.8)
        target, draft = TableLM(tt), TableLM(dt)
        counts = torch.zeros(4, 4, dtype=torch.float64)
        for _ in range(SAMPLED_TRIALS):
            target.truncate(0)
            draft.truncate(0)
            got, _ = _generate(fn, target, draft, prompt, k, 2, TEMPERATURE, g)
            counts[got[0], got[1]] += 1
        notes.append(expect_distribution(
            counts, _exact_joint(target, prompt),
            tr("k = {k}, the first two tokens after {prompt}", k=k, prompt=prompt),
            tr("Draw each draft from the drafter's distribution at the same temperature (the q "
               "you pass on must be the distribution the draft was drawn from), take the "
               "target's k + 1 rows at the drafts' positions, and let rejection_sample "
               "decide.")))
    return notes[0]


@exercise("ch13.speculative_step", "calls your own accept_greedy (temperature 0) and "
                                   "rejection_sample (temperature > 0)")
@single_threaded
def _own(fn: Callable) -> None:
    g = torch.Generator().manual_seed(7)
    tt, dt = table_pair(6, g)
    with spy_calls(fn) as calls:
        for temperature in (0.0, TEMPERATURE):
            _generate(fn, TableLM(tt), TableLM(dt), [1, 2, 3], 2, 6, temperature, g)
    missing = [name for name in ("accept_greedy", "rejection_sample") if not calls.get(name)]
    expect(not missing, tr("your speculative_step never called your {missing}: verify the "
                           "drafts with the functions you wrote above",
                           missing=join(tr(" or "), missing)))
