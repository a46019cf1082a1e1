"""Tensor parallelism for the engine: N processes, each holding 1/N of every layer's heads.

    with LLM("tiny", tensor_parallel_size=2) as llm:
        outs = llm.generate(prompts, params)

The calling process is rank 0: it schedules, samples and detokenises, as with one rank, and
also runs the model on its own shards. Ranks 1..N-1 are processes started with
`torch.multiprocessing` (spawn); each loads its shards of the checkpoint
(`minimodel.layers`), builds a KV pool for its KV heads only (the same page ids everywhere,
so rank 0's page tables are valid on every rank) and waits for commands. Every step rank 0
broadcasts what the batch is (token ids, page tables, lengths, the rows to sample) with
`torch.distributed.broadcast_object_list`; then all ranks run the same forward, whose layers
all-reduce twice per decoder layer and once after the embedding, and gather the LM head's
vocabulary slices on rank 0. Backend: gloo on CPU, NCCL on CUDA (rank r on cuda:r); the
commands travel on a second gloo group that may wait without a timeout between steps.

Lifecycle: `LLM.close()` (or leaving a `with` block) stops the workers; they are daemonic
(they end with the parent) and also exit on their own when the parent disappears. A worker
that raises sends its traceback to rank 0, which raises RuntimeError naming it; a worker that
hangs makes rank 0's next collective fail after `MINIMODEL_TP_TIMEOUT` seconds (default 120).
After such an error, or Ctrl-C inside a step, the engine is closed: make a new one;
`llm.runner.closed` says why (None while the engine can serve, as with one process; a worker
that died between steps shows there at once). Only one tensor-parallel engine can be open
per process (torch.distributed has one default group): opening a second one closes the first,
with a warning.

Threads: each rank uses torch.get_num_threads() // N threads (at least one), so N ranks use the
cores that one rank would; rank 0 (this process) is set to that while the engine is open.
Scripts that use it need the usual `if __name__ == "__main__":` guard of spawn.
"""

from __future__ import annotations

import datetime
import os
import queue
import signal
import socket
import threading
import time
import traceback
import warnings
import weakref

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from minimodel.engine.attention import AttentionMetadata, build_metadata
from minimodel.engine.config import GUARD_HINT, EngineConfig, refuse_inside_a_worker
from minimodel.engine.model import PackedQwen3ForCausalLM
from minimodel.engine.runner import ModelRunner, load_shard
from minimodel.engine.scheduler import ScheduledBatch

STARTUP_TIMEOUT_S = 300.0  # workers must have loaded their shards by then
CONTROL_TIMEOUT = datetime.timedelta(days=30)  # workers wait for the next step this long


def timeout_s() -> float:
    """Seconds a collective may wait for a rank before rank 0 calls it hung."""
    return float(os.environ.get("MINIMODEL_TP_TIMEOUT", "120"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_backend(device_type: str) -> str:
    return "nccl" if device_type == "cuda" else "gloo"


_OPEN: weakref.WeakSet[ParallelRunner] = weakref.WeakSet()


def _stop_processes(procs: list, grace_s: float = 10.0) -> None:
    """Join, then terminate, then kill: no worker outlives this (and one that never started
    needs nothing)."""
    procs = [p for p in procs if p.pid is not None]
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)


class ParallelRunner(ModelRunner):
    """ModelRunner of rank 0: also starts, drives and stops ranks 1..N-1, and before each
    step's forward tells them what it runs (`broadcast`)."""

    def __init__(self, config: EngineConfig, model: PackedQwen3ForCausalLM) -> None:
        refuse_inside_a_worker()
        super().__init__(config, model)
        for other in list(_OPEN):
            warnings.warn("Another tensor-parallel LLM is open in this process; closing it "
                          "(torch.distributed has one default group per process).",
                          stacklevel=3)
            other.close(reason="another tensor-parallel LLM was opened in this process")
        self._closed: str | None = None  # why, once closed (see the `closed` property)
        self._threads = torch.get_num_threads()
        torch.set_num_threads(config.threads_per_rank)
        ctx = mp.get_context("spawn")
        self._errors = ctx.Queue()
        init_method = f"tcp://127.0.0.1:{_free_port()}"
        self._procs = [
            ctx.Process(target=_worker_main, name=f"minimodel-tp-rank{rank}", daemon=True,
                        args=(rank, config, init_method, self._errors, os.getpid()))
            for rank in range(1, config.tensor_parallel_size)
        ]
        self._finalizer = weakref.finalize(self, _stop_processes, self._procs, 0.0)
        try:
            for p in self._procs:
                p.start()
            self._wait_ready()
            dist.init_process_group(_pg_backend(config.device.type), init_method=init_method,
                                    rank=0, world_size=config.tensor_parallel_size,
                                    timeout=datetime.timedelta(seconds=timeout_s()))
            self._control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
        except BaseException:
            self._shutdown(graceful=False)
            raise
        _OPEN.add(self)

    def _wait_ready(self) -> None:
        ready: set[int] = set()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while len(ready) < len(self._procs):
            try:
                kind, rank, text = self._errors.get(timeout=0.2)
            except queue.Empty:
                dead = [p for p in self._procs if p.exitcode is not None]
                if dead:  # before it could say why: while it imported the main script
                    raise RuntimeError(
                        f"Tensor-parallel worker {dead[0].name} exited with code "
                        f"{dead[0].exitcode} while starting, before it reached the engine "
                        f"(its traceback is above). The most likely cause: {GUARD_HINT}"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Tensor-parallel workers were not ready within "
                                       f"{STARTUP_TIMEOUT_S:.0f} s.") from None
                continue
            if kind == "error":
                raise RuntimeError(f"Tensor-parallel worker rank {rank} failed while starting:"
                                   f"\n{text}")
            ready.add(rank)

    # --- steps -------------------------------------------------------------------------

    def _send(self, *command: object) -> None:
        dist.broadcast_object_list([command], src=0, group=self._control)

    # --- can it still serve? ------------------------------------------------------------

    @property
    def closed(self) -> str | None:
        """Why this engine can run no more steps, or None while it can.

        Once closed: the reason it was closed. Before that, a worker that has already died
        (killed, out of memory) is reported too, so that a health check sees it at once and
        not only when the next step fails; that next step then closes the engine."""
        if self._closed is None:
            dead = self._dead_workers()
            if dead:
                return f"tensor-parallel worker {dead[0].name} exited with code " \
                       f"{dead[0].exitcode}"
        return self._closed

    @closed.setter
    def closed(self, reason: str | None) -> None:
        # ModelRunner.__init__ sets None; tests may set a reason to fake a closed engine
        self._closed = reason

    def _dead_workers(self) -> list:
        """Workers that have exited (poll only: safe to call from another thread)."""
        return [p for p in getattr(self, "_procs", []) if p.pid is not None
                and p.exitcode is not None]

    def _guarded(self, fn, *args):
        if self._closed is None and self._dead_workers():
            # a worker died between steps: close now, explaining which one and how
            raise self._failure(RuntimeError("a worker exited between steps"))
        if self._closed:
            raise RuntimeError(f"This tensor-parallel LLM is closed ({self._closed}); make a "
                               "new one.")
        try:
            return fn(*args)
        except KeyboardInterrupt:
            self.close(reason="interrupted during a step", graceful=False)
            raise
        except Exception as e:
            raise self._failure(e) from e

    def run(self, batch: ScheduledBatch) -> tuple[list[int], list[float]]:
        return self._guarded(super().run, batch)

    def broadcast(self, input_ids: torch.Tensor, batch: ScheduledBatch,
                  metadata: AttentionMetadata, rows: list[int]) -> None:
        """What every worker needs to run the step as rank 0 does (see `_serve`)."""
        self._send("step", input_ids.tolist(), [s.page_table for s in batch.seqs],
                   metadata.kv_lens, metadata.q_lens, rows)

    def debug_worker(self, command: str, arg: object) -> None:
        """Test hook: make every worker raise ("fail", message) or sleep ("hang", seconds)."""
        self._guarded(self._send, command, arg)
        self._guarded(dist.barrier)  # the next collective notices, as a step's would

    # --- errors and shutdown --------------------------------------------------------------

    def _failure(self, exc: BaseException) -> RuntimeError:
        """Close the engine and explain which worker failed and how."""
        detail = None
        # A worker that raised has put its traceback on the queue (and flushed it) before it
        # exits, so once the queue is empty there is nothing more to wait for: either nobody
        # died (a hang, or a failure on rank 0 itself) or a worker died without a word
        # (killed by a signal), which its exit code tells below.
        deadline = time.monotonic() + 5.0
        while detail is None and time.monotonic() < deadline:
            try:
                kind, rank, text = self._errors.get(timeout=1.0)
                if kind == "error":
                    detail = f"Tensor-parallel worker rank {rank} failed:\n{text}"
            except queue.Empty:
                break
        if detail is None:
            dead = [p for p in self._procs if p.exitcode is not None]
            if dead:
                detail = f"Tensor-parallel worker {dead[0].name} exited with code " \
                         f"{dead[0].exitcode}."
            else:
                detail = (f"A collective failed on rank 0 ({type(exc).__name__}: {exc}); a "
                          f"worker that does not answer within {timeout_s():.0f} s "
                          "(MINIMODEL_TP_TIMEOUT) counts as hung.")
        # the reason kept is the detail's first line, e.g. "... worker rank 1 failed:"
        self.close(reason=detail.splitlines()[0].rstrip(":"), graceful=False)
        return RuntimeError(detail + "\nThe engine is closed; make a new LLM.")

    def close(self, reason: str = "closed", graceful: bool = True) -> None:
        """Stop the workers and leave the process group (idempotent)."""
        if self._closed:
            return
        self._closed = reason
        self._shutdown(graceful)

    def _shutdown(self, graceful: bool) -> None:
        _OPEN.discard(self)
        if graceful and dist.is_initialized() and all(p.is_alive() for p in self._procs):
            try:
                self._send("stop")
            except Exception:
                graceful = False
        _stop_processes(self._procs, 10.0 if graceful else 0.0)
        if dist.is_initialized():
            dist.destroy_process_group()
        self._finalizer.detach()
        torch.set_num_threads(self._threads)


# --- the worker process ----------------------------------------------------------------------


def _watch_parent(parent_pid: int) -> None:
    while True:
        time.sleep(0.5)
        if os.getppid() != parent_pid:  # the parent is gone: nobody will send a command
            os._exit(1)


def _worker_main(rank: int, config: EngineConfig, init_method: str, errors,
                 parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is rank 0's to handle
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    try:
        _serve(rank, config, init_method, errors)
    except BaseException:
        errors.put(("error", rank, traceback.format_exc()))
        errors.close()
        errors.join_thread()
        raise SystemExit(1) from None


@torch.inference_mode()
def _serve(rank: int, config: EngineConfig, init_method: str, errors) -> None:
    """Rank `rank`: its shard and its runner, built from the same EngineConfig as rank 0's;
    then every step rank 0 broadcasts, run with the same `compute`."""
    torch.set_num_threads(config.threads_per_rank)
    device = torch.device("cuda", rank) if config.device.type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    runner = ModelRunner(config, load_shard(config, rank, device), device)
    errors.put(("ready", rank, ""))
    dist.init_process_group(_pg_backend(device.type), init_method=init_method, rank=rank,
                            world_size=config.tensor_parallel_size,
                            timeout=datetime.timedelta(seconds=timeout_s()))
    control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
    while True:
        box: list[object] = [None]
        dist.broadcast_object_list(box, src=0, group=control)
        command, *args = box[0]
        if command == "stop":
            break
        if command == "step":
            ids, page_tables, kv_lens, q_lens, rows = args
            metadata = build_metadata(page_tables, kv_lens, q_lens, config.page_size, device)
            # this rank's slice of the logits goes to rank 0
            runner.compute(torch.tensor(ids, dtype=torch.int64, device=device), metadata, rows)
        elif command == "fail":
            raise RuntimeError(args[0])
        elif command == "hang":
            time.sleep(args[0])
        else:
            raise ValueError(f"unknown command {command!r}")
    dist.destroy_process_group()
