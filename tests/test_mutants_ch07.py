"""Chapter 07's checks: every wrong implementation learners write fails, every right one passes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from minimodel import ops
from minimodel.engine.attention import build_metadata
from minimodel.grading import check
from minimodel.grading.learner import learner_module

ROOT = Path(__file__).resolve().parents[1]

# --- ch07.kv_bytes_per_token -----------------------------------------------------------------


def kv_bytes_solution(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


def kv_bytes_prod(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return math.prod([2, num_layers, num_kv_heads, head_dim, dtype_bytes])


def kv_bytes_tensor(num_layers, num_kv_heads, head_dim, dtype_bytes):
    """Sizes a real [L, 2, Hkv, D] cache row and asks torch how many bytes it holds."""
    dtype = {1: torch.uint8, 2: torch.bfloat16, 4: torch.float32}[dtype_bytes]
    row = torch.empty(num_layers, 2, num_kv_heads, head_dim, dtype=dtype, device="meta")
    return row.numel() * row.element_size()


KV_BYTES_MUTANTS = {
    "factor 2 forgotten (only K)": lambda L, H, D, b: L * H * D * b,
    "factor 2 twice": lambda L, H, D, b: 4 * L * H * D * b,
    "bits instead of bytes": lambda L, H, D, b: 2 * L * H * D * b * 8,
    "layers forgotten": lambda L, H, D, b: 2 * H * D * b,
    "dtype forgotten": lambda L, H, D, b: 2 * L * H * D,
    "float result": lambda L, H, D, b: 2.0 * L * H * D * b,
    "divides by 1": lambda L, H, D, b: 2 * L * H * D * b / 1,
    "tensor result": lambda L, H, D, b: torch.tensor(2 * L * H * D * b),
    "head_dim squared": lambda L, H, D, b: 2 * L * H * D * D * b,
    "sums instead of multiplies": lambda L, H, D, b: 2 * (L + H + D + b),
    "hard-coded Qwen3-0.6B bf16": lambda L, H, D, b: 114688,
    "KiB instead of bytes": lambda L, H, D, b: 2 * L * H * D * b // 1024,
}


@pytest.mark.parametrize("fn", [kv_bytes_solution, kv_bytes_prod, kv_bytes_tensor])
def test_kv_bytes_correct(fn):
    assert check("ch07.kv_bytes_per_token", fn).passed


@pytest.mark.parametrize("name", KV_BYTES_MUTANTS)
def test_kv_bytes_mutants(name):
    assert not check("ch07.kv_bytes_per_token", KV_BYTES_MUTANTS[name]).passed


# --- ch07.paged_metadata --------------------------------------------------------------------------


def md_solution(kv_lens, pages, page_size):
    counts = [-(-n // page_size) for n in kv_lens]
    kv_indptr = torch.zeros(len(kv_lens) + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.tensor(counts).cumsum(0)
    kv_indices = torch.tensor([p for own, c in zip(pages, counts) for p in own[:c]],
                              dtype=torch.int32)
    kv_last_page_len = torch.tensor([n - (c - 1) * page_size for n, c in zip(kv_lens, counts)],
                                    dtype=torch.int32)
    return kv_indptr, kv_indices, kv_last_page_len


def md_loop(kv_lens, pages, page_size):
    indptr, indices, last = [0], [], []
    for n, own in zip(kv_lens, pages):
        used = math.ceil(n / page_size)
        indices.extend(own[:used])
        indptr.append(indptr[-1] + used)
        last.append((n - 1) % page_size + 1)
    return (torch.tensor(indptr, dtype=torch.int32), torch.tensor(indices, dtype=torch.int32),
            torch.tensor(last, dtype=torch.int32))


def md_vectorised(kv_lens, pages, page_size):
    lens = torch.tensor(kv_lens)
    counts = (lens + page_size - 1) // page_size
    indptr = F.pad(counts.cumsum(0), (1, 0)).int()
    indices = torch.cat([torch.tensor(p[:c], dtype=torch.int64)
                         for p, c in zip(pages, counts.tolist())]).int()
    last = torch.where(lens % page_size == 0, page_size, lens % page_size).int()
    return indptr, indices, last


def md_engine(kv_lens, pages, page_size):
    """The engine's own builder (q_lens do not matter for the kv arrays)."""
    md = build_metadata(pages, kv_lens, kv_lens, page_size)
    return md.kv_indptr, md.kv_indices, md.kv_last_page_len


def _md_mutant(counts="ceil", cumulative=True, last="ok", dtype=torch.int32, all_pages=False,
               leading_zero=True, order="ok"):
    def fn(kv_lens, pages, page_size):
        c = [(-(-n // page_size) if counts == "ceil" else n // page_size) for n in kv_lens]
        if all_pages:
            c = [len(p) for p in pages]
        running = list(torch.tensor(c).cumsum(0).tolist()) if cumulative else c
        indptr = ([0] if leading_zero else []) + running
        listed = [own[:k] for own, k in zip(pages, c)]
        if order == "sorted":
            listed = [sorted(x) for x in listed]
        if order == "reversed":
            listed = [x[::-1] for x in listed]
        indices = [p for x in listed for p in x]
        if last == "mod":
            lp = [n % page_size for n in kv_lens]
        elif last == "plus_one":
            lp = [n % page_size + 1 for n in kv_lens]
        elif last == "full":
            lp = [page_size] * len(kv_lens)
        else:
            lp = [(n - 1) % page_size + 1 for n in kv_lens]
        return (torch.tensor(indptr, dtype=dtype), torch.tensor(indices, dtype=dtype),
                torch.tensor(lp, dtype=dtype))

    return fn


def md_mutates_pages(kv_lens, pages, page_size):
    for own, n in zip(pages, kv_lens):
        del own[-(-n // page_size):]  # "drop the spare pages" in place
    return md_solution(kv_lens, pages, page_size)


MD_MUTANTS = {
    "int64 dtype": _md_mutant(dtype=torch.int64),
    "indptr not cumulative": _md_mutant(cumulative=False),
    "indptr without the leading 0": _md_mutant(leading_zero=False),
    "floor instead of ceil": _md_mutant(counts="floor"),
    "last_page_len 0 for full pages": _md_mutant(last="mod"),
    "last_page_len len % S + 1": _md_mutant(last="plus_one"),
    "last_page_len always page_size": _md_mutant(last="full"),
    "all owned pages listed": _md_mutant(all_pages=True),
    "pages sorted": _md_mutant(order="sorted"),
    "pages reversed": _md_mutant(order="reversed"),
    "returns lists": lambda s, p, S: tuple(t.tolist() for t in md_solution(s, p, S)),
    "mutates the page tables": md_mutates_pages,
}


@pytest.mark.parametrize("fn", [md_solution, md_loop, md_vectorised, md_engine])
def test_paged_metadata_correct(fn):
    assert check("ch07.paged_metadata", fn).passed


@pytest.mark.parametrize("name", MD_MUTANTS)
def test_paged_metadata_mutants(name):
    assert not check("ch07.paged_metadata", MD_MUTANTS[name]).passed


def test_paged_metadata_hints():
    result = check("ch07.paged_metadata", MD_MUTANTS["all owned pages listed"])
    assert any("owns" in o.message for o in result.outcomes)
    result = check("ch07.paged_metadata", MD_MUTANTS["last_page_len 0 for full pages"])
    assert any("full" in o.message for o in result.outcomes)
    result = check("ch07.paged_metadata", MD_MUTANTS["indptr not cumulative"])
    assert any("cumulative" in o.message for o in result.outcomes)


# --- ch07.slot_mapping ----------------------------------------------------------------------------


def slots_solution(kv_lens, q_lens, pages, page_size):
    slots = []
    for n, q, own in zip(kv_lens, q_lens, pages):
        for pos in range(n - q, n):
            slots.append(own[pos // page_size] * page_size + pos % page_size)
    return torch.tensor(slots, dtype=torch.long)


def slots_vectorised(kv_lens, q_lens, pages, page_size):
    out = []
    for n, q, own in zip(kv_lens, q_lens, pages):
        pos = torch.arange(n - q, n)
        table = torch.tensor(own)
        out.append(table[pos // page_size] * page_size + pos % page_size)
    return torch.cat(out)


def slots_engine(kv_lens, q_lens, pages, page_size):
    return build_metadata(pages, kv_lens, q_lens, page_size).slot_mapping


def _slots_mutant(start="ok", multiply=True, swap=False, dtype=torch.long):
    def fn(kv_lens, q_lens, pages, page_size):
        slots = []
        for n, q, own in zip(kv_lens, q_lens, pages):
            first = {"ok": n - q, "zero": 0, "n": n - q + 1}[start]
            for pos in range(first, first + q):
                page, offset = (pos % page_size, pos // page_size) if swap else (
                    pos // page_size, pos % page_size)
                page = own[min(page, len(own) - 1)]
                slots.append(page * page_size + offset if multiply else page + offset)
        return torch.tensor(slots, dtype=dtype)

    return fn


SLOT_MUTANTS = {
    "positions, not slots": lambda s, q, p, S: torch.tensor(
        [pos for n, k in zip(s, q) for pos in range(n - k, n)]),
    "new tokens from position 0": _slots_mutant(start="zero"),
    "one position too far": _slots_mutant(start="n"),
    "page id not multiplied": _slots_mutant(multiply=False),
    "page and offset swapped": _slots_mutant(swap=True),
    "int32 dtype": _slots_mutant(dtype=torch.int32),
    "pages of request 0 for all": lambda s, q, p, S: slots_solution(s, q, [p[0]] * len(p), S),
    "every token of the sequence": lambda s, q, p, S: slots_solution(s, s, p, S),
}


@pytest.mark.parametrize("fn", [slots_solution, slots_vectorised, slots_engine])
def test_slot_mapping_correct(fn):
    assert check("ch07.slot_mapping", fn).passed


@pytest.mark.parametrize("name", SLOT_MUTANTS)
def test_slot_mapping_mutants(name):
    assert not check("ch07.slot_mapping", SLOT_MUTANTS[name]).passed


# --- ch07.cached_attention ------------------------------------------------------------------------


def cached_solution(q, k, v):
    Q, Hq, D = q.shape
    K, Hkv, _ = k.shape
    k = k.repeat_interleave(Hq // Hkv, dim=1)  # [K, Hq, D]
    v = v.repeat_interleave(Hq // Hkv, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k.float()) / math.sqrt(D)  # [Hq, Q, K]
    mask = torch.arange(K)[None, :] <= torch.arange(K - Q, K)[:, None]  # [Q, K]
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v.float()).to(q.dtype)


def cached_sdpa(q, k, v):
    """SDPA with an explicit bottom-right mask (is_causal=True would be top-left)."""
    Q, K = q.shape[0], k.shape[0]
    mask = torch.ones(Q, K, dtype=torch.bool).tril(diagonal=K - Q)
    out = F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=mask, enable_gqa=True
    )
    return out.transpose(0, 1)


def cached_loop(q, k, v):
    """Token by token, head by head, in the input dtype."""
    Q, Hq, D = q.shape
    K, Hkv, _ = k.shape
    out = torch.empty_like(q)
    for j in range(Q):
        seen = K - Q + j + 1
        for h in range(Hq):
            kv = h * Hkv // Hq
            w = torch.softmax((k[:seen, kv] @ q[j, h]).float() * D**-0.5, dim=0)
            out[j, h] = (w[:, None] * v[:seen, kv].float()).sum(0).to(q.dtype)
    return out


def cached_grouped(q, k, v):
    """Group query heads by KV head instead of repeating K/V; additive mask."""
    Q, Hq, D = q.shape
    K, Hkv, _ = k.shape
    G = Hq // Hkv
    qg = q.float().reshape(Q, Hkv, G, D)
    scores = torch.einsum("qkgd,skd->kgqs", qg, k.float()) * D**-0.5  # [Hkv, G, Q, K]
    pos = torch.arange(K)
    bias = torch.zeros(Q, K).masked_fill(pos[None] > (K - Q + torch.arange(Q))[:, None],
                                          float("-inf"))
    out = torch.einsum("kgqs,skd->qkgd", (scores + bias).softmax(-1), v.float())
    return out.reshape(Q, Hq, D).to(q.dtype)


def _cached_mutant(mask="bottom_right", scale="sqrt", order="interleave", softmax_dim=-1):
    def fn(q, k, v):
        Q, Hq, D = q.shape
        K, Hkv, _ = k.shape
        G = Hq // Hkv
        if order == "interleave":
            k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
        elif order == "tile":
            k, v = k.repeat(1, G, 1), v.repeat(1, G, 1)
        qh, kh, vh = q.float().transpose(0, 1), k.float().transpose(0, 1), v.float().transpose(0, 1)
        s = {"sqrt": D**-0.5, "none": 1.0, "D": 1.0 / D, "times": D**0.5}[scale]
        scores = qh @ kh.transpose(-1, -2) * s  # [Hq, Q, K]
        if mask == "bottom_right":
            m = torch.ones(Q, K, dtype=torch.bool).tril(K - Q)
        elif mask == "top_left":
            m = torch.ones(Q, K, dtype=torch.bool).tril()
        elif mask == "inverted":
            m = ~torch.ones(Q, K, dtype=torch.bool).tril(K - Q)
        elif mask == "off_by_one":
            m = torch.ones(Q, K, dtype=torch.bool).tril(K - Q - 1)
            m[:, 0] = True
        else:
            m = torch.ones(Q, K, dtype=torch.bool)
        scores = scores.masked_fill(~m, float("-inf"))
        return (scores.softmax(softmax_dim).nan_to_num(0) @ vh).transpose(0, 1).to(q.dtype)

    return fn


def cached_sdpa_is_causal(q, k, v):
    return F.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, enable_gqa=True
    ).transpose(0, 1)


CACHED_MUTANTS = {
    "top-left causal": _cached_mutant(mask="top_left"),
    "SDPA is_causal=True (top-left)": cached_sdpa_is_causal,
    "no mask": _cached_mutant(mask="none"),
    "mask one key short": _cached_mutant(mask="off_by_one"),
    "missing scale": _cached_mutant(scale="none"),
    "scale 1/D": _cached_mutant(scale="D"),
    "scores times sqrt(D)": _cached_mutant(scale="times"),
    "mask inverted": _cached_mutant(mask="inverted"),
    "K/V heads tiled (0,1,0,1)": _cached_mutant(order="tile"),
    "softmax over queries": _cached_mutant(softmax_dim=-2),
    "returns float32 always": lambda q, k, v: cached_solution(q, k, v).float(),
    "only the last query": lambda q, k, v: cached_solution(q, k, v)[-1:].expand_as(q),
}


@pytest.mark.parametrize("fn", [cached_solution, cached_sdpa, cached_loop, cached_grouped])
def test_cached_attention_correct(fn):
    assert check("ch07.cached_attention", fn).passed


@pytest.mark.parametrize("name", CACHED_MUTANTS)
def test_cached_attention_mutants(name):
    assert not check("ch07.cached_attention", CACHED_MUTANTS[name]).passed


def test_cached_attention_hints():
    result = check("ch07.cached_attention", CACHED_MUTANTS["top-left causal"])
    assert any("top-left" in o.message for o in result.outcomes)
    result = check("ch07.cached_attention", CACHED_MUTANTS["missing scale"])
    assert any("1/sqrt(D)" in o.message for o in result.outcomes)
    result = check("ch07.cached_attention", CACHED_MUTANTS["K/V heads tiled (0,1,0,1)"])
    assert any("h // (Hq // Hkv)" in o.message for o in result.outcomes)


# --- ch07.my_cached_decode (the capstone) ---------------------------------------------------------
#
# The learner's pieces come from the solution notebooks (chapters 02-04 and this chapter's own
# cached_attention), loaded the way a learner's capstone loads them.

SOL = learner_module("ch07", ROOT / "solutions")
ch02, ch03, ch04 = SOL.ch02, learner_module("ch03", ROOT / "solutions"), SOL.ch04
cached_attention = SOL.cached_attention


def _package_rope(x, positions, theta):
    return ops.apply_rope(x, *ops.rope_cos_sin(positions, x.shape[-1], theta))


def _top_left_attention(q, k, v):
    return CACHED_MUTANTS["top-left causal"](q, k, v)


def _decoder(**bug):
    """A cached greedy decoder over a dict cache {k, v: [L, B, S, Hkv, D], length}, right unless
    `bug` names a mistake (a mutant) or another correct design (rotate the keys on read)."""
    # The learner's pieces are looked up when called (as a notebook does), so spy_calls sees them.
    def norm(*args):
        return bug["norm"](*args) if "norm" in bug else ch04.rms_norm(*args)

    def attend(*args):
        return bug["attend"](*args) if "attend" in bug else cached_attention(*args)

    def rotate(x, positions, theta):  # x [B, T, H, D], positions [T]
        B, T, H, D = x.shape
        rope = bug["rope"] if "rope" in bug else ch02.apply_rope
        return rope(x.reshape(B * T, H, D), positions.repeat(B), theta).view(B, T, H, D)

    def forward(weights, cfg, ids, cache):
        B, T = ids.shape
        Hq, Hkv, D, eps = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                           cfg.rms_norm_eps)
        start = cache["length"]
        first = 0 if bug.get("positions") == "from zero" and start else start
        positions = torch.arange(first, first + T)
        x = weights["model.embed_tokens.weight"][ids]
        for i in range(cfg.num_hidden_layers):
            def w(name, i=i):
                return weights[f"model.layers.{i}.{name}.weight"]
            h = norm(x, w("input_layernorm"), eps)
            q = norm((h @ w("self_attn.q_proj").T).view(B, T, Hq, D), w("self_attn.q_norm"), eps)
            k = norm((h @ w("self_attn.k_proj").T).view(B, T, Hkv, D), w("self_attn.k_norm"), eps)
            v = (h @ w("self_attn.v_proj").T).view(B, T, Hkv, D)
            q = rotate(q, positions, cfg.rope_theta)
            if not bug.get("rotate on read"):
                k = rotate(k, positions, cfg.rope_theta)
            if bug.get("rotate v"):
                v = rotate(v, positions, cfg.rope_theta)
            at = {"start": 0, "one late": start + 1}.get(bug.get("write"), start)
            if bug.get("write") == "start" and start == 0:
                at = 0
            cache["k"][i, :, at : at + T] = k
            cache["v"][i, :, at : at + T] = v
            end = at + T
            keys, values = cache["k"][i, :, :end], cache["v"][i, :, :end]
            if bug.get("rotate on read") or bug.get("rotate twice"):
                keys = rotate(keys, torch.arange(end), cfg.rope_theta)
            o = torch.stack([attend(q[b], keys[b], values[b]) for b in range(B)])
            x = x + o.reshape(B, T, Hq * D) @ w("self_attn.o_proj").T
            x = x + ch04.swiglu(norm(x, w("post_attention_layernorm"), eps),
                                w("mlp.gate_proj"), w("mlp.up_proj"), w("mlp.down_proj"))
            if bug.get("advance") == "per layer":
                cache["length"] += T
                start = cache["length"]
        if bug.get("advance") is None:
            cache["length"] += T
        tied = cfg.tie_word_embeddings or bug.get("head") == "always tied"
        head = weights["model.embed_tokens.weight" if tied else "lm_head.weight"]
        return norm(x, weights["model.norm.weight"], eps) @ head.T

    def new_cache(cfg, B, S):
        shape = (cfg.num_hidden_layers, B, S + 1, cfg.num_key_value_heads, cfg.head_dim)
        return {"k": torch.zeros(shape), "v": torch.zeros(shape), "length": 0}

    @torch.no_grad()
    def decode(weights, cfg, ids, steps):
        B, T = ids.shape
        cache = new_cache(cfg, B, T + steps)
        out = [forward(weights, cfg, ids, cache)[:, -1]]
        seq = ids
        for _ in range(steps - 1):
            nxt = out[-1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
            if bug.get("recompute"):  # the no-cache loop: a fresh cache, the whole sequence
                out.append(forward(weights, cfg, seq, new_cache(cfg, B, seq.shape[1]))[:, -1])
            elif bug.get("feed") == "prompt's last token":
                out.append(forward(weights, cfg, ids[:, -1:], cache)[:, -1])
            else:
                out.append(forward(weights, cfg, nxt, cache)[:, -1])
        return torch.stack(out, dim=1)

    return decode


@torch.no_grad()
def decode_growing_cache(weights, cfg, ids, steps):
    """Another design: per-layer K/V lists grown with torch.cat in [B, Hkv, T, D], chapter 03's
    attention with a bottom-right mask, fused add-norm, the LM head on the last row only."""
    B = ids.shape[0]
    Hq, Hkv, D, eps = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                       cfg.rms_norm_eps)
    ks = [torch.zeros(B, Hkv, 0, D) for _ in range(cfg.num_hidden_layers)]
    vs = [torch.zeros(B, Hkv, 0, D) for _ in range(cfg.num_hidden_layers)]
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
    out, new = [], ids
    for _ in range(steps):
        T, past = new.shape[1], ks[0].shape[2]
        pos = torch.arange(past, past + T)
        x, residual = weights["model.embed_tokens.weight"][new], None
        for i in range(cfg.num_hidden_layers):
            p = f"model.layers.{i}."
            if residual is None:
                residual, h = x, ch04.rms_norm(x, weights[p + "input_layernorm.weight"], eps)
            else:
                h, residual = ch04.fused_add_rms_norm(
                    x, residual, weights[p + "input_layernorm.weight"], eps)
            q = ch04.rms_norm((h @ weights[p + "self_attn.q_proj.weight"].T).view(B, T, Hq, D),
                              weights[p + "self_attn.q_norm.weight"], eps)
            k = ch04.rms_norm((h @ weights[p + "self_attn.k_proj.weight"].T).view(B, T, Hkv, D),
                              weights[p + "self_attn.k_norm.weight"], eps)
            v = (h @ weights[p + "self_attn.v_proj.weight"].T).view(B, T, Hkv, D)
            q = torch.stack([ch02.apply_rope(q[b], pos, cfg.rope_theta) for b in range(B)])
            k = torch.stack([ch02.apply_rope(k[b], pos, cfg.rope_theta) for b in range(B)])
            ks[i] = torch.cat([ks[i], k.transpose(1, 2)], dim=2)
            vs[i] = torch.cat([vs[i], v.transpose(1, 2)], dim=2)
            K = ks[i].shape[2]
            mask = torch.ones(T, K, dtype=torch.bool).tril(K - T)
            o = ch03.attention(q.transpose(1, 2), ks[i], vs[i], mask)  # [B, Hq, T, D]
            x = o.transpose(1, 2).reshape(B, T, Hq * D) @ weights[p + "self_attn.o_proj.weight"].T
            h, residual = ch04.fused_add_rms_norm(
                x, residual, weights[p + "post_attention_layernorm.weight"], eps)
            x = ch04.swiglu(h, weights[p + "mlp.gate_proj.weight"],
                            weights[p + "mlp.up_proj.weight"], weights[p + "mlp.down_proj.weight"])
        last = ch04.fused_add_rms_norm(x, residual, weights["model.norm.weight"], eps)[0][:, -1]
        out.append(last @ head.T)
        new = out[-1].argmax(-1, keepdim=True)
    return torch.stack(out, dim=1)


DECODE_CORRECT = {
    "the solution notebook's": SOL.my_cached_decode,
    "dict cache, tokens before heads": _decoder(),
    "K cached before RoPE, rotated on read": _decoder(**{"rotate on read": True}),
    "growing cache, chapter 03's attention, fused add-norm": decode_growing_cache,
}

DECODE_MUTANTS = {
    "RoPE positions restart at 0 in decode": _decoder(positions="from zero"),
    "cache written at position 0 every step": _decoder(write="start"),
    "cache written one position late": _decoder(write="one late"),
    "cache length never advances": _decoder(advance="never"),
    "cache length advanced once per layer": _decoder(advance="per layer"),
    "K rotated twice (cached after RoPE, rotated again on read)": _decoder(
        **{"rotate twice": True}),
    "RoPE applied to V": _decoder(**{"rotate v": True}),
    "top-left mask in cached attention": _decoder(attend=_top_left_attention),
    "feeds the prompt's last token at every step": _decoder(feed="prompt's last token"),
    "LM head always tied to the embedding": _decoder(head="always tied"),
    "no cache: recomputes the whole sequence each step": _decoder(recompute=True),
    "the package's RoPE and RMSNorm instead of the learner's": _decoder(rope=_package_rope,
                                                                       norm=ops.rms_norm),
}


@pytest.mark.parametrize("name", DECODE_CORRECT)
def test_cached_decode_correct(name):
    assert check("ch07.my_cached_decode", DECODE_CORRECT[name]).passed


@pytest.mark.parametrize("name", DECODE_MUTANTS)
def test_cached_decode_mutants(name):
    assert not check("ch07.my_cached_decode", DECODE_MUTANTS[name]).passed


def test_cached_decode_hints():
    def messages(fn):
        return " ".join(o.message for o in check("ch07.my_cached_decode", fn).outcomes)

    assert "matmul work" in messages(DECODE_MUTANTS["no cache: recomputes the whole sequence "
                                                    "each step"])
    assert "never called your own RoPE (chapter 02), RMSNorm" in messages(
        DECODE_MUTANTS["the package's RoPE and RMSNorm instead of the learner's"])
    assert "prefill matches" in messages(DECODE_MUTANTS["RoPE positions restart at 0 in decode"])
    assert "as if nothing were cached" in messages(_decoder(write="start"))


# The learner's own earlier functions, broken on purpose, break the solution's capstone.
BROKEN_PIECES = {
    "chapter 04 rms_norm without its weight": (
        ch04, "rms_norm", lambda x, weight, eps: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                                                 + eps)),
    "chapter 04 swiglu with gate and up swapped": (
        ch04, "swiglu", lambda x, g, u, d: (F.silu(x @ u.T) * (x @ g.T)) @ d.T),
    "chapter 02 RoPE on interleaved pairs": (
        ch02, "apply_rope", lambda x, pos, theta: _interleaved_rope(x, pos, theta)),
    "chapter 07 cached_attention with a top-left mask": (SOL, "cached_attention",
                                                         _top_left_attention),
}


def _interleaved_rope(x, positions, theta):
    cos, sin = ch02.rope_tables(positions, x.shape[-1], theta)  # [T, D], halves repeated
    cos, sin = cos[:, None, : x.shape[-1] // 2], sin[:, None, : x.shape[-1] // 2]
    x1, x2 = x.float()[..., 0::2], x.float()[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2).to(x.dtype)


@pytest.mark.parametrize("name", BROKEN_PIECES)
def test_a_broken_learner_piece_breaks_the_capstone(name, monkeypatch):
    module, attr, broken = BROKEN_PIECES[name]
    monkeypatch.setattr(module, attr, broken)
    assert not check("ch07.my_cached_decode", SOL.my_cached_decode).passed
