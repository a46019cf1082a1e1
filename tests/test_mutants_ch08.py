"""Chapter 08's checks: every wrong implementation learners write fails, every right one passes."""

from __future__ import annotations

import functools
import math
import statistics
import types
from itertools import accumulate

import numpy as np
import pytest
import torch

import minimodel as mm
from minimodel.grading import check
from minimodel.grading.ch08 import engine_admit, engine_decode_step, reference_ttft_tpot

# --- ch08.admit -------------------------------------------------------------------------------


def admit_solution(waiting, cached, free_pages, page_size, max_num_batched_tokens, free_seqs):
    q_lens = []
    for n, c in zip(waiting, cached):
        if max_num_batched_tokens == 0 or len(q_lens) == free_seqs:
            break
        q = min(n, max_num_batched_tokens)
        pages = -(-(c + q) // page_size) - -(-c // page_size)
        if pages > free_pages:
            break
        q_lens.append(q)
        free_pages -= pages
        max_num_batched_tokens -= q
        if q < n:
            break
    return q_lens


def admit_room_first(waiting, cached, free_pages, page_size, max_num_batched_tokens, free_seqs):
    """Counts the room left in a partly filled last page, then whole pages for the rest."""
    out = []
    for i, n in enumerate(waiting):
        if len(out) >= free_seqs or max_num_batched_tokens <= 0:
            break
        q = n if n <= max_num_batched_tokens else max_num_batched_tokens
        room = (page_size - cached[i] % page_size) % page_size
        need = max(0, math.ceil((q - room) / page_size))
        if need > free_pages:
            break
        out.append(q)
        free_pages, max_num_batched_tokens = free_pages - need, max_num_batched_tokens - q
        if q != n:
            break
    return out


def admit_recursive(waiting, cached, free_pages, page_size, max_num_batched_tokens, free_seqs):
    if not waiting or free_seqs == 0 or max_num_batched_tokens <= 0:
        return []
    q = min(waiting[0], max_num_batched_tokens)
    c = cached[0]
    need = (c + q + page_size - 1) // page_size - (c + page_size - 1) // page_size
    if need > free_pages:
        return []
    if q < waiting[0]:
        return [q]
    return [q] + admit_recursive(waiting[1:], cached[1:], free_pages - need, page_size,
                                 max_num_batched_tokens - q, free_seqs - 1)


def _admit_mutant(pages="ceil", skip=False, budget="chunk", seqs="ok", cumulative=True,
                  chunk_pages="chunk", chunk_to_pages=False, held="subtract"):
    def fn(waiting, cached, free_pages, page_size, max_num_batched_tokens, free_seqs):
        out, free, left = [], free_pages, max_num_batched_tokens
        limit = {"ok": free_seqs, "plus1": free_seqs + 1, "none": 10**9}[seqs]
        for n, c in zip(waiting, cached):
            if len(out) >= limit:
                break
            if budget == "ignore":
                q = n
            else:
                if left <= 0:
                    break
                q = min(n, left)
                if budget == "whole" and q < n:
                    break
            counted = n if chunk_pages == "whole" else q
            if held == "scratch":
                c = 0  # as if nothing were cached
            total = {"ceil": -(-(c + counted) // page_size), "floor": (c + counted) // page_size,
                     "plus1": -(-(c + counted + 1) // page_size)}[pages]
            need = total - (-(-c // page_size) if held != "keep" else 0)
            if need > free:
                if chunk_to_pages and free > 0:
                    out.append(free * page_size)
                    break
                if skip:
                    continue
                break
            out.append(q)
            if cumulative:
                free -= need
            if budget != "no_subtract":
                left -= q
            if q < n:
                break
        return out

    return fn


def admit_mutates(waiting, cached, free_pages, page_size, max_num_batched_tokens, free_seqs):
    out = admit_solution(list(waiting), list(cached), free_pages, page_size, max_num_batched_tokens,
                         free_seqs)
    del waiting[: len(out)]  # "pop the admitted requests off the queue"
    return out


ADMIT_MUTANTS = {
    "skips ahead past a request that does not fit": _admit_mutant(skip=True),
    "floor instead of ceil for pages": _admit_mutant(pages="floor"),
    "reserves a page for the first new token": _admit_mutant(pages="plus1"),
    "ignores the token budget": _admit_mutant(budget="ignore"),
    "no chunking: stops at the prompt that crosses the budget": _admit_mutant(budget="whole"),
    "budget never decreases": _admit_mutant(budget="no_subtract"),
    "a chunk needs pages for the whole prompt": _admit_mutant(chunk_pages="whole"),
    "ignores free_seqs": _admit_mutant(seqs="none"),
    "free_seqs off by one": _admit_mutant(seqs="plus1"),
    "free pages never decrease": _admit_mutant(cumulative=False),
    "chunks to the free pages instead of stopping": _admit_mutant(chunk_to_pages=True),
    "a chunk in progress counts its pages from scratch": _admit_mutant(held="scratch"),
    "a chunk in progress asks again for the pages it holds": _admit_mutant(held="keep"),
    "brings the cached tokens again": lambda w, c, *a: admit_solution(
        [n + k for n, k in zip(w, c)], [0] * len(c), *a),
    "returns the count": lambda *a: len(admit_solution(*a)),
    "returns the indices": lambda *a: list(range(len(admit_solution(*a)))),
    "mutates the queue": admit_mutates,
}


def admit_tuple(waiting, cached, free_pages, page_size, max_num_batched_tokens, free_seqs):
    """The solution, answering with a tuple of numpy ints."""
    return tuple(np.int64(q) for q in admit_solution(waiting, cached, free_pages, page_size,
                                                       max_num_batched_tokens, free_seqs))


@pytest.mark.parametrize("fn", [admit_solution, admit_room_first, admit_recursive, admit_tuple])
def test_admit_correct(fn):
    assert check("ch08.admit", fn).passed


@pytest.mark.parametrize("name", ADMIT_MUTANTS)
def test_admit_mutants(name):
    assert not check("ch08.admit", ADMIT_MUTANTS[name]).passed


def test_admit_naming_more_requests_than_wait_gets_a_hint_not_a_crash():
    def one_too_many(waiting, *rest):
        return admit_solution(waiting, *rest) + [1] * (len(waiting) + 1)

    text = str(check("ch08.admit", one_too_many))
    assert "waiting requests: one q_len per admitted request" in text
    assert "IndexError" not in text


def test_admit_solution_is_the_engine():
    g = torch.Generator().manual_seed(1)
    for _ in range(300):
        S = int(torch.randint(1, 9, (), generator=g))
        waiting = torch.randint(1, 50, (int(torch.randint(0, 6, (), generator=g)),),
                                generator=g).tolist()
        cached = [0] * len(waiting)
        if waiting:
            cached[int(torch.randint(0, len(waiting), (), generator=g))] = int(
                torch.randint(0, 3 * S, (), generator=g))
        args = (waiting, cached, int(torch.randint(0, 20, (), generator=g)), S,
                int(torch.randint(1, 120, (), generator=g)),
                int(torch.randint(0, 6, (), generator=g)))
        assert admit_solution(*args) == engine_admit(*args), args


# --- ch08.decode_step ---------------------------------------------------------------------------


def decode_solution(num_tokens, free_pages, page_size):
    held = [-(-(n - 1) // page_size) for n in num_tokens]
    left = list(range(len(num_tokens)))  # waiting for their page, oldest first
    decoding, preempted = [], []
    while left:
        i = left.pop(0)
        need = -(-num_tokens[i] // page_size) - held[i]
        while need > free_pages:
            victim = left.pop() if left else i
            free_pages += held[victim]
            preempted.append(victim)
            if victim == i:
                break
        else:
            free_pages -= need
            decoding.append(i)
    return decoding, preempted


def decode_deque(num_tokens, free_pages, page_size):
    """The same with a deque and the 'a new page iff (n - 1) % S == 0' shortcut."""
    from collections import deque

    todo = deque(range(len(num_tokens)))
    dec, pre = [], []
    while todo:
        i = todo.popleft()
        if (num_tokens[i] - 1) % page_size == 0:
            while free_pages == 0 and todo:
                v = todo.pop()
                free_pages += math.ceil((num_tokens[v] - 1) / page_size)
                pre.append(v)
            if free_pages == 0:
                pre.append(i)
                continue
            free_pages -= 1
        dec.append(i)
    return dec, pre


def _decode_mutant(victim="newest", free_victim=True, victim_pages="held", need="ok",
                   self_continue=False, order="ok"):
    def fn(num_tokens, free_pages, page_size):
        S = page_size
        held = [-(-(n - 1) // S) for n in num_tokens]
        left = list(range(len(num_tokens)))
        dec, pre = [], []
        while left:
            i = left.pop(0)
            n = num_tokens[i]
            k = {"ok": -(-n // S) - held[i], "always": 1, "floor": n // S - (n - 1) // S,
                 "mod": int(n % S == 0)}[need]
            ok = True
            while k > free_pages:
                if self_continue or not left:
                    v = i
                elif victim == "oldest":
                    v = left.pop(0)
                else:
                    v = left.pop()
                if free_victim:
                    free_pages += held[v] if victim_pages == "held" else -(-num_tokens[v] // S)
                pre.append(v)
                if v == i:
                    ok = False
                    break
            if ok:
                free_pages -= k
                dec.append(i)
        if order == "reversed":
            pre = pre[::-1]
            dec = dec[::-1]
        if order == "dropped":
            pre = []
        return dec, pre

    return fn


DECODE_MUTANTS = {
    "preempts the oldest": _decode_mutant(victim="oldest"),
    "victim's pages not freed": _decode_mutant(free_victim=False),
    "victim frees one page too many": _decode_mutant(victim_pages="all"),
    "every request needs a page every step": _decode_mutant(need="always"),
    "floor for the pages needed": _decode_mutant(need="floor"),
    "new page when n % S == 0": _decode_mutant(need="mod"),
    "the request that does not fit waits, the rest go on": _decode_mutant(self_continue=True),
    "lists reversed": _decode_mutant(order="reversed"),
    "preempted requests are dropped": _decode_mutant(order="dropped"),
    "never preempts": lambda t, f, s: (list(range(len(t))), []),
    "preempted as a set": lambda t, f, s: (decode_solution(t, f, s)[0],
                                           sorted(decode_solution(t, f, s)[1])),
}


@pytest.mark.parametrize("fn", [decode_solution, decode_deque])
def test_decode_correct(fn):
    assert check("ch08.decode_step", fn).passed


@pytest.mark.parametrize("name", DECODE_MUTANTS)
def test_decode_mutants(name):
    assert not check("ch08.decode_step", DECODE_MUTANTS[name]).passed


def test_decode_solution_is_the_engine():
    g = torch.Generator().manual_seed(2)
    for _ in range(300):
        S = int(torch.randint(1, 6, (), generator=g))
        num_tokens = torch.randint(2, 20, (int(torch.randint(2, 7, (), generator=g)),),
                                   generator=g).tolist()
        args = (num_tokens, int(torch.randint(0, 3, (), generator=g)), S)
        assert decode_solution(*args) == engine_decode_step(*args), args


# --- ch08.ttft_tpot -----------------------------------------------------------------------------


def ttft_solution(arrival, token_times):
    n = len(token_times)
    return token_times[0] - arrival, (token_times[-1] - token_times[0]) / (n - 1) if n > 1 else 0.0


def ttft_numpy(arrival, token_times):
    t = np.asarray(token_times, dtype=np.float64)
    gaps = np.diff(t)
    return float(t[0] - arrival), float(gaps.mean()) if gaps.size else 0.0


def ttft_statistics(arrival, token_times):
    gaps = [b - a for a, b in zip(token_times, token_times[1:])]
    return token_times[0] - arrival, statistics.fmean(gaps) if gaps else 0.0


def _ttft(fn_ttft, fn_tpot):
    def fn(arrival, token_times):
        t = token_times
        return fn_ttft(arrival, t), fn_tpot(arrival, t)

    return fn


def _good_tpot(a, t):
    return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else 0.0


def _good_ttft(a, t):
    return t[0] - a


def _sorts_in_place(arrival, token_times):
    token_times.sort(reverse=True)
    token_times.sort()
    token_times.append(token_times.pop())
    token_times[0] = token_times[0] + 0.0
    token_times.reverse()  # "latest first" and forgets to undo it
    return ttft_solution(arrival, sorted(token_times))


TTFT_MUTANTS = {
    "TPOT includes the first token's latency": _ttft(_good_ttft,
                                                     lambda a, t: (t[-1] - a) / len(t)),
    "TPOT divides by n": _ttft(_good_ttft, lambda a, t: (t[-1] - t[0]) / len(t)),
    "TTFT from the first token to the second": _ttft(
        lambda a, t: t[1] - t[0] if len(t) > 1 else 0.0, _good_tpot),
    "TTFT is the first timestamp": _ttft(lambda a, t: t[0], _good_tpot),
    "TTFT to the last token": _ttft(lambda a, t: t[-1] - a, _good_tpot),
    "TPOT nan for one token": _ttft(
        _good_ttft, lambda a, t: (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else math.nan),
    "TPOT divides by zero for one token": _ttft(
        _good_ttft, lambda a, t: (t[-1] - t[0]) / (len(t) - 1)),
    "TPOT is the last gap": _ttft(_good_ttft, lambda a, t: t[-1] - t[-2] if len(t) > 1 else 0.0),
    "TPOT is the median gap": _ttft(
        _good_ttft,
        lambda a, t: statistics.median(np.diff(t).tolist()) if len(t) > 1 else 0.0),
    "TPOT in tokens per second": _ttft(
        _good_ttft, lambda a, t: (len(t) - 1) / (t[-1] - t[0]) if len(t) > 1 else 0.0),
    "TPOT in milliseconds": _ttft(_good_ttft, lambda a, t: 1000 * _good_tpot(a, t)),
    "e2e over tokens": _ttft(_good_ttft, lambda a, t: (t[-1] - a) / max(1, len(t) - 1)),
    "float32 clock": _ttft(lambda a, t: float(np.float32(t[0]) - np.float32(a)),
                           lambda a, t: float((np.float32(t[-1]) - np.float32(t[0]))
                                              / max(1, len(t) - 1))),
    "returns tensors": lambda a, t: tuple(torch.tensor(x) for x in ttft_solution(a, t)),
    "swapped": lambda a, t: ttft_solution(a, t)[::-1],
    "reverses the input": _sorts_in_place,
}


@pytest.mark.parametrize("fn", [ttft_solution, ttft_numpy, ttft_statistics])
def test_ttft_correct(fn):
    assert check("ch08.ttft_tpot", fn).passed


@pytest.mark.parametrize("name", TTFT_MUTANTS)
def test_ttft_mutants(name):
    assert not check("ch08.ttft_tpot", TTFT_MUTANTS[name]).passed



# --- ch08.my_engine_step: the capstone ----------------------------------------------------------
#
# The step is built from the learner's pieces, reached the way a notebook reaches them: admit and
# decode_step by name, chapter 07 and chapter 05 as learner modules. Each mutant breaks one piece
# (or one line of the step) and must fail the capstone.


def paged_metadata_ok(seq_lens, pages, page_size):
    used = [-(-n // page_size) for n in seq_lens]
    kv_indptr = torch.zeros(len(seq_lens) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.tensor(used).cumsum(0)
    kv_indices = torch.tensor([p for table, u in zip(pages, used) for p in table[:u]],
                              dtype=torch.int32)
    last = torch.tensor([n - (u - 1) * page_size for n, u in zip(seq_lens, used)],
                        dtype=torch.int32)
    return kv_indptr, kv_indices, last


def slot_mapping_ok(seq_lens, q_lens, pages, page_size):
    slots = []
    for n, q, table in zip(seq_lens, q_lens, pages):
        for t in range(n - q, n):
            slots.append(table[t // page_size] * page_size + t % page_size)
    return torch.tensor(slots, dtype=torch.long)


def sample_ok(logits, temperature, top_k, top_p, generator):
    if temperature == 0:
        return logits.argmax(dim=-1)
    raise AssertionError("the capstone's requests are greedy")


def _named(name, fn):
    fn.__name__ = fn.__qualname__ = name
    return fn


def _learner(name, **functions):
    module = types.ModuleType(f"learner_test_{name}")
    for key, fn in functions.items():
        setattr(module, key, _named(key, fn))
    return module


def engine_step_with(admit, decode_step, ch05, ch07, rows="last", keep_cache=False,
                     sample_chunks=False):
    """The solution's step over these pieces; the flags break one line of it on purpose."""
    from minimodel.engine.attention import AttentionMetadata

    def my_engine_step(engine):
        S, pool = engine.page_size, engine.allocator
        waiting, running = engine.waiting, engine.running
        q_lens = admit([s.num_uncached_tokens for s in waiting],
                       [s.num_cached_tokens for s in waiting], pool.num_free, S,
                       engine.max_num_batched_tokens, engine.max_num_seqs - len(running))
        if q_lens:
            seqs = waiting[:len(q_lens)]
            for seq, q in zip(seqs, q_lens):
                if q == seq.num_uncached_tokens:
                    waiting.remove(seq)
                    running.append(seq)
        else:
            decoding, preempted = decode_step([s.num_tokens for s in running], pool.num_free, S)
            for i in preempted:
                pool.free(running[i].page_table)
                running[i].page_table = []
                if not keep_cache:
                    running[i].num_cached_tokens = 0
            waiting[:0] = [running[i] for i in sorted(preempted)]
            seqs = [running[i] for i in decoding]
            running[:] = seqs
            q_lens = [1] * len(seqs)
        kv_lens = [s.num_cached_tokens + q for s, q in zip(seqs, q_lens)]
        for seq, n in zip(seqs, kv_lens):
            seq.page_table += pool.allocate(-(-n // S) - len(seq.page_table))
        tables = [s.page_table for s in seqs]
        kv_indptr, kv_indices, last = ch07.paged_metadata(kv_lens, tables, S)
        qo_indptr = torch.tensor([0, *accumulate(q_lens)], dtype=torch.int32)
        positions = torch.cat([torch.arange(n - q, n) for n, q in zip(kv_lens, q_lens)])
        meta = AttentionMetadata(qo_indptr, kv_indptr, kv_indices, last, positions,
                                 ch07.slot_mapping(kv_lens, q_lens, tables, S), S, q_lens,
                                 kv_lens)
        ids = torch.tensor([t for s, q in zip(seqs, q_lens)
                            for t in s.token_ids[s.num_cached_tokens:s.num_cached_tokens + q]])
        engine.backend.plan(meta)
        hidden = engine.model(ids, positions, engine.backend)
        done = [i for i, (s, n) in enumerate(zip(seqs, kv_lens))
                if n == s.num_tokens or sample_chunks]
        row = qo_indptr[1:].long() - 1 if rows == "last" else qo_indptr[:-1].long()
        logits = engine.model.compute_logits(hidden[row[done]])
        tokens = ch05.sample(logits, 0.0, 0, 1.0, None).tolist()
        for s, q in zip(seqs, q_lens):
            s.num_cached_tokens += q
        for i, t in zip(done, tokens):
            s = seqs[i]
            s.append_token(t, 0.0)
            if s.num_output_tokens == s.params.max_new_tokens:
                running.remove(s)
                pool.free(s.page_table)
                s.page_table = []
        return [(s.request_id, q) for s, q in zip(seqs, q_lens)]

    return my_engine_step


def engine_step_other_style(admit, decode_step, ch05, ch07):
    """A correct step written differently: a deque, dicts, packing by hand, argmax per row."""
    from collections import deque

    from minimodel.engine.attention import AttentionMetadata

    def my_engine_step(engine):
        S = engine.page_size
        wanted = admit([r.num_tokens - r.num_cached_tokens for r in engine.waiting],
                       [r.num_cached_tokens for r in engine.waiting],
                       engine.allocator.num_free, S, engine.max_num_batched_tokens,
                       engine.max_num_seqs - len(engine.running))
        batch = {}
        if wanted:
            for r, q in zip(list(engine.waiting), wanted):
                batch[r.request_id] = (r, q)
                if r.num_cached_tokens + q == r.num_tokens:
                    engine.waiting.pop(0)
                    engine.running.append(r)
        else:
            line = deque(engine.running)
            go, out = decode_step([r.num_tokens for r in line], engine.allocator.num_free, S)
            back = []
            for i in out:
                r = line[i]
                engine.allocator.free(r.page_table)
                r.page_table, r.num_cached_tokens = [], 0
                back.append(r)
            engine.waiting = sorted(back, key=lambda r: r.request_id) + engine.waiting
            engine.running = [line[i] for i in go]
            batch = {line[i].request_id: (line[i], 1) for i in go}
        reqs = [r for r, _ in batch.values()]
        qs = [q for _, q in batch.values()]
        ends = [r.num_cached_tokens + q for r, q in zip(reqs, qs)]
        for r, end in zip(reqs, ends):
            while len(r.page_table) * S < end:
                r.page_table.extend(engine.allocator.allocate(1))
        indptr, indices, last_len = ch07.paged_metadata(ends, [r.page_table for r in reqs], S)
        slots = ch07.slot_mapping(ends, qs, [r.page_table for r in reqs], S)
        starts = np.cumsum([0] + qs)
        pos = torch.tensor([p for e, q in zip(ends, qs) for p in range(e - q, e)])
        engine.backend.plan(AttentionMetadata(
            qo_indptr=torch.tensor(starts, dtype=torch.int32), kv_indptr=indptr,
            kv_indices=indices, kv_last_page_len=last_len, positions=pos, slot_mapping=slots,
            page_size=S, q_lens=qs, kv_lens=ends))
        ids = torch.tensor(sum((r.token_ids[e - q:e] for r, e, q in zip(reqs, ends, qs)), []))
        hidden = engine.model(ids, pos, engine.backend)
        for k, (r, e) in enumerate(zip(reqs, ends)):
            r.num_cached_tokens = e
            if e < r.num_tokens:
                continue  # a chunk of a prompt: no token yet
            logits = engine.model.compute_logits(hidden[starts[k + 1] - 1][None])
            r.token_ids.append(int(ch05.sample(logits, 0.0, 0, 1.0, None)[0]))
            if len(r.token_ids) - r.num_prompt_tokens >= r.params.max_new_tokens:
                engine.running = [x for x in engine.running if x is not r]
                engine.allocator.free(r.page_table)
                r.page_table = []
        return [(r.request_id, q) for r, q in zip(reqs, qs)]

    return my_engine_step


GOOD_CH05 = {"sample": sample_ok}
GOOD_CH07 = {"paged_metadata": paged_metadata_ok, "slot_mapping": slot_mapping_ok}


def _step(ch05=None, ch07=None, admit=admit_solution, decode_step=decode_solution,
          build=engine_step_with, **flags):
    return build(_named("admit", admit), _named("decode_step", decode_step),
                 _learner("ch05", **{**GOOD_CH05, **(ch05 or {})}),
                 _learner("ch07", **{**GOOD_CH07, **(ch07 or {})}), **flags)


def slots_next_offset(seq_lens, q_lens, pages, page_size):
    """Off by one inside the page: position t goes to offset t % S + 1."""
    return slot_mapping_ok(seq_lens, q_lens, pages, page_size) + torch.tensor(
        [1 if (t % page_size) < page_size - 1 else 0 for n, q in zip(seq_lens, q_lens)
         for t in range(n - q, n)])


def slots_contiguous(seq_lens, q_lens, pages, page_size):
    """Ignores the page table: slots as if each request's tokens were one contiguous block."""
    return torch.tensor([t for n, q in zip(seq_lens, q_lens) for t in range(n - q, n)])


def last_page_minus_one(seq_lens, pages, page_size):
    indptr, indices, last = paged_metadata_ok(seq_lens, pages, page_size)
    return indptr, indices, last - 1


def last_page_mod(seq_lens, pages, page_size):
    """n % S: 0 for a full last page."""
    indptr, indices, _ = paged_metadata_ok(seq_lens, pages, page_size)
    return indptr, indices, torch.tensor([n % page_size for n in seq_lens], dtype=torch.int32)


def admit_ignores_pages(waiting, cached, free_pages, page_size, max_num_batched_tokens, free_seqs):
    return admit_solution(waiting, cached, 10**6, page_size, max_num_batched_tokens, free_seqs)


def decode_never_preempts(num_tokens, free_pages, page_size):
    return list(range(len(num_tokens))), []


STEP_MUTANTS = {
    "slot mapping off by one inside the page": dict(ch07={"slot_mapping": slots_next_offset}),
    "slot mapping ignores the page table": dict(ch07={"slot_mapping": slots_contiguous}),
    "last page length off by one": dict(ch07={"paged_metadata": last_page_minus_one}),
    "last page length n % S (0 for a full page)": dict(ch07={"paged_metadata": last_page_mod}),
    "admits beyond the free pages": dict(admit=admit_ignores_pages),
    "decode never preempts": dict(decode_step=decode_never_preempts),
    "samples at each request's first new token": dict(rows="first"),
    "samples a token after a prompt chunk": dict(sample_chunks=True),
    "a preempted request keeps its cache count": dict(keep_cache=True),
}


@pytest.mark.parametrize("build", [engine_step_with, engine_step_other_style])
def test_engine_step_correct(build):
    result = check("ch08.my_engine_step", _step(build=build))
    assert result.passed, result


@pytest.mark.parametrize("name", STEP_MUTANTS)
def test_engine_step_mutants(name):
    assert not check("ch08.my_engine_step", _step(**STEP_MUTANTS[name])).passed


def test_engine_step_must_use_the_learners_pieces():
    """A step that samples with its own argmax, not the learner's sample, fails on the spy."""
    step = _step()

    def argmax_module():
        module = _learner("ch05", sample=sample_ok)
        module.sample = lambda logits, *a: logits.argmax(dim=-1)  # not a `sample` of theirs
        return module

    cells = step.__code__.co_freevars
    step.__closure__[cells.index("ch05")].cell_contents = argmax_module()
    result = check("ch08.my_engine_step", step)
    assert [o.passed for o in result.outcomes] == [True, True, True, False], result


def test_engine_step_stub_is_not_implemented_yet():
    def stub(*a, **k):
        raise NotImplementedError("your code here")

    result = check("ch08.my_engine_step", _step(ch07={"paged_metadata": stub}))
    assert not result.implemented and all(o.status == "todo" for o in result.outcomes), result


def test_engine_schedule_is_what_mm_LLM_runs():
    """The capstone's expected batches (the Scheduler without a model) are what mm.LLM ran."""
    from minimodel.grading import ch08

    torch.manual_seed(0)
    for tight in (False, True):
        case = ch08._draw_case(tight)
        llm = ch08._reference_llm()
        first = llm._next_id  # the ids this engine gives the case's requests start here
        for p, m in zip(case.prompts, case.max_new):
            llm.add_request(p, mm.SamplingParams(temperature=0.0, max_new_tokens=m,
                                                 ignore_eos=True))
        trace = []
        while llm.has_unfinished_requests():
            llm.step()
            batch = llm.last_batch
            trace.append([(s.request_id - first, q) for s, q in zip(batch.seqs, batch.q_lens)])
        assert trace == case.trace
        assert (case.preemptions > 0) == tight


# --- handing the work to the engine or to the grader -------------------------------------------
#
# The checks' expected answers come from the engine (engine_admit, engine_decode_step,
# reference_ttft_tpot, mm.LLM): a function that asks them instead of deciding must fail, however
# it reaches them.


def admit_asks_the_scheduler(waiting, cached, free_pages, page_size, max_num_batched_tokens,
                             free_seqs):
    """Queues the requests in the engine's own Scheduler and reports its prefill step."""
    from minimodel.engine.kv_cache import PageAllocator
    from minimodel.engine.scheduler import Scheduler
    from minimodel.engine.sequence import Sequence

    held = [-(-c // page_size) for c in cached]
    pool = PageAllocator(free_pages + sum(held))
    engine = Scheduler(pool, page_size, max_num_seqs=free_seqs,
                       max_num_batched_tokens=max_num_batched_tokens, max_model_len=1 << 20)
    for rid, n in enumerate(waiting):
        request = Sequence(rid, [1] * (n + cached[rid]), mm.SamplingParams())
        request.num_cached_tokens, request.page_table = cached[rid], pool.allocate(held[rid])
        engine.add(request)
    batch = engine.schedule()
    return [] if batch is None or not batch.is_prefill else batch.q_lens


class DecodeByTheGrader:
    """A callable object whose __call__ is the grader's answer."""

    def __call__(self, num_tokens, free_pages, page_size):
        return engine_decode_step(num_tokens, free_pages, page_size)


DELEGATING = {
    "ch08.admit": {
        "wraps the grader's engine_admit": lambda *a: engine_admit(*a),
        "is the grader's engine_admit": engine_admit,
        "a partial of engine_admit": functools.partial(engine_admit),
        "asks the engine's Scheduler": admit_asks_the_scheduler,
    },
    "ch08.decode_step": {
        "wraps the grader's engine_decode_step": lambda t, f, s: engine_decode_step(t, f, s),
        "a callable object that asks the grader": DecodeByTheGrader(),
        "copies the answer out of a scheduler run": lambda t, f, s: tuple(
            list(x) for x in engine_decode_step(list(t), f, s)),
    },
    "ch08.ttft_tpot": {
        "wraps the grader's reference_ttft_tpot": lambda a, t: reference_ttft_tpot(a, t),
    },
}


@pytest.mark.parametrize("exercise, name", [(e, n) for e, fns in DELEGATING.items() for n in fns])
def test_delegating_to_the_engine_or_the_grader_fails(exercise, name):
    result = check(exercise, DELEGATING[exercise][name])
    assert not result.passed, result
    assert "hands its work to" in str(result), result


@pytest.mark.parametrize("piece", ["admit", "decode_step"])
def test_engine_step_with_a_delegating_piece_fails(piece):
    """The capstone over an admit (or decode_step) that asks the grader: its own spy is happy
    (the learner's function is called), but the answer is not theirs."""
    oracle = {"admit": engine_admit, "decode_step": engine_decode_step}[piece]
    step = _step(**{piece: lambda *a: oracle(*a)})
    result = check("ch08.my_engine_step", step)
    assert not result.passed and "hands its work to" in str(result), result
