"""Prefix caching: a radix tree over the KV pages of token prefixes that were computed before.

A chat's second turn, a shared system prompt, few-shot examples and `n > 1` all send tokens
that an earlier request already ran through the model. Their K/V are still in the pool if
nobody overwrote them, so the engine keeps the *full* pages of every request in a tree keyed by
their token ids (SGLang's RadixAttention, at the granularity of pages as in mini-sglang):

- a node's edge is a run of whole pages: `key` holds their token ids (page_size per page) and
  `pages` their page ids; children are found by the token ids of their first page;
- `match(tokens)` walks down as far as whole pages agree and returns those pages; where the
  match ends inside a node, the node is split in two, so that every node is shared whole;
- `insert(tokens, pages)` adds what is not there yet (splitting the node where the new
  tokens diverge inside it) and says which pages the tree holds for every page of `tokens`;
- pages carry reference counts (`RefCountedAllocator`): the tree holds one on each of its pages and
  every request that uses a page holds one. A page only the tree holds is *evictable*: the
  allocator lends it again when its free list runs out, evicting least recently used leaves
  first (a leaf, so that the tree stays a tree of prefixes).

A partly filled page is never shared: the request that owns it writes its next tokens there.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from itertools import count

from minimodel.engine.kv_cache import PageAllocator


class RefCountedAllocator(PageAllocator):
    """chapter 07's free list, counting who holds each page, so that pages can be shared.

    `allocate(n)` lends n pages (each held once), `share(pages)` adds a holder to pages already
    lent, `free(pages)` removes one: a page with no holder left returns to the free list. With
    prefix caching a `RadixCache` (below) holds the full pages of earlier
    requests too (`cache=True`); a page that only the cache holds is *evictable*: it counts as
    free, and `allocate` evicts such pages, least recently used first, when the free list runs
    out (as vLLM keeps cached blocks in its free queue until it needs them).
    """

    def __init__(self, num_pages: int) -> None:
        super().__init__(num_pages)
        self.refs = [0] * num_pages  # holders of each page: requests, and the cache
        self._in_cache = [False] * num_pages
        self.num_evictable = 0  # pages that only the cache holds
        self.cache: RadixCache | None = None  # set by RadixCache(allocator, ...)

    @property
    def num_free(self) -> int:
        """Pages that can be lent right now: the free list and the evictable cached pages."""
        return len(self._free) + self.num_evictable

    def allocate(self, n: int) -> list[int]:
        """Lend n pages; the caller checks `num_free` first (running out is a scheduler bug)."""
        if n > len(self._free) and self.cache is not None:
            self.cache.evict(n - len(self._free))
        assert n <= len(self._free), f"asked for {n} pages, {len(self._free)} free"
        pages = [self._free.popleft() for _ in range(n)]
        for page in pages:
            self.refs[page] = 1
        return pages

    def share(self, pages: list[int], cache: bool = False) -> None:
        """One more holder of pages already lent (the cache itself when cache=True)."""
        for page in pages:
            assert self.refs[page] > 0, f"page {page} is not lent: it cannot be shared"
            if cache:
                assert not self._in_cache[page], f"page {page} is cached already"
                self._in_cache[page] = True
            elif self._in_cache[page] and self.refs[page] == 1:
                self.num_evictable -= 1  # a request holds it again
            self.refs[page] += 1

    def free(self, pages: list[int], cache: bool = False) -> None:
        """One holder lets go of pages (the cache itself when cache=True): a page nobody
        holds returns to the free list."""
        for page in pages:
            assert self.refs[page] > 0, f"page {page} is freed more often than it was lent"
            if cache:
                assert self._in_cache[page], f"page {page} is not in the cache"
                self._in_cache[page] = False
                if self.refs[page] == 1:
                    self.num_evictable -= 1  # evicted
            self.refs[page] -= 1
            if self.refs[page] == 0:
                self._free.append(page)
            elif self.refs[page] == 1 and self._in_cache[page]:
                self.num_evictable += 1  # only the cache holds it now


class Node:
    """One edge of the tree: `pages` (whole pages) holding the K/V of the tokens in `key`."""

    __slots__ = ("children", "key", "last_used", "pages", "parent")

    def __init__(self, key: tuple[int, ...] = (), pages: Sequence[int] = (),
                 parent: Node | None = None) -> None:
        self.key = key
        self.pages = list(pages)
        self.parent = parent
        self.children: dict[tuple[int, ...], Node] = {}  # keyed by their first page's tokens
        self.last_used = 0

    def __repr__(self) -> str:
        return f"Node(pages={self.pages}, children={len(self.children)})"


class RadixCache:
    """A page-granular radix tree of cached token prefixes (see the module docstring).

    It registers itself with the allocator, which asks it to `evict` when it runs out of free
    pages. `tokens` given to `match` and `insert` may be any sequence of ints.
    """

    def __init__(self, allocator: RefCountedAllocator, page_size: int) -> None:
        self.allocator = allocator
        self.page_size = page_size
        self.root = Node()
        self.num_pages = 0  # pages in the tree (held by requests too, or evictable)
        self._clock = count(1)  # LRU order: a logical clock, the same on every machine
        allocator.cache = self

    # --- reading -------------------------------------------------------------------------

    def match(self, tokens: Sequence[int], max_pages: int | None = None) -> tuple[list[int], Node]:
        """The pages that hold the longest cached prefix of `tokens` (whole pages only, at most
        `max_pages`), and the node where that prefix ends. The nodes on the way are marked as
        just used; a node the match ends inside is split so that the match ends a node."""
        limit = len(tokens) // self.page_size
        if max_pages is not None:
            limit = min(limit, max_pages)
        node, pages, i = self.root, [], 0
        now = next(self._clock)
        while i < limit and (child := self._step(node, tokens, i, limit)) is not None:
            child.last_used = now
            pages += child.pages
            node, i = child, i + len(child.pages)
        return pages, node

    def _page(self, tokens: Sequence[int], i: int) -> tuple[int, ...]:
        """The token ids of page i of `tokens`."""
        S = self.page_size
        return tuple(tokens[i * S:(i + 1) * S])

    def _step(self, node: Node, tokens: Sequence[int], i: int, limit: int) -> Node | None:
        """The child of node whose first page is page i of tokens, cut (by a split) to the
        pages that agree with tokens' pages i .. limit - 1; None if no child starts so."""
        child = node.children.get(self._page(tokens, i))
        if child is None:
            return None
        n = 1
        while n < len(child.pages) and i + n < limit and \
                self._page(tokens, i + n) == self._page(child.key, n):
            n += 1
        return self._split(child, n) if n < len(child.pages) else child

    # --- writing -------------------------------------------------------------------------

    def insert(self, tokens: Sequence[int], pages: Sequence[int],
               start: Node | None = None) -> tuple[list[int], Node]:
        """Cache `pages` as the K/V of `tokens` (len(tokens) == len(pages) * page_size),
        continuing below `start` (default: the root; a node this request already reached, the
        tokens then being those after it). Pages whose tokens the tree holds already are left
        to their owner; the others join the tree, which takes a reference on each.

        Returns the tree's pages for all of `tokens` (an entry differs from `pages` where the
        tree had those tokens already: the caller may use the tree's page and let its own
        go) and the node where they end."""
        S = self.page_size
        assert len(tokens) == len(pages) * S, "insert whole pages only"
        node = start or self.root
        now = next(self._clock)
        node.last_used = now
        held: list[int] = []
        i = 0
        while i < len(pages):
            child = self._step(node, tokens, i, len(pages))
            if child is None:  # nothing from here on: a new leaf holds the rest of the pages
                child = Node(tuple(tokens[i * S:]), pages[i:], node)
                node.children[child.key[:S]] = child
                self.allocator.share(child.pages, cache=True)
                self.num_pages += len(child.pages)
            child.last_used = now
            held += child.pages
            node, i = child, i + len(child.pages)
        return held, node

    def cache_pages(self, tokens: Sequence[int], table: list[int], start: int, full: int,
                    node: Node | None) -> Node:
        """A request's pages table[start:full] (whole pages of `tokens`; the earlier ones are
        the tree's already, ending at `node`) join the tree. Where the tree held those tokens
        already (another request computed them too), the request takes the tree's page
        instead of its own: `table` is changed in place. Returns the node its pages end at."""
        S = self.page_size
        held, node = self.insert(tokens[start * S:full * S], table[start:full], node)
        for i, page in enumerate(held, start):
            if page != table[i]:
                self.allocator.share([page])
                self.allocator.free([table[i]])
                table[i] = page
        return node

    def _split(self, node: Node, n: int) -> Node:
        """Split node after its first n pages; return the new upper node (the first n pages).
        `node` keeps the rest, so a request that ends at `node` still ends there."""
        S = self.page_size
        parent = node.parent
        assert parent is not None and 0 < n < len(node.pages)
        upper = Node(node.key[:n * S], node.pages[:n], parent)
        upper.last_used = node.last_used
        parent.children[node.key[:S]] = upper
        node.key, node.pages, node.parent = node.key[n * S:], node.pages[n:], upper
        upper.children[node.key[:S]] = node
        return upper

    # --- making room ---------------------------------------------------------------------

    def _evictable(self, node: Node) -> bool:
        """A leaf whose pages nobody but the tree holds."""
        refs = self.allocator.refs
        return (node is not self.root and not node.children
                and all(refs[p] == 1 for p in node.pages))

    def nodes(self) -> Iterator[Node]:
        """Every node but the root, parents before children."""
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def evict(self, num_pages: int) -> int:
        """Free at least num_pages pages (fewer if not that many are evictable), least recently
        used leaf first; returns how many were freed."""
        order = count()  # ties (never between two leaves of one tree) in a fixed order
        heap = [(n.last_used, next(order), n) for n in self.nodes() if self._evictable(n)]
        heapq.heapify(heap)
        freed = 0
        while freed < num_pages and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            del parent.children[node.key[:self.page_size]]
            self.allocator.free(node.pages, cache=True)
            self.num_pages -= len(node.pages)
            freed += len(node.pages)
            if self._evictable(parent):
                heapq.heappush(heap, (parent.last_used, next(order), parent))
        return freed

    def reset(self) -> bool:
        """Evict every page no request holds; True if the tree is empty afterwards."""
        self.evict(self.allocator.num_pages)
        return not self.root.children
