"""LLM(tensor_parallel_size=2) on CPU (gloo, two processes) against one rank, and its process
lifecycle: close, context manager, a failing or hung worker, Ctrl-C, the parent's death, two
engines one after the other, bad sizes before any process starts, no orphans."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import torch

import minimodel as mm
from minimodel.engine import LLM
from minimodel.layers import TPConfigError

pytestmark = pytest.mark.stress  # processes, a TCP rendezvous, signals, deadlines
ROOT = Path(__file__).resolve().parents[1]

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
    deadline = time.monotonic() + 10
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
    import minimodel.engine.parallel as parallel

    monkeypatch.setattr(parallel, "available_ranks", lambda device: 2)
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
    record_property("failure_reported_s", round(time.monotonic() - t, 2))
    assert second.runner.closed  # why it is closed: what the server's /health reports
    with pytest.raises(RuntimeError, match="closed"):
        second.generate(prompt, sp)
    second.close()  # idempotent
    with LLM(folder, tensor_parallel_size=2, skip_tokenizer_init=True) as third:
        assert third.generate(prompt, sp)[0].token_ids == want
    assert not children()


def test_hung_worker_is_an_error_within_the_timeout(small_checkpoint, monkeypatch,
                                                    record_property):
    monkeypatch.setenv("MINIMODEL_TP_TIMEOUT", "5")
    with LLM(small_checkpoint(), tensor_parallel_size=2, skip_tokenizer_init=True) as llm:
        t = time.monotonic()
        with pytest.raises(RuntimeError, match="hung"):  # not the 120 s the worker sleeps
            llm.runner.debug_worker("hang", 120)
        record_property("hang_reported_s", round(time.monotonic() - t, 2))
        assert llm.runner.closed


def test_a_killed_worker_closes_the_engine_and_says_so(small_checkpoint):
    with LLM(small_checkpoint(), tensor_parallel_size=2, skip_tokenizer_init=True) as llm:
        sp = mm.SamplingParams(temperature=0.0, max_new_tokens=3)
        assert llm.runner.closed is None and llm.generate([1, 2, 3], sp)[0].token_ids
        worker = psutil.Process(llm.runner._procs[0].pid)
        worker.kill()
        worker.wait(120)
        with pytest.raises(RuntimeError, match="minimodel-tp-rank1|rank 1|worker"):
            llm.generate([1, 2, 3], sp)
        assert llm.runner.closed
        with pytest.raises(RuntimeError, match="closed"):
            llm.generate([1, 2, 3], sp)
        assert not llm.has_unfinished_requests()  # the failed step left nothing behind


NO_GUARD = """
import minimodel as mm
from minimodel.engine import LLM

llm = LLM(%r, tensor_parallel_size=2, skip_tokenizer_init=True)  # no __main__ guard
print(llm.generate([1, 2, 3], mm.SamplingParams(max_new_tokens=2))[0].token_ids)
"""


def test_a_script_without_a_main_guard_is_told_the_fix(small_checkpoint, tmp_path: Path):
    script = tmp_path / "no_guard.py"
    script.write_text(NO_GUARD % str(small_checkpoint()))
    before = {p.pid for p in psutil.process_iter()}
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                         text=True, timeout=600, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    assert out.returncode != 0
    assert 'if __name__ == "__main__":' in out.stderr and "spawn" in out.stderr, out.stderr
    assert "can only join" not in out.stderr and "AssertionError" not in out.stderr
    assert "bootstrapping phase" not in out.stderr  # the worker stops before multiprocessing
    left = [p for p in psutil.process_iter(["name", "cmdline"])
            if p.pid not in before and str(script) in " ".join(p.info["cmdline"] or [])]
    assert not left, left


SCRIPT = """
import os, sys, time
import minimodel as mm
from minimodel.engine import LLM

if __name__ == "__main__":
    llm = LLM(sys.argv[1], tensor_parallel_size=2, skip_tokenizer_init=True)
    print("workers", *[p.pid for p in llm.runner._procs], flush=True)
    while True:
        llm.generate([1, 2, 3], mm.SamplingParams(max_new_tokens=8))
        print("generated", flush=True)
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_ctrl_c_or_killed_parent_leaves_no_worker(sig, small_checkpoint, tmp_path: Path,
                                                  record_property):
    """Waits on events (the "workers" line, then the generate loop's first answers, then the
    processes' ends) with deadlines of minutes, so that a loaded machine only makes it slower;
    the seconds are recorded, not asserted."""
    script = tmp_path / "serve.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, str(script), str(small_checkpoint())],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()  # the workers are up (or the script died: then b"")
        assert line.startswith("workers"), proc.stderr.read()
        pids = [int(p) for p in line.split()[1:]]
        for _ in range(2):  # two generate calls done: a step may well be in flight now
            assert proc.stdout.readline().startswith("generated"), proc.stderr.read()
        start = time.monotonic()
        os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C: the whole process group
        proc.wait(timeout=300)
        deadline = time.monotonic() + 300
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        record_property("all_gone_s", round(time.monotonic() - start, 2))
        assert not any(_alive(p) for p in pids), "a worker outlived its parent"
        if sig == signal.SIGINT:
            assert "KeyboardInterrupt" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
