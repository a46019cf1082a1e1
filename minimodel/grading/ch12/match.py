"""Checks of ch12.match_prefix: the longest cached prefix of a prompt, in whole pages.

    match_prefix(cache: RadixCache, tokens: list[int], max_pages: int | None)
        -> (pages: list[int], node: Node)

Each check drives two worlds with the same stream of requests (common.py): one with the
engine's RadixCache, one whose tree calls the learner's function for every match; the calls'
answers and then the trees, the reference counts and the order of last use must agree after
every event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from minimodel.grading.ch12.common import (
    Event,
    World,
    _rng,
    prompt,
    random_streams,
    run_stream,
    stems,
)
from minimodel.grading.core import exercise
from minimodel.grading.i18n import tr

HINTS = {
    "pages": tr(" Only whole pages that hold exactly the prompt's tokens are shared: a page whose "
                "tokens agree only in part holds K/V computed for other tokens. The match may take "
                "at most len(tokens) // page_size pages, and at most max_pages when it is not "
                "None."),
    "node": tr(" The node returned is the one whose last page is the last page matched; when the "
               "match stops inside a node, that is not the node as it was."),
    "shape": tr(" Where the match stops inside a node, the node is split in two there (an upper "
                "node with the pages that matched, and below it the rest), so that every node is "
                "shared whole and the match ends at a node's end."),
    "held node": tr(" The split keeps the node object for the *lower* part (the rest of its pages "
                    "and its children), since requests that ended at that node must still end "
                    "there; the upper part is the new Node, its parent's child now."),
    "refs": tr(" match_prefix only reads the tree (and splits a node): the caller takes the "
               "references on the pages it returns."),
    "lru": tr(" A match uses every node on its path: their last_used becomes the cache's time "
              "now (next(cache._clock), once per call), so that eviction takes the least recently "
              "used leaf first. The upper node of a split starts with the node's own last_used."),
    "num_pages": tr(" A match adds no page to the tree and removes none, so it leaves "
                    "cache.num_pages as it is."),
    "crash": tr(" The caller shares the pages returned and hands the node to insert as `start`."),
}


def _seeded(page_size: int, k: int = 2) -> tuple[list[list[int]], list[Event]]:
    """k stems, each computed by a request that then finished: the tree holds them."""
    base = stems(_rng(), page_size, k)
    events: list[Event] = []
    for s in base:
        events += [("arrive", s), ("finish", 0)]
    return base, events


def _run(fn: Callable, events, page_size: int, what: str, num_pages: int = 200) -> int:
    return run_stream(fn, "match", events, page_size, num_pages, what, HINTS)


@exercise("ch12.match_prefix", "whole pages only: prompts that part from the tree inside a page, "
                               "at a page's end, or end in a partly filled page (page sizes 1-4)")
def _whole_pages(fn: Callable) -> str:
    n = 0
    for S in (1, 2, 3, 4):
        rng = _rng()
        base, events = _seeded(S)
        for _ in range(12):
            stem = rng.choice(base)
            cut = rng.randrange(1, len(stem) + 1)
            events.append(("lookup", stem[:cut] + [50 + rng.randrange(9)] * rng.randrange(3),
                           None))
        n += _run(fn, events, S, tr("page size {S}", S=S))
    return tr("{n} matches, as the engine's", n=n)


@exercise("ch12.match_prefix", "at most max_pages pages (0: none, None: no limit), so a prompt "
                               "the tree holds whole still computes its last token")
def _max_pages(fn: Callable) -> None:
    for S in (1, 2, 4):
        rng = _rng()
        base, events = _seeded(S)
        for stem in base:
            whole = len(stem) // S
            for m in (0, 1, 2, None, whole, whole + 1):
                events.append(("lookup", stem, m))
            for k in (1, 2, whole):  # a prompt of exactly k cached pages arrives (twice)
                events += [("arrive", stem[:k * S]), ("arrive", stem[:k * S]),
                           ("finish", 1), ("finish", 0)]
        events.append(("lookup", rng.choice(base), 0))
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.match_prefix", "splits the node where a match ends inside it; a node that "
                               "requests hold keeps their place")
def _splits(fn: Callable) -> None:
    for S in (1, 2, 3):
        rng = _rng()
        base = stems(rng, S, 1)
        long = base[0] + [rng.randrange(50) for _ in range(4 * S)]

        def events(world: World, long=long, rng=rng, S=S) -> Iterator[Event]:
            yield ("arrive", long)  # one node of many pages, held by a running request
            for _ in range(6):
                cut = rng.randrange(1, len(long))
                yield ("arrive", long[:cut] + [50 + rng.randrange(9) for _ in range(S + 1)])
                if len(world.running) > 3:
                    yield ("finish", rng.randrange(len(world.running)))
            while world.running:
                yield ("finish", len(world.running) - 1)
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.match_prefix", "marks every node on the matched path as just used (the order "
                               "eviction follows)")
def _lru(fn: Callable) -> None:
    for S in (1, 2, 4):
        rng = _rng()
        base, events = _seeded(S, k=4)
        for _ in range(8):
            events.append(("lookup", prompt(rng, base), None))
            if rng.random() < 0.4:
                events.append(("evict", 1))
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.match_prefix", "equals the engine's RadixCache.match over random request streams "
                               "(page sizes 1, 2, 3, 4 and 16)")
def _streams(fn: Callable) -> str:
    return tr("{n} matches over 5 streams, as the engine's",
              n=random_streams(fn, "match", HINTS))
