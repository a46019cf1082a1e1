"""Test stand-ins for FlashInfer's paged wrappers and for CUDA-graph capture, so that the
flashinfer backend and the CUDA-graph runner run on a CPU (see DESIGN.md, invariant 11).

`flashinfer` imports on a CPU; only its kernels need CUDA. The stand-ins take the place of
`BatchPrefillWithPagedKVCacheWrapper` and `BatchDecodeWithPagedKVCacheWrapper`:

- every call is bound against the installed wrapper's own signature (`inspect.signature(...)
  .bind`), so a keyword that FlashInfer 0.6.1 does not have, or a missing one, fails here;
- FlashInfer's documented rules are enforced: NHD layout, int32 indptr/indices/last_page_len,
  1 <= last_page_len <= page_size, a zeroed workspace, q and KV dtypes as planned, a cache of
  shape [P, 2, S, Hkv, D]; in CUDA-graph mode the indptr/indices/last_page_len buffers given at
  construction, a fixed batch size, an indices buffer long enough, no `plan` inside a capture;
  FlashInfer's kernel limits (dtypes, head dims, CUDA-core decode group sizes);
- attention is computed from the wrapper's own planned buffers, with the torch backend's math:
  eager runs hand them to `TorchBackend` itself; a CUDA-graph decode wrapper computes from its
  static buffers with tensor ops only (shapes fixed at construction), as a captured kernel must.

`install_graph_standin` replaces `torch.cuda.CUDAGraph` / `torch.cuda.graph`: capture records
every tensor operation (a `TorchDispatchMode`) and keeps the tensors it touched; `replay` runs
the recorded operations again on those same tensors, so it reads only what a real graph reads:
the static buffers and the captured intermediates. Python code inside the `with` block runs only
at capture, as with CUDA; a host read during capture (`.item()`, `bool(t)`) raises.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import flashinfer
import pytest
import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from minimodel.engine import attention, cuda_graph, flashinfer_env
from minimodel.engine.attention import TorchBackend, build_metadata
from minimodel.engine.kv_cache import KVCache

REAL_PREFILL = flashinfer.BatchPrefillWithPagedKVCacheWrapper
REAL_DECODE = flashinfer.BatchDecodeWithPagedKVCacheWrapper
REAL_GRAPH_NEW = torch.cuda.CUDAGraph.__new__  # kept: install_graph_standin replaces both
REAL_GRAPH_CONTEXT_INIT = torch.cuda.graph.__init__
KERNEL_DTYPES = (torch.float16, torch.bfloat16)  # flashinfer.jit.utils.dtype_map has no float32
KERNEL_HEAD_DIMS = (64, 128, 256)  # FA3's paged prefill static_assert (Hopper)
CUDA_CORE_GROUP_SIZES = (1, 2, 3, 4, 8)  # DISPATCH_GQA_GROUP_SIZE in flashinfer/utils.cuh


class FlashInferRuleError(AssertionError):
    """A call that real FlashInfer would reject, or that would compute garbage on a GPU."""


def bind(real: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The arguments of a call, bound against the real function's signature (defaults filled)."""
    bound = inspect.signature(real).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def require(ok: bool, message: str) -> None:
    if not ok:
        raise FlashInferRuleError(message)


# --- CUDA-graph stand-in ---------------------------------------------------------------------

HOST_READS = {
    torch.ops.aten._local_scalar_dense.default,
    torch.ops.aten.item.default,
    torch.ops.aten.is_nonzero.default,
    torch.ops.aten.equal.default,
    torch.ops.aten.nonzero.default,
    torch.ops.aten.lift_fresh.default,  # torch.tensor(python data): a host-to-device copy
}


class _Recorder(TorchDispatchMode):
    def __init__(self, graph: StandInCUDAGraph) -> None:
        super().__init__()
        self.graph = graph

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        if func in HOST_READS:
            raise FlashInferRuleError(
                f"{func} reads tensor data on the host inside a CUDA-graph capture: a real "
                "graph would freeze (or refuse) it"
            )
        out = func(*args, **kwargs)
        self.graph.ops.append((func, args, kwargs, out))
        return out


class StandInCUDAGraph:
    """torch.cuda.CUDAGraph on a CPU: the operations recorded at capture, replayed in place."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        bind(REAL_GRAPH_NEW, torch.cuda.CUDAGraph, *args, **kwargs)
        self.ops: list[tuple[Any, tuple, dict, Any]] = []
        self.captured = False
        self.replays = 0

    def replay(self) -> None:
        require(self.captured, "replay() of a graph that was never captured")
        for func, args, kwargs, recorded in self.ops:
            fresh = func(*args, **kwargs)
            for old, new in zip(pytree.tree_leaves(recorded), pytree.tree_leaves(fresh),
                                strict=True):
                if isinstance(old, torch.Tensor) and not _same_memory(old, new):
                    old.copy_(new)  # a graph writes its outputs where it wrote them at capture
        self.replays += 1


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr(), a.shape, a.stride()) == (b.data_ptr(), b.shape, b.stride())


@dataclass
class GraphState:
    capturing: StandInCUDAGraph | None = None
    graphs: list[StandInCUDAGraph] = field(default_factory=list)


GRAPHS = GraphState()


class StandInGraphContext:
    """torch.cuda.graph(...) on a CPU: records what runs inside the `with` block."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        a = bind(REAL_GRAPH_CONTEXT_INIT, self, *args, **kwargs)
        self.graph: StandInCUDAGraph = a["cuda_graph"]
        require(isinstance(self.graph, StandInCUDAGraph), "torch.cuda.graph needs a CUDAGraph")

    def __enter__(self) -> StandInGraphContext:
        require(GRAPHS.capturing is None, "a CUDA-graph capture inside another capture")
        require(not self.graph.captured, "a CUDAGraph captured twice")
        GRAPHS.capturing = self.graph
        self.mode = _Recorder(self.graph)
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.mode.__exit__(*exc)
        GRAPHS.capturing = None
        self.graph.captured = True
        GRAPHS.graphs.append(self.graph)


def install_graph_standin(monkeypatch: pytest.MonkeyPatch) -> GraphState:
    """Replace torch.cuda's graph API with the stand-in; CUDA graphs turn on for CPU engines."""
    GRAPHS.capturing, GRAPHS.graphs = None, []
    monkeypatch.setattr(torch.cuda, "CUDAGraph", StandInCUDAGraph)
    monkeypatch.setattr(torch.cuda, "graph", StandInGraphContext)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: ("stand-in pool",))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    real_reason = cuda_graph.graphs_off_reason
    monkeypatch.setattr(cuda_graph, "graphs_off_reason",
                        lambda eager, device, backend: real_reason(
                            eager, torch.device("cuda"), backend))
    return GRAPHS


# --- FlashInfer wrapper stand-ins ------------------------------------------------------------

@dataclass
class Registry:
    """Every stand-in wrapper made, and which dtypes the stand-in has "kernels" for."""

    dtypes: tuple[torch.dtype, ...] = KERNEL_DTYPES
    wrappers: list[Any] = field(default_factory=list)

    def of(self, kind: type, graph: bool | None = None) -> list[Any]:
        return [w for w in self.wrappers
                if isinstance(w, kind) and (graph is None or w.use_cuda_graph == graph)]


REGISTRY = Registry()


def _canonical(dtype: str | torch.dtype | None) -> torch.dtype | None:
    return getattr(torch, dtype) if isinstance(dtype, str) else dtype


def _check_index(name: str, t: Any, length: int | None = None) -> None:
    require(isinstance(t, torch.Tensor), f"{name} must be a tensor, got {type(t).__name__}")
    require(t.dtype == torch.int32, f"{name} must be int32 (FlashInfer's IdType), got {t.dtype}")
    require(t.dim() == 1, f"{name} must be 1-D, got shape {tuple(t.shape)}")
    if length is not None:
        require(t.numel() == length, f"{name} must have {length} entries, got {t.numel()}")


class _Wrapper:
    """What the prefill and decode stand-ins share: construction rules, plan rules, the cache."""

    real: Any

    def _init(self, a: dict[str, Any]) -> None:
        ws = a["float_workspace_buffer"]
        require(isinstance(ws, torch.Tensor) and ws.dtype == torch.uint8,
                "float_workspace_buffer must be a uint8 tensor")
        require(not bool(ws.any()), "float_workspace_buffer must be zeros on its first use "
                "(FlashInfer's docstring): allocate it with torch.zeros, not torch.empty")
        if a["kv_layout"] not in ("NHD", "HND"):
            raise KeyError(f"Invalid kv_layout {a['kv_layout']}")  # flashinfer's _check_kv_layout
        require(a["kv_layout"] == "NHD", "the engine's pool is NHD: [P, 2, S, Hkv, D]")
        require(a["backend"] == "auto" and a["jit_args"] is None, "only the default kernels")
        self.workspace, self.device = ws, ws.device
        self.use_cuda_graph = bool(a["use_cuda_graph"])
        self.planned: dict[str, Any] | None = None
        self.num_plans = self.num_runs = 0
        REGISTRY.wrappers.append(self)

    def _plan_common(self, a: dict[str, Any], indptr: torch.Tensor, last: torch.Tensor,
                     head_dim: int) -> dict[str, Any]:
        require(GRAPHS.capturing is None, "plan() inside a CUDA-graph capture: FlashInfer's "
                "plan reads the host and cannot be captured")
        Hq, Hkv, S = a["num_qo_heads"], a["num_kv_heads"], a["page_size"]
        require(Hq % Hkv == 0, f"num_qo_heads {Hq} is not a multiple of num_kv_heads {Hkv}")
        require(head_dim in KERNEL_HEAD_DIMS,
                f"head_dim {head_dim}: FlashInfer's Hopper kernels take {KERNEL_HEAD_DIMS}")
        q_dtype = _canonical(a["q_data_type"])
        kv_dtype = _canonical(a["kv_data_type"]) or q_dtype
        for name, dt in (("q_data_type", q_dtype), ("kv_data_type", kv_dtype)):
            require(dt in REGISTRY.dtypes, f"{name}={dt}: FlashInfer builds no kernel for it "
                    "(its JIT dtype map has float16, bfloat16 and fp8 only)")
        require(a["pos_encoding_mode"] == "NONE",
                "pos_encoding_mode must be 'NONE': the model applies RoPE itself")
        require(a["window_left"] == -1 and not a["logits_soft_cap"],
                "no sliding window or soft cap in Qwen3")
        indptr_host, last_host = indptr.cpu(), last.cpu()
        pages = (indptr_host[1:] - indptr_host[:-1]).tolist()
        require(int(indptr_host[0]) == 0 and all(p >= 1 for p in pages),
                "paged_kv_indptr must start at 0 and give every request >= 1 page")
        require(all(1 <= n <= S for n in last_host.tolist()),
                f"every last_page_len must be in 1..page_size={S}, got {last_host.tolist()}")
        kv_lens = [(p - 1) * S + n for p, n in zip(pages, last_host.tolist(), strict=True)]
        return dict(num_qo_heads=Hq, num_kv_heads=Hkv, page_size=S, head_dim=head_dim,
                    q_dtype=q_dtype, kv_dtype=kv_dtype, kv_lens=kv_lens,
                    sm_scale=a["sm_scale"] if a["sm_scale"] is not None else head_dim ** -0.5)

    def _check_run(self, a: dict[str, Any], num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
        p = self.planned
        require(p is not None, "run() before plan()")
        require(GRAPHS.capturing is None or self.use_cuda_graph,
                "run() of a wrapper built without use_cuda_graph=True inside a CUDA-graph "
                "capture: its buffers move at the next plan, the graph would read stale ones")
        unsupported = {k: a[k] for k in ("out", "lse", "q_scale", "k_scale", "v_scale")
                       if a[k] is not None}
        require(not unsupported and not a["return_lse"] and not a["args"],
                f"the engine uses none of {sorted(unsupported) or 'return_lse/*args'}")
        q, cache = a["q"], a["paged_kv_cache"]
        want = (p["page_size"], p["num_kv_heads"], p["head_dim"])
        require(isinstance(cache, torch.Tensor) and cache.dim() == 5 and cache.shape[1] == 2
                and tuple(cache.shape[2:]) == want,
                f"paged_kv_cache must be one NHD tensor [P, 2, {want[0]}, {want[1]}, {want[2]}],"
                f" got {tuple(cache.shape) if isinstance(cache, torch.Tensor) else type(cache)}")
        require(tuple(q.shape) == (num_rows, p["num_qo_heads"], p["head_dim"]),
                f"q must be [{num_rows}, {p['num_qo_heads']}, {p['head_dim']}], got "
                f"{tuple(q.shape)}")
        require(q.dtype == p["q_dtype"] and cache.dtype == p["kv_dtype"],
                f"q/kv dtypes {q.dtype}/{cache.dtype} differ from the planned "
                f"{p['q_dtype']}/{p['kv_dtype']}")
        require(q.device == cache.device == self.device, "q, cache and workspace on one device")
        self.num_runs += 1
        return q, cache


class _OneLayerCache(KVCache):
    """A KVCache over one given pool [P, 2, S, Hkv, D], so that TorchBackend can read it."""

    def __init__(self, pool: torch.Tensor) -> None:  # noqa: D107 (KVCache's init allocates)
        self.pools = [pool]
        self.num_pages, _, self.page_size, self.num_kv_heads, self.head_dim = pool.shape


def torch_backend_attention(q: torch.Tensor, cache: torch.Tensor, page_tables: list[list[int]],
                            kv_lens: list[int], q_lens: list[int], num_qo_heads: int,
                            sm_scale: float) -> torch.Tensor:
    """The torch backend over these page tables: q [N, Hq, D] -> [N, Hq, D]. The new tokens'
    K/V are already in the cache; TorchBackend.forward writes the same values back."""
    view = _OneLayerCache(cache)
    meta = build_metadata(page_tables, kv_lens, q_lens, view.page_size, cache.device)
    backend = TorchBackend(view, num_qo_heads, cache.dtype)
    backend.scale = sm_scale
    backend.plan(meta)
    rows = view.rows(0)
    k, v = rows[backend.new_k_rows], rows[backend.new_k_rows + view.page_size]
    return backend.forward(q, k, v, 0)


def _page_tables(indptr: torch.Tensor, indices: torch.Tensor) -> list[list[int]]:
    bounds, pages = indptr.tolist(), indices.tolist()
    return [pages[bounds[i]: bounds[i + 1]] for i in range(len(bounds) - 1)]


class StandInPrefill(_Wrapper):
    """BatchPrefillWithPagedKVCacheWrapper on a CPU (eager only: the engine never graphs it)."""

    real = REAL_PREFILL

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        a = bind(REAL_PREFILL.__init__, self, *args, **kwargs)
        require(not a["use_cuda_graph"], "the engine captures decode steps only")
        self._init(a)

    def plan(self, *args: Any, **kwargs: Any) -> None:
        a = bind(REAL_PREFILL.plan, self, *args, **kwargs)
        qo, indptr, indices, last = (a["qo_indptr"], a["paged_kv_indptr"],
                                     a["paged_kv_indices"], a["paged_kv_last_page_len"])
        B = qo.numel() - 1
        _check_index("qo_indptr", qo)
        _check_index("paged_kv_indptr", indptr, B + 1)
        _check_index("paged_kv_last_page_len", last, B)
        _check_index("paged_kv_indices", indices)
        require(a["head_dim_vo"] in (None, a["head_dim_qk"]), "Qwen3 has one head_dim")
        require(a["custom_mask"] is None and a["packed_custom_mask"] is None, "no custom mask")
        require(not a["use_fp16_qk_reduction"], "no fp16 q.k reduction")
        p = self._plan_common(a, indptr, last, a["head_dim_qk"])
        qo_host = qo.cpu()
        q_lens = (qo_host[1:] - qo_host[:-1]).tolist()
        require(int(qo_host[0]) == 0 and all(n >= 1 for n in q_lens),
                "qo_indptr must start at 0 and give every request >= 1 new token")
        require(int(indptr[-1]) <= indices.numel(), "paged_kv_indices shorter than indptr[-1]")
        if a["causal"]:
            require(all(q <= k for q, k in zip(q_lens, p["kv_lens"], strict=True)),
                    "causal attention needs q_len <= kv_len for every request")
        # As FlashInfer: device copies of the index tensors (the same tensors when they are
        # already on the device), plus what plan works out on the host.
        self.bufs = [t.to(self.device) for t in (qo, indptr, indices, last)]
        self.planned = dict(p, q_lens=q_lens, causal=bool(a["causal"]), num_rows=sum(q_lens))
        self.num_plans += 1

    def run(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        a = bind(REAL_PREFILL.run, self, *args, **kwargs)
        q, cache = self._check_run(a, self.planned["num_rows"] if self.planned else -1)
        p, (qo, indptr, indices, last) = self.planned, self.bufs
        q_lens = (qo[1:] - qo[:-1]).tolist()
        S = p["page_size"]
        kv_lens = ((indptr[1:] - indptr[:-1] - 1) * S + last).tolist()
        tables = _page_tables(indptr, indices)
        if not p["causal"]:  # every new token sees the whole request: one 1-token row each
            tables = [t for t, n in zip(tables, q_lens, strict=True) for _ in range(n)]
            kv_lens = [k for k, n in zip(kv_lens, q_lens, strict=True) for _ in range(n)]
            q_lens = [1] * sum(q_lens)
        return torch_backend_attention(q, cache, tables, kv_lens, q_lens, p["num_qo_heads"],
                                       p["sm_scale"])


class StandInDecode(_Wrapper):
    """BatchDecodeWithPagedKVCacheWrapper on a CPU, eager or in CUDA-graph mode."""

    real = REAL_DECODE

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        a = bind(REAL_DECODE.__init__, self, *args, **kwargs)
        self._init(a)
        self.use_tensor_cores = bool(a["use_tensor_cores"])
        self.fixed_batch_size = 0
        if self.use_cuda_graph:  # FlashInfer's own checks, then the buffers' dtypes
            for name in ("paged_kv_indptr_buffer", "paged_kv_indices_buffer",
                         "paged_kv_last_page_len_buffer"):
                if not torch.is_tensor(a[name]):
                    raise ValueError(f"{name} should be a torch.Tensor in cudagraph mode")
                _check_index(name, a[name])
                require(a[name].device == self.device, f"{name} on the workspace's device")
            self.fixed_batch_size = len(a["paged_kv_last_page_len_buffer"])
            if len(a["paged_kv_indptr_buffer"]) != self.fixed_batch_size + 1:
                raise ValueError("The size of paged_kv_indptr_buffer should be batch_size + 1")
        self.indptr_buf = a["paged_kv_indptr_buffer"]
        self.indices_buf = a["paged_kv_indices_buffer"]
        self.last_buf = a["paged_kv_last_page_len_buffer"]

    def plan(self, *args: Any, **kwargs: Any) -> None:
        a = bind(REAL_DECODE.plan, self, *args, **kwargs)
        indptr, indices, last = a["indptr"], a["indices"], a["last_page_len"]
        B = last.numel()
        _check_index("indptr", indptr, B + 1)
        _check_index("last_page_len", last, B)
        _check_index("indices", indices)
        require(a["data_type"] is None, "the engine names q_data_type and kv_data_type")
        p = self._plan_common(a, indptr, last, a["head_dim"])
        G = p["num_qo_heads"] // p["num_kv_heads"]
        require(self.use_tensor_cores or G in CUDA_CORE_GROUP_SIZES,
                f"Unsupported group_size: {G} (FlashInfer's CUDA-core decode is built for "
                f"{CUDA_CORE_GROUP_SIZES}; use tensor cores)")
        require(int(indptr[-1]) <= indices.numel(), "indices shorter than indptr[-1]")
        if self.use_cuda_graph:  # FlashInfer's checks, then its copies into the fixed buffers
            if B != self.fixed_batch_size:
                raise ValueError(f"The batch size should be fixed in cudagraph mode, the runtime "
                                 f"batch size {B}  mismatches the batch size set during "
                                 f"initialization {self.fixed_batch_size}")
            if len(indices) > len(self.indices_buf):
                raise ValueError(
                    "The size of indices should be less than or equal to the allocated buffer")
            self.indptr_buf.copy_(indptr)
            self.last_buf.copy_(last)
            self.indices_buf[: len(indices)].copy_(indices)
        else:
            self.indptr_buf, self.indices_buf, self.last_buf = (
                t.to(self.device) for t in (indptr, indices, last))
        self.planned = dict(p, batch_size=B)
        self.num_plans += 1

    def run(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        a = bind(REAL_DECODE.run, self, *args, **kwargs)
        require(a["q_len_per_req"] == 1 and a["sinks"] is None, "one new token per request")
        q, cache = self._check_run(a, self.planned["batch_size"] if self.planned else -1)
        p = self.planned
        if not self.use_cuda_graph:
            kv_lens = ((self.indptr_buf[1:] - self.indptr_buf[:-1] - 1) * p["page_size"]
                       + self.last_buf).tolist()
            tables = _page_tables(self.indptr_buf, self.indices_buf)
            return torch_backend_attention(q, cache, tables, kv_lens, [1] * len(kv_lens),
                                           p["num_qo_heads"], p["sm_scale"])
        return self._graph_safe_attention(q, cache)

    def _graph_safe_attention(self, q: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
        """The torch backend's decode math over the static buffers, in tensor ops only, with
        room for every page of the indices buffer (a captured kernel's shapes are fixed)."""
        p = self.planned
        B, Hq, D = q.shape
        S, Hkv = p["page_size"], p["num_kv_heads"]
        cap = self.indices_buf.numel()
        indptr = self.indptr_buf.long()
        num_pages = indptr[1:] - indptr[:-1]  # [B]
        kv_len = (num_pages - 1) * S + self.last_buf.long()  # [B]
        j = torch.arange(cap, device=q.device)
        j = torch.minimum(j[None, :], num_pages[:, None] - 1)  # [B, cap]
        page_ids = self.indices_buf.long()[indptr[:-1, None] + j].flatten()  # [B * cap]
        pos = torch.arange(cap * S, device=q.device)
        mask = (pos[None, :] < kv_len[:, None])[:, None, None, :]  # [B, 1, 1, cap * S]
        K = cache[:, 0].index_select(0, page_ids).view(B, -1, Hkv, D)
        V = cache[:, 1].index_select(0, page_ids).view(B, -1, Hkv, D)
        out = F.scaled_dot_product_attention(
            q.view(B, Hkv, Hq // Hkv, D), K.transpose(1, 2), V.transpose(1, 2),
            attn_mask=mask, scale=p["sm_scale"],
        )  # [B, Hkv, G, D]
        return out.reshape(B, Hq, D)


def install_flashinfer_standin(monkeypatch: pytest.MonkeyPatch,
                               float32: bool = False) -> Registry:
    """Put the stand-ins where the engine looks for FlashInfer and let it pick FlashInfer on a
    CPU. float32=True gives the stand-in float32 "kernels" (real FlashInfer has none), so that
    the engine can be compared with the torch backend to float32 rounding."""
    REGISTRY.wrappers = []
    REGISTRY.dtypes = KERNEL_DTYPES + ((torch.float32,) if float32 else ())
    monkeypatch.setattr(flashinfer, "BatchPrefillWithPagedKVCacheWrapper", StandInPrefill)
    monkeypatch.setattr(flashinfer, "BatchDecodeWithPagedKVCacheWrapper", StandInDecode)
    monkeypatch.setattr(flashinfer_env, "flashinfer_status",
                        lambda device: (True, "flashinfer stand-in (tests/flashinfer_standin.py)"))
    if float32:
        monkeypatch.setattr(attention, "FLASHINFER_DTYPES", KERNEL_DTYPES + (torch.float32,))
    return REGISTRY
