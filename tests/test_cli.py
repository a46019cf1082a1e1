"""The command line, run as a learner runs it: python -m minimodel ..."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.stress  # every test runs the command line in a process of its own
ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minimodel", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def one_line_error(out: subprocess.CompletedProcess) -> str:
    """A user's error: a non-zero exit and one line on stderr (argparse's usage errors: the
    usage, then one line), never a traceback."""
    assert out.returncode != 0, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1, out.stderr
    return errors[0]


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


def test_generate_prints_no_special_token_text():
    import minimodel as mm

    out = run("generate", "--model", "bard", "--max-tokens", "32", "床前明月光，")
    assert out.returncode == 0, out.stderr
    llm = mm.LLM("bard")
    expected = llm.generate("床前明月光，", mm.SamplingParams(temperature=0.0, max_tokens=32))[0]
    assert expected.finish_reason == "stop"  # bard ends it with <|endoftext|>
    assert out.stdout.rstrip("\n") == expected.text.rstrip("\n")
    assert "<|" not in out.stdout


def test_generate_with_speculative_decoding_prints_the_same_text():
    """--speculative-model and --num-speculative-tokens reach the engine: bard with its
    drafter writes, greedily, exactly what bard alone writes."""
    import minimodel as mm

    out = run("generate", "--model", "bard", "--max-tokens", "24", "--speculative-model",
              "bard-draft", "--num-speculative-tokens", "3", "ROMEO.\n")
    assert out.returncode == 0, out.stderr
    expected = mm.LLM("bard").generate("ROMEO.\n", mm.SamplingParams(temperature=0.0,
                                                                     max_tokens=24))[0]
    assert out.stdout.rstrip("\n") == expected.text.rstrip("\n")
    out = run("generate", "--model", "tiny", "--num-speculative-tokens", "3", "hi")
    assert out.returncode != 0 and "needs a speculative_model" in out.stderr


def test_chat_keeps_the_answers_without_special_tokens_in_its_history(monkeypatch, capsys):
    """Two turns of `minimodel chat` in this process: the second prompt is the template over
    the first answer as the model's text, with one <|im_end|> per message."""
    import minimodel as mm
    from minimodel import __main__ as cli
    from minimodel.serve.reasoning import split_reasoning

    llm = mm.LLM("bard")
    prompts: list[list[int]] = []
    real_stream = llm.stream

    def stream(prompt, params):
        prompts.append(prompt)
        return real_stream(prompt, params)

    monkeypatch.setattr(llm, "stream", stream)
    monkeypatch.setattr(cli, "_llm", lambda args: llm)
    lines = iter(["床前明月光", "再来一首", ""])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(lines))
    args = cli.build_parser().parse_args(["chat", "--model", "bard", "--max-tokens", "24"])
    assert args.think is None and cli.cmd_chat(args) == 0
    shown = capsys.readouterr().out
    assert "<|im_end|>" not in shown and "<|endoftext|>" not in shown
    assert "thinking on" in shown  # the chat template's default, as the server's
    tok = llm.tokenizer
    first = [{"role": "user", "content": "床前明月光"}]
    assert prompts[0] == tok.apply_chat_template(first, tokenize=True)
    answer = llm.generate([prompts[0]], mm.SamplingParams(temperature=0.0, max_tokens=24))[0]
    content = split_reasoning(answer.text, True)[1] or ""  # what follows a think block
    assert content.strip() and content.strip() in shown
    history = [*first, {"role": "assistant", "content": content.strip()},
               {"role": "user", "content": "再来一首"}]
    assert prompts[1] == tok.apply_chat_template(history, tokenize=True)
    assert tok.decode(prompts[1]).count("<|im_end|>") == 3  # user, assistant, user: once each


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


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is visible here")

# Errors of one argument's value are argparse's usage errors (exit 2), raised before any model
# is even looked for; the others need the model's name resolved or a folder looked at.
ARGUMENT = [
    (["generate", "--model", "tiny", "--device", "bogus", "hi"], "not a device"),
    (["generate", "--model", "tiny", "--device", "cuda:x", "hi"], "not a device"),
    pytest.param(["generate", "--model", "tiny", "--device", "cuda", "hi"],
                 "no CUDA device is visible (torch.cuda.is_available() is False); use --device "
                 "cpu", marks=NO_CUDA),
    pytest.param(["serve", "--model", "tiny", "--device", "cuda:0"], "use --device cpu",
                 marks=NO_CUDA),
    pytest.param(["bench", "--device", "cuda"], "use --device cpu", marks=NO_CUDA),
    (["bench", "--device", "mps"], "cpu or cuda"),
    (["generate", "--model", "tiny", "--max-new-tokens", "-3", "hi"], ">= 0"),
    (["generate", "--model", "tiny", "--seed", str(2**64), "hi"], "64 bits"),
    (["serve", "--model", "tiny", "--port", "99999"], "0..65535"),
    (["serve", "--model", "tiny", "--port", "-1"], ">= 0"),
    (["serve", "--model", "tiny", "--max-num-seqs", "0"], ">= 1"),
    (["serve", "--model", "tiny", "--max-requests", "0"], ">= 1"),
    (["serve", "tiny", "--dtype", "int8"], "invalid choice"),
    (["serve", "tiny", "--max-model-len", "0"], ">= 1"),
    (["serve", "tiny", "--max-body-bytes", "0"], ">= 1"),
    (["serve", "tiny", "--body-timeout", "0"], "> 0"),
    (["serve", "tiny", "--reasoning-parser", "deepseek"], "invalid choice"),
    (["bench", "--page-size", "0"], ">= 1"),
    (["bench", "--threads", "-1"], ">= 1"),
    (["bench", "--a-requests", "-1"], ">= 1"),
    (["bench", "--c-tokens", "many"], "not an integer"),
    (["bench", "--dtype", "int8"], "unknown int8"),
    (["bench", "--dtype", "float32,int8"], "unknown int8; choose from float32,bfloat16"),
    (["bench", "--workloads", "Z"], "unknown Z; choose from A,B,C,N"),
    (["bench", "--systems", "nope"], "unknown nope; choose from engine,transformers,reference"),
]
OTHER = [
    (["generate", "--model", "tiny", "--temperature", "-1", "hi"], "temperature"),
    (["bench", "--model", "nosuch", "--workloads", "B", "--systems", "engine"], "Unknown model"),
    (["bench", "--model", "tiny", "--workloads", "N", "--systems", "engine"],
     "runs on CUDA only"),
    (["bench", "--model", "tiny", "--workloads", "C", "--systems", "transformers"],
     "run none of --workloads C"),
    (["exercises", "--root", "/nonexistent", "--check"], "no solutions/ folder"),
    (["exercises", "--root", "/nonexistent"], "no solutions/ folder"),
    (["grade", "/nonexistent.ipynb"], "does not exist"),
    (["serve", "tiny", "--model", "bard"], "two models given"),
]


@pytest.mark.parametrize("args, says", ARGUMENT)
def test_a_bad_argument_is_a_usage_error_before_anything_loads(tmp_path: Path, args, says):
    out = run(*args, env={"MINIMODEL_HOME": str(tmp_path / "home")})
    line = one_line_error(out)
    assert out.returncode == 2 and out.stderr.startswith("usage:"), out.stderr
    assert says in line, line
    assert not (tmp_path / "home").exists()  # no model was built, no tokenizer either


@pytest.mark.parametrize("args, says", OTHER)
def test_user_errors_are_one_line_and_a_non_zero_exit(args, says):
    line = one_line_error(run(*args))
    assert says in line, line


def test_bench_run_as_its_own_module_has_the_same_one_line_errors():
    out = subprocess.run([sys.executable, "-m", "minimodel.bench", "--model", "nosuch",
                          "--workloads", "B", "--systems", "engine"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert "Unknown model" in one_line_error(out)


def test_an_unknown_repo_id_offline_says_how_to_get_the_model():
    line = one_line_error(run("generate", "--model", "Qwen/No-Such-Model", "hi"))
    assert "not reachable" in line and "hf download Qwen/No-Such-Model" in line
    assert "--model /path/to/folder" in line and "'tiny'" in line


def test_exercises_from_a_solutions_folder_without_notebooks_is_an_error(tmp_path: Path):
    (tmp_path / "solutions").mkdir()
    line = one_line_error(run("exercises", "--root", str(tmp_path), "--check"))
    assert "holds no notebooks" in line
    assert not (tmp_path / "exercises").exists()


def test_an_empty_minimodel_home_means_the_default_cache():
    out = run("info", env={"MINIMODEL_HOME": ""})
    assert out.returncode == 0, out.stderr
    cache = next(line for line in out.stdout.splitlines() if line.startswith("cache"))
    assert cache.split()[-1] == str(Path.home() / ".cache" / "minimodel")


@pytest.mark.parametrize("card", [False, True])
def test_bench_out_under_a_file_is_one_line_before_measuring(tmp_path: Path, card):
    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "b.json"
    proc = run("bench", "--model", "tiny", "--workloads", "B", "--systems", "engine", "--dtype",
               "float32", "--out", str(out), "--no-plot", *(["--card"] if card else []))
    line = one_line_error(proc)
    assert f"--out {out}" in line and f"{tmp_path / 'file'} is a file, not a folder" in line
    assert proc.stdout == ""  # nothing was measured


@pytest.mark.parametrize("kind", ["under a file", "unwritable"])
def test_a_cache_folder_that_cannot_be_written_says_how_to_move_it(tmp_path: Path, kind):
    if kind == "under a file":
        (tmp_path / "file").write_text("x")
        home = tmp_path / "file" / "cache"
    elif os.geteuid() == 0:  # root writes in any folder of its own, but not in sysfs
        home = Path("/sys/minimodel-cache")
    else:
        home = tmp_path / "locked"
        home.mkdir(mode=0o500)
    line = one_line_error(run("generate", "--model", "tiny", "hi",
                              env={"MINIMODEL_HOME": str(home)}))
    assert f"cannot write the cache folder {home}" in line and "Set MINIMODEL_HOME" in line
    if kind == "under a file":
        assert f"{tmp_path / 'file'} is a file, not a folder" in line


DYING = {"cells": [{"cell_type": "code", "execution_count": None, "id": "a", "metadata": {},
                    "outputs": [], "source": "import os\nos._exit(3)"}],
         "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}},
         "nbformat": 4, "nbformat_minor": 5}


def test_grading_a_notebook_whose_kernel_dies_is_one_line(tmp_path: Path):
    import json

    nb = tmp_path / "dies.ipynb"
    nb.write_text(json.dumps(DYING))
    line = one_line_error(run("grade", str(nb)))
    assert "kernel died" in line


def test_grading_a_notebook_that_runs_too_long_names_the_limit(tmp_path: Path):
    import json

    from minimodel.grading.notebooks import GradingError, grade_notebook

    slow = json.loads(json.dumps(DYING))
    slow["cells"][0]["source"] = "import time\ntime.sleep(120)"
    nb = tmp_path / "slow.ipynb"
    nb.write_text(json.dumps(slow))
    with pytest.raises(GradingError, match="a cell ran longer than 3 s"):
        grade_notebook(nb, timeout=3)


def test_serve_on_a_port_in_use_is_one_line_before_the_model_loads():
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        line = one_line_error(run("serve", "--model", "tiny", "--port",
                                  str(busy.getsockname()[1])))
    assert "cannot listen" in line and "--port" in line


def test_serve_takes_the_model_positionally_or_with_model():
    from minimodel.__main__ import _serve_model, build_parser

    for argv in (["serve", "tiny"], ["serve", "--model", "tiny"], ["serve", "tiny", "--model",
                                                                    "tiny"]):
        args = build_parser().parse_args(argv)
        assert _serve_model(args) == "tiny" and args.served_model_name is None, argv
    args = build_parser().parse_args(["serve", "Qwen/Qwen3-0.6B", "--dtype", "float16",
                                      "--max-model-len", "2048", "--body-timeout", "2.5",
                                      "--max-body-bytes", "1000"])
    assert (_serve_model(args), args.dtype, args.max_model_len, args.body_timeout,
            args.max_body_bytes) == ("Qwen/Qwen3-0.6B", "float16", 2048, 2.5, 1000)
    assert args.enable_prefix_caching  # on by default, as vLLM's
    args = build_parser().parse_args(["serve", "tiny", "--no-enable-prefix-caching"])
    assert args.enable_prefix_caching is False
    assert (args.speculative_model, args.num_speculative_tokens) == (None, None)
    args = build_parser().parse_args(["serve", "bard", "--speculative-model", "bard-draft",
                                      "--num-speculative-tokens", "4"])
    assert (args.speculative_model, args.num_speculative_tokens) == ("bard-draft", 4)
