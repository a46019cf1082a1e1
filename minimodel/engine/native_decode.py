"""A decode step of the engine's model in one call into C (minimodel/kernels/decode.c).

On a CPU, a decode step of a small model is a few milliseconds, and the model written in torch
spends most of them outside its matrix products: every layer makes about thirty small torch
calls (norms, RoPE, the K/V writes and page gathers, attention, SiLU, adds), each paying a few
microseconds of dispatch and a fresh tensor. `NativeDecoder` hands the whole step (the
embedding, every layer and the final norm) to `mm_decode`, one call, which does the same work in
plain loops and the products with the same C kernel on the same packed weights
(`matmul.LinearKernels`' `c_gemv` packs). `greedy` goes on in the same call through the LM head
and the argmax (`mm_decode_greedy`), for a step whose every request is plain greedy and whose
LM head chose the C kernel too (`ModelRunner.greedy_in_c`).

It runs a step only where the measured timings say the C kernel's products cost no more than
what the layers chose (`can_run`): one CPU process on the torch backend (the runner's `inline`
decoder exists), float32 or bfloat16 activations, and for the step's row bucket the products
of every layer, timed in `c_gemv` when the kernels were chosen (`model.kernel_choices`), add up
to at most SLACK times those of the formulations chosen, or to at most SAVED_PER_LAYER_S more
a layer. A layer whose choice for that bucket is another formulation gets a `c_gemv` pack of
its own. Elsewhere the runner keeps the inlined torch step. The K/V go into the same slots of
the same pool, so prefills (the model's forward) and native decode steps read each other's
cache. Hidden states equal the model's within float rounding, not bit for bit
(tests/test_native_decode.py): sums run in another order, and e^x is decode.c's own.

What it reads: the model's norm weights, embedding, RoPE tables and KV pools in place, and the
layers' packed weights (the packs, not the weights: as with `c_gemv` anywhere, a weight
changed in place after packing is not seen; rebinding a layer's kernels is).
"""

from __future__ import annotations

import array
import ctypes
import math
from dataclasses import dataclass
from typing import Any

import torch

from minimodel.engine.attention import AttentionMetadata, TorchBackend, decode_lists
from minimodel.engine.model import PackedQwen3ForCausalLM
from minimodel.engine.quantization import linear_layers
from minimodel.kernels import native
from minimodel.kernels.matmul import FORMULATIONS, BoundKernels, row_bucket
from minimodel.sampling import Sampler, SamplingParams

PROFILER_LABEL = "minimodel::c_decode"  # what torch.profiler calls a native decode step
# The C kernel's products may take up to this much longer than the chosen ones, in total over
# the layers, for a step to run here: what the step saves outside its products (every torch
# call of every layer) is larger on any model small enough to be decoded on a CPU.
SLACK = 1.1
# ... or longer by at most this many seconds per layer: what a step in C saves outside the
# products, credited low. Measured (docs/benchmarks.md, the inlined torch step against the step
# in C, taking turns), it saves 0.3-0.6 ms a layer on bard and 0.5-1.0 ms on Qwen3-0.6B's shape,
# on CPUs with and without AVX-512; a small model's products can be a little slower in C (bard's
# int8 layers on an AVX2-only CPU: 12%, 14 us a layer) and the step still far faster.
SAVED_PER_LAYER_S = 50e-6


class NativeDecoder:
    """`__call__(ids, metadata)` -> hidden [B, C] of a pure decode step, computed by
    decode.c's `mm_decode`; `can_run(metadata)` says whether this step may take it.
    `product_s`: the seconds its products took, summed over every call (measured inside C)."""

    def __init__(self, model: PackedQwen3ForCausalLM, backend: TorchBackend) -> None:
        if model.tp_size != 1:
            raise ValueError("NativeDecoder runs one rank's whole model "
                             "(tensor_parallel_size=1).")
        self.model, self.backend = model, backend
        layers = model.model.layers
        self.products = tuple(m for layer in layers for m in (
            layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj,
            layer.mlp.down_proj))
        self._names = {m: name for name, m in linear_layers(model)}
        self._packs: dict[Any, native.Packed] = {}  # c_gemv packs of layers that chose another
        self.product_s = 0.0
        self._state: tuple[Any, ...] = ()  # what the struct was built from
        self._key: tuple[int, ...] = ()  # and _current's key of it
        self._ok: dict[int | None, bool] = {}  # row bucket -> may run here
        self._head_ok: dict[int | None, bool] = {}  # row bucket -> head_chose_c
        self._struct: native.MMModel | None = None
        self._keep: list[Any] = []  # tensors the struct points into
        self._approved: AttentionMetadata | None = None  # the step can_run last said yes to
        self._head: tuple[native.Packed, native.MMWeight] | None = None  # the LM head's
        self._head_approved: AttentionMetadata | None = None  # head_runs_here's last yes
        # greedy steps go on through the LM head in the same call (the bench card turns it
        # off to time the steps that stop at the hidden states against them)
        self.through_head = True
        self._frames: dict[tuple[int, bool], _Frame] = {}  # per (B, without the head)
        self._logits: torch.Tensor | None = None  # greedy's logits, kept from step to step
        self._spent = ctypes.c_double()  # the seconds a call spent in its products
        self._dtype = torch.float32  # the model's when the struct was built (_build)

    def _current(self) -> tuple[tuple[Any, ...], tuple[int, ...]]:
        """What the struct depends on (the RoPE tables, the pools; and the layers' kernels)
        and a key that changes when any of them does: their id()s (no other object has one
        while `_state` holds them), the thread count, and the count of kernel rebindings in
        any layer (`BoundKernels`: no pass over the layers). Asked every step."""
        state = (self.model.rope_cos, self.model.rope_sin, *self.backend.kv_cache.pools)
        return state, (BoundKernels.rebinds, *map(id, state), torch.get_num_threads())

    def can_run(self, metadata: AttentionMetadata) -> bool:
        """A pure decode step that may run here (`runs`)."""
        ok = metadata.is_decode and self.runs(len(metadata.kv_lens))
        self._approved = metadata if ok else None  # __call__ need not ask again
        return ok

    def runs(self, requests: int) -> bool:
        """May a pure decode step of this many requests run here: is its row bucket one where
        the C kernel's products cost at most SLACK times the chosen ones, or a little more
        (see the module's docstring)?"""
        state, key = self._current()
        if key != self._key:
            self._state, self._key, self._struct, self._keep = state, key, None, []
            self._ok, self._head_ok, self._head, self._frames = {}, {}, None, {}
        bucket = row_bucket(requests)
        ok = self._ok.get(bucket)
        if ok is None:
            ok = self._ok[bucket] = self._supported() and self._c_costs_no_more(bucket)
        return ok

    def _c_costs_no_more(self, bucket: int | None) -> bool:
        """Do the products in `c_gemv` cost at most SLACK times the chosen ones at `bucket`,
        or at most SAVED_PER_LAYER_S more a layer, summed over the layers, by the seconds
        measured when they were chosen? (A layer whose timings are not at hand counts only if
        it chose `c_gemv` itself.)"""
        if bucket is None:
            return False
        by_layer = {name: c for c in getattr(self.model, "kernel_choices", [])
                    for name in c.layers}
        c_total = chosen_total = 0.0
        for m in self.products:
            if m.kernels is None:
                return False
            chosen = m.kernels.choices.get(bucket, "linear")
            choice = by_layer.get(self._names[m])
            timed = {} if choice is None else choice.seconds.get(str(bucket), {})
            if "c_gemv" not in timed or chosen not in timed:
                if chosen == "c_gemv":
                    continue  # the same product either way
                return False
            c_total, chosen_total = c_total + timed["c_gemv"], chosen_total + timed[chosen]
        saved = len(self.model.model.layers) * SAVED_PER_LAYER_S
        return c_total <= SLACK * chosen_total or c_total - chosen_total <= saved

    def _supported(self) -> bool:
        dtype = self.model.model.embed_tokens.weight.dtype
        return (native.library() is not None and dtype in (torch.float32, torch.bfloat16)
                and all(p.dtype == dtype for p in self.backend.kv_cache.pools))

    def _build(self) -> native.MMModel:
        """The mm_model of the current state (pointers into the model's tensors)."""
        model, keep = self.model, self._keep
        dtype = self._dtype = model.model.embed_tokens.weight.dtype

        def ptr(t: torch.Tensor) -> int:
            t = t.detach()
            if t.dtype != dtype or not t.is_contiguous():
                t = t.to(dtype).contiguous()
            keep.append(t)
            return t.data_ptr()

        def weight(module: Any) -> native.MMWeight:
            packed = module.kernels.packed.get("c_gemv")
            if packed is None:  # this layer chose another formulation for every bucket
                if module not in self._packs:
                    self._packs[module] = FORMULATIONS["c_gemv"].pack(module.weight)
                packed = self._packs[module]
            bias = None if module.bias is None else module.bias.detach().to(dtype).contiguous()
            keep.extend([packed, bias])
            return native.weight_struct(packed, bias)

        layers = (native.MMLayer * len(model.model.layers))()
        for i, layer in enumerate(model.model.layers):
            a, mlp = layer.self_attn, layer.mlp
            layers[i] = native.MMLayer(
                ptr(layer.input_layernorm.weight), ptr(a.q_norm.weight), ptr(a.k_norm.weight),
                ptr(layer.post_attention_layernorm.weight), weight(a.qkv_proj),
                weight(a.o_proj), weight(mlp.gate_up_proj), weight(mlp.down_proj),
                self.backend.kv_cache.pools[i].data_ptr())
        assert model.rope_cos is not None and model.rope_sin is not None
        cos, sin = model.rope_cos.float().contiguous(), model.rope_sin.float().contiguous()
        keep.extend([layers, cos, sin])
        attn, cfg = model.model.layers[0].self_attn, model.cfg
        return native.MMModel(
            len(model.model.layers), cfg.hidden_size, attn.num_heads, attn.num_kv_heads,
            attn.head_dim, model.model.layers[0].mlp.down_proj.weight.shape[1],
            self.backend.kv_cache.page_size, native.KINDS[dtype], torch.get_num_threads(),
            model.model.embed_tokens.weight.shape[0], self.backend.kv_cache.pools[0].shape[0],
            cos.shape[0], cfg.rms_norm_eps, self.backend.scale, layers,
            ptr(model.model.embed_tokens.weight), cos.data_ptr(), sin.data_ptr(),
            ptr(model.model.norm.weight))

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, metadata: AttentionMetadata) -> torch.Tensor:
        """ids: Long [B], one new token per request of a decode step (`can_run` true) ->
        hidden [B, C], the final norm applied; each token's K/V written into its slot."""
        return self._step(ids, metadata, None)[0]

    def head_runs_here(self, metadata: AttentionMetadata) -> bool:
        """May `greedy` take this step: a pure decode step that `head_runs`?"""
        ok = metadata.is_decode and self.head_runs(len(metadata.kv_lens))
        self._head_approved = metadata if ok else None  # greedy need not ask again
        return ok

    def head_runs(self, requests: int) -> bool:
        """May a greedy step of this many requests go on here through the LM head: `runs`,
        and the head chose the C kernel for its row bucket (its pack is at hand, and it was
        measured the fastest), unless `through_head` is off?"""
        if not (self.through_head and self.runs(requests)):  # runs first: it sees rebinds
            return False
        bucket = row_bucket(requests)
        head = self._head_ok.get(bucket)
        if head is None:
            head = self._head_ok[bucket] = self.head_chose_c(bucket)
        return head

    def head_chose_c(self, bucket: int | None) -> bool:
        """Did the LM head choose the C kernel for this row bucket (its pack at hand)?"""
        kernels = getattr(getattr(self.model, "lm_head", None), "kernels", None)
        return (kernels is not None and bucket is not None
                and kernels.choices.get(bucket) == "c_gemv" and "c_gemv" in kernels.packed)

    def greedy(self, ids: torch.Tensor, metadata: AttentionMetadata, score: bool = True
               ) -> tuple[list[int], list[float] | None, torch.Tensor]:
        """The step through the LM head to each request's greedy token in the same call
        (`head_runs_here` true): (tokens, their log-probabilities, hidden [B, C]). A
        log-probability is NaN where a row's largest logit is not finite (decide those from
        `hidden`, as `GreedySampler` does). score=False, for requests that asked for no
        log-probabilities: (tokens, None, hidden), no pass of e^x over the vocabulary, and a
        token is -1 where the row's largest logit is not finite."""
        if metadata is not self._head_approved and not self.head_runs_here(metadata):
            raise ValueError("NativeDecoder.greedy runs pure decode steps whose LM head chose "
                             "the C kernel (see head_runs_here); run the model instead.")
        hidden, tokens, logprobs = self._step(ids, metadata, self._head_struct(), score)
        return list(tokens), list(logprobs) if score else None, hidden  # type: ignore[arg-type]

    def greedy_lists(self, ids: list[int], kv_lens: list[int], page_tables: list[list[int]]
                     ) -> tuple[list[int], torch.Tensor]:
        """`greedy(..., score=False)` of a pure decode step as the scheduler holds it: each
        request's new token, its kv_len (this token counted) and its page table, where
        `head_runs(len(ids))`; the same call, without a metadata tensor made for it ->
        (tokens, hidden), a token -1 where its row's largest logit is not finite; hidden a
        buffer that the next such step of as many requests overwrites."""
        if not self.head_runs(len(kv_lens)):
            raise ValueError("NativeDecoder.greedy_lists runs greedy steps whose LM head chose "
                             "the C kernel (see head_runs); run the model instead.")
        if len(ids) != len(kv_lens):
            raise ValueError(f"ids must hold one token per request: {len(kv_lens)}, got "
                             f"{len(ids)}.")
        kv_indptr, kv_indices, _, slots = decode_lists(
            page_tables, kv_lens, self.backend.kv_cache.page_size)
        held = (array.array("q", ids), array.array("q", [n - 1 for n in kv_lens]),
                array.array("q", slots), array.array("i", kv_indptr),
                array.array("i", kv_indices))  # the positions: each kv_len - 1
        hidden, tokens, _ = self._call(tuple(a.buffer_info()[0] for a in held), kv_lens,
                                       self._head_struct(), score=False, fresh=False)
        return list(tokens), hidden

    def _head_struct(self) -> native.MMWeight:
        if self._head is None:  # the LM head's pack (until a rebinding: runs)
            packed = self.model.lm_head.kernels.packed["c_gemv"]  # type: ignore[union-attr]
            self._head = (packed, native.weight_struct(packed, None))
        return self._head[1]

    def _step(self, ids: torch.Tensor, metadata: AttentionMetadata,
              head: native.MMWeight | None, score: bool = True
              ) -> tuple[torch.Tensor, Any, Any]:
        """`_call` with the step's token ids and metadata tensors."""
        if metadata is not self._approved and not self.can_run(metadata):
            raise ValueError("NativeDecoder runs pure decode steps whose products may run on "
                             "the C kernel (see can_run); run the model's forward instead.")
        B = len(metadata.kv_lens)
        if ids.shape != (B,):
            raise ValueError(f"ids must hold one token per request: [{B}], got "
                             f"{tuple(ids.shape)}.")
        # as decode.c reads them (the metadata's tensors are so already: no torch call)
        held = (*(_as(t, torch.int64) for t in (ids, metadata.positions, metadata.slot_mapping)),
                _as(metadata.kv_indptr, torch.int32), _as(metadata.kv_indices, torch.int32))
        return self._call(tuple(t.data_ptr() for t in held), metadata.kv_lens, head, score)

    def _call(self, pointers: tuple[int, ...], kv_lens: list[int], head: native.MMWeight | None,
              score: bool, fresh: bool = True) -> tuple[torch.Tensor, Any, Any]:
        """mm_decode (head None) or mm_decode_greedy, given where the step's ids, positions,
        slots (int64), kv_indptr and kv_indices (int32) lie -> (hidden, tokens, logprobs);
        the last two ctypes arrays, the same for every step of B requests (copy them), filled
        only with a head (logprobs only with score); hidden a new tensor, or with fresh=False
        a buffer the next such step overwrites."""
        B = len(kv_lens)
        frame = self._frames.get((B, head is None))
        if frame is None:
            frame = self._frames[B, head is None] = self._frame(B, head)
        if max(kv_lens) > frame.positions:
            raise ValueError(f"a position past the RoPE tables ({frame.positions} positions): "
                             f"kv_lens {kv_lens}.")
        frame.kv_lens[:] = kv_lens
        hidden = torch.empty_like(frame.hidden) if fresh else frame.hidden
        args = (*frame.before, *pointers, frame.kv_lens_at, hidden.data_ptr(),
                *(frame.after if score else frame.after_unscored))
        if torch.autograd._profiler_enabled():  # one op of its own under the profiler
            with native.labelled(PROFILER_LABEL):
                code = frame.call(*args)
        else:
            code = frame.call(*args)
        if code:
            raise ValueError(
                f"decode.c refused the step (code {code}; 1: a token id, position, slot or page "
                f"out of range, or more tokens than a request's pages hold; 2: out of memory); "
                f"nothing was written. kv_lens {kv_lens}.")
        self.product_s += self._spent.value
        return hidden, frame.tokens, frame.logprobs

    def _frame(self, B: int, head: native.MMWeight | None) -> _Frame:
        """What every call for B requests (with or without the head) passes the same: made
        once, until the struct is built again (`runs`)."""
        if self._struct is None:
            self._struct = self._build()
        struct, lib = self._struct, native.library()
        assert lib is not None
        kv_lens, tokens, logprobs = ((ctypes.c_int32 * B)(), (ctypes.c_int64 * B)(),
                                     (ctypes.c_float * B)())
        hidden = torch.empty(B, struct.C, dtype=self._dtype)  # the struct's kind
        spent = ctypes.byref(self._spent)
        if head is None:
            return _Frame(lib.mm_decode, (ctypes.byref(struct), B), (spent,), (spent,), kv_lens,
                          ctypes.addressof(kv_lens), tokens, logprobs, hidden, struct.positions)
        if (self._logits is None or self._logits.dtype != self._dtype
                or self._logits.numel() < B * head.out_features):
            # one buffer for every B, kept (see decode.c): the frames on a smaller one go
            self._logits = torch.empty(B * head.out_features, dtype=self._dtype)
            self._frames = {key: f for key, f in self._frames.items() if key[1]}
        tail = (self._logits.data_ptr(), ctypes.addressof(tokens))
        return _Frame(lib.mm_decode_greedy, (ctypes.byref(struct), ctypes.byref(head), B),
                      (*tail, ctypes.addressof(logprobs), spent), (*tail, None, spent),
                      kv_lens, ctypes.addressof(kv_lens), tokens, logprobs, hidden,
                      struct.positions)


@dataclass
class _Frame:
    """The arguments of a call into decode.c that stay from step to step (`NativeDecoder._call`):
    its function, those before the step's pointers and after its hidden states (the logits
    buffer, `NativeDecoder._logits`; the tokens and log-probabilities, or with no scoring a
    NULL for them; the seconds), and what they point into."""

    call: Any
    before: tuple[Any, ...]
    after: tuple[Any, ...]
    after_unscored: tuple[Any, ...]
    kv_lens: Any
    kv_lens_at: int
    tokens: Any
    logprobs: Any
    hidden: torch.Tensor
    positions: int  # rows of the RoPE tables


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """t as a contiguous CPU tensor of dtype (t itself where it is one)."""
    if t.dtype is dtype and t.device.type == "cpu" and t.is_contiguous():
        return t
    return t.to(device="cpu", dtype=dtype).contiguous()


class GreedySampler(Sampler):
    """The engine's sampler on a CPU: a batch whose every row is plain greedy (no penalties,
    min_tokens or top logprobs) gets its argmax and that token's log-probability from one
    pass over each row in C (`native.greedy`, decode.c), where `Sampler` writes the whole
    log_softmax; any other batch, or a row whose largest logit is not finite, goes to
    `Sampler` as it is."""

    @staticmethod
    def takes(params: list[SamplingParams]) -> bool:
        """Is every row plain greedy (no penalties, min_tokens or top logprobs)?"""
        return all(sp.greedy and sp.num_logprobs is None and sp.min_tokens == 0
                   and not sp.has_penalties for sp in params)

    def __call__(self, logits: torch.Tensor, params: list[SamplingParams],
                 generators: list[torch.Generator | None] | None = None,
                 rows: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.takes(params):
            found = native.greedy(logits)
            if (found is not None and found[1] is not None
                    and all(map(math.isfinite, found[1].tolist()))):
                self.last_top_logprobs = [None] * len(params)
                return found[0], found[1]
        return super().__call__(logits, params, generators, rows)
