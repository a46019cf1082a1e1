"""What chapter 12's checks share: two worlds (a page pool, a radix tree and the requests that
hold its pages) driven by the same stream of requests, one with the engine's RadixCache and one
whose tree calls the learner's function in place of one of its methods; how the two are compared
after every event; and the guard that keeps a learner's function from handing its job back to
the engine's tree.

A stream is a list of events, each plain data, applied to both worlds in turn:

- ("arrive", tokens): a request comes: match its prompt (whole pages of the first n - 1 tokens at
  most, as the scheduler does), share those pages, take new pages for the rest, compute it and
  put its full pages in the tree (insert, from the node the match ended at);
- ("grow", i, tokens): running request i computes more tokens; its new full pages join the tree;
- ("finish", i): running request i lets go of its pages (the tree keeps its full ones);
- ("lookup", tokens, max_pages): match alone, as a probe;
- ("evict", n): make room for n pages.
"""

from __future__ import annotations

import functools
import random
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from minimodel.engine.kv_cache import pages_needed
from minimodel.engine.radix_cache import Node, RadixCache, RefCountedAllocator
from minimodel.grading.common import clip
from minimodel.grading.core import CheckFailed
from minimodel.grading.i18n import Text, tr
from minimodel.grading.learner import learner_calls

Event = tuple


def _randint(low: int, high: int) -> int:
    """A random int in [low, high] (inclusive), from torch's seeded generator."""
    return int(torch.randint(low, high + 1, ()))


def _rng() -> random.Random:
    """A Python generator seeded from torch's (which check() seeds): streams are the same on
    every run."""
    return random.Random(_randint(0, 2**31))


# --- own work: the learner's function may not call the tree's own answers ---------------------

_ANSWERS = ("match", "insert", "evict", "_step", "_split", "_evictable", "reset")


@functools.cache
def _answer_codes() -> dict:
    return {getattr(RadixCache, name).__code__: f"RadixCache.{name}" for name in _ANSWERS}


@contextmanager
def own_work(what: str) -> Iterator[None]:
    """Run the block and fail if the learner's code called the engine tree's own match, insert,
    evict (or their helpers _step, _split, _evictable)."""
    with learner_calls(_answer_codes().get) as found:
        yield
    if found:
        raise CheckFailed(tr("{what} calls the engine's {found}: the exercise is to walk and "
                             "change the tree yourself, from its nodes' fields (key, pages, "
                             "children, parent, last_used) and the allocator's share and free",
                             what=what, found=found[0]))


# --- two worlds -----------------------------------------------------------------------------

@dataclass
class _Request:
    tokens: list[int]
    table: list[int]  # its pages, in order
    node: Node  # where its pages in the tree end
    in_tree: int  # table[:in_tree] are the tree's pages on the path to node


def _describe_call(method: str, args: tuple) -> str:
    if method == "match":
        tokens, max_pages = args
        return tr("match_prefix(cache, tokens={tokens} ({n} tokens), max_pages={max_pages})",
                  tokens=clip(tokens, 12), n=len(tokens), max_pages=max_pages)
    if method == "insert":
        tokens, pages, start = args
        where = tr("the root") if start is None or start.parent is None else \
            tr("the node of pages {pages}", pages=start.pages)
        return tr("insert(cache, tokens={tokens} ({n} tokens), pages={pages}, start={where})",
                  tokens=clip(tokens, 12), n=len(tokens), pages=clip(pages, 12), where=where)
    return f"evict(cache, num_pages={args[0]})"


def path_pages(node: object) -> list[int] | None:
    """The pages from the root down to node, or None if node is not a Node in a tree."""
    if not isinstance(node, Node):
        return None
    out: list[int] = []
    seen = 0
    while node is not None and node.parent is not None:
        out = list(node.pages) + out
        node = node.parent
        seen += 1
        if seen > 10_000:
            return None
    return out


class World:
    """A pool, a tree over it, and the requests that hold pages. `cls` is RadixCache or the
    tree that calls the learner's function; every call of that function is logged."""

    def __init__(self, cls: type[RadixCache], num_pages: int, page_size: int) -> None:
        self.allocator = RefCountedAllocator(num_pages)
        self.cache = cls(self.allocator, page_size)
        self.S = page_size
        self.running: list[_Request] = []
        self.calls: list[tuple[str, tuple, object]] = []  # (method, args, what it returned)

    # the events
    def apply(self, event: Event) -> None:
        kind = event[0]
        if kind == "arrive":
            self._arrive(list(event[1]))
        elif kind == "grow":
            self._grow(self.running[event[1]], list(event[2]))
        elif kind == "finish":
            req = self.running.pop(event[1])
            self.allocator.free(req.table)
        elif kind == "lookup":
            self.cache.match(list(event[1]), event[2])
        elif kind == "evict":
            self.cache.evict(event[1])
        else:
            raise ValueError(kind)

    def _arrive(self, tokens: list[int]) -> None:
        S = self.S
        pages, node = self.cache.match(tokens, (len(tokens) - 1) // S)
        pages = list(pages)
        self.allocator.share(pages)
        need = pages_needed(len(tokens), S) - len(pages)
        if need > self.allocator.num_free:  # no room: it waits (and holds nothing)
            self.allocator.free(pages)
            return
        req = _Request(tokens, pages + self.allocator.allocate(need), node, len(pages))
        self.running.append(req)
        self._cache_full_pages(req)

    def _grow(self, req: _Request, more: list[int]) -> None:
        need = pages_needed(len(req.tokens) + len(more), self.S) - len(req.table)
        if need > self.allocator.num_free:
            return
        req.table += self.allocator.allocate(need)
        req.tokens += more
        self._cache_full_pages(req)

    def _cache_full_pages(self, req: _Request) -> None:
        """As the scheduler does: the request's full pages not in the tree yet join it; where
        the tree had those tokens already, the request uses the tree's page instead of its own."""
        start, full = req.in_tree, len(req.tokens) // self.S
        if full <= start:
            return
        req.node = self.cache.cache_pages(req.tokens, req.table, start, full, req.node)
        req.in_tree = full

    # what is compared
    def tree(self) -> list:
        """Every node as (key, pages, rank of last_used, children), siblings in key order."""
        nodes = list(self.cache.nodes())
        order = sorted({n.last_used for n in nodes})
        rank = {t: i for i, t in enumerate(order)}

        def walk(node: Node) -> list:
            return [(tuple(c.key), tuple(c.pages), rank[c.last_used], walk(c))
                    for _, c in sorted(node.children.items())]
        return walk(self.cache.root)


def learner_tree(fn: Callable, method: str, log: list | None = None) -> type[RadixCache]:
    """A RadixCache whose `method` ("match", "insert" or "evict") calls the learner's fn."""

    def record(args: tuple, out: object, self: RadixCache) -> object:
        self.world_calls.append((method, args, out))  # type: ignore[attr-defined]
        return out

    if method == "match":
        def call(self, tokens, max_pages=None):
            args = (list(tokens), max_pages)
            return record(args, fn(self, tokens, max_pages), self)
    elif method == "insert":
        def call(self, tokens, pages, start=None):
            args = (list(tokens), list(pages), start)
            return record(args, fn(self, tokens, pages, start), self)
    else:
        def call(self, num_pages):
            return record((num_pages,), fn(self, num_pages), self)
    return type("LearnersRadixCache", (RadixCache,), {method: call})


def logged_tree(method: str) -> type[RadixCache]:
    """The engine's RadixCache, logging its calls of `method` as learner_tree does."""
    engine = getattr(RadixCache, method)

    def call(self, *args):
        out = engine(self, *args)
        if method == "match":
            logged = (list(args[0]), args[1] if len(args) > 1 else None)
        elif method == "insert":
            logged = (list(args[0]), list(args[1]), args[2] if len(args) > 2 else None)
        else:
            logged = args
        self.world_calls.append((method, logged, out))
        return out
    return type("EngineRadixCache", (RadixCache,), {method: call})


def _make_world(cls: type[RadixCache], num_pages: int, page_size: int) -> World:
    world = World(cls, num_pages, page_size)
    world.cache.world_calls = world.calls  # type: ignore[attr-defined]
    return world


# --- comparing the two worlds -----------------------------------------------------------------

_NAMES = {"match": ("match_prefix", "RadixCache.match"),
          "insert": ("insert", "RadixCache.insert"),
          "evict": ("evict", "RadixCache.evict")}


def _returned(method: str, out: object) -> object:
    """What a call returned, as comparable data (or a description of a wrong shape)."""
    if method == "evict":
        return out if isinstance(out, int) and not isinstance(out, bool) else ("bad", out)
    if not (isinstance(out, tuple) and len(out) == 2):
        return ("bad", out)
    pages, node = out
    if not isinstance(pages, list) or not all(isinstance(p, int) for p in pages):
        return ("bad", out)
    return (list(pages), path_pages(node))


def _compare_calls(mine: World, engine: World, method: str, what: str,
                   hints: dict[str, str]) -> None:
    you, eng = _NAMES[method]
    for a, b in zip(mine.calls, engine.calls):
        got, want = _returned(method, a[2]), _returned(method, b[2])
        if got == want:
            continue
        call = _describe_call(method, b[1])
        if isinstance(got, tuple) and got and got[0] == "bad":
            shape = tr("an int") if method == "evict" else \
                tr("a tuple (pages: list[int], node: Node)")
            raise CheckFailed(tr("{what}: {call} returned {got!r}; it should return {shape}",
                                 what=what, call=call, got=got[1], shape=shape))
        if method == "evict":
            raise CheckFailed(tr("{what}: {call} freed (returned) {got} pages, the engine's {eng} "
                                 "{want}.{hint}", what=what, call=call, got=got, eng=eng,
                                 want=want, hint=hints.get("count", "")))
        (gp, gn), (wp, wn) = got, want
        if gp != wp:
            raise CheckFailed(tr("{what}: {call} returned pages {got}, the engine's {eng} "
                                 "{want}.{hint}", what=what, call=call, got=clip(gp, 12),
                                 eng=eng, want=clip(wp, 12), hint=hints.get("pages", "")))
        node = tr("not a Node of the tree") if gn is None else \
            tr("the end of pages {pages}", pages=clip(gn, 12))
        raise CheckFailed(tr("{what}: {call} returned the right pages, but its node is {node}; "
                             "it should be the node where those pages end ({want}).{hint}",
                             what=what, call=call, node=node, want=clip(wn, 12),
                             hint=hints.get("node", "")))
    if len(mine.calls) != len(engine.calls):
        raise CheckFailed(tr("{what}: your {you} was called {got} times, the engine's "
                             "{want}{hint}", what=what, you=you, got=len(mine.calls),
                             want=len(engine.calls), hint=hints.get("calls", "")))


def _compare_state(mine: World, engine: World, what: str, hints: dict[str, str]) -> None:
    a, b = mine.allocator, engine.allocator
    mt, et = mine.tree(), engine.tree()

    def strip(t):  # the tree without the LRU ranks
        return [(k, p, strip(c)) for k, p, _, c in t]
    if strip(mt) != strip(et):
        raise CheckFailed(tr("{what}: the tree differs from the engine's: {got} instead of "
                             "{want} (each node's pages, children in brackets).{hint}",
                             what=what, got=_tree_text(strip(mt)), want=_tree_text(strip(et)),
                             hint=hints.get("shape", "")))
    for ra, rb in zip(mine.running, engine.running):
        if ra.table != rb.table:
            raise CheckFailed(tr("{what}: a request's page table is {got}, with the engine's "
                                 "tree {want}.{hint}", what=what, got=clip(ra.table, 12),
                                 want=clip(rb.table, 12), hint=hints.get("pages", "")))
        if path_pages(ra.node) != ra.table[:ra.in_tree]:
            raise CheckFailed(tr("{what}: a running request's node moved: it ended the path of "
                                 "its pages {was}, and now ends {now}.{hint}", what=what,
                                 was=clip(ra.table[:ra.in_tree], 12),
                                 now=clip(path_pages(ra.node) or [], 12),
                                 hint=hints.get("held node", "")))
    if mine.cache.num_pages != engine.cache.num_pages:
        raise CheckFailed(tr("{what}: the tree has the engine's nodes, but cache.num_pages says "
                             "{got}, the engine's tree {want}.{hint}", what=what,
                             got=mine.cache.num_pages, want=engine.cache.num_pages,
                             hint=hints.get("num_pages", "")))
    if a.refs != b.refs:
        diff = [p for p in range(a.num_pages) if a.refs[p] != b.refs[p]]
        p = diff[0]
        raise CheckFailed(tr("{what}: page {page} has {got} holders, with the engine's tree "
                             "{want} (pages whose counts differ: {pages}).{hint}", what=what,
                             page=p, got=a.refs[p], want=b.refs[p], pages=clip(diff),
                             hint=hints.get("refs", "")))
    if sorted(a._free) != sorted(b._free) or a.num_evictable != b.num_evictable:
        raise CheckFailed(tr("{what}: {free} pages on the free list and {evictable} evictable, "
                             "with the engine's tree {want_free} and {want_evictable}.{hint}",
                             what=what, free=len(a._free), evictable=a.num_evictable,
                             want_free=len(b._free), want_evictable=b.num_evictable,
                             hint=hints.get("refs", "")))
    if mt != et:
        raise CheckFailed(tr("{what}: the tree has the engine's nodes, but not in the same order "
                             "of last use, so the next eviction would take another leaf.{hint}",
                             what=what, hint=hints.get("lru", "")))
    a._free = deque(b._free)  # the same set: lend pages in the same order from here on


def _tree_text(t: list) -> str:
    return "[" + ", ".join(f"{list(p)}" + (_tree_text(c) if c else "") for _, p, c in t) + "]"


def random_streams(fn: Callable, method: str, hints: dict[str, str]) -> int:
    """The learner's `method` over one seeded random stream per page size 1, 2, 3, 4 and 16
    (120 pages, four stems to share); how many calls were compared."""
    n = 0
    for S in (1, 2, 3, 4, 16):
        rng = _rng()
        base = stems(rng, S, 4)
        n += run_stream(fn, method, lambda w, rng=rng, base=base: random_stream(w, rng, 120, base),
                        S, 120, tr("a random stream, page size {S}", S=S), hints)
    return n


def run_stream(fn: Callable, method: str, events: Iterator[Event] | Callable[[World], Iterator],
               page_size: int, num_pages: int, what: str, hints: dict[str, str]) -> int:
    """Apply a stream to the engine's world and to the learner's, comparing after every event.
    `events` may be a function of the engine's world (to pick running requests). Returns how
    many calls of `method` were compared."""
    engine = _make_world(logged_tree(method), num_pages, page_size)
    mine = _make_world(learner_tree(fn, method), num_pages, page_size)
    stream = events(engine) if callable(events) else events
    you = _NAMES[method][0]
    for event in stream:
        engine.apply(event)
        try:
            with own_work(you):
                mine.apply(event)
        except (NotImplementedError, CheckFailed):
            raise
        except Exception as err:
            _compare_calls(mine, engine, method, what, hints)
            raise CheckFailed(tr("{what}: after your {you}, the {event} failed with {error}: "
                                 "{text}.{hint}", what=what, you=you, event=_event_text(event),
                                 error=type(err).__name__, text=str(err),
                                 hint=hints.get("crash", ""))) from None
        step = tr("{what}, after the {event}", what=what, event=_event_text(event))
        _compare_calls(mine, engine, method, step, hints)
        _compare_state(mine, engine, step, hints)
    return len(engine.calls)


def _event_text(event: Event) -> Text:
    kind = event[0]
    if kind == "arrive":
        return tr("arrival of a prompt of {n} tokens", n=len(event[1]))
    if kind == "grow":
        return tr("growth of request {i} by {n} tokens", i=event[1], n=len(event[2]))
    if kind == "finish":
        return tr("end of request {i}", i=event[1])
    if kind == "lookup":
        return tr("lookup of {n} tokens (max_pages={max_pages})", n=len(event[1]),
                  max_pages=event[2])
    return tr("eviction of {n} pages", n=event[1])


# --- streams ----------------------------------------------------------------------------------

def stems(rng: random.Random, page_size: int, k: int = 4, vocab: int = 50) -> list[list[int]]:
    """k prompts' beginnings of 2 to 6 pages and a few tokens (a small vocabulary, so that
    pages of different prompts may agree by chance too)."""
    return [[rng.randrange(vocab) for _ in range(rng.randrange(2, 7) * page_size
                                                  + rng.randrange(page_size))]
            for _ in range(k)]


def prompt(rng: random.Random, base: list[list[int]], vocab: int = 50) -> list[int]:
    """A stem cut anywhere (inside a page or at its end), maybe with tokens of its own after."""
    stem = rng.choice(base)
    out = stem[:rng.randrange(1, len(stem) + 1)]
    return out + [rng.randrange(vocab) for _ in range(rng.choice([0, 0, 1, 2, 5]))]


def random_stream(world: World, rng: random.Random, n: int, base: list[list[int]],
                  evicts: bool = True, max_running: int = 4) -> Iterator[Event]:
    """n events of a busy engine: arrivals, growth, finishes, lookups and evictions."""
    for _ in range(n):
        r = rng.random()
        if world.running and (r < 0.25 or len(world.running) >= max_running):
            yield ("finish", rng.randrange(len(world.running)))
        elif world.running and r < 0.4:
            yield ("grow", rng.randrange(len(world.running)),
                   [rng.randrange(50) for _ in range(rng.randrange(1, 2 * world.S + 2))])
        elif r < 0.5:
            yield ("lookup", prompt(rng, base), rng.choice([None, None, 0, 1, 2, 3]))
        elif evicts and r < 0.58:
            yield ("evict", rng.randrange(1, 4))
        else:
            yield ("arrive", prompt(rng, base))
    while world.running:
        yield ("finish", 0)
