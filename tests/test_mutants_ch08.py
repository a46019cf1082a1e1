"""Chapter 08's checks: every wrong implementation learners write fails, every right one passes."""

from __future__ import annotations

import math
import statistics
from itertools import accumulate

import numpy as np
import pytest
import torch

from minimodel.grading import check
from minimodel.grading.ch08 import engine_admit, engine_decode_step

# --- ch08.admit -------------------------------------------------------------------------------


def admit_solution(waiting, free_pages, page_size, token_budget, max_seqs):
    q_lens = []
    for n in waiting:
        if token_budget == 0 or len(q_lens) == max_seqs:
            break
        q = min(n, token_budget)
        pages = -(-q // page_size)
        if pages > free_pages:
            break
        q_lens.append(q)
        free_pages -= pages
        token_budget -= q
        if q < n:
            break
    return q_lens


def admit_prefix_sums(waiting, free_pages, page_size, token_budget, max_seqs):
    """Whole prompts while the running totals of pages and tokens fit, then at most one chunk."""
    queue = waiting[:max_seqs]
    pages = list(accumulate(math.ceil(n / page_size) for n in queue))
    tokens = list(accumulate(queue))
    k = sum(1 for p, t in zip(pages, tokens) if p <= free_pages and t <= token_budget)
    out = queue[:k]
    if k < len(queue):
        left = token_budget - sum(out)
        used = pages[k - 1] if k else 0
        if 0 < left < queue[k] and math.ceil(left / page_size) <= free_pages - used:
            out.append(left)
    return out


def admit_recursive(waiting, free_pages, page_size, token_budget, max_seqs):
    if not waiting or max_seqs == 0 or token_budget <= 0:
        return []
    q = min(waiting[0], token_budget)
    need = (q + page_size - 1) // page_size
    if need > free_pages:
        return []
    if q < waiting[0]:
        return [q]
    return [q] + admit_recursive(waiting[1:], free_pages - need, page_size, token_budget - q,
                                 max_seqs - 1)


def _admit_mutant(pages="ceil", skip=False, budget="chunk", seqs="ok", cumulative=True,
                  chunk_pages="chunk", chunk_to_pages=False):
    def fn(waiting, free_pages, page_size, token_budget, max_seqs):
        out, free, left = [], free_pages, token_budget
        limit = {"ok": max_seqs, "plus1": max_seqs + 1, "none": 10**9}[seqs]
        for n in waiting:
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
            need = {"ceil": -(-counted // page_size), "floor": counted // page_size,
                    "plus1": -(-(counted + 1) // page_size)}[pages]
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


def admit_mutates(waiting, free_pages, page_size, token_budget, max_seqs):
    out = admit_solution(list(waiting), free_pages, page_size, token_budget, max_seqs)
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
    "ignores max_seqs": _admit_mutant(seqs="none"),
    "max_seqs off by one": _admit_mutant(seqs="plus1"),
    "free pages never decrease": _admit_mutant(cumulative=False),
    "chunks to the free pages instead of stopping": _admit_mutant(chunk_to_pages=True),
    "returns the count": lambda *a: len(admit_solution(*a)),
    "returns the indices": lambda *a: list(range(len(admit_solution(*a)))),
    "mutates the queue": admit_mutates,
}


def admit_tuple(waiting, free_pages, page_size, token_budget, max_seqs):
    """The solution, answering with a tuple of numpy ints."""
    return tuple(np.int64(q) for q in admit_solution(waiting, free_pages, page_size,
                                                       token_budget, max_seqs))


@pytest.mark.parametrize("fn", [admit_solution, admit_prefix_sums, admit_recursive, admit_tuple])
def test_admit_correct(fn):
    assert check("ch08.admit", fn).passed


@pytest.mark.parametrize("name", ADMIT_MUTANTS)
def test_admit_mutants(name):
    assert not check("ch08.admit", ADMIT_MUTANTS[name]).passed


def test_admit_solution_is_the_engine():
    g = torch.Generator().manual_seed(1)
    for _ in range(300):
        S = int(torch.randint(1, 9, (), generator=g))
        waiting = torch.randint(1, 50, (int(torch.randint(0, 6, (), generator=g)),),
                                generator=g).tolist()
        args = (waiting, int(torch.randint(0, 20, (), generator=g)), S,
                int(torch.randint(1, 120, (), generator=g)),
                int(torch.randint(1, 6, (), generator=g)))
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

