"""The command line, run as a learner runs it: python -m minimodel ..."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minimodel", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_generate_streams_text_from_tiny():
    import minimodel as mm

    tok = mm.load_tokenizer(mm.resolve_model("tiny"))
    out = run("generate", "--model", "tiny", "--max-new-tokens", "5", "我爱datawhale")
    assert out.returncode == 0, out.stderr
    llm = mm.LLM("tiny")
    expected = llm.generate(["我爱datawhale"],
                            mm.SamplingParams(temperature=0.0, max_new_tokens=5))[0]
    assert out.stdout.rstrip("\n") == expected.text
    assert len(tok.encode(expected.text)) >= 1


def test_info_reports_backends_and_cache():
    out = run("info")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    labels = {line.split("  ")[0] for line in lines}
    assert {"minimodel", "transformers", "tokenizers", "flashinfer", "device", "cache",
            "attention", "auto picks", "cuda graphs"} <= labels, lines
    # One column of values: every value starts at the same place, after at least two spaces.
    starts = {len(line) - len(line.split("  ", 1)[1].lstrip(" ")) for line in lines}
    assert len(starts) == 1, lines
    assert all(line[next(iter(starts)) - 2: next(iter(starts))] == "  " for line in lines)
    assert any(line.startswith("attention") and "torch: available" in line for line in lines)


def test_bad_arguments_are_clear_errors():
    out = run("generate", "--model", "tiny", "--top-p", "1.5", "hi")
    assert out.returncode == 2 and "top_p" in out.stderr
    out = run("generate", "--model", "no-such-model", "hi")
    assert out.returncode == 2 and "Unknown model" in out.stderr


def test_exercises_check_reports_up_to_date():
    out = run("exercises", "--check")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "up to date" in out.stdout


def test_bench_takes_its_own_options():
    out = run("bench", "--help")
    assert out.returncode == 0, out.stderr
    assert "--dtype" in out.stdout and "--workloads" in out.stdout
