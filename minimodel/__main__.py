"""Command line: python -m minimodel
{generate,chat,serve,bench,grade,exercises,translate,info}."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

from minimodel.cli_types import device, int64, int_at_least, port, positive_int

DEFAULT_MODEL = os.environ.get("MINIMODEL_MODEL", "bard")


def _sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="bard (default), tiny, random:<shape>, folder, repo id")
    p.add_argument("--device", type=device, default="cuda" if _cuda() else "cpu",
                   help="cpu, cuda or cuda:N")
    p.add_argument("--max-tokens", "--max-new-tokens", dest="max_tokens", type=int_at_least(0),
                   default=64, help="generated tokens at most (default: 64)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    p.add_argument("--top-k", type=int_at_least(0), default=0, help="0 = off")
    p.add_argument("--top-p", type=float, default=1.0, help="1.0 = off")
    p.add_argument("--seed", type=int64, default=None, help="any 64-bit integer")
    _quantization_arg(p)


def _quantization_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quantization", default=None, choices=["int8", "int4"],
                   help="weight-only int8 or int4 (torchao) for the linear layers and the LM "
                        "head; computes in bfloat16 unless --dtype says otherwise")
    p.add_argument("--speculative-model", default=None,
                   help="speculative decoding (chapter 13): 'ngram' (prompt lookup) or a draft "
                        "model with the same tokenizer (bard-draft, a folder)")
    p.add_argument("--num-speculative-tokens", type=positive_int, default=None,
                   help="draft tokens checked per request and step (with --speculative-model)")


def _dtype(device: str, asked: str | None, quantization: str | None):
    """--dtype, or by default bfloat16 on CUDA or with quantized weights, else float32."""
    import torch

    if asked not in (None, "auto"):
        return asked
    return torch.bfloat16 if device.startswith("cuda") or quantization else torch.float32


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _params(args: argparse.Namespace):
    from minimodel.sampling import SamplingParams

    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                          max_tokens=args.max_tokens, seed=args.seed)


def _llm(args: argparse.Namespace):
    from minimodel.engine import LLM

    return LLM(args.model, device=args.device, quantization=args.quantization,
               dtype=_dtype(args.device, None, args.quantization),
               speculative_model=args.speculative_model,
               num_speculative_tokens=args.num_speculative_tokens)


def cmd_generate(args: argparse.Namespace) -> int:
    params = _params(args)
    llm = _llm(args)
    for delta in llm.stream(args.prompt, params):
        print(delta, end="", flush=True)
    print()
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from minimodel.serve.reasoning import ReasoningSplit
    from minimodel.tokenizer import DEFAULT_ENABLE_THINKING

    params = _params(args)
    llm = _llm(args)
    thinking = DEFAULT_ENABLE_THINKING if args.think is None else args.think
    dim, plain = ("\033[2m", "\033[0m") if sys.stdout.isatty() else ("", "")
    messages: list[dict] = []
    print(f"Chat with the model (thinking {'on' if thinking else 'off'}: "
          f"{'--no-think' if thinking else '--think'} to switch); an empty line or Ctrl-D ends.")
    while True:
        try:
            line = input("you> ").strip()
        except EOFError:
            break
        if not line:
            break
        messages.append({"role": "user", "content": line})
        prompt = llm.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                   enable_thinking=thinking, tokenize=True)
        # The think block is shown dimmed, the answer plainly; only the answer goes into the
        # history (Qwen3's template drops earlier turns' reasoning anyway).
        split, answer, shown = ReasoningSplit(thinking), "", False
        print("model> ", end="", flush=True)

        def show(reasoning: str, content: str) -> None:
            nonlocal answer, shown
            if reasoning and (shown or reasoning.strip()):  # an empty think block shows nothing
                text = reasoning if shown else "(thinking) " + reasoning.lstrip()
                print(f"{dim}{text}{plain}", end="", flush=True)
                shown = True
            if content and (answer or content.strip()):
                if shown and not answer:
                    print("\nmodel> ", end="")
                print(content if answer else content.lstrip(), end="", flush=True)
                answer += content

        for delta in llm.stream(prompt, params):
            show(*split.push(delta))
        show(*split.flush())
        print()
        messages.append({"role": "assistant", "content": answer.strip()})
    return 0


def _seconds(text: str) -> float:
    """A finite number of seconds > 0 (--body-timeout)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (0 < value < math.inf):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}")
    return value


def _check_can_listen(host: str, port: int) -> None:
    """An address the server could not listen on is an error before the model loads."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            probe.bind((host, port))
    except OSError as err:
        raise ValueError(f"cannot listen on {host}:{port} ({err.strerror or err}); pick another "
                         "--port, or a --host of this machine.") from None


def cmd_serve(args: argparse.Namespace) -> int:
    from minimodel.engine import LLM
    from minimodel.serve import serve

    model = _serve_model(args)
    _check_can_listen(args.host, args.port)
    dtype = _dtype(args.device, args.dtype, args.quantization)
    with LLM(model, device=args.device, dtype=dtype, max_num_seqs=args.max_num_seqs,
             num_pages=args.num_pages, tensor_parallel_size=args.tensor_parallel_size,
             max_model_len=args.max_model_len, quantization=args.quantization,
             enable_prefix_caching=args.enable_prefix_caching,
             speculative_model=args.speculative_model,
             num_speculative_tokens=args.num_speculative_tokens) as llm:
        name = args.served_model_name or model
        print(f"minimodel: serving {name!r} on http://{args.host}:{args.port} "
              f"(OpenAI API under /v1; Ctrl-C stops)", flush=True)
        serve(llm, name, host=args.host, port=args.port, api_key=args.api_key,
              max_requests=args.max_requests, log_level=args.log_level,
              max_body_bytes=args.max_body_bytes, body_timeout_s=args.body_timeout,
              reasoning_parser=args.reasoning_parser)
    return 0


def _serve_model(args: argparse.Namespace) -> str:
    """`serve MODEL` as `vllm serve MODEL`; `--model MODEL` too (not two different ones)."""
    if args.model and args.model_option and args.model != args.model_option:
        raise ValueError(f"two models given: {args.model!r} and --model {args.model_option!r}; "
                         "give one.")
    return args.model or args.model_option or DEFAULT_MODEL


def info_rows() -> list[tuple[str, str]]:
    """(label, value) rows of `minimodel info`: versions, device, cache, backends."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    import minimodel
    from minimodel.engine.flashinfer_env import backend_report
    from minimodel.home import minimodel_home

    rows = [
        ("minimodel", minimodel.__version__),
        ("python", f"{platform.python_version()} ({platform.machine()})"),
        ("torch", f"{torch.__version__}, {torch.get_num_threads()} CPU threads"),
    ]
    for name, dist in (("transformers", "transformers"), ("tokenizers", "tokenizers"),
                       ("flashinfer", "flashinfer-python")):
        try:
            rows.append((name, version(dist)))
        except PackageNotFoundError:
            rows.append((name, "not installed"))
    if torch.cuda.is_available():
        rows.append(("device", f"cuda: {torch.cuda.get_device_name(0)}"))
    else:
        rows.append(("device", "cpu (no CUDA device visible)"))
    rows.append(("cache", str(minimodel_home())))
    rows.append(("model", f"{DEFAULT_MODEL} (MINIMODEL_MODEL)"))
    report = backend_report()
    for name, backend in report["backends"].items():
        state = "available" if backend["available"] else "unavailable"
        rows.append(("attention", f"{name}: {state} ({backend['reason']})"))
    rows.append(("auto picks", f"{report['auto']['backend']} ({report['auto']['reason']})"))
    graphs = report["cuda_graphs"]
    rows.append(("cuda graphs", f"{'on' if graphs['available'] else 'off'} ({graphs['reason']})"))
    rows += kernel_rows()
    return rows


def kernel_rows() -> list[tuple[str, str]]:
    """What this machine's kernel table holds: per weight shape and kind, the product chosen
    for each row bucket (minimodel/kernels/matmul.py; measured when an LLM first starts)."""
    from minimodel.kernels import native
    from minimodel.kernels.matmul import KernelTable, describe_choices

    table = KernelTable()
    c_kernel = ("c kernel", f"gemv.c {native.status()}")
    if not table.choices:
        return [c_kernel, ("cpu kernels", f"none measured yet for this CPU and thread count "
                                          f"({table.path} is written when an LLM first starts "
                                          "on the CPU)")]
    rows = [c_kernel, ("cpu kernels", f"{table.path} (delete it to measure again)")]
    for key, choices in sorted(table.choices.items()):
        rows.append(("", f"{key}: {describe_choices({int(b): n for b, n in choices.items()})}"))
    return rows


def format_rows(rows: list[tuple[str, str]]) -> str:
    """Labels in one column, padded to the longest label plus two spaces."""
    width = max(len(label) for label, _ in rows) + 2
    return "\n".join(f"{label:<{width}}{value}" for label, value in rows)


def cmd_info(args: argparse.Namespace) -> int:
    print(format_rows(info_rows()))
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    from minimodel.grading.notebooks import GradingError, grade, score_table

    if not Path(args.path).exists():
        raise FileNotFoundError(f"{args.path} does not exist: give a notebook or a folder of "
                                "notebooks.")
    try:
        report = grade(Path(args.path))
    except GradingError as err:  # the notebook's fault, not the command's: exit status 1
        print(f"error: {_explain(err)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    else:
        from minimodel.grading.i18n import language

        graded = Path(args.path).resolve()
        print(score_table(report, language(graded if graded.is_dir() else graded.parent)))
    return 0


def cmd_exercises(args: argparse.Namespace) -> int:
    from minimodel.grading.notebooks import sync_exercises

    root = Path(args.root)
    if not (root / "solutions").is_dir():
        raise FileNotFoundError(f"{root} has no solutions/ folder: --root must be the course "
                                "folder (the one that holds solutions/ and exercises/).")
    if not any((root / "solutions").glob("*.ipynb")):
        raise FileNotFoundError(f"{root / 'solutions'} holds no notebooks (*.ipynb), so there "
                                "is nothing to make exercises from; check --root.")
    changed = sync_exercises(root / "solutions", root / "exercises", check_only=args.check)
    for path in changed:
        print(("out of date: " if args.check else "wrote ") + str(path))
    if args.check and changed:
        print("Run `python -m minimodel exercises` to regenerate them.")
        return 1
    if not changed:
        print("exercises/ is up to date with solutions/")
    return 0


def cmd_translate(args: argparse.Namespace) -> int:
    from minimodel.grading.translation import build, skeleton, translation_file

    root = Path(args.root)
    if not (root / "chapters").is_dir():
        raise FileNotFoundError(f"{root} has no chapters/ folder: --root must be the course "
                                "folder (the one that holds chapters/ and solutions/).")
    if args.skeleton:
        notebook = Path(args.skeleton)
        if not notebook.is_file() or notebook.suffix != ".ipynb":
            raise FileNotFoundError(f"{notebook} is not a notebook: --skeleton takes an English "
                                    "notebook, e.g. chapters/01_tokens_and_embeddings.ipynb.")
        target = translation_file(root, notebook.resolve().relative_to(root.resolve()))
        if target.exists():
            raise FileExistsError(f"{target} exists already; edit it (stale blocks are listed "
                                  "by `python -m minimodel translate --check`).")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(skeleton(notebook), encoding="utf-8")
        print(f"wrote {target}: translate each block below its marker")
        return 0
    changed, reports = build(root, check_only=args.check)
    for path in changed:
        print(("out of date: " if args.check else "wrote ") + str(path))
    problems = [line for r in reports for line in r.problems()]
    for line in problems:
        print(line)
    if args.check and (changed or problems):
        print("Translate the cells named, then run `python -m minimodel translate`.")
        return 1
    if not changed and not problems:
        print(f"{len(reports)} Chinese notebooks are up to date with their translations")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="minimodel", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("generate", help="stream a completion of one prompt")
    _sampling_args(p)
    p.add_argument("prompt")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("chat", help="chat in the terminal with the chat template")
    _sampling_args(p)
    p.add_argument("--think", action=argparse.BooleanOptionalAction, default=None,
                   help="Qwen3's thinking mode (default: on, as the chat template's default)")
    p.set_defaults(func=cmd_chat)

    p = sub.add_parser("serve", help="an OpenAI-compatible HTTP server (streaming, /v1/...)")
    p.add_argument("model", nargs="?", default=None,
                   help="bard (default), tiny, random:<shape>, folder, repo id")
    p.add_argument("--model", dest="model_option", default=None, help="the same as MODEL")
    p.add_argument("--device", type=device, default="cuda" if _cuda() else "cpu",
                   help="cpu, cuda or cuda:N")
    p.add_argument("--host", default="127.0.0.1",
                   help="127.0.0.1 (default: this machine only); 0.0.0.0 opens it to the network")
    p.add_argument("--port", type=port, default=8000)
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1 (default: no key)")
    p.add_argument("--served-model-name", default=None,
                   help="the model name clients send (default: the model as given)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="auto (default): bfloat16 on CUDA, float32 on a CPU")
    p.add_argument("--max-model-len", type=positive_int, default=None,
                   help="context length in tokens (default: the model's own)")
    p.add_argument("--max-body-bytes", type=positive_int, default=32 << 20,
                   help="larger request bodies get HTTP 413 (default: 32 MiB)")
    p.add_argument("--body-timeout", type=_seconds, default=30.0,
                   help="seconds a request body may take to arrive, else HTTP 408 (default: 30)")
    p.add_argument("--reasoning-parser", default=None, choices=["qwen3"],
                   help="qwen3: Qwen3's <think> text goes to reasoning_content, not content")
    p.add_argument("--max-num-seqs", type=positive_int, default=64,
                   help="requests decoded at once")
    p.add_argument("--num-pages", type=positive_int, default=None,
                   help="KV pages (default: sized from memory, 1 GiB on a CPU)")
    p.add_argument("--tensor-parallel-size", type=positive_int, default=1,
                   help="processes that split the model (chapter 10)")
    _quantization_arg(p)
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=True, help="share the KV pages of prompt prefixes seen before "
                   "(chapter 12; default: on)")
    p.add_argument("--max-requests", type=positive_int, default=256,
                   help="requests held at once (running + waiting); more get HTTP 429")
    p.add_argument("--log-level", default="info",
                   choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("info", help="versions, device, cache folder, attention backends")
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("grade", help="run notebooks and print a score table per exercise")
    p.add_argument("path", help="a notebook or a folder of notebooks")
    p.add_argument("--json", action="store_true", help="print JSON for a learning platform")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("exercises", help="regenerate exercises/ from solutions/")
    p.add_argument("--root", default=".", help="the course folder (holds solutions/)")
    p.add_argument("--check", action="store_true", help="only report out-of-date files")
    p.set_defaults(func=cmd_exercises)

    p = sub.add_parser("translate", help="build chapters/zh, solutions/zh and exercises/zh "
                       "from the English notebooks and translations/zh/")
    p.add_argument("--root", default=".", help="the course folder (holds chapters/)")
    p.add_argument("--check", action="store_true",
                   help="only report out-of-date notebooks and stale or missing translations")
    p.add_argument("--skeleton", metavar="NOTEBOOK",
                   help="start the translation file of an English notebook")
    p.set_defaults(func=cmd_translate)

    # `bench` is dispatched in main() before parsing; listed here for --help.
    sub.add_parser("bench", help="engine vs transformers vs naive loop; see bench --help")
    return parser


def _explain(err: BaseException) -> str:
    """One line for a user's error; a file error in the cache folder says how to move it."""
    from minimodel.home import minimodel_home

    text = str(err) if not isinstance(err, KeyError) else str(err.args[0] if err.args else err)
    if isinstance(err, OSError):
        home = minimodel_home()
        name = Path(err.filename) if err.filename else None
        if name is not None and (name == home or home in name.parents):
            text += (f" (the cache folder is {home}: set MINIMODEL_HOME to a folder you can "
                     "write)")
    return " ".join(text.split())  # one line


def main(argv: list[str] | None = None) -> int:
    """Run a command; a user's error is one line `error: ...` on stderr and exit status 2."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        if argv[:1] == ["bench"]:  # the benchmark parses its own options
            from minimodel.bench import main as bench_main

            return bench_main(argv[1:]) or 0
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (ValueError, OSError, KeyError) as e:  # bad values, files, models, folders
        print(f"error: {_explain(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
