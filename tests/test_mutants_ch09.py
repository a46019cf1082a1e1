"""Chapter 09's checks: every wrong implementation learners write fails, every right one passes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from minimodel import kernels
from minimodel.grading import check

# --- ch09.online_softmax ------------------------------------------------------------------------


def softmax_solution(x, block):
    m = torch.full(x.shape[:-1], float("-inf"))
    l = torch.zeros(x.shape[:-1])
    for s in range(0, x.shape[-1], block):
        xb = x[..., s : s + block]
        m_new = torch.maximum(m, xb.amax(-1))
        l = l * torch.exp(m - m_new) + torch.exp(xb - m_new[..., None]).sum(-1)
        m = m_new
    return torch.exp(x - m[..., None]) / l[..., None]


def softmax_scalar_loop(x, block):
    """Element by element inside each block, on a flattened view, in float64."""
    rows = x.double().reshape(-1, x.shape[-1])
    out = torch.empty_like(rows)
    for r in range(rows.shape[0]):
        m, l = -math.inf, 0.0
        for s in range(0, rows.shape[1], block):
            for value in rows[r, s : s + block].tolist():
                if value > m:
                    l, m = l * math.exp(m - value), value
                l += math.exp(value - m)
        out[r] = torch.exp(rows[r] - m) / l
    return out.reshape(x.shape).to(x.dtype)


def softmax_blocks_out(x, block):
    """Block states (max, sum) first, then combined; the output written block by block."""
    starts = range(0, x.shape[-1], block)
    maxes = torch.stack([x[..., s : s + block].amax(-1) for s in starts], -1)
    sums = torch.stack([torch.exp(x[..., s : s + block] - maxes[..., i : i + 1]).sum(-1)
                        for i, s in enumerate(starts)], -1)
    m = maxes.amax(-1, keepdim=True)
    total = (sums * torch.exp(maxes - m)).sum(-1, keepdim=True)
    return torch.cat([torch.exp(x[..., s : s + block] - m) / total for s in starts], -1)


def _softmax_mutant(rescale=True, carry=True, subtract_max=True, normalise_with="final"):
    def fn(x, block):
        m = torch.full(x.shape[:-1], float("-inf"))
        l = torch.zeros(x.shape[:-1])
        for s in range(0, x.shape[-1], block):
            xb = x[..., s : s + block]
            m_new = torch.maximum(m, xb.amax(-1)) if carry else xb.amax(-1)
            if not subtract_max:
                m_new = torch.zeros_like(m_new)
            alpha = torch.exp(m - m_new) if rescale else torch.ones_like(m)
            l = l * alpha.nan_to_num(0.0) + torch.exp(xb - m_new[..., None]).sum(-1)
            m = m_new
        return torch.exp(x - m[..., None]) / l[..., None]

    return fn


def softmax_per_block(x, block):
    return torch.cat([x[..., s : s + block].softmax(-1) for s in range(0, x.shape[-1], block)],
                     -1)


SOFTMAX_MUTANTS = {
    "no rescaling of the sum when the max grows": _softmax_mutant(rescale=False),
    "max not carried across blocks": _softmax_mutant(carry=False),
    "no max subtracted (overflows)": _softmax_mutant(subtract_max=False),
    "naive exp / sum": lambda x, block: x.exp() / x.exp().sum(-1, keepdim=True),
    "each block normalised on its own": softmax_per_block,
    "softmax over the first dim": lambda x, block: x.softmax(0),
    "in place": lambda x, block: x.sub_(x.amax(-1, keepdim=True)).exp_().div_(
        x.sum(-1, keepdim=True)),
}


@pytest.mark.parametrize("fn", [softmax_solution, softmax_scalar_loop, softmax_blocks_out,
                                kernels.online_softmax])
def test_online_softmax_correct(fn):
    assert check("ch09.online_softmax", fn).passed


@pytest.mark.parametrize("name", SOFTMAX_MUTANTS)
def test_online_softmax_mutants(name):
    assert not check("ch09.online_softmax", SOFTMAX_MUTANTS[name]).passed


# --- ch09.flash_attention -------------------------------------------------------------------------


def flash_solution(q, k, v, causal, block_q, block_k):
    T, Hq, D = q.shape
    S, Hkv, _ = k.shape
    G = Hq // Hkv
    o = torch.empty(T, Hq, D)
    lse = torch.empty(T, Hq)
    for h in range(Hq):
        kh, vh = k[:, h // G], v[:, h // G]  # [S, D]
        for t0 in range(0, T, block_q):
            qt = q[t0 : t0 + block_q, h]  # [Tq, D]
            pos = S - T + torch.arange(t0, t0 + qt.shape[0])
            m = torch.full((qt.shape[0],), float("-inf"))
            l = torch.zeros(qt.shape[0])
            acc = torch.zeros(qt.shape[0], D)
            for s0 in range(0, S, block_k):
                if causal and s0 > pos[-1]:
                    break
                s = qt @ kh[s0 : s0 + block_k].T / math.sqrt(D)
                if causal:
                    keys = torch.arange(s0, s0 + s.shape[1])
                    s = s.masked_fill(keys[None, :] > pos[:, None], float("-inf"))
                m_new = torch.maximum(m, s.amax(-1))
                p = torch.exp(s - m_new[:, None])
                alpha = torch.exp(m - m_new)
                l = l * alpha + p.sum(-1)
                acc = acc * alpha[:, None] + p @ vh[s0 : s0 + block_k]
                m = m_new
            o[t0 : t0 + block_q, h] = acc / l[:, None]
            lse[t0 : t0 + block_q, h] = m + torch.log(l)
    return o, lse


def flash_no_skip_grouped(q, k, v, causal, block_q, block_k):
    """Every tile computed and masked (no skipping); the G heads of a group as extra rows;
    the output normalised at the end; float64 inside."""
    T, Hq, D = q.shape
    S, Hkv, _ = k.shape
    G = Hq // Hkv
    qd, kd, vd = q.double(), k.double(), v.double()
    o = torch.zeros(T, Hq, D, dtype=torch.float64)
    lse = torch.zeros(T, Hq, dtype=torch.float64)
    for t0 in range(0, T, block_q):
        t1 = min(T, t0 + block_q)
        rows = qd[t0:t1].reshape(t1 - t0, Hkv, G, D).permute(1, 0, 2, 3).reshape(Hkv, -1, D)
        pos = (S - T + torch.arange(t0, t1)).repeat_interleave(G)
        m = torch.full(rows.shape[:2], -torch.inf, dtype=torch.float64)
        l = torch.zeros(rows.shape[:2], dtype=torch.float64)
        acc = torch.zeros_like(rows)
        for s0 in range(0, S, block_k):
            s1 = min(S, s0 + block_k)
            s = torch.einsum("hrd,shd->hrs", rows, kd[s0:s1]) * D**-0.5
            if causal:
                s = s.masked_fill(torch.arange(s0, s1)[None, :] > pos[:, None], -torch.inf)
            m_new = torch.maximum(m, s.amax(-1))
            scale_old = torch.where(m_new == -torch.inf, 0.0, torch.exp(m - m_new))
            p = torch.exp(s - m_new[..., None]).nan_to_num(0.0)
            l = l * scale_old + p.sum(-1)
            acc = acc * scale_old[..., None] + torch.einsum("hrs,shd->hrd", p, vd[s0:s1])
            m = m_new
        out = (acc / l[..., None]).reshape(Hkv, t1 - t0, G, D).permute(1, 0, 2, 3)
        o[t0:t1] = out.reshape(t1 - t0, Hq, D)
        lse[t0:t1] = (m + l.log()).reshape(Hkv, t1 - t0, G).permute(1, 0, 2).reshape(-1, Hq)
    return o.float(), lse.float()


def flash_sdpa(q, k, v, causal, block_q, block_k):
    """Right numbers, not tiled at all: SDPA with a bottom-right mask, and the lse from the
    whole score matrix."""
    T, S = q.shape[0], k.shape[0]
    mask = torch.ones(T, S, dtype=torch.bool).tril(S - T) if causal else None
    qh, kh, vh = (t.transpose(0, 1) for t in (q, k, v))
    o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, enable_gqa=True)
    scores = qh @ kh.repeat_interleave(q.shape[1] // k.shape[1], 0).transpose(1, 2)
    scores = scores / math.sqrt(q.shape[-1])
    if causal:
        scores = scores.masked_fill(~mask, float("-inf"))
    return o.transpose(0, 1), scores.logsumexp(-1).T


def _flash_mutant(rescale=True, carry=True, top_left=False, scale=True, base2=False,
                  heads="div", subtract_max=True):
    def fn(q, k, v, causal, block_q, block_k):
        T, Hq, D = q.shape
        S, Hkv, _ = k.shape
        G = Hq // Hkv
        o = torch.empty(T, Hq, D)
        lse = torch.empty(T, Hq)
        for h in range(Hq):
            kv_head = h // G if heads == "div" else h % Hkv
            kh, vh = k[:, kv_head], v[:, kv_head]
            for t0 in range(0, T, block_q):
                qt = q[t0 : t0 + block_q, h]
                pos = torch.arange(t0, t0 + qt.shape[0]) + (0 if top_left else S - T)
                m = torch.full((qt.shape[0],), float("-inf"))
                l = torch.zeros(qt.shape[0])
                acc = torch.zeros(qt.shape[0], D)
                for s0 in range(0, S, block_k):
                    s = qt @ kh[s0 : s0 + block_k].T / (math.sqrt(D) if scale else 1.0)
                    if causal:
                        keys = torch.arange(s0, s0 + s.shape[1])
                        s = s.masked_fill(keys[None, :] > pos[:, None], float("-inf"))
                    tile_max = s.amax(-1)
                    m_new = torch.maximum(m, tile_max) if carry else tile_max
                    if not subtract_max:
                        m_new = torch.zeros_like(m_new)
                    p = torch.exp(s - m_new[:, None]).nan_to_num(0.0)
                    alpha = torch.exp(m - m_new).nan_to_num(0.0)
                    l = l * alpha + p.sum(-1)
                    acc = (acc * alpha[:, None] if rescale else acc) + p @ vh[s0 : s0 + block_k]
                    m = m_new
                o[t0 : t0 + block_q, h] = acc / l[:, None]
                out_lse = m + torch.log(l)
                lse[t0 : t0 + block_q, h] = out_lse / math.log(2) if base2 else out_lse
        return o, lse

    return fn


def flash_no_causal(q, k, v, causal, block_q, block_k):
    return flash_solution(q, k, v, False, block_q, block_k)


def flash_lse_without_max(q, k, v, causal, block_q, block_k):
    o, lse = flash_solution(q, k, v, causal, block_q, block_k)
    scores = torch.einsum("thd,shd->ths", q, k.repeat_interleave(q.shape[1] // k.shape[1], 1))
    return o, lse - scores.amax(-1) / math.sqrt(q.shape[-1])


def flash_lse_log_of_mean(q, k, v, causal, block_q, block_k):
    o, lse = flash_solution(q, k, v, causal, block_q, block_k)
    return o, lse - math.log(k.shape[0])


FLASH_MUTANTS = {
    "no rescaling of the accumulator when the max changes": _flash_mutant(rescale=False),
    "max not carried across tiles": _flash_mutant(carry=False),
    "top-left causal alignment": _flash_mutant(top_left=True),
    "missing 1/sqrt(D) scale": _flash_mutant(scale=False),
    "lse in base 2": _flash_mutant(base2=True),
    "KV heads in the wrong order (h % Hkv)": _flash_mutant(heads="mod"),
    "no max subtracted (overflows on large scores)": _flash_mutant(subtract_max=False),
    "causal ignored": flash_no_causal,
    "lse without the max": flash_lse_without_max,
    "lse divided by S": flash_lse_log_of_mean,
    "not tiled (SDPA and the whole score matrix)": flash_sdpa,
    "not tiled (the chapter's naive attention)": lambda q, k, v, c, bq, bk: (
        kernels.naive_attention(q, k, v, c)),
    "returns only o": lambda q, k, v, c, bq, bk: flash_solution(q, k, v, c, bq, bk)[0],
    "lse transposed [Hq, T]": lambda q, k, v, c, bq, bk: (
        flash_solution(q, k, v, c, bq, bk)[0], flash_solution(q, k, v, c, bq, bk)[1].T),
}


def flash_keys_outer(q, k, v, causal, block_q, block_k):
    """Key tiles in the outer loop, every query tile's running state kept between them."""
    T, Hq, D = q.shape
    S, Hkv, _ = k.shape
    G = Hq // Hkv
    kh, vh = k.repeat_interleave(G, 1).transpose(0, 1), v.repeat_interleave(G, 1).transpose(0, 1)
    qh = q.transpose(0, 1) / math.sqrt(D)  # [Hq, T, D]
    pos = S - T + torch.arange(T)
    m = torch.full((Hq, T), float("-inf"))
    l = torch.zeros(Hq, T)
    acc = torch.zeros(Hq, T, D)
    for s0 in range(0, S, block_k):
        keys = torch.arange(s0, min(S, s0 + block_k))
        for t0 in range(0, T, block_q):
            rows = slice(t0, t0 + block_q)
            if causal and s0 > pos[rows][-1]:
                continue
            s = qh[:, rows] @ kh[:, s0 : s0 + block_k].transpose(1, 2)
            if causal:
                s = s.masked_fill(keys[None, :] > pos[rows][:, None], float("-inf"))
            m_new = torch.maximum(m[:, rows], s.amax(-1))
            alpha = torch.exp(m[:, rows] - m_new)
            p = torch.exp(s - m_new[..., None])
            l[:, rows] = l[:, rows] * alpha + p.sum(-1)
            acc[:, rows] = acc[:, rows] * alpha[..., None] + p @ vh[:, s0 : s0 + block_k]
            m[:, rows] = m_new
    return (acc / l[..., None]).transpose(0, 1), (m + l.log()).T


@pytest.mark.parametrize("fn", [flash_solution, flash_no_skip_grouped, flash_keys_outer,
                                kernels.flash_attention])
def test_flash_attention_correct(fn):
    assert check("ch09.flash_attention", fn).passed


@pytest.mark.parametrize("name", FLASH_MUTANTS)
def test_flash_attention_mutants(name):
    assert not check("ch09.flash_attention", FLASH_MUTANTS[name]).passed


def _messages(name, fn):
    """Every message the checks of exercise `name` give fn, in one string."""
    return " ".join(o.message for o in check(name, fn).outcomes)


def test_flash_attention_hints():
    messages = lambda name: _messages("ch09.flash_attention", FLASH_MUTANTS[name])  # noqa: E731
    assert "top-left" in messages("top-left causal alignment")
    assert "base 2" in messages("lse in base 2")
    assert "unscaled" in messages("missing 1/sqrt(D) scale")
    assert "h // G" in messages("KV heads in the wrong order (h % Hkv)")


# --- ch09.merge_states ----------------------------------------------------------------------------


def merge_solution(o_a, lse_a, o_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    o = (o_a * w_a[..., None] + o_b * w_b[..., None]) / (w_a + w_b)[..., None]
    return o, m + torch.log(w_a + w_b)


def merge_logaddexp(o_a, lse_a, o_b, lse_b):
    lse = torch.logaddexp(lse_a.float(), lse_b.float())
    return (o_a.float() * torch.exp(lse_a - lse)[..., None]
            + o_b.float() * torch.exp(lse_b - lse)[..., None]), lse


def merge_sigmoid(o_a, lse_a, o_b, lse_b):
    """The weight of a is sigmoid(lse_a - lse_b); the lse through softplus."""
    w_a = torch.sigmoid((lse_a - lse_b).double())
    lse = torch.maximum(lse_a, lse_b).double() + F.softplus(-(lse_a - lse_b).abs().double())
    lse = torch.where(torch.isinf(lse_a) | torch.isinf(lse_b),
                      torch.maximum(lse_a, lse_b).double(), lse)
    o = o_a.double() * w_a[..., None] + o_b.double() * (1 - w_a)[..., None]
    return o.to(o_a.dtype), lse.to(lse_a.dtype)


def merge_stack(o_a, lse_a, o_b, lse_b):
    lse = torch.stack([lse_a, lse_b]).logsumexp(0)
    w = torch.stack([lse_a, lse_b]).sub(lse).exp()  # [2, T, H]
    return (torch.stack([o_a.to(w.dtype), o_b.to(w.dtype)]) * w[..., None]).sum(0), lse


def merge_naive_exp(o_a, lse_a, o_b, lse_b):
    e_a, e_b = torch.exp(lse_a), torch.exp(lse_b)
    return (o_a * e_a[..., None] + o_b * e_b[..., None]) / (e_a + e_b)[..., None], torch.log(
        e_a + e_b)


def merge_base2(o_a, lse_a, o_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp2(lse_a - m), torch.exp2(lse_b - m)
    o = (o_a * w_a[..., None] + o_b * w_b[..., None]) / (w_a + w_b)[..., None]
    return o, m + torch.log2(w_a + w_b)


def merge_in_place(o_a, lse_a, o_b, lse_b):
    m = torch.maximum(lse_a, lse_b)
    w_a, w_b = torch.exp(lse_a - m), torch.exp(lse_b - m)
    o_a.mul_(w_a[..., None]).add_(o_b * w_b[..., None]).div_((w_a + w_b)[..., None])
    return o_a, m + torch.log(w_a + w_b)


MERGE_MUTANTS = {
    "without subtracting the max (overflows)": merge_naive_exp,
    "lse in base 2": merge_base2,
    "plain average": lambda o_a, l_a, o_b, l_b: ((o_a + o_b) / 2, torch.logaddexp(l_a, l_b)),
    "lse = max": lambda o_a, l_a, o_b, l_b: (merge_solution(o_a, l_a, o_b, l_b)[0],
                                             torch.maximum(l_a, l_b)),
    "lse = sum": lambda o_a, l_a, o_b, l_b: (merge_solution(o_a, l_a, o_b, l_b)[0], l_a + l_b),
    "weights swapped": lambda o_a, l_a, o_b, l_b: merge_solution(o_b, l_a, o_a, l_b),
    "weights not normalised": lambda o_a, l_a, o_b, l_b: (
        o_a * torch.exp(l_a - torch.maximum(l_a, l_b))[..., None]
        + o_b * torch.exp(l_b - torch.maximum(l_a, l_b))[..., None],
        torch.logaddexp(l_a, l_b)),
    "the larger side wins outright": lambda o_a, l_a, o_b, l_b: (
        torch.where((l_a >= l_b)[..., None], o_a, o_b), torch.maximum(l_a, l_b)),
    "modifies o_a in place": merge_in_place,
}


@pytest.mark.parametrize("fn", [merge_solution, merge_logaddexp, merge_sigmoid, merge_stack,
                                kernels.merge_states])
def test_merge_states_correct(fn):
    assert check("ch09.merge_states", fn).passed


@pytest.mark.parametrize("name", MERGE_MUTANTS)
def test_merge_states_mutants(name):
    assert not check("ch09.merge_states", MERGE_MUTANTS[name]).passed


# --- ch09.paged_split_kv_decode ------------------------------------------------------------------
#
# The learner's version composes their own flash_attention and merge_states (the checks spy on
# both), so these are written the same way: module-level functions named merge_states and
# flash_attention, as in the notebook.


def flash_attention(q, k, v, causal, block_q, block_k):
    return flash_solution(q, k, v, causal, block_q, block_k)


def merge_states(o_a, lse_a, o_b, lse_b):
    return merge_solution(o_a, lse_a, o_b, lse_b)


def _requests(kv_pool, kv_indptr, kv_indices, kv_last_page_len, offsets=True, trim=True,
              page_dim=2):
    """[(pages, kv_len)] of every request, read from the metadata."""
    S = kv_pool.shape[page_dim]
    out = []
    for b in range(len(kv_last_page_len)):
        first = int(kv_indptr[b]) if offsets else 0
        pages = kv_indices[first : first + int(kv_indptr[b + 1] - kv_indptr[b])].long()
        out.append((pages, (len(pages) - 1) * S + int(kv_last_page_len[b]) if trim
                    else len(pages) * S))
    return out


def smallest_longest(lens, budget):
    """Linear scan: the smallest L for which chunks of L fit the budget."""
    L = 1
    while sum(-(-n // L) for n in lens) > budget:
        L += 1
    return L


def _gather(kv_pool, pages, t0, t1, how="slots"):
    """K and V of tokens t0..t1-1 of a request: [n, Hkv, D] each."""
    S = kv_pool.shape[2]
    t = torch.arange(t0, t1)
    if how == "consecutive":  # wrong: the slots after the first one's, as if pages were adjacent
        flat = kv_pool.transpose(1, 2).flatten(0, 1)
        kv = flat[pages[t0 // S] * S + t0 % S + (t - t0)]
    else:
        kv = kv_pool[pages[t // S], :, t % S]  # [n, 2, Hkv, D]
    return kv[:, 0], kv[:, 1]


def paged_solution(q, kv_pool, kv_indptr, kv_indices, kv_last_page_len, num_work_items):
    reqs = _requests(kv_pool, kv_indptr, kv_indices, kv_last_page_len)
    L = smallest_longest([n for _, n in reqs], num_work_items)
    o, lse = torch.empty_like(q), torch.empty(q.shape[:2])
    for b, (pages, n) in enumerate(reqs):
        state = None
        for t0 in range(0, n, L):
            k, v = _gather(kv_pool, pages, t0, min(n, t0 + L))
            part = flash_attention(q[b : b + 1], k, v, False, 1, 4)
            state = part if state is None else merge_states(*state, *part)
        o[b], lse[b] = state[0][0], state[1][0]
    return o, lse


def _decode_chunks(q, kv_pool, reqs, chunks_of, merge_fn=None):
    """Attend each request over chunks_of(b, n) = [(t0, t1)], states merged in a tree."""
    merge_fn = merge_fn or merge_states
    o, lse = torch.empty_like(q), torch.empty(q.shape[:2])
    for b, (pages, n) in enumerate(reqs):
        parts = [flash_attention(q[b : b + 1], *_gather(kv_pool, pages, t0, t1), True, 1, 3)
                 for t0, t1 in chunks_of(b, n)]
        while len(parts) > 1:
            parts = [merge_fn(*parts[i], *parts[i + 1]) if i + 1 < len(parts) else parts[i]
                     for i in range(0, len(parts), 2)]
        o[b], lse[b] = parts[0][0][0], parts[0][1][0]
    return o, lse


def paged_greedy(q, kv_pool, kv_indptr, kv_indices, kv_last_page_len, num_work_items):
    """One item per request, then each spare item to the request whose chunks are longest;
    each request cut into equal parts (sizes differ by at most one)."""
    reqs = _requests(kv_pool, kv_indptr, kv_indices, kv_last_page_len)
    lens = [n for _, n in reqs]
    counts = [1] * len(lens)
    for _ in range(num_work_items - len(lens)):
        b = max(range(len(lens)), key=lambda i: -(-lens[i] // counts[i]))
        if lens[b] <= counts[b]:
            break
        counts[b] += 1

    def even(b, n):
        bounds = [n * i // counts[b] for i in range(counts[b] + 1)]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    return _decode_chunks(q, kv_pool, reqs, even)


def paged_whole_budget(q, kv_pool, kv_indptr, kv_indices, kv_last_page_len, num_work_items):
    """The balanced cut, then the longest chunks halved while items are left: uses the whole
    budget and the longest item stays as short as it was."""
    reqs = _requests(kv_pool, kv_indptr, kv_indices, kv_last_page_len)
    L = smallest_longest([n for _, n in reqs], num_work_items)
    chunks = [(b, t0, min(n, t0 + L)) for b, (_, n) in enumerate(reqs) for t0 in range(0, n, L)]
    while len(chunks) < num_work_items:
        b, t0, t1 = max(chunks, key=lambda c: c[2] - c[1])
        if t1 - t0 < 2:
            break
        chunks.remove((b, t0, t1))
        chunks += [(b, t0, (t0 + t1) // 2), (b, (t0 + t1) // 2, t1)]
    return _decode_chunks(q, kv_pool, reqs,
                          lambda b, n: sorted((c[1], c[2]) for c in chunks if c[0] == b))


def _paged_mutant(trim=True, offsets=True, merge="merge", overlap=False, scale=True, base2=False,
                  page_dim=2, plan="best", gather="slots", strided=False):
    def fn(q, kv_pool, kv_indptr, kv_indices, kv_last_page_len, num_work_items):
        S = kv_pool.shape[2]
        reqs = _requests(kv_pool, kv_indptr, kv_indices, kv_last_page_len, offsets, trim,
                         page_dim)
        lens = [n for _, n in reqs]
        if plan == "best":
            L = smallest_longest(lens, num_work_items)
        elif plan == "pages":  # the smallest whole number of pages that fits the budget
            L = S * smallest_longest([-(-n // S) for n in lens], num_work_items)
        elif plan == "total":  # an equal share of all the tokens, ignoring the rounding
            L = -(-sum(lens) // num_work_items)
        elif plan == "per request":  # the budget shared out evenly, whatever the lengths
            L = max(-(-n // max(1, num_work_items // len(lens))) for n in lens)
        elif plan == "tokens":
            L = 1
        elif plan == "whole":
            L = max(lens)
        elif plan == "pages per chunk":  # the budget read as a chunk length in pages
            L = num_work_items * S
        o, lse = torch.empty_like(q), torch.empty(q.shape[:2])
        for b, (pages, n) in enumerate(reqs):
            state, parts = None, []
            count = -(-n // L)
            for c in range(count):
                if strided:  # tokens c, c + count, ...: the right numbers, not a run of keys
                    t = torch.arange(c, n, count)
                    kv = kv_pool[pages[t // S], :, t % S]
                    k, v = kv[:, 0], kv[:, 1]
                else:
                    t0 = max(0, c * L - (1 if overlap and c else 0))
                    k, v = _gather(kv_pool, pages, t0, min(n, c * L + L), gather)
                if not scale:
                    k = k * math.sqrt(q.shape[-1])
                part = flash_attention(q[b : b + 1], k, v, False, 1, 5)
                parts.append(part)
                if merge == "merge":
                    state = part if state is None else merge_states(*state, *part)
                elif merge == "package":
                    state = part if state is None else kernels.merge_states(*state, *part)
            if merge == "last":
                state = parts[-1]
            if merge == "average":
                state = (sum(p[0] for p in parts) / len(parts), parts[-1][1])
            o[b], lse[b] = state[0][0], state[1][0] / (math.log(2) if base2 else 1.0)
        return o, lse

    return fn


PAGED_MUTANTS = {
    "last page read in full": _paged_mutant(trim=False),
    "kv_indptr offsets ignored": _paged_mutant(offsets=False),
    "only the last chunk": _paged_mutant(merge="last"),
    "chunk outputs averaged": _paged_mutant(merge="average"),
    "chunks overlap by one token": _paged_mutant(overlap=True),
    "missing scale": _paged_mutant(scale=False),
    "lse in base 2": _paged_mutant(base2=True),
    "page size read from the K/V dim": _paged_mutant(page_dim=1),
    "not split (no merge)": _paged_mutant(plan="whole"),
    "the package's merge_states": _paged_mutant(merge="package"),
    "chunks of whole pages only": _paged_mutant(plan="pages"),
    "an equal share of all tokens (over the budget)": _paged_mutant(plan="total"),
    "the budget shared evenly between requests": _paged_mutant(plan="per request"),
    "one item per token (over the budget)": _paged_mutant(plan="tokens"),
    "the budget read as pages per chunk": _paged_mutant(plan="pages per chunk"),
    "a chunk read from consecutive pool slots": _paged_mutant(gather="consecutive"),
    "strided chunks (not contiguous runs)": _paged_mutant(strided=True),
}


@pytest.mark.parametrize("fn", [paged_solution, paged_greedy, paged_whole_budget])
def test_paged_split_kv_decode_correct(fn):
    assert check("ch09.paged_split_kv_decode", fn).passed


@pytest.mark.parametrize("name", PAGED_MUTANTS)
def test_paged_split_kv_decode_mutants(name):
    assert not check("ch09.paged_split_kv_decode", PAGED_MUTANTS[name]).passed


def test_paged_hints():
    messages = lambda name: _messages("ch09.paged_split_kv_decode",  # noqa: E731
                                      PAGED_MUTANTS[name])
    assert "kv_last_page_len" in messages("last page read in full")
    assert "merge_states" in messages("not split (no merge)")
    assert "inside a page" in messages("chunks of whole pages only")
    assert "over the budget" in messages("an equal share of all tokens (over the budget)")
    assert "contiguous" in messages("strided chunks (not contiguous runs)")


def test_longest_item_is_the_smallest_that_fits():
    from minimodel.grading.ch09 import longest_item

    for lens, budget in (([40, 7, 100], 8), ([1, 1, 10], 3), ([5], 1), ([5], 9), ([3, 3], 2)):
        best = longest_item(lens, budget)
        assert best == smallest_longest(lens, budget)
        assert sum(-(-n // best) for n in lens) <= budget
        assert best == 1 or sum(-(-n // (best - 1)) for n in lens) > budget
    assert longest_item([40, 7, 100], 8) == 20 and longest_item([1, 1, 10], 3) == 10


# --- ch09.predict_step_seconds -----------------------------------------------------------------


def step_solution(cfg, batch, kv_len, weights, bandwidth, peak_flops):
    C, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    q, kv = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
    mats = [(q, C), (kv, C), (kv, C), (C, q), (I, C), (I, C), (C, I)] * L + [(cfg.vocab_size, C)]

    def nbytes(out, inp):
        if weights == "int8":
            return out * inp + 4 * out
        if weights == "int4":
            return out * inp // 2 + 4 * out * (inp // 128)
        return out * inp * (4 if weights == "float32" else 2)

    act = 4 if weights == "float32" else 2
    kv_bytes = batch * kv_len * 2 * L * kv * act
    flops = 2 * batch * sum(o * i for o, i in mats) + 4 * batch * L * q * kv_len
    return max((sum(nbytes(o, i) for o, i in mats) + kv_bytes) / bandwidth, flops / peak_flops)


def step_from_step_cost(cfg, batch, kv_len, weights, bandwidth, peak_flops):
    """The package's step_cost for the FLOPs and a bfloat16 step's bytes; the quantized weights'
    bytes per weight (a fraction) in place of bfloat16's 2."""
    from minimodel.kernels.roofline import step_cost

    dtype = torch.float32 if weights == "float32" else torch.bfloat16
    flops, nbytes = step_cost(cfg, 1, kv_len, batch, dtype)
    C, L = cfg.hidden_size, cfg.num_hidden_layers
    rows = L * (cfg.q_size + 2 * cfg.kv_size + C + 2 * cfg.intermediate_size + C) + cfg.vocab_size
    n = L * (2 * C * cfg.q_size + 2 * C * cfg.kv_size + 3 * C * cfg.intermediate_size)
    n += cfg.vocab_size * C
    if weights == "int8":
        nbytes += -n + 4 * rows
    elif weights == "int4":
        nbytes += n * (0.5 + 4 / 128 - 2)
    return max(nbytes / bandwidth, flops / peak_flops)


def _step_mutant(weight_reads="once", kv="all", combine="max", attention_flops=True,
                 flops_per_weight=2, head=True, head_quantized=True, o_square=False,
                 int8_scales=True, int4="groups", kv_format="activations", unit=1.0):
    def fn(cfg, batch, kv_len, weights, bandwidth, peak_flops):
        C, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
        q, kv_w = cfg.num_attention_heads * cfg.head_dim, cfg.num_key_value_heads * cfg.head_dim
        qo = C if o_square else q
        layer = [(qo, C), (kv_w, C), (kv_w, C), (C, qo), (I, C), (I, C), (C, I)]
        mats = [(m, w, True) for m, w in layer * L]
        if head:
            mats.append((cfg.vocab_size, C, head_quantized))

        def nbytes(out, inp, quantized):
            fmt = weights if quantized or weights in ("float32", "bfloat16") else "bfloat16"
            if fmt == "int8":
                return out * inp + (4 * out if int8_scales else 0)
            if fmt == "int4":
                extra = {"groups": 4 * out * inp / 128, "none": 0, "rows": 4 * out,
                         "scales only": 2 * out * inp / 128,
                         "a byte each": out * inp / 2 + 4 * out * inp / 128}[int4]
                return out * inp / 2 + extra
            return out * inp * (4 if fmt == "float32" else 2)

        act = 4 if weights == "float32" else 2
        if kv_format == "weights":
            act = {"int8": 1, "int4": 0.5}.get(weights, act)
        kv_bytes = {"all": batch * kv_len * 2 * L * kv_w * act, "none": 0,
                    "one layer": batch * kv_len * 2 * kv_w * act,
                    "K only": batch * kv_len * L * kv_w * act}[kv]
        w_bytes = sum(nbytes(*m) for m in mats) * (batch if weight_reads == "per request" else 1)
        flops = flops_per_weight * batch * sum(o * i for o, i, _ in mats)
        if attention_flops:
            flops += 4 * batch * L * q * kv_len
        memory, compute = (w_bytes + kv_bytes) / bandwidth, flops / peak_flops
        total = {"max": max(memory, compute), "sum": memory + compute, "memory": memory}
        return total[combine] * unit

    return fn


STEP_MUTANTS = {
    "weights read once per request": _step_mutant(weight_reads="per request"),
    "no K/V bytes": _step_mutant(kv="none"),
    "K/V of one layer": _step_mutant(kv="one layer"),
    "K only, not V": _step_mutant(kv="K only"),
    "memory time + compute time": _step_mutant(combine="sum"),
    "the memory roof alone": _step_mutant(combine="memory"),
    "no attention FLOPs": _step_mutant(attention_flops=False),
    "1 FLOP per weight": _step_mutant(flops_per_weight=1),
    "no LM head": _step_mutant(head=False),
    "LM head left in bfloat16": _step_mutant(head_quantized=False),
    "q and o taken as [C, C]": _step_mutant(o_square=True),
    "int8 without its scales": _step_mutant(int8_scales=False),
    "int4 without scales and zero points": _step_mutant(int4="none"),
    "int4 with one scale and zero per row": _step_mutant(int4="rows"),
    "int4 with scales but no zero points": _step_mutant(int4="scales only"),
    "int4 as one byte per weight": _step_mutant(int4="a byte each"),
    "K/V in the weights' format": _step_mutant(kv_format="weights"),
    "milliseconds": _step_mutant(unit=1e3),
}


@pytest.mark.parametrize("fn", [step_solution, step_from_step_cost, _step_mutant()])
def test_predict_step_seconds_correct(fn):
    assert check("ch09.predict_step_seconds", fn).passed


@pytest.mark.parametrize("name", STEP_MUTANTS)
def test_predict_step_seconds_mutants(name):
    assert not check("ch09.predict_step_seconds", STEP_MUTANTS[name]).passed


def test_predict_step_seconds_hints():
    messages = lambda name: _messages("ch09.predict_step_seconds",  # noqa: E731
                                      STEP_MUTANTS[name])
    assert "once per request" in messages("weights read once per request")
    assert "larger of the two" in messages("memory time + compute time")
    assert "zero point" in messages("int4 without scales and zero points")
    assert "per group" in messages("int4 with one scale and zero per row")
    assert "float32 scale" in messages("int8 without its scales")
    assert "Hq·D need not" in messages("q and o taken as [C, C]")
    assert "milliseconds" in messages("milliseconds")
    assert "stays bfloat16" in messages("K/V in the weights' format")


def test_predict_step_seconds_rejects_a_tensor():
    def as_tensor(*args):
        return torch.tensor(step_solution(*args))

    assert not check("ch09.predict_step_seconds", as_tensor).passed


def test_stubs_report_not_implemented():
    def stub(*args):
        raise NotImplementedError("your code here")

    for name in ("online_softmax", "flash_attention", "merge_states", "paged_split_kv_decode",
                 "predict_step_seconds"):
        result = check(f"ch09.{name}", stub)
        assert not result.implemented and not result.passed
