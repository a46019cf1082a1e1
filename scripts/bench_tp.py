"""tp=1 against tp=2 on this machine: the same requests through mm.LLM with one rank and two.

    OMP_NUM_THREADS=1 python scripts/bench_tp.py --model bard --threads 2

Settings: one rank with `--threads` threads, one rank with `--threads / 2` threads, and two
ranks with `--threads / 2` threads each (the same cores as the first). Workloads (greedy, EOS
ignored, float32): "decode", one request of 32 prompt tokens and 64 new ones (decode tokens/s,
after its first token); "batch", 8 requests of 64 prompt tokens and 32 new ones (output
tokens/s). Best of `--repeats` runs. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

import minimodel as mm


def run(llm: mm.LLM, n: int, prompt_len: int, new: int) -> tuple[float, float]:
    """(output tokens/s, decode tokens/s after each request's first token)."""
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, llm.cfg.vocab_size, (prompt_len,), generator=g).tolist()
               for _ in range(n)]
    sp = mm.SamplingParams(temperature=0.0, max_new_tokens=new, ignore_eos=True)
    t = time.perf_counter()
    outs = llm.generate(prompts, sp)
    wall = time.perf_counter() - t
    decode = max(o.metrics.e2e_s - o.metrics.ttft_s for o in outs)
    return n * new / wall, n * (new - 1) / decode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="bard")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    half = max(1, args.threads // 2)
    settings = [("tp=1", 1, args.threads), ("tp=1", 1, half), ("tp=2", 2, half)]
    settings = list(dict.fromkeys(settings))  # --threads 1: tp=1 once
    results = []
    for label, tp, threads in settings:
        torch.set_num_threads(threads * tp)  # LLM gives each rank threads // tp
        t = time.perf_counter()
        with mm.LLM(args.model, tensor_parallel_size=tp, num_pages=128, max_num_seqs=8,
                    skip_tokenizer_init=True) as llm:
            startup = time.perf_counter() - t
            run(llm, 1, 8, 4)  # warm-up
            decode = max(run(llm, 1, 32, 64)[1] for _ in range(args.repeats))
            batch = max(run(llm, 8, 64, 32)[0] for _ in range(args.repeats))
        results.append(dict(setting=label, ranks=tp, threads_per_rank=threads,
                            startup_s=round(startup, 1), decode_tok_s=round(decode, 1),
                            batch_tok_s=round(batch, 1)))
        print(f"{label} x {threads} thread(s) per rank: start {startup:5.1f} s | decode "
              f"{decode:7.1f} tok/s | batch of 8 {batch:7.1f} tok/s", flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(json.dumps(dict(model=args.model, load_avg_1min=load, results=results)))


if __name__ == "__main__":
    main()
