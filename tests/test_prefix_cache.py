"""Prefix caching (engine/radix_cache.py): the radix tree on its own, an engine that drives
random request streams against an oracle that counts every page's holders, and the same tokens
(logprobs within 1e-5, float32, torch backend) with the cache on as with it off, over repeated
prompts, prompts that diverge inside a page and at its boundary, page sizes 1/3/16, chunked
prefill, preemption, abort, eviction under a tight pool, n > 1, the FlashInfer backend and
CUDA graphs through their CPU stand-ins."""

from __future__ import annotations

import random

import pytest
import torch
from engine_runs import record_replays, run_traced
from flashinfer_standin import install_flashinfer_standin, install_graph_standin

import minimodel as mm
from minimodel.engine import LLM
from minimodel.engine.radix_cache import RadixCache, RefCountedAllocator

CPU32 = dict(device="cpu", dtype=torch.float32, skip_tokenizer_init=True)
VOCAB = 1000  # tiny's vocabulary is larger; prompts use the first 1000 ids


# --- the tree on its own ---------------------------------------------------------------------

def tree(num_pages: int = 16, page_size: int = 2) -> tuple[RefCountedAllocator, RadixCache]:
    alloc = RefCountedAllocator(num_pages)
    return alloc, RadixCache(alloc, page_size)


def cache_pages(alloc: RefCountedAllocator, cache: RadixCache, tokens: list[int]) -> list[int]:
    """What a finished request leaves behind: its full pages in the tree, its own hold gone."""
    pages = alloc.allocate(len(tokens) // cache.page_size)
    held, _ = cache.insert(tokens, pages)
    for own in pages:
        alloc.free([own])
    return held


def shape(cache: RadixCache) -> list[tuple[int, ...]]:
    """Every node's pages, parents before children, siblings in key order."""
    out = []

    def walk(node):
        for key in sorted(node.children):
            child = node.children[key]
            out.append(tuple(child.pages))
            walk(child)
    walk(cache.root)
    return out


def test_match_insert_and_split():
    alloc, cache = tree()
    a = cache_pages(alloc, cache, [1, 2, 3, 4, 5, 6])  # one node of three pages
    assert shape(cache) == [tuple(a)]
    assert alloc.num_evictable == 3 and alloc.num_free == 16

    pages, node = cache.match([1, 2, 3, 4, 9, 9, 9])  # agrees for two pages: a split
    assert pages == a[:2] and node.pages == a[:2]
    assert shape(cache) == [tuple(a[:2]), (a[2],)]
    assert cache.match([1, 2, 3])[0] == a[:1]  # whole pages only: the 3 is a partial page
    assert cache.match([1, 9, 3, 4])[0] == []  # diverges inside the first page
    assert cache.match([1, 2, 3, 4, 5, 6, 7, 8], max_pages=1)[0] == a[:1]

    b = cache_pages(alloc, cache, [1, 2, 3, 4, 7, 8, 9, 10])  # diverges at a page boundary
    assert b[:2] == a[:2], "pages the tree has are the tree's"
    assert shape(cache) == [tuple(a[:1]), tuple(a[1:2]), (a[2],), tuple(b[2:])]
    assert cache.num_pages == 5 and alloc.num_evictable == 5
    assert len(alloc._free) == 16 - 5, "the duplicate pages went back to the free list"


def test_eviction_is_least_recently_used_leaf_first_and_spares_held_pages():
    alloc, cache = tree()
    old = cache_pages(alloc, cache, [1, 1, 2, 2])
    new = cache_pages(alloc, cache, [3, 3, 4, 4])
    held, _ = cache.match([1, 1, 2, 2, 5])  # a request now holds `old` ...
    alloc.share(held)
    assert alloc.num_evictable == 2  # ... so only `new` can go
    assert cache.evict(1) == 2  # a node goes whole
    assert shape(cache) == [tuple(old)] and set(new) <= set(alloc._free)
    assert cache.evict(8) == 0 and not cache.reset(), "held pages are never evicted"
    alloc.free(held)  # the request finished
    assert alloc.num_evictable == 2 and cache.reset() and alloc.num_free == 16
    assert len(alloc._free) == 16 and shape(cache) == []

    # least recently used first: touch the first of three, then evict one node at a time
    firsts = [cache_pages(alloc, cache, [t, t])[0] for t in (1, 2, 3)]
    cache.match([1, 1])
    order = []
    for _ in range(3):
        before = set(alloc._free)
        cache.evict(1)
        order += [p for p in firsts if p in set(alloc._free) - before]
    assert order == [firsts[1], firsts[2], firsts[0]]


def test_allocate_evicts_only_when_the_free_list_is_empty():
    alloc, cache = tree(num_pages=4)
    cache_pages(alloc, cache, [1, 1, 2, 2, 3, 3])
    assert alloc.num_free == 4 and len(alloc._free) == 1
    got = alloc.allocate(1)
    assert cache.num_pages == 3, "a free page was there: nothing evicted"
    got += alloc.allocate(2)  # the tree's only leaf (all three pages) goes
    assert cache.num_pages == 0 and len(set(got)) == 3
    with pytest.raises(AssertionError):
        alloc.free([got[0], got[0]])


# --- the engine: an oracle that counts references --------------------------------------------

def check_pages(llm: LLM, snapshot: dict[int, torch.Tensor],
                lent: set[int]) -> dict[int, torch.Tensor]:
    """Every page's holder count equals the requests that hold it plus the tree; free pages
    are held by nobody; a page that holds a request's next tokens is its own; a page in the
    tree was not written since the last step, unless it was evicted and lent again (`lent`:
    pages allocated since). Returns the tree's pages' K/V for next time."""
    alloc, cache, sched = llm.allocator, llm.prefix_cache, llm.scheduler
    in_tree = [p for node in cache.nodes() for p in node.pages]
    assert len(in_tree) == len(set(in_tree)), "a page is in the tree twice"
    seqs = [s for s in list(sched.running) + list(sched.waiting) if s.page_table]
    want = [0] * alloc.num_pages
    for s in seqs:
        assert len(s.page_table) == len(set(s.page_table)), "a request holds a page twice"
        for p in s.page_table:
            want[p] += 1
        # pages a request writes (from its first uncached token on) are shared with no one
        S = llm.config.page_size
        for p in s.page_table[s.num_cached_tokens // S:]:
            assert alloc.refs[p] == 1, f"page {p}, which request {s.request_id} writes, is shared"
    for p in in_tree:
        want[p] += 1
    assert alloc.refs == want, "reference counts differ from the oracle's"
    assert sorted(alloc._free) == [p for p in range(alloc.num_pages) if want[p] == 0]
    assert alloc.num_evictable == sum(1 for p in in_tree if want[p] == 1)
    for s in seqs:  # a request's pages in the tree are the tree's path to its node
        path, node = [], s.cache_node
        while node is not None and node is not cache.root:
            path = node.pages + path
            node = node.parent
        assert s.page_table[:s.num_pages_in_cache] == path
    pools = llm.kv_cache.pools
    for p, kv in snapshot.items():
        if p in set(in_tree) and p not in lent:
            assert torch.equal(torch.stack([pool[p] for pool in pools]), kv), \
                f"cached page {p} was written"
    lent.clear()
    return {p: torch.stack([pool[p] for pool in pools]).clone() for p in in_tree}


@pytest.mark.parametrize("page_size, num_pages", [(1, 50), (3, 20), (4, 15)])
def test_random_streams_against_a_reference_counting_oracle(page_size, num_pages):
    rng = random.Random(page_size)
    llm = LLM("tiny", page_size=page_size, num_pages=num_pages, max_num_seqs=6,
              max_num_batched_tokens=24, **CPU32)
    stems = [[rng.randrange(VOCAB) for _ in range(rng.randrange(4, 30))] for _ in range(4)]
    snapshot: dict[int, torch.Tensor] = {}
    lent: set[int] = set()
    allocate = llm.allocator.allocate
    llm.allocator.allocate = lambda n: lent.update(got := allocate(n)) or got
    live: list[int] = []
    aborted = preempted = 0
    for _ in range(160):
        if rng.random() < 0.5:  # a new request: a stem (or a cut of one), maybe more after it
            stem = rng.choice(stems)
            prompt = stem[:rng.randrange(1, len(stem) + 1)]
            prompt += [rng.randrange(VOCAB) for _ in range(rng.choice([0, 0, 1, 5]))]
            live.append(llm.add_request(prompt, mm.SamplingParams(
                temperature=rng.choice([0.0, 1.0]), seed=rng.randrange(100),
                max_tokens=rng.randrange(1, 12), ignore_eos=True)))
        if live and rng.random() < 0.05:
            aborted += llm.abort(live.pop(rng.randrange(len(live))))
        done = {o.request_id for o in llm.step()}
        live = [r for r in live if r not in done]
        if llm.last_batch is not None:
            preempted += len(llm.last_batch.preempted)
        snapshot = check_pages(llm, snapshot, lent)
    while llm.has_unfinished_requests():
        llm.step()
        snapshot = check_pages(llm, snapshot, lent)
    assert llm.allocator.num_free == num_pages, "idle: every page free or evictable"
    assert llm.prefix_cache_stats()["hit_rate"] > 0.2
    assert aborted > 0 and preempted > 0, "the stream should abort and preempt"
    assert llm.reset_prefix_cache() and len(llm.allocator._free) == num_pages


# --- the same tokens with the cache as without it --------------------------------------------

Wave = list[tuple[list[int], mm.SamplingParams]]


def shared_prefix_requests(page_size: int, seed: int = 0, vocab: int = VOCAB) -> list[Wave]:
    """Waves of requests (a wave arrives while the previous one runs): a system prompt shared
    by all, prompts that diverge inside a page and at a page boundary, a prompt repeated, a
    prompt that is exactly a cached prefix, and n = 3 copies of one prompt with their own
    seeds. Greedy and seeded sampling, logprobs on."""
    rng = random.Random(seed)
    system = [rng.randrange(vocab) for _ in range(5 * page_size + 2)]
    boundary, inside = 4 * page_size, 4 * page_size + max(1, page_size // 2)

    def tail(n):
        return [rng.randrange(vocab) for _ in range(n)]

    prompts = [system + tail(7), system + tail(3), system[:boundary] + tail(5),
               system[:inside] + tail(4), system + tail(7), system[:boundary],
               system + tail(1), tail(20)]
    prompts.insert(4, prompts[0])  # an exact repeat
    waves = []
    for w in range(3):
        wave = []
        for i, p in enumerate(prompts[w * 3:(w + 1) * 3] + ([prompts[0]] if w == 2 else [])):
            sample = (i + w) % 2 == 1
            wave.append((p, mm.SamplingParams(temperature=0.9 if sample else 0.0, seed=10 * w + i,
                                              max_tokens=6 + i, logprobs=1, ignore_eos=True)))
        waves.append(wave)
    n3 = system + tail(6)
    waves.append([(n3, mm.SamplingParams(temperature=1.0, seed=s, max_tokens=5, logprobs=0,
                                         ignore_eos=True)) for s in range(3)])
    return waves


def run_waves(llm: LLM, waves, steps_between: int = 2, abort: set[int] = frozenset()):
    """Add each wave `steps_between` steps after the previous; abort the requests whose
    index is in `abort` right after the second wave arrives. Outputs by index."""
    ids, done = [], {}
    for w, wave in enumerate(waves):
        ids += [llm.add_request(p, sp) for p, sp in wave]
        if w == 1:
            for i in abort:
                llm.abort(ids[i])
        for _ in range(steps_between):
            done.update({o.request_id: o for o in llm.step()})
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
    return {i: done[r] for i, r in enumerate(ids) if r in done}


def assert_same(got: dict, want: dict, tol: float = 1e-5) -> None:
    assert got.keys() == want.keys()
    for i in want:
        a, b = got[i], want[i]
        assert a.token_ids == b.token_ids, f"request {i}: tokens differ"
        diff = max((abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0)
        assert diff <= tol, f"request {i}: logprobs differ by {diff:.2e}"
        for ta, tb in zip(a.top_logprobs, b.top_logprobs, strict=True):
            assert [t for t, _ in ta] == [t for t, _ in tb]
        assert a.finish_reason == b.finish_reason


def on_and_off(waves, abort=frozenset(), **kw):
    want = run_waves(LLM("tiny", enable_prefix_caching=False, **CPU32, **kw), waves, abort=abort)
    llm = LLM("tiny", **CPU32, **kw)
    got = run_waves(llm, waves, abort=abort)
    assert_same(got, want)
    assert llm.allocator.num_free == llm.allocator.num_pages
    return llm, got, want


@pytest.mark.parametrize("page_size", [1, 3, 16])
def test_same_tokens_with_the_cache_on_and_off(page_size):
    waves = shared_prefix_requests(page_size)
    llm, got, want = on_and_off(waves, page_size=page_size, num_pages=2048 // page_size,
                                max_num_batched_tokens=4 * page_size + 5)  # chunked prefill
    assert all(o.metrics.cached_tokens == 0 for o in want.values())
    hits = [o.metrics.cached_tokens for o in got.values()]
    assert sum(hits) > 0 and all(h % page_size == 0 for h in hits)
    n3 = list(got.values())[-3:]
    assert len({tuple(o.token_ids) for o in n3}) > 1, "n > 1 copies drew their own tokens"
    assert llm.scheduler.num_prefill_tokens < sum(
        len(o.prompt_token_ids) for o in got.values())


def test_cached_tokens_are_whole_pages_and_never_the_last_token():
    S = 4
    llm = LLM("tiny", page_size=S, num_pages=64, **CPU32)
    sp = mm.SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)
    base = list(range(100, 110))  # 10 tokens: two full pages
    first = llm.generate(base, sp)[0]
    assert first.metrics.cached_tokens == 0
    cases = {  # prompt -> cached tokens
        tuple(base): 8,  # the same prompt: its two full pages
        tuple(base[:8]): 4,  # exactly two cached pages: the last token must be computed
        tuple(base[:6] + [7, 7, 7]): 4,  # diverges inside the second page
        tuple(base[:8] + [7]): 8,  # diverges at the boundary
        tuple(base + first.token_ids[:2] + [5]): 12,  # the first answer's third page too
        (7, *base): 0,
    }
    for prompt, cached in cases.items():
        out = llm.generate(list(prompt), sp)[0]
        assert out.metrics.cached_tokens == cached, prompt
    assert llm.reset_prefix_cache()
    assert llm.generate(base, sp)[0].metrics.cached_tokens == 0, "reset emptied the cache"
    off = LLM("tiny", page_size=S, num_pages=64, enable_prefix_caching=False, **CPU32)
    assert off.prefix_cache is None and not off.reset_prefix_cache()
    off.generate(base, sp)
    assert off.generate(base, sp)[0].metrics.cached_tokens == 0
    assert off.prefix_cache_stats() == {"cached_pages": 0, "evictable_pages": 0,
                                        "hit_rate": 0.0}


def test_reset_refuses_while_a_request_shares_the_cache():
    llm = LLM("tiny", page_size=2, num_pages=64, **CPU32)
    sp = mm.SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    llm.generate(list(range(20)), sp)
    rid = llm.add_request(list(range(20)), sp)
    llm.step()
    assert not llm.reset_prefix_cache(), "a running request holds cached pages"
    assert llm.prefix_cache.num_pages > 0
    llm.abort(rid)
    assert llm.reset_prefix_cache() and llm.prefix_cache.num_pages == 0


def test_preemption_abort_and_eviction_under_a_tight_pool():
    """18 pages of 4 tokens for requests that share a prefix and need more than that at
    once: requests are preempted while they share pages, two are aborted, and the tree is
    evicted to make room; every other request gets the tokens of a run without the cache."""
    waves = shared_prefix_requests(4, seed=5)
    for wave in waves:
        for _, sp in wave:
            sp.max_tokens += 14
    llm = LLM("tiny", page_size=4, num_pages=18, max_num_seqs=8, **CPU32)
    evicted = []
    evict = llm.prefix_cache.evict
    llm.prefix_cache.evict = lambda n: evicted.append(evict(n)) or evicted[-1]
    got = run_waves(llm, waves, abort={1, 4})
    want = run_waves(LLM("tiny", page_size=4, num_pages=18, max_num_seqs=8,
                         enable_prefix_caching=False, **CPU32), waves, abort={1, 4})
    assert_same(got, want)
    assert sum(o.metrics.num_preemptions for o in got.values()) > 0, "nothing was preempted"
    assert sum(evicted) > 0, "nothing was evicted"
    assert sum(o.metrics.cached_tokens for o in got.values()) > 0
    assert len(got) == sum(len(w) for w in waves) - 2
    assert llm.allocator.num_free == 18


def test_flashinfer_and_graphs_share_page_ids(monkeypatch, small_checkpoint):
    """Through the CPU stand-ins of FlashInfer and CUDA graphs: two requests' rows of
    paged_kv_indices name the same pages, and tokens equal the torch backend's without the
    cache."""
    install_graph_standin(monkeypatch)
    install_flashinfer_standin(monkeypatch, float32=True)
    folder = small_checkpoint(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              head_dim=64, num_attention_heads=4, num_key_value_heads=2)
    waves = shared_prefix_requests(3, seed=2, vocab=500)
    reqs = [r for wave in waves for r in wave]
    kw = dict(CPU32, page_size=3, num_pages=600, max_num_seqs=16, max_num_batched_tokens=20)
    want, _ = run_traced(LLM(folder, attention_backend="torch", enable_prefix_caching=False,
                             **kw), reqs)
    llm = LLM(folder, attention_backend="flashinfer", **kw)
    assert llm.cuda_graphs_reason.startswith("on")
    replays = record_replays(llm)
    shared_in = {"prefill": 0, "decode": 0}  # steps whose kv_indices name a page twice
    forward = llm.runner.forward

    def logged(input_ids, metadata):
        indptr, indices = metadata.kv_indptr.tolist(), metadata.kv_indices.tolist()
        rows = [set(indices[indptr[i]:indptr[i + 1]]) for i in range(metadata.num_requests)]
        if any(rows[i] & rows[j] for i in range(len(rows)) for j in range(i)):
            shared_in["decode" if metadata.is_decode else "prefill"] += 1
        return forward(input_ids, metadata)

    llm.runner.forward = logged
    got, _ = run_traced(llm, reqs)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.token_ids == b.token_ids, f"request {i}: tokens differ"
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) <= 1e-5
    assert replays, "no decode step replayed a graph"
    assert shared_in["decode"] > 0 and shared_in["prefill"] > 0, shared_in
    assert sum(o.metrics.cached_tokens for o in got) > 0


@pytest.mark.stress  # two processes over gloo
def test_two_ranks_share_prefixes_like_one_without_the_cache():
    waves = shared_prefix_requests(4, seed=3)
    kw = dict(page_size=4, num_pages=16, max_num_seqs=8, max_num_batched_tokens=24)
    want = run_waves(LLM("tiny", enable_prefix_caching=False, **CPU32, **kw), waves)
    with LLM("tiny", tensor_parallel_size=2, **CPU32, **kw) as llm:
        got = run_waves(llm, waves)
        assert llm.allocator.num_free == 16
    assert_same(got, want, tol=1e-4)  # two ranks sum their halves in another order
    assert sum(o.metrics.cached_tokens for o in got.values()) > 0
    assert sum(o.metrics.num_preemptions for o in got.values()) > 0


def test_a_shared_system_prompt_is_computed_once_even_in_one_batch():
    """Workload P1 in small: the first request computes the system prompt; the others, though
    they arrive in the same step, wait one step and find it cached (the in-batch check), so
    the prefill tokens are one whole prompt plus each other question (and the system prompt's
    tail, not a whole page). P2: each turn computes only what the cache lacks."""
    from minimodel.bench.prefix import PrefixWorkloads, format_prefix, prefix_report

    w = PrefixWorkloads(system_tokens=70, questions=5, question_tokens=10, new_tokens=4,
                        turns=3, user_tokens=20)
    rep = prefix_report("tiny", w, page_size=16)
    p1, p2 = rep["P1"], rep["P2"]
    assert p1["same_tokens"] and p2["same_tokens"]
    prompt = 70 + 10
    assert p1["off"]["prefill_tokens"] == 5 * prompt
    assert p1["on"]["prefill_tokens"] == prompt + 4 * (prompt - 64), "64 = 4 whole pages shared"
    assert p1["on"]["hit_rate"] == pytest.approx(4 * 64 / (5 * prompt))
    turns = [20, 20 + 4 + 20, 20 + 4 + 20 + 4 + 20]  # each turn's prompt
    assert p2["off"]["prefill_tokens"] == sum(turns)
    # a turn finds the previous turn's whole pages: of its prompt and of its answer but the
    # last answer token, which was sampled, never run through the model
    cached = [0] + [(t - 20 - 1) // 16 * 16 for t in turns[1:]]
    assert p2["on"]["prefill_tokens"] == sum(turns) - sum(cached)
    assert p1["prefill_tokens_ratio"] > 2 and "target" in format_prefix([rep])
