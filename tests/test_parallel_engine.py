"""LLM(tensor_parallel_size=2) on CPU (gloo, two processes) against one rank, and its process
lifecycle: close, context manager, a failing or hung worker, Ctrl-C, the parent's death, two
engines one after the other, bad sizes before any process starts, no orphans."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch

import minimodel as mm
from minimodel.engine import LLM
from minimodel.engine.parallel import timeout_s
from minimodel.layers import TPConfigError

pytestmark = pytest.mark.stress  # processes, a TCP rendezvous, signals, deadlines
ROOT = Path(__file__).resolve().parents[1]
# Every wait below is for an event (a line, a process's end), bounded by a deadline this long
# so that a machine whose cores are busy only makes a test slower, never fails it. Seconds
# taken are recorded (record_property, and printed: `pytest -rP` shows them), not asserted.
PATIENCE_S = 300.0

KV_CONFIGS = {  # KV-head counts 1 (replicated on both ranks), 2 and 4
    "kv1": dict(num_attention_heads=4, num_key_value_heads=1, head_dim=16),
    "kv2": dict(num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                tie_word_embeddings=True),
    "kv4": dict(num_attention_heads=8, num_key_value_heads=4, head_dim=8, vocab_size=501),
}
# small pages, few of them, short steps: chunked prefill and preemption happen
ENGINE = dict(page_size=4, num_pages=14, max_num_seqs=4, max_num_batched_tokens=16,
              skip_tokenizer_init=True)


def children() -> list[psutil.Process]:
    """Live child processes, but not multiprocessing's resource tracker (one per parent)."""
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(
                    c.cmdline()):
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(autouse=True)
def no_orphans():
    yield
    deadline = time.monotonic() + 120  # a worker that is being killed may take a while
    while children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not children(), f"processes left behind: {children()}"


def drive(llm: LLM, vocab: int) -> list[mm.RequestOutput]:
    """Requests that arrive while others run, long prompts next to one-token ones."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, vocab, (n,), generator=g).tolist() for n in [1, 21, 7, 33, 3]]
    sp = mm.SamplingParams(temperature=0.0, max_new_tokens=10, logprobs=True)
    ids = [llm.add_request(p, sp) for p in prompts[:3]]
    done = {}
    for _ in range(2):
        done.update({o.request_id: o for o in llm.step()})
    ids += [llm.add_request(p, sp) for p in prompts[3:]]
    while llm.has_unfinished_requests():
        done.update({o.request_id: o for o in llm.step()})
    return [done[i] for i in ids]


def assert_same(one, two) -> None:
    for i, (a, b) in enumerate(zip(one, two, strict=True)):
        assert a.token_ids == b.token_ids, f"request {i}: tokens differ"
        diff = max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True))
        assert diff < 1e-4, f"request {i}: logprobs differ by {diff:.2e}"


@pytest.mark.parametrize("name", ["tiny", *KV_CONFIGS])
def test_two_ranks_equal_one(name, small_checkpoint):
    folder = "tiny" if name == "tiny" else small_checkpoint(**KV_CONFIGS[name])
    vocab = mm.Qwen3Config.from_pretrained(mm.resolve_model(folder)).vocab_size
    one = drive(LLM(folder, **ENGINE), vocab)
    assert sum(o.metrics.num_preemptions for o in one) > 0, "the run should preempt"
    with LLM(folder, tensor_parallel_size=2, **ENGINE) as llm:
        assert llm.kv_cache.num_kv_heads == max(1, llm.cfg.num_key_value_heads // 2)
        two = drive(llm, vocab)
    assert_same(one, two)


@pytest.mark.parametrize("size, kw, message", [
    (3, {}, "needs 3 CPU cores"),
    (2, dict(num_attention_heads=6, num_key_value_heads=3, head_dim=8), "num_key_value_heads"),
    (2, dict(intermediate_size=95), "intermediate_size"),
    (0, {}, "integer >= 1"),
])
def test_bad_sizes_fail_before_any_process(size, kw, message, small_checkpoint, monkeypatch):
    import minimodel.engine.config as engine_config

    monkeypatch.setattr(engine_config, "available_ranks", lambda device: 2)
    with pytest.raises(TPConfigError, match=message):
        LLM(small_checkpoint(**kw), tensor_parallel_size=size, skip_tokenizer_init=True)
    assert not children()


def test_close_failure_and_a_second_engine(small_checkpoint, record_property):
    folder = small_checkpoint(**KV_CONFIGS["kv2"])
    prompt, sp = [5, 6, 7], mm.SamplingParams(temperature=0.0, max_new_tokens=4)
    want = LLM(folder, skip_tokenizer_init=True).generate(prompt, sp)[0].token_ids
    first = LLM(folder, tensor_parallel_size=2, skip_tokenizer_init=True)
    assert len(children()) == 1
    with pytest.warns(UserWarning, match="closing it"):
        second = LLM(folder, tensor_parallel_size=2, skip_tokenizer_init=True)
    with pytest.raises(RuntimeError, match="closed"):
        first.generate(prompt, sp)
    assert second.generate(prompt, sp)[0].token_ids == want
    t = time.monotonic()
    with pytest.raises(RuntimeError, match="worker rank 1 failed:(.|\n)*boom"):
        second.runner.debug_worker("fail", "boom")
    took = time.monotonic() - t
    record_property("failure_reported_s", round(took, 2))
    print(f"failure reported after {took:.2f} s")
    # Not a speed limit: a worker's exception must be reported as such, before the hang
    # timeout (MINIMODEL_TP_TIMEOUT, 120 s here) could have been what noticed it.
    assert took < timeout_s(), f"the failure was only noticed after {took:.0f} s"
    assert second.runner.closed  # why it is closed: what the server's /health reports
    with pytest.raises(RuntimeError, match="closed"):
        second.generate(prompt, sp)
    second.close()  # idempotent
    with LLM(folder, tensor_parallel_size=2, skip_tokenizer_init=True) as third:
        assert third.generate(prompt, sp)[0].token_ids == want
    assert not children()


def test_hung_worker_is_an_error_within_the_timeout(small_checkpoint, monkeypatch,
                                                    record_property):
    # The timeout also bounds the start's rendezvous: 15 s leaves room on a loaded machine.
    monkeypatch.setenv("MINIMODEL_TP_TIMEOUT", "15")
    with LLM(small_checkpoint(), tensor_parallel_size=2, skip_tokenizer_init=True) as llm:
        t = time.monotonic()
        # The worker sleeps far longer than any test runs, so only the timeout can end the
        # wait: what is asserted is the error, not how fast it came.
        with pytest.raises(RuntimeError, match="hung"):
            llm.runner.debug_worker("hang", 3600)
        took = time.monotonic() - t
        record_property("hang_reported_s", round(took, 2))
        print(f"hang reported after {took:.2f} s (timeout 15 s)")
        assert llm.runner.closed


def test_a_killed_worker_closes_the_engine_and_says_so(small_checkpoint):
    """`llm.runner.closed` answers "can this LLM still serve?" (the server's /health): None
    while it can, and a reason as soon as a worker is dead, before any step has failed."""
    assert LLM(small_checkpoint(), skip_tokenizer_init=True).runner.closed is None
    with LLM(small_checkpoint(), tensor_parallel_size=2, skip_tokenizer_init=True) as llm:
        sp = mm.SamplingParams(temperature=0.0, max_new_tokens=3)
        assert llm.runner.closed is None and llm.generate([1, 2, 3], sp)[0].token_ids
        worker = llm.runner._procs[0]
        os.kill(worker.pid, signal.SIGKILL)  # as the kernel's OOM killer would
        worker.join(PATIENCE_S)  # multiprocessing reaps it (psutil's wait would hide the code)
        closed = llm.runner.closed
        assert isinstance(closed, str) and "minimodel-tp-rank1" in closed, closed
        with pytest.raises(RuntimeError, match="minimodel-tp-rank1 exited(.|\n)*closed"):
            llm.generate([1, 2, 3], sp)
        assert llm.runner.closed and "minimodel-tp-rank1" in llm.runner.closed
        with pytest.raises(RuntimeError, match="is closed"):
            llm.generate([1, 2, 3], sp)
        assert not llm.has_unfinished_requests()  # the failed step left nothing behind


NO_GUARD = """
import minimodel as mm
from minimodel.engine import LLM

llm = LLM(%r, tensor_parallel_size=2, skip_tokenizer_init=True)  # no __main__ guard
print(llm.generate([1, 2, 3], mm.SamplingParams(max_new_tokens=2))[0].token_ids)
"""


def processes_with(marker: str) -> list[psutil.Process]:
    """Live processes whose environment holds MINIMODEL_TEST_RUN=marker: a script run and
    every process it started (spawned workers inherit the environment)."""
    found = []
    for p in psutil.process_iter():
        try:
            if (p.environ().get("MINIMODEL_TEST_RUN") == marker
                    and p.status() != psutil.STATUS_ZOMBIE):
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def wait_gone(marker: str, timeout: float) -> list[psutil.Process]:
    """Wait until no process of that run is left (or the deadline passes) -> those left."""
    deadline = time.monotonic() + timeout
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_a_script_without_a_main_guard_is_told_the_fix(small_checkpoint, tmp_path: Path,
                                                       record_property):
    script = tmp_path / "no_guard.py"
    script.write_text(NO_GUARD % str(small_checkpoint()))
    marker = uuid.uuid4().hex
    t = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                         text=True, timeout=PATIENCE_S,
                         env=dict(os.environ, HF_HUB_OFFLINE="1", MINIMODEL_TEST_RUN=marker))
    record_property("script_s", round(time.monotonic() - t, 2))
    assert out.returncode != 0
    err = out.stderr
    # the worker says where it stopped; the parent says what happened and what to do
    assert "A tensor-parallel worker was asked to start workers" in err, err
    assert "exited with code 1 while starting" in err, err
    assert 'if __name__ == "__main__":' in err and "spawn" in err, err
    assert "can only join" not in err and "AssertionError" not in err, err
    assert "bootstrapping phase" not in err, err  # the worker stopped before multiprocessing
    assert not wait_gone(marker, 120), "a process of the script outlived it"


SCRIPT = """
import sys
import minimodel as mm
from minimodel.engine import LLM

if __name__ == "__main__":
    llm = LLM(sys.argv[1], tensor_parallel_size=2, skip_tokenizer_init=True)
    print("ready", *[p.pid for p in llm.runner._procs], flush=True)  # the worker pids
    while True:
        llm.generate([1, 2, 3], mm.SamplingParams(max_new_tokens=8))
        print("generated", flush=True)
"""


class Lines:
    """A child's stdout, read by a thread, so that waiting for a line can have a deadline."""

    def __init__(self, stream) -> None:
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put("")  # end of output: the process closed it (exited)

    def next(self, timeout: float) -> str:
        """The next line; "" at the end of output or if none came within timeout."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            return ""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_ctrl_c_or_killed_parent_leaves_no_worker(sig, small_checkpoint, tmp_path: Path,
                                                  record_property):
    """Waits on events (the "ready" line, the generate loop's first answers, the processes'
    ends), each with a deadline of minutes: a loaded machine only makes it slower."""
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(SCRIPT))
    marker = uuid.uuid4().hex
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", MINIMODEL_TEST_RUN=marker)
    stderr_path = tmp_path / "stderr.txt"
    with open(stderr_path, "w") as stderr:  # a file: the child never blocks on a full pipe
        proc = subprocess.Popen([sys.executable, str(script), str(small_checkpoint())],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env=env, start_new_session=True)
    lines = Lines(proc.stdout)
    try:
        t = time.monotonic()
        line = lines.next(PATIENCE_S)
        assert line.startswith("ready"), f"no ready line: {line!r}\n{stderr_path.read_text()}"
        pids = [int(p) for p in line.split()[1:]]
        assert len(pids) == 1
        for _ in range(2):  # two generate calls done: the loop runs, a step may be in flight
            line = lines.next(PATIENCE_S)
            assert line.startswith("generated"), f"{line!r}\n{stderr_path.read_text()}"
        started = time.monotonic() - t
        t = time.monotonic()
        os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C: the whole process group
        proc.wait(timeout=120)
        left = wait_gone(marker, 120)  # the script and every worker it started
        gone = time.monotonic() - t
        record_property("started_s", round(started, 2))
        record_property("all_gone_s", round(gone, 2))
        print(f"{sig.name}: the script was up after {started:.2f} s; it and its workers were "
              f"gone {gone:.2f} s after the signal")
        assert not left, f"outlived the script: {left}"
        if sig == signal.SIGINT:
            assert "KeyboardInterrupt" in stderr_path.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in processes_with(marker):  # never leave a worker behind, even on failure
            p.kill()
