"""Checks of ch12.insert: a request's computed full pages join the tree.

    insert(cache: RadixCache, tokens: list[int], pages: list[int], start: Node | None)
        -> (held: list[int], node: Node)

As for match_prefix (match.py), each check drives the engine's tree and the learner's with the
same stream of requests and compares them after every event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from minimodel.grading.ch12.common import Event, World, _rng, random_streams, run_stream, stems
from minimodel.grading.core import exercise
from minimodel.grading.i18n import tr

HINTS = {
    "pages": tr(" insert returns, for every page of tokens, the page the tree holds for it "
                "afterwards: where the tree had those tokens already, the tree's own page (the "
                "caller then uses it and lets its copy go); where they are new, the page given."),
    "node": tr(" The node returned is where the inserted tokens end (below start): the new leaf, "
               "or the node that already held their last page."),
    "shape": tr(" Walk down from start page by page, as a match does. Where the tokens part from "
                "a node inside it, the node is split there and the rest of the tokens hang below "
                "the upper part; where no child begins with the next page's tokens, all the rest "
                "becomes one new leaf (its children key: the tokens of its first page)."),
    "held node": tr(" A split keeps the node object for the *lower* part (the rest of its pages "
                    "and its children): requests that ended at that node must still end there."),
    "refs": tr(" The tree takes one reference on each page it adds, marked as the tree's own "
               "(allocator.share(..., cache=True)), and none on pages it held already."),
    "lru": tr(" Every node the inserted tokens pass through, start included, is used now: its "
              "last_used becomes next(cache._clock) (once per call)."),
    "num_pages": tr(" The tree counts the pages it holds in cache.num_pages: the pages of a new "
                    "leaf join the count (a split moves pages, it adds none)."),
    "calls": "",
    "crash": tr(" The caller shares the pages insert returns where they differ from its own."),
}


def _run(fn: Callable, events, page_size: int, what: str, num_pages: int = 200) -> int:
    return run_stream(fn, "insert", events, page_size, num_pages, what, HINTS)


@exercise("ch12.insert", "new prompts become new leaves; returns the pages the tree holds and "
                         "the node where they end")
def _new_leaves(fn: Callable) -> None:
    for S in (1, 2, 4):
        base = stems(_rng(), S, 4, vocab=1000)  # prompts that share nothing
        events: list[Event] = [("arrive", s) for s in base] + [("finish", 0)] * 4
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.insert", "tokens the tree holds keep the tree's pages; only new pages join, "
                         "with one reference each")
def _shared(fn: Callable) -> None:
    for S in (1, 2, 3):
        rng = _rng()
        base = stems(rng, S, 2)
        events: list[Event] = []
        for _ in range(3):  # the same prompts computed by requests that overlap in time
            for s in base:
                events += [("arrive", s), ("arrive", s + [rng.randrange(50)] * S)]
            events += [("finish", 0)] * 4
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.insert", "splits a node where the new tokens part from it inside it")
def _splits(fn: Callable) -> None:
    for S in (1, 2, 3, 4):
        rng = _rng()
        base = stems(rng, S, 1)
        long = base[0] + [rng.randrange(50) for _ in range(4 * S)]

        def events(world: World, long=long, rng=rng, S=S) -> Iterator[Event]:
            yield ("arrive", long)
            for _ in range(6):
                # a request that matched only a part, then computed tokens of its own (the
                # match split nothing: it stopped before; insert meets the node)
                cut = rng.randrange(1, len(long) // S + 1) * S
                yield ("lookup", long[:1], None)
                yield ("arrive", long[:cut] + [50 + rng.randrange(9) for _ in range(2 * S)])
                if len(world.running) > 3:
                    yield ("finish", 0)
            while world.running:
                yield ("finish", len(world.running) - 1)
        _run(fn, events, S, tr("page size {S}", S=S))
    # two requests that compute the same new tokens at once part inside a node the other
    # inserted: only insert can split it
    for S in (2, 3):
        rng = _rng()
        a = [rng.randrange(50) for _ in range(5 * S)]
        b = a[:2 * S] + [77] * (3 * S)
        events = [("arrive", a[:S]), ("arrive", b[:S]), ("grow", 0, a[S:]), ("grow", 1, b[S:]),
                  ("finish", 0), ("finish", 0)]
        _run(fn, events, S, tr("two requests at once, page size {S}", S=S))


@exercise("ch12.insert", "continues below start, the node a request reached before")
def _start(fn: Callable) -> None:
    for S in (1, 2, 4):
        rng = _rng()
        base = stems(rng, S, 2)

        def events(world: World, rng=rng, base=base, S=S) -> Iterator[Event]:
            for s in base:
                yield ("arrive", s)
            for _ in range(10):
                yield ("grow", rng.randrange(len(world.running)),
                       [rng.randrange(50) for _ in range(rng.randrange(1, 2 * S + 2))])
            while world.running:
                yield ("finish", 0)
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.insert", "equals the engine's RadixCache.insert over random request streams "
                         "(page sizes 1, 2, 3, 4 and 16)")
def _streams(fn: Callable) -> str:
    return tr("{n} inserts over 5 streams, as the engine's",
              n=random_streams(fn, "insert", HINTS))
