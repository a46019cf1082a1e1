"""Checks of chapter 04 (the transformer block): rms_norm, fused_add_rms_norm, swiglu,
merge_qkv, and the part-1 capstone my_qwen3_forward (the learner's own Qwen3, compared with the
reference model on bard's weights and on small random models).

Shapes: C hidden, I intermediate (MLP), Hq/Hkv query/KV heads, D head dim. Expected values come
from minimodel.ops (rms_norm, fused_add_rms_norm, silu_and_mul), the functions the reference
model and the engine both run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

from minimodel.grading.core import CheckFailed, exercise, expect, expect_close, expect_shape
from minimodel.grading.learner import spy_calls
from minimodel.ops import fused_add_rms_norm as ref_fused
from minimodel.ops import rms_norm as ref_rms_norm
from minimodel.ops import silu_and_mul

_HALF = (torch.bfloat16, torch.float16)
_TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# --- rms_norm ------------------------------------------------------------------------------


def _diagnose_norm(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, eps: float) -> str:
    """A hint naming the classic RMSNorm mistake that `out` reproduces, or "" if none does."""
    x64, w64, got = x.double(), w.double(), out.double()
    ms = x64.pow(2).mean(-1, keepdim=True)
    variants = {
        " It matches x / sqrt(mean(x^2) + eps) without the weight: multiply by weight.":
            x64 * torch.rsqrt(ms + eps),
        " It matches LayerNorm (the mean subtracted first); RMSNorm only divides by the root "
        "mean square, it does not center x.":
            F.layer_norm(x64, x64.shape[-1:], eps=eps) * w64,
        " It matches x / sqrt(mean(x) + eps): square x before taking the mean.":
            x64 * torch.rsqrt(x64.mean(-1, keepdim=True).abs() + eps) * w64,
        " It matches x / (sqrt(mean(x^2)) + eps): eps goes inside the square root.":
            x64 / (ms.sqrt() + eps) * w64,
        " It matches x / sqrt(mean(x^2)) with no eps: add eps inside the square root.":
            x64 * torch.rsqrt(ms) * w64,
        " It matches x / sqrt(sum(x^2) + eps): take the mean over C, not the sum.":
            x64 * torch.rsqrt(x64.pow(2).sum(-1, keepdim=True) + eps) * w64,
    }
    for hint, wrong in variants.items():
        if wrong.shape == got.shape and torch.allclose(got, wrong, atol=1e-4, rtol=1e-4):
            return hint
    if x.dim() >= 2:
        over_first = x64 * torch.rsqrt(x64.pow(2).mean(0, keepdim=True) + eps) * w64
        if torch.allclose(got, over_first, atol=1e-4, rtol=1e-4):
            return " It normalises over the first dim; normalise over the last dim (C)."
    return ""


def _compare_norm(fn: Callable, x: torch.Tensor, w: torch.Tensor, eps: float) -> None:
    before = x.clone()
    out = fn(x, w, eps)
    what = f"rms_norm(x {tuple(x.shape)} {_name(x.dtype)}, weight, eps={eps:g})"
    expect_shape(out, tuple(x.shape), what)
    expect(torch.equal(x, before), f"{what} changed x in place; return a new tensor instead.")
    expected = ref_rms_norm(x, w, eps)
    tol = _TOL[x.dtype]
    if not torch.allclose(out.double(), expected.double(), atol=tol, rtol=tol, equal_nan=False):
        worst = float((out.double() - expected.double()).abs().nan_to_num(float("inf")).max())
        raise CheckFailed(
            f"{what} is off from x / sqrt(mean(x^2) + eps) * weight: max abs diff {worst:.3g}."
            + (" It contains NaN or inf." if not out.isfinite().all() else "")
            + _diagnose_norm(out, x, w, eps)
        )


@exercise("ch04.rms_norm", "keeps x's shape for [C], [T, C], [B, T, C] and [B, T, H, D]")
def _norm_shape(fn: Callable) -> None:
    for shape in ((16,), (5, 32), (2, 3, 64), (2, 3, 4, 8)):
        x = torch.randn(shape)
        expect_shape(fn(x, torch.rand(shape[-1]) + 0.5, 1e-6), shape,
                     f"rms_norm(x of shape {shape}, ...)")


@exercise("ch04.rms_norm", "equals x / sqrt(mean(x²) + eps) * weight over the last dim")
def _norm_values(fn: Callable) -> None:
    for shape, eps in (((7, 32), 1e-6), ((2, 5, 64), 1e-5), ((3, 2, 4, 16), 1e-6)):
        x = torch.randn(shape) * 2 + 0.7  # a non-zero mean, so LayerNorm differs
        _compare_norm(fn, x, torch.rand(shape[-1]) * 1.5 + 0.25, eps)


@exercise("ch04.rms_norm", "puts eps inside the square root, and maps zeros to zeros (no NaN)")
def _norm_eps(fn: Callable) -> None:
    for scale, eps in ((1e-3, 1e-6), (0.1, 1e-2), (1.0, 0.5)):  # eps matters at these scales
        _compare_norm(fn, torch.randn(4, 32) * scale, torch.rand(32) + 0.5, eps)
    zeros = fn(torch.zeros(3, 16), torch.ones(16), 1e-6)
    expect_shape(zeros, (3, 16), "rms_norm(zeros)")
    expect(bool((zeros == 0).all()),
           "rms_norm of an all-zero row should be all zeros, got "
           f"{'NaN' if zeros.isnan().any() else 'non-zero values'}: eps keeps the division finite.")


@exercise("ch04.rms_norm", "returns x's dtype for float32, bfloat16 and float16 inputs")
def _norm_dtype(fn: Callable) -> None:
    for dtype in (torch.float32, *_HALF):
        x = torch.randn(4, 64).to(dtype)
        w = (torch.rand(64) + 0.5).to(dtype)
        out = fn(x, w, 1e-6)
        expect_shape(out, (4, 64), f"rms_norm(x {_name(dtype)})")
        expect(out.dtype == dtype,
               f"rms_norm of {_name(dtype)} x (weight {_name(dtype)}) returned {_name(out.dtype)};"
               " compute in float32, then cast back to x's dtype.")
        _compare_norm(fn, x, w, 1e-6)


@exercise("ch04.rms_norm", "computes in float32 for bfloat16 input (no per-row rounding bias)")
def _norm_bf16_float32(fn: Callable) -> None:
    # Rounding the row's scale 1/sqrt(mean(x^2) + eps) to bfloat16 shifts a whole row by up to
    # 0.4%; rounding only the outputs is unbiased. Measure the mean relative bias of each row.
    C = 512
    x = (torch.randn(64, C) * 2 + 0.3).to(torch.bfloat16)
    w = (torch.rand(C) + 0.5).to(torch.bfloat16)
    out = fn(x, w, 1e-6)
    expect_shape(out, (64, C), "rms_norm(x bfloat16)")
    exact = ref_rms_norm(x.float(), w.float(), 1e-6)
    bias = (out.float() / exact - 1).mean(-1).abs().mean().item()
    expect(bias < 7e-4,
           f"in bfloat16 each row of rms_norm(x) is scaled {100 * bias:.2f}% off on average "
           "(float32 math stays below 0.07%): compute mean(x^2) and x * rsqrt(...) in float32, "
           "then cast the result to x's dtype.")


@exercise("ch04.rms_norm", "does not overflow in float16 when x² exceeds 65504")
def _norm_fp16_overflow(fn: Callable) -> None:
    x = (torch.randn(4, 64) * 400).to(torch.float16)  # x^2 ~ 1e5: inf in float16
    w = (torch.rand(64) + 0.5).to(torch.float16)
    out = fn(x, w, 1e-6)
    expect_shape(out, (4, 64), "rms_norm(x float16)")
    expect(bool(out.isfinite().all()) and out.abs().amax() > 0.1,
           "rms_norm of float16 x with |x| in the hundreds gave NaN, inf or zeros: x^2 overflows "
           "float16 (max 65504). Square and average in float32.")
    _compare_norm(fn, x, w, 1e-6)


# --- fused_add_rms_norm --------------------------------------------------------------------


def _call_fused(fn: Callable, x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    out = fn(x, residual, w, eps)
    pair = isinstance(out, (tuple, list))
    expect(pair and len(out) == 2,
           "fused_add_rms_norm should return a pair (normed, new_residual), got "
           f"{type(out).__name__}{f' of {len(out)}' if pair else ''}.")
    normed, new_residual = out
    expect_shape(normed, tuple(x.shape), "normed (the first output)")
    expect_shape(new_residual, tuple(x.shape), "new_residual (the second output)")
    return normed, new_residual


def _check_fused(fn: Callable, x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                 eps: float) -> None:
    want_normed, want_residual = ref_fused(x.clone(), residual.clone(), w, eps)
    old_residual = residual.clone()
    normed, new_residual = _call_fused(fn, x, residual, w, eps)
    where = f"for x {tuple(x.shape)} {_name(x.dtype)}"
    tol = _TOL[x.dtype]
    for name, got in (("normed", normed), ("new_residual", new_residual)):
        expect(got.dtype == x.dtype,
               f"{name} has dtype {_name(got.dtype)} {where}; return x's dtype.")
    if not torch.allclose(new_residual.float(), want_residual.float(), atol=tol, rtol=tol):
        hint = ""
        if torch.equal(new_residual, old_residual):
            hint = " It equals the old residual: the new residual stream is x + residual."
        elif torch.allclose(new_residual.float(), want_normed.float(), atol=tol, rtol=tol):
            hint = (" It equals the normed output: the residual stream carries x + residual "
                    "un-normalised, or every layer's input would shrink to RMS 1.")
        elif torch.equal(new_residual, x):
            hint = " It equals x: add the old residual to it."
        raise CheckFailed(f"new_residual (the second output) is not x + residual {where}." + hint)
    if not torch.allclose(normed.float(), want_normed.float(), atol=tol, rtol=tol):
        hint = ""
        if torch.allclose(normed.float(), ref_rms_norm(x, w, eps).float(), atol=tol, rtol=tol):
            hint = " It equals rms_norm(x): normalise the sum x + residual."
        elif torch.allclose(normed.float(), want_residual.float(), atol=tol, rtol=tol):
            hint = " It equals x + residual: did you swap the two outputs?"
        worst = float((normed.float() - want_normed.float()).abs().max())
        raise CheckFailed(
            f"normed (the first output) is off from rms_norm(x + residual) {where}: "
            f"max abs diff {worst:.3g}." + hint
        )


@exercise("ch04.fused_add_rms_norm", "returns (rms_norm(x + residual), x + residual)")
def _fused_values(fn: Callable) -> None:
    for shape, eps in (((6, 32), 1e-6), ((2, 5, 64), 1e-5)):
        _check_fused(fn, torch.randn(shape), torch.randn(shape) * 3, torch.rand(shape[-1]) + 0.5,
                     eps)


@exercise("ch04.fused_add_rms_norm", "keeps the dtype in bfloat16 and float16")
def _fused_dtype(fn: Callable) -> None:
    for dtype in _HALF:
        x, residual = torch.randn(3, 64).to(dtype), (torch.randn(3, 64) * 3).to(dtype)
        _check_fused(fn, x, residual, (torch.rand(64) + 0.5).to(dtype), 1e-6)


@exercise("ch04.fused_add_rms_norm", "chained over 3 layers equals the explicit x + f(norm(x))")
def _fused_chain(fn: Callable) -> None:
    C, L, eps = 32, 3, 1e-6
    x = torch.randn(2, 4, C)
    norms = [torch.rand(C) + 0.5 for _ in range(2 * L + 1)]
    subs = [torch.randn(C, C) / C**0.5 for _ in range(2 * L)]  # stand-ins for attn and mlp
    # the reference's way: explicit residual adds
    h = x
    for i in range(2 * L):
        h = h + ref_rms_norm(h, norms[i], eps) @ subs[i]
    want = ref_rms_norm(h, norms[-1], eps)
    # the engine's way: each sublayer's output goes to the next norm with the residual
    out, residual = x, torch.zeros_like(x)
    for i in range(2 * L):
        normed, residual = _call_fused(fn, out, residual, norms[i], eps)
        out = normed @ subs[i]
    final, _ = _call_fused(fn, out, residual, norms[-1], eps)
    expect_close(final, want, "the final hidden state of the fused chain", atol=1e-4, rtol=1e-4)


# --- swiglu --------------------------------------------------------------------------------


def _mlp_weights(C: int, I: int, dtype: torch.dtype = torch.float32):
    return (
        (torch.randn(I, C) / C**0.5).to(dtype),
        (torch.randn(I, C) / C**0.5).to(dtype),
        (torch.randn(C, I) / I**0.5).to(dtype),
    )


def _expected_swiglu(x, w_gate, w_up, w_down):
    gate_up = torch.cat([x.double() @ w_gate.double().T, x.double() @ w_up.double().T], -1)
    return silu_and_mul(gate_up) @ w_down.double().T


def _diagnose_swiglu(out, x, w_gate, w_up, w_down) -> str:
    x, wg, wu, wd = (t.double() for t in (x, w_gate, w_up, w_down))
    g, u = x @ wg.T, x @ wu.T
    variants = {
        " It matches relu(gate) * up: Qwen3 uses silu(z) = z * sigmoid(z).": F.relu(g) * u,
        " It matches gelu(gate) * up: Qwen3 uses silu(z) = z * sigmoid(z).": F.gelu(g) * u,
        " It matches sigmoid(gate) * up: silu is z * sigmoid(z), not sigmoid(z).":
            torch.sigmoid(g) * u,
        " It matches gate * silu(up): the activation goes on the gate projection.": g * F.silu(u),
        " It matches silu(gate * up): apply silu to the gate alone, then multiply.": F.silu(g * u),
        " It matches silu(gate) without the up projection: multiply by up(x).": F.silu(g),
        " It matches gate * up with no activation: apply silu to the gate.": g * u,
    }
    got = out.double()
    for hint, h in variants.items():
        wrong = h @ wd.T
        if wrong.shape == got.shape and torch.allclose(got, wrong, atol=1e-4, rtol=1e-4):
            return hint
    return ""


def _compare_swiglu(fn: Callable, lead: tuple[int, ...], C: int, I: int,
                    dtype: torch.dtype = torch.float32) -> None:
    x = torch.randn(*lead, C).to(dtype)
    w_gate, w_up, w_down = _mlp_weights(C, I, dtype)
    out = fn(x, w_gate, w_up, w_down)
    what = f"swiglu(x {tuple(x.shape)} {_name(dtype)}, I={I})"
    expect_shape(out, tuple(x.shape), what)
    expect(out.dtype == dtype, f"{what} returned {_name(out.dtype)}; keep x's dtype.")
    expected = _expected_swiglu(x, w_gate, w_up, w_down)
    tol = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 5e-3}[dtype]
    if not torch.allclose(out.double(), expected, atol=tol, rtol=tol):
        worst = float((out.double() - expected).abs().max())
        raise CheckFailed(
            f"{what} is off from down(silu(gate(x)) * up(x)): max abs diff {worst:.3g}."
            + _diagnose_swiglu(out, x, w_gate, w_up, w_down)
        )


@exercise("ch04.swiglu", "returns [..., C] for 1-D to 3-D inputs (weights [I, C], [I, C], [C, I])")
def _swiglu_shape(fn: Callable) -> None:
    for lead, C, I in (((), 8, 24), ((5,), 16, 40), ((2, 3), 32, 96)):
        x = torch.randn(*lead, C)
        expect_shape(fn(x, *_mlp_weights(C, I)), (*lead, C), f"swiglu(x {(*lead, C)}, I={I})")


@exercise("ch04.swiglu", "equals down(silu(gate(x)) * up(x))")
def _swiglu_values(fn: Callable) -> None:
    for lead, C, I in (((7,), 16, 40), ((2, 3), 32, 96), ((4,), 64, 192)):
        _compare_swiglu(fn, lead, C, I)


@exercise("ch04.swiglu", "works in bfloat16 and float16")
def _swiglu_dtype(fn: Callable) -> None:
    for dtype in _HALF:
        _compare_swiglu(fn, (2, 3), 32, 64, dtype)


# --- merge_qkv -----------------------------------------------------------------------------

# (C, Hq, Hkv, D): MHA, GQA, MQA, and Hq * D != C as in Qwen3
_QKV_CASES = ((32, 4, 4, 8), (64, 4, 2, 32), (48, 6, 1, 16), (40, 8, 2, 10))


def _qkv_weights(C: int, Hq: int, Hkv: int, D: int, dtype: torch.dtype = torch.float32):
    return (torch.randn(Hq * D, C).to(dtype), torch.randn(Hkv * D, C).to(dtype),
            torch.randn(Hkv * D, C).to(dtype))


@exercise("ch04.merge_qkv", "returns [(Hq + 2*Hkv) * D, C] for MHA, GQA, MQA and Hq*D != C")
def _merge_shape(fn: Callable) -> None:
    for C, Hq, Hkv, D in _QKV_CASES:
        expect_shape(fn(*_qkv_weights(C, Hq, Hkv, D)), ((Hq + 2 * Hkv) * D, C),
                     f"merge_qkv for C={C}, Hq={Hq}, Hkv={Hkv}, D={D}")


@exercise("ch04.merge_qkv", "one matmul x @ W.T then a split gives q, k, v (in that order)")
def _merge_matmul(fn: Callable) -> None:
    for C, Hq, Hkv, D in _QKV_CASES:
        w_q, w_k, w_v = _qkv_weights(C, Hq, Hkv, D)
        merged = fn(w_q, w_k, w_v)
        where = f"merge_qkv for C={C}, Hq={Hq}, Hkv={Hkv}, D={D}"
        expect_shape(merged, ((Hq + 2 * Hkv) * D, C), where)
        x = torch.randn(3, C)
        q, k, v = (x @ merged.T).split([Hq * D, Hkv * D, Hkv * D], dim=-1)
        for name, got, w in (("q", q, w_q), ("k", k, w_k), ("v", v, w_v)):
            if not torch.allclose(got, x @ w.T, atol=1e-4, rtol=1e-4):
                raise CheckFailed(
                    f"{where}: the {name} slice of x @ merged.T is not x @ w_{name}.T. Stack the "
                    "rows of w_q, then w_k, then w_v along dim 0 (the order of "
                    "PACKED_MODULES['qkv_proj'])."
                )


@exercise("ch04.merge_qkv", "keeps the weights' dtype and values exactly (bfloat16)")
def _merge_dtype(fn: Callable) -> None:
    w_q, w_k, w_v = _qkv_weights(64, 4, 2, 32, torch.bfloat16)
    merged = fn(w_q, w_k, w_v)
    expect_shape(merged, (256, 64), "merge_qkv of bfloat16 weights")
    expect(merged.dtype == torch.bfloat16,
           f"merge_qkv of bfloat16 weights returned {_name(merged.dtype)}; keep their dtype.")
    expect(torch.equal(merged, torch.cat([w_q, w_k, w_v])),
           "merge_qkv changed the weights' values: the merged weight holds the rows of w_q, "
           "then w_k, then w_v, exactly as they are (no transpose, no arithmetic).")


# --- my_qwen3_forward: the part-1 capstone -------------------------------------------------

# Real text through the real tokenizer: verse in the layout bard was trained on, a Chinese line,
# and a single token (where attention can only read the token itself).
_PROMPTS = ("HAMLET.\nTo be, or not to be, that is the question:\n", "床前明月光，疑是地上霜。",
            "O")
_BATCH = ("Shall I compare thee to a summer's day?", "床前明月光，", "ROMEO.\nBut soft")
_ATOL = 1e-4

# What the forward must be built from: (what to tell the learner, names that count)
_PIECES = (
    ("embed (chapter 01)", ("embed",)),
    ("apply_rope or rope_qkv (chapter 02)", ("apply_rope", "rope_qkv")),
    ("attention (chapter 03)", ("attention",)),
    ("rms_norm (this chapter)", ("rms_norm",)),
    ("swiglu (this chapter)", ("swiglu",)),
)


def _reference_model(cfg, weights: dict[str, torch.Tensor]):
    """The package's reference Qwen3 (float32) holding `weights` (Hugging Face names)."""
    from minimodel.reference import Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    model = model.to_empty(device="cpu").float()
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    with torch.no_grad():
        for name, param in model.named_parameters():  # a tied table is listed once
            param.copy_(weights[name])
    return model.eval()


def _left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ids -> (ids Long[B, T], attention_mask Bool[B, T]), padded on the left."""
    T = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (T - len(r)) + r for r in rows])
    real = torch.tensor([[False] * (T - len(r)) + [True] * len(r) for r in rows])
    return ids, real


@functools.lru_cache(maxsize=1)
def _bard_cases():
    """bard's weights in float32, its config, and (ids, attention_mask, reference logits)."""
    from minimodel.config import Qwen3Config
    from minimodel.hub import resolve_model
    from minimodel.tokenizer import load_tokenizer
    from minimodel.weights import iter_checkpoint

    path = resolve_model("bard")
    cfg = Qwen3Config.from_pretrained(path)
    tok = load_tokenizer(path)
    weights = {name: t.float() for name, t in iter_checkpoint(path)}
    model = _reference_model(cfg, weights)
    prompts = [torch.tensor([tok.encode(p)]) for p in _PROMPTS]
    batch, real = _left_pad([tok.encode(p) for p in _BATCH], tok.pad_token_id)
    with torch.no_grad():
        alone = [(ids, None, model(ids)) for ids in prompts]
        padded = (batch, real, model(batch, attention_mask=real))
    return weights, cfg, alone, padded


def _random_cases():
    """Small random Qwen3s (MQA, Hq*D != C, an untied LM head), random lengths and padding."""
    from minimodel.checkpoints import random_state_dict_numpy
    from minimodel.config import Qwen3Config

    configs = (
        Qwen3Config(vocab_size=97, hidden_size=48, intermediate_size=80, num_hidden_layers=2,
                    num_attention_heads=6, num_key_value_heads=2, head_dim=16,
                    rope_theta=10_000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    torch_dtype="float32"),
        Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=1, head_dim=8,
                    torch_dtype="float32"),
    )
    for seed, cfg in enumerate(configs):
        weights = random_state_dict_numpy(cfg, seed=seed + 1)
        model = _reference_model(cfg, weights)
        lengths = torch.randint(1, 12, (3,)).tolist()
        rows = [torch.randint(cfg.vocab_size, (n,)).tolist() for n in lengths]
        ids, real = _left_pad(rows, pad_id=0)
        with torch.no_grad():
            yield weights, cfg, ids, real, model(ids, attention_mask=real)


def _where(cfg, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> str:
    B, T = ids.shape
    what = f"my_qwen3_forward on ids [{B}, {T}]"
    if attention_mask is not None:
        what += f" (left-padded, real lengths {attention_mask.sum(-1).tolist()})"
    shape = (f"C={cfg.hidden_size}, Hq={cfg.num_attention_heads}, "
             f"Hkv={cfg.num_key_value_heads}, D={cfg.head_dim}, L={cfg.num_hidden_layers}")
    return f"{what}, {shape}"


def _compare_forward(fn: Callable, weights, cfg, ids, attention_mask, want) -> None:
    """The learner's logits must equal `want` at every real position, within 1e-4."""
    with torch.no_grad():
        got = fn(dict(weights), cfg, ids, attention_mask)
    where = _where(cfg, ids, attention_mask)
    expect_shape(got, tuple(want.shape), f"the logits of {where}")
    expect(got.dtype == torch.float32,
           f"the logits of {where} have dtype {_name(got.dtype)}; the weights are float32, "
           "so the logits should be too.")
    real = (torch.ones(ids.shape, dtype=torch.bool) if attention_mask is None
            else attention_mask.bool())
    diff = (got - want)[real].abs()  # [positions, V]: padded positions are not compared
    if diff.isnan().any():
        raise CheckFailed(
            f"{where} gives NaN at real positions. A padding query that may read no key at all "
            "gets a softmax over -inf only (NaN); the NaN then reaches real tokens through the "
            "next layer's values, even where their weight is 0 (0 * NaN = NaN)."
            if attention_mask is not None else f"{where} gives NaN logits."
        )
    worst = float(diff.max())
    if worst <= _ATOL:
        return
    # Diagnose with the first real token alone: it reads only itself, at position 0, so q, k,
    # RoPE and the mask play no part in its logits.
    s = int(real[0].long().argmax())
    with torch.no_grad():
        single = fn(dict(weights), cfg, ids[:1, s:s + 1])
    if not isinstance(single, torch.Tensor) or tuple(single.shape[:2]) != (1, 1) \
            or (single[0, 0] - want[0, s]).abs().max() > _ATOL:
        hint = (" Even one token alone is off. A single token's attention reads only its own "
                "value vector, so q, k, RoPE and the mask play no part there: look at the "
                "embedding, the norms and their weights, the residual adds, the MLP, v and "
                "o_proj, the final norm and the LM head.")
    else:
        hint = (" One token alone comes out right, so the mistake is where tokens meet: q and "
                "k (QK-norm, RoPE and its positions), the causal mask, the padding, the scores.")
    raise CheckFailed(f"{where}: the logits are off from the reference model's by up to "
                      f"{worst:.3g} (allowed {_ATOL:g})." + hint)


@exercise("ch04.my_qwen3_forward", "returns float32 logits [B, T, V] for bard's weights")
def _forward_shape(fn: Callable) -> None:
    weights, cfg, alone, _ = _bard_cases()
    ids, _, want = alone[0]
    with torch.no_grad():
        got = fn(dict(weights), cfg, ids)
    expect_shape(got, tuple(want.shape), f"my_qwen3_forward(weights, cfg, ids {tuple(ids.shape)})")
    expect(got.dtype == torch.float32,
           f"my_qwen3_forward returned {_name(got.dtype)} logits; float32 weights give float32.")


@exercise("ch04.my_qwen3_forward",
          "equals the reference model within 1e-4 on 3 prompts (verse, Chinese, one token)")
def _forward_prompts(fn: Callable) -> None:
    weights, cfg, alone, _ = _bard_cases()
    for ids, mask, want in alone:
        _compare_forward(fn, weights, cfg, ids, mask, want)


@exercise("ch04.my_qwen3_forward",
          "a left-padded batch of 3 prompts: equal at every real position")
def _forward_padded(fn: Callable) -> None:
    weights, cfg, _, (ids, real, want) = _bard_cases()
    _compare_forward(fn, weights, cfg, ids, real, want)


@exercise("ch04.my_qwen3_forward",
          "random small models: MQA, Hq*D != C, untied LM head, random lengths and padding")
def _forward_random(fn: Callable) -> None:
    for weights, cfg, ids, real, want in _random_cases():
        _compare_forward(fn, weights, cfg, ids, real, want)


@exercise("ch04.my_qwen3_forward",
          "is built from your own embed, RoPE, attention, rms_norm and swiglu")
def _forward_own_pieces(fn: Callable) -> None:
    weights, cfg, alone, _ = _bard_cases()
    ids = alone[0][0]
    with spy_calls(fn) as calls, torch.no_grad():
        fn(dict(weights), cfg, ids)
    missing = [what for what, names in _PIECES if not any(calls[n] for n in names)]
    expect(not missing,
           "my_qwen3_forward never called your own " + ", ".join(missing) + ". The capstone "
           "is your model: it must run the functions you wrote (loaded with learner_module "
           "from your notebooks of chapters 01-03, and this notebook's), not the package's.")
