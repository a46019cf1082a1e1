"""Checks of ch12.my_prefix_cache, the capstone: the learner's match_prefix, insert and evict
inside a real engine.

The learner's class is a RadixCache whose match, insert and evict call their own functions. It
replaces the tree of an `mm.LLM("tiny")` (float32, the torch backend), which then serves waves
of requests that share prefixes (a system prompt, a chat that grows turn by turn, a repeated
prompt, a prompt of exactly one page, n = 3 samples of one prompt) in a pool small enough that
the tree must evict and requests are preempted. The tokens must equal those of the same engine
with the cache off (greedy and seeded), logprobs within 1e-5.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable

import torch

import minimodel as mm
from minimodel.engine.llm import LLM
from minimodel.engine.radix_cache import RadixCache
from minimodel.grading.common import clip, first_difference
from minimodel.grading.core import CheckFailed, exercise, expect
from minimodel.grading.i18n import join, tr
from minimodel.grading.learner import spy_calls

CAPSTONE_MODEL = "tiny"
# (page size, pages): roomy enough for every request, tight enough that the tree evicts
CAPSTONE_POOLS = ((4, 20), (1, 60))
_SETTINGS = dict(device="cpu", dtype=torch.float32, skip_tokenizer_init=True, max_num_seqs=6,
                 max_num_batched_tokens=40)
_VOCAB = 1000

Wave = list[tuple[list[int], mm.SamplingParams]]


def capstone_waves(page_size: int, seed: int = 12) -> list[Wave]:
    """Waves of requests (a wave arrives while the one before runs)."""
    rng = random.Random(seed)

    def tail(n: int) -> list[int]:
        return [rng.randrange(_VOCAB) for _ in range(n)]

    def sp(i: int, n: int = 5) -> mm.SamplingParams:
        return mm.SamplingParams(temperature=0.8 if i % 2 else 0.0, seed=100 + i, max_tokens=n,
                                 logprobs=0, ignore_eos=True)

    system = tail(4 * page_size + 3)
    chat = system + tail(5)
    one_page = tail(page_size)
    waves: list[Wave] = [[(system + tail(6), sp(0)), (system + tail(2), sp(1)),
                          (one_page, sp(2, 3))],
                         [(chat, sp(3)), (system[:2 * page_size] + tail(4), sp(4)),
                          (one_page, sp(5, 3)), (system + tail(6), sp(6))]]
    for turn in range(2):  # the chat goes on: each prompt is the whole conversation so far
        chat = chat + tail(3 + turn)
        waves.append([(chat, sp(7 + turn)), (tail(12), sp(9 + turn))])
    waves.append([(system + tail(3), mm.SamplingParams(temperature=1.0, seed=s, max_tokens=4,
                                                       logprobs=0, ignore_eos=True))
                  for s in range(3)])
    return waves


def _run_waves(llm: LLM, waves: list[Wave]) -> list:
    ids, done = [], {}
    for wave in waves:
        ids += [llm.add_request(p, sp) for p, sp in wave]
        for _ in range(2):
            done.update({o.request_id: o for o in llm.step()})
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
    return [done[r] for r in ids]


def _engine(page_size: int, num_pages: int, caching: bool) -> LLM:
    return LLM(CAPSTONE_MODEL, page_size=page_size, num_pages=num_pages,
               enable_prefix_caching=caching, **_SETTINGS)


@functools.cache
def reference_outputs(page_size: int, num_pages: int) -> tuple:
    """The same waves through the same engine with the cache off."""
    return tuple(_run_waves(_engine(page_size, num_pages, False), capstone_waves(page_size)))


def with_tree(cls: type, page_size: int, num_pages: int) -> LLM:
    """A new engine whose prefix cache is an instance of cls (the learner's tree)."""
    llm = _engine(page_size, num_pages, True)
    cache = cls(llm.allocator, page_size)  # it takes the allocator's place as its cache
    llm.prefix_cache = llm.scheduler.cache = cache
    return llm


def _unwritten(err: BaseException | None) -> bool:
    """Whether err, or an error it was raised from (a failed engine step), is a stub's."""
    while err is not None:
        if isinstance(err, NotImplementedError):
            return True
        err = err.__cause__ or err.__context__
    return False


def _count_evictions(cache: RadixCache) -> list[int]:
    """Record the pages each call of cache.evict frees (whoever calls it)."""
    freed: list[int] = []
    evict = cache.evict

    def counted(num_pages: int) -> int:
        freed.append(evict(num_pages))
        return freed[-1]
    cache.evict = counted  # type: ignore[method-assign]
    return freed


_RUNS: dict[str, object] = {}  # the latest class's runs, shared by its checks


def _runs(cls: type, fresh: bool = False) -> dict:
    if fresh or _RUNS.get("cls") is not cls:
        runs = []
        methods = [getattr(cls, m, None) for m in ("match", "insert", "evict")]
        spied = [m for m in methods if callable(m) and m is not getattr(RadixCache, m.__name__)]
        with _spying(spied) as calls:
            for S, P in CAPSTONE_POOLS:
                run: dict = {"S": S, "P": P}
                try:
                    llm = with_tree(cls, S, P)
                    evicted = _count_evictions(llm.prefix_cache)
                    run["outs"] = _run_waves(llm, capstone_waves(S))
                    run["llm"], run["evicted"] = llm, sum(evicted)
                except Exception as err:  # kept, and raised again by every check
                    if _unwritten(err):
                        raise NotImplementedError from err
                    run["error"] = err
                runs.append(run)
        _RUNS.clear()
        _RUNS.update(cls=cls, runs=runs, calls=calls)
    return _RUNS


class _spying:
    """spy_calls over several methods at once: the learner's functions they call, by name."""

    def __init__(self, methods: list[Callable]) -> None:
        self.managers = [spy_calls(m) for m in methods]
        self.calls: dict[str, int] = {}

    def __enter__(self) -> dict[str, int]:
        self.counters = [m.__enter__() for m in self.managers]
        return self.calls

    def __exit__(self, *exc) -> None:
        for m, c in zip(reversed(self.managers), reversed(self.counters)):
            m.__exit__(*exc)
            for k, v in c.items():
                self.calls[k] = self.calls.get(k, 0) + v


def _check_run(run: dict) -> None:
    if "error" in run:
        err = run["error"]
        raise CheckFailed(tr("page size {S}: the engine with your tree failed with {error}: "
                             "{text}", S=run["S"], error=type(err).__name__,
                             text=str(err))) from None


@exercise("ch12.my_prefix_cache", "tiny with your tree (page sizes 4 and 1, a tight pool): the "
                                  "same tokens as with the cache off, logprobs within 1e-5")
def _same_tokens(cls: type) -> str:
    if not isinstance(cls, type) or not issubclass(cls, RadixCache):
        raise CheckFailed(tr("pass the class itself, a subclass of RadixCache; got {cls!r}",
                             cls=cls))
    runs = _runs(cls, fresh=True)["runs"]
    n = 0
    for run in runs:
        _check_run(run)
        want = reference_outputs(run["S"], run["P"])
        for i, (a, b) in enumerate(zip(run["outs"], want, strict=True)):
            if a.token_ids != b.token_ids:
                k = first_difference(a.token_ids, b.token_ids)
                hint = (tr("The first token is sampled from the logits of the prompt's last "
                           "token, which must be computed in this request, not found in the "
                           "tree.") if k == 0 else
                        tr("Pages shared from the tree must hold exactly the K/V of the tokens "
                           "they stand for."))
                raise CheckFailed(tr(
                    "page size {S}, request {i} (a prompt of {n} tokens, {cached} of them from "
                    "your tree): {got} instead of {want}, from token {k} on. {hint}",
                    S=run["S"], i=i, n=len(b.prompt_token_ids), cached=a.metrics.cached_tokens,
                    got=clip(a.token_ids), want=clip(b.token_ids), k=k, hint=hint))
            diff = max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)),
                       default=0.0)
            expect(diff <= 1e-5, tr("page size {S}, request {i}: logprobs differ from the "
                                    "cache-off run's by {diff:.1e} (more than 1e-5)",
                                    S=run["S"], i=i, diff=diff))
            n += 1
    return tr("{n} requests, the same tokens", n=n)


@exercise("ch12.my_prefix_cache", "the tree is used: prompts that share a prefix report cached "
                                  "tokens, and fewer prompt tokens are computed")
def _used(cls: type) -> str:
    notes = []
    for run in _runs(cls)["runs"]:
        _check_run(run)
        cached = sum(o.metrics.cached_tokens for o in run["outs"])
        prompt = sum(len(o.prompt_token_ids) for o in run["outs"])
        expect(cached > 0, tr("page size {S}: no request found any of its prompt in your tree "
                              "(cached_tokens is 0 everywhere), though most share a prefix",
                              S=run["S"]))
        expect(all(o.metrics.cached_tokens % run["S"] == 0 for o in run["outs"]),
               tr("page size {S}: a request reports cached tokens that are not whole pages",
                  S=run["S"]))
        expect(run["llm"].scheduler.num_prefill_tokens < prompt,
               tr("page size {S}: the engine computed every prompt token again", S=run["S"]))
        notes.append(tr("page size {S}: {cached} of {prompt} prompt tokens from the tree",
                        S=run["S"], cached=cached, prompt=prompt))
    return join(tr("; "), notes)


@exercise("ch12.my_prefix_cache", "when the engine is idle every page is free or evictable, and "
                                  "reset_prefix_cache() gives them all back")
def _idle(cls: type) -> None:
    for run in _runs(cls)["runs"]:
        _check_run(run)
        llm = run["llm"]
        alloc = llm.allocator
        expect(run["evicted"] > 0, tr("page size {S}: the pool of {P} pages ran out, yet evict "
                                      "freed no page", S=run["S"], P=run["P"]))
        expect(alloc.num_free == alloc.num_pages,
               tr("page size {S}: idle, yet only {free} of {total} pages are free or evictable: "
                  "some page still has a holder besides the tree", S=run["S"],
                  free=alloc.num_free, total=alloc.num_pages))
        expect(llm.reset_prefix_cache() and len(alloc._free) == alloc.num_pages,
               tr("page size {S}: after reset_prefix_cache() {free} of {total} pages are on the "
                  "free list; evicting everything should give every page back", S=run["S"],
                  free=len(alloc._free), total=alloc.num_pages))


@exercise("ch12.my_prefix_cache", "its match, insert and evict call your match_prefix, insert "
                                  "and evict")
def _pieces(cls: type) -> None:
    missing = [m for m in ("match", "insert", "evict")
               if getattr(cls, m, None) is getattr(RadixCache, m)]
    expect(not missing, tr("your class keeps the engine's {methods}: override each with a "
                           "method that calls your own function", methods=", ".join(missing)))
    calls = _runs(cls)["calls"]
    absent = [n for n in ("match_prefix", "insert", "evict") if not calls.get(n)]
    expect(not absent, tr("the engine ran, but your {functions} was never called: each method "
                          "should hand its work to your function of the same job",
                          functions=", ".join(absent)))
