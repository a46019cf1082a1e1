"""Checks of ch12.evict: make room in the pool, least recently used leaf first.

    evict(cache: RadixCache, num_pages: int) -> int   (pages freed)

As for match_prefix (match.py), each check drives the engine's tree and the learner's with the
same stream of requests and compares them after every event; in a tight pool the allocator
itself calls evict when its free list runs out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from minimodel.grading.ch12.common import (
    Event,
    World,
    _rng,
    prompt,
    random_stream,
    run_stream,
    stems,
)
from minimodel.grading.core import exercise
from minimodel.grading.i18n import tr

HINTS = {
    "count": tr(" Whole leaves go, least recently used first, until at least num_pages pages are "
                "freed or no leaf may go; the answer is the number of pages freed."),
    "shape": tr(" Only a leaf may go (a node with children is the prefix of theirs), and only one "
                "whose pages nobody but the tree holds (a reference count of 1). The leaf that "
                "goes first is the one used longest ago; when a leaf goes, its parent may become "
                "a leaf, and it then waits its turn by its own last_used."),
    "held node": tr(" Evicting a node a running request ends at takes pages it still uses."),
    "refs": tr(" The tree lets go of its own reference on each page of a leaf it evicts, marked "
               "as the tree's (allocator.free(..., cache=True)); the allocator then counts the "
               "page as free, not as evictable."),
    "pages": tr(" A page a running request holds was lent again while it still held it: an "
                "evicted leaf had pages with more than one holder."),
    "num_pages": tr(" The tree counts the pages it holds in cache.num_pages: an evicted leaf's "
                    "pages leave the count."),
    "lru": "",
    "crash": tr(" The allocator calls evict when its free list runs out, and then takes pages "
                "from the free list: they must be there."),
}


def _run(fn: Callable, events, page_size: int, what: str, num_pages: int = 200) -> int:
    return run_stream(fn, "evict", events, page_size, num_pages, what, HINTS)


def _leaves(S: int, k: int) -> tuple[list[list[int]], list[Event]]:
    """k prompts computed and finished: a tree of several leaves (some share a stem)."""
    rng = _rng()
    base = stems(rng, S, 2)
    prompts = [prompt(rng, base) + [60 + i] * S for i in range(k)]
    events: list[Event] = []
    for p in prompts:
        events += [("arrive", p), ("finish", 0)]
    return prompts, events


@exercise("ch12.evict", "frees whole leaves until at least num_pages pages are free; returns "
                        "how many (0 when nothing may go)")
def _count(fn: Callable) -> None:
    for S in (1, 2, 3):
        rng = _rng()
        _, events = _leaves(S, 5)
        for _ in range(6):
            events.append(("evict", rng.randrange(0, 6)))
        events.append(("evict", 1000))
        events.append(("evict", 3))
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.evict", "never evicts a page that a request still holds")
def _held(fn: Callable) -> None:
    for S in (1, 2, 4):
        rng = _rng()
        prompts, events = _leaves(S, 4)
        events += [("arrive", p) for p in prompts[:2]]  # two requests hold their pages again
        events += [("evict", rng.randrange(1, 4)), ("evict", 1000),
                   ("grow", 0, [rng.randrange(50) for _ in range(S)]), ("evict", 1000),
                   ("finish", 1), ("evict", 1000), ("finish", 0), ("evict", 1000)]
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.evict", "least recently used leaf first; a parent left without children waits "
                        "its turn by its own last use")
def _order(fn: Callable) -> None:
    for S in (1, 2, 3):
        rng = _rng()
        prompts, events = _leaves(S, 6)
        for _ in range(3):
            for p in rng.sample(prompts, 3):
                events.append(("lookup", p, None))
            for _ in range(3):
                events.append(("evict", 1))
            events += [("arrive", p) for p in rng.sample(prompts, 2)] + [("finish", 0)] * 2
        _run(fn, events, S, tr("page size {S}", S=S))


@exercise("ch12.evict", "a tight pool: allocate() calls it when its free list runs out (random "
                        "request streams, page sizes 1, 2, 3 and 4)")
def _tight(fn: Callable) -> str:
    n = 0
    for S, pool in ((1, 40), (2, 24), (3, 16), (4, 14)):
        rng = _rng()
        base = stems(rng, S, 4)

        def events(world: World, rng=rng, base=base) -> Iterator[Event]:
            return random_stream(world, rng, 150, base, evicts=False, max_running=3)
        what = tr("a random stream, page size {S}, {pool} pages", S=S, pool=pool)
        n += _run(fn, events, S, what, num_pages=pool)
    return tr("{n} evictions over 4 streams, as the engine's", n=n)
