"""Chapter 12's checks: every wrong tree learners write fails, every right one passes.

The solutions below are written as a learner would (one helper that walks and splits, shared by
match_prefix and insert); each mutant changes one thing in them."""

from __future__ import annotations

import pytest

from minimodel.engine.radix_cache import Node, RadixCache
from minimodel.grading import check

# --- the solutions ----------------------------------------------------------------------------


def split_node(node, n, page_size, keep_lower=True):
    parent = node.parent
    upper = Node(node.key[:n * page_size], node.pages[:n], parent)
    upper.last_used = node.last_used
    parent.children[upper.key[:page_size]] = upper
    if not keep_lower:  # the node object keeps the upper part; a new node takes the rest
        lower = Node(node.key[n * page_size:], node.pages[n:], node)
        lower.children, lower.last_used = node.children, node.last_used
        for c in lower.children.values():
            c.parent = lower
        node.key, node.pages, node.children = upper.key, upper.pages, {lower.key[:page_size]: lower}
        parent.children[node.key[:page_size]] = node
        return node
    node.key, node.pages, node.parent = node.key[n * page_size:], node.pages[n:], upper
    upper.children[node.key[:page_size]] = node
    return upper


def make_walk(past_limit=False, no_split=False, mark=True, keep_lower=True):
    def walk(cache, node, tokens, i, limit, now):
        S = cache.page_size
        pages = []
        while i < limit:
            child = node.children.get(tuple(tokens[i * S:(i + 1) * S]))
            if child is None:
                break
            n = 1
            stop = limit + 1 if past_limit else limit
            while (n < len(child.pages) and i + n < stop
                   and tuple(tokens[(i + n) * S:(i + n + 1) * S]) == child.key[n * S:(n + 1) * S]):
                n += 1
            if n < len(child.pages):
                if no_split:  # only whole nodes are matched
                    break
                child = split_node(child, n, S, keep_lower)
            if mark:
                child.last_used = now
            pages += child.pages
            node, i = child, i + n
        return node, i, pages
    return walk


def make_match(walk=None, zero_is_none=False, token_level=False):
    walk = walk or make_walk()

    def match_prefix(cache, tokens, max_pages):
        S = cache.page_size
        if token_level:  # a radix tree over tokens: a partly filled page counts too
            node, pages, t = cache.root, [], 0
            while True:
                child = node.children.get(tuple(tokens[t:t + S]))
                if child is None:
                    for c in node.children.values():
                        k = 0
                        while k < min(len(c.key), len(tokens) - t) and c.key[k] == tokens[t + k]:
                            k += 1
                        if k:
                            pages += c.pages[:-(-k // S)]
                            break
                    break
                pages += child.pages
                node, t = child, t + len(child.key)
            if max_pages is not None:
                pages = pages[:max_pages]
            return pages, node
        limit = len(tokens) // S
        if (max_pages if zero_is_none else max_pages is not None):
            limit = min(limit, max_pages)
        node, _, pages = walk(cache, cache.root, tokens, 0, limit, next(cache._clock))
        return pages, node
    return match_prefix


def make_insert(walk=None, share="new", own_pages=False, overwrite=False, count=True):
    walk = walk or make_walk()

    def insert(cache, tokens, pages, start=None):
        S = cache.page_size
        now = next(cache._clock)
        node = start if start is not None else cache.root
        node.last_used = now
        if overwrite:  # no split: a node that agrees only in part is replaced by the new leaf
            i, held = 0, []
            while i < len(pages):
                child = node.children.get(tuple(tokens[i * S:(i + 1) * S]))
                if child is None or tuple(tokens[i * S:i * S + len(child.key)]) != child.key:
                    break
                child.last_used = now
                held += child.pages
                node, i = child, i + len(child.pages)
        else:
            node, i, held = walk(cache, node, tokens, 0, len(pages), now)
        if share == "all":
            cache.allocator.share(list(pages[:i]))
        if i < len(pages):
            leaf = Node(tuple(tokens[i * S:]), pages[i:], node)
            node.children[leaf.key[:S]] = leaf
            if share != "none":
                cache.allocator.share(leaf.pages, cache=True)
            if count:
                cache.num_pages += len(leaf.pages)
            leaf.last_used = now
            held += leaf.pages
            node = leaf
        return (list(pages) if own_pages else held), node
    return insert


def make_evict(refs_checked=True, newest_first=False, leaves_only=True, parents=True,
               cache_flag=True, count=True):
    def evict(cache, num_pages):
        refs = cache.allocator.refs

        def evictable(n):
            return (n.parent is not None and (not n.children or not leaves_only)
                    and (not refs_checked or all(refs[p] == 1 for p in n.pages)))

        candidates = [n for n in cache.nodes() if evictable(n)]
        freed = 0
        while freed < num_pages and candidates:
            pick = max if newest_first else min
            node = pick(candidates, key=lambda n: n.last_used)
            candidates.remove(node)
            parent = node.parent
            del parent.children[node.key[:cache.page_size]]
            if cache_flag:
                cache.allocator.free(node.pages, cache=True)
            else:
                cache.allocator.free(node.pages)
            freed += len(node.pages)
            if count:
                cache.num_pages -= len(node.pages)
            if parents and evictable(parent) and parent not in candidates:
                candidates.append(parent)
        return freed
    return evict


match_prefix, insert, evict = make_match(), make_insert(), make_evict()


def tree_class(match=None, ins=None, ev=None):
    """A learner's capstone class over the given functions (the solutions by default)."""
    match, ins, ev = match or match_prefix, ins or insert, ev or evict
    ns = {"match_prefix": match, "insert": ins, "evict": ev, "RadixCache": RadixCache}
    exec("class MyRadixCache(RadixCache):\n"
         "    def match(self, tokens, max_pages=None):\n"
         "        return match_prefix(self, tokens, max_pages)\n"
         "    def insert(self, tokens, pages, start=None):\n"
         "        return insert(self, tokens, pages, start)\n"
         "    def evict(self, num_pages):\n"
         "        return evict(self, num_pages)\n", ns)
    return ns["MyRadixCache"]


def _passes(name, fn) -> bool:
    return check(name, fn).passed


def test_solutions_pass():
    assert _passes("ch12.match_prefix", match_prefix)
    assert _passes("ch12.insert", insert)
    assert _passes("ch12.evict", evict)
    assert _passes("ch12.my_prefix_cache", tree_class())


MATCH_MUTANTS = {
    "compares one page past the limit inside a node (off by one at the page boundary)":
        make_match(make_walk(past_limit=True)),
    "shares a partly filled page (matches tokens, not whole pages)": make_match(token_level=True),
    "max_pages=0 taken as no limit: a fully cached one-page prompt recomputes nothing":
        make_match(zero_is_none=True),
    "does not split a node: stops before one that agrees only in part":
        make_match(make_walk(no_split=True)),
    "does not mark the path as used": make_match(make_walk(mark=False)),
    "splits the wrong way round: the node object keeps the upper part":
        make_match(make_walk(keep_lower=False)),
    "calls the engine's own match": lambda cache, tokens, m: RadixCache.match(cache, tokens, m),
}


@pytest.mark.parametrize("name", list(MATCH_MUTANTS))
def test_match_mutants_fail(name):
    assert not _passes("ch12.match_prefix", MATCH_MUTANTS[name]), name


INSERT_MUTANTS = {
    "does not split: a new leaf replaces a node that agrees only in part":
        make_insert(overwrite=True),
    "takes no reference on the pages it adds": make_insert(share="none"),
    "also takes a reference on the pages the tree had": make_insert(share="all"),
    "returns the caller's pages, not the tree's": make_insert(own_pages=True),
    "splits the wrong way round: the node object keeps the upper part":
        make_insert(make_walk(keep_lower=False)),
    "does not mark the path as used": make_insert(make_walk(mark=False)),
    "does not count the pages it adds in cache.num_pages": make_insert(count=False),
}


@pytest.mark.parametrize("name", list(INSERT_MUTANTS))
def test_insert_mutants_fail(name):
    assert not _passes("ch12.insert", INSERT_MUTANTS[name]), name


EVICT_MUTANTS = {
    "evicts a page a request still holds (ignores reference counts)":
        make_evict(refs_checked=False),
    "evicts the most recently used leaf first": make_evict(newest_first=True),
    "evicts nodes that still have children": make_evict(leaves_only=False),
    "forgets the parent that became a leaf": make_evict(parents=False),
    "frees the pages as a request would (not as the tree's)": make_evict(cache_flag=False),
    "does not take the evicted pages off cache.num_pages": make_evict(count=False),
}


@pytest.mark.parametrize("name", list(EVICT_MUTANTS))
def test_evict_mutants_fail(name):
    assert not _passes("ch12.evict", EVICT_MUTANTS[name]), name


CAPSTONE_MUTANTS = {
    "keeps the engine's methods": type("MyRadixCache", (RadixCache,), {}),
    "a match that forgets to recompute the last token of a fully cached prompt":
        tree_class(match=make_match(zero_is_none=True)),
    "a match that shares a partly filled page": tree_class(match=make_match(token_level=True)),
    "an evict that takes pages requests hold": tree_class(ev=make_evict(refs_checked=False)),
    "an insert that takes no reference": tree_class(ins=make_insert(share="none")),
}


@pytest.mark.parametrize("name", list(CAPSTONE_MUTANTS))
def test_capstone_mutants_fail(name):
    assert not _passes("ch12.my_prefix_cache", CAPSTONE_MUTANTS[name]), name


def test_the_capstone_pool_evicts_and_preempts():
    """The capstone's waves make the engine evict and preempt, with the cache on and off."""
    from minimodel.grading.ch12 import CAPSTONE_POOLS, capstone

    for S, P in CAPSTONE_POOLS:
        llm = capstone.with_tree(tree_class(), S, P)
        evicted = capstone._count_evictions(llm.prefix_cache)
        outs = capstone._run_waves(llm, capstone.capstone_waves(S))
        assert sum(evicted) > 0
        assert sum(o.metrics.num_preemptions for o in outs) > 0, (S, P)
