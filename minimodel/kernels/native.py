"""The decode product as a small C kernel (gemv.c), compiled on this machine at first use.

`library()` builds minimodel/kernels/gemv.c with the C compiler it finds ($CC, else cc, gcc or
clang) into $MINIMODEL_HOME/kernels/native/, once per source, compiler, flags and CPU, and loads
it with ctypes; None where no compiler can build it (`status()` says why). It is one more way to
write the product (minimodel/kernels/matmul.py), timed against the others like any of them, so a
machine where it is slower never runs it. MINIMODEL_NATIVE=0 turns it off.

- `pack(weight)`: W packed once into gemv.c's blocked layout (a copy; int8 weights of torchao keep
  their per-row scales beside).
- `gemv(x, packed, bias)`: y = x @ W.T (+ bias), x [rows, in] float32 or bfloat16.
- `greedy(logits)`: each row's argmax and its log-probability in one pass (decode.c).

decode.c, built into the same library, also holds a whole decode step of the model
(engine/native_decode.py).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from minimodel.home import minimodel_home, write_atomic

SOURCES = tuple(Path(__file__).with_name(n) for n in ("gemv.c", "decode.c", "mm.h"))
ABI = 7  # gemv.c's mm_abi()
PLAIN, PAIRS, QUADS, WORDS = 0, 1, 2, 3  # the layouts of a packed weight (gemv.c)
KINDS = {torch.float32: 0, torch.bfloat16: 1, torch.int8: 2}
# tried in order: the first that compiles is used (Apple's clang has no -fopenmp; then one thread)
FLAG_SETS = (("-O3", "-march=native", "-fopenmp"), ("-O3", "-march=native"),
             ("-O3", "-fopenmp"), ("-O3",))
COMPILE_TIMEOUT_S = 300
PROFILER_LABEL = "minimodel::c_gemv"  # what torch.profiler calls a product of this kernel

_status = "not loaded yet"
_key = ""  # the loaded library's: a hash of the sources, the compiler, the flags and the CPU


def cpu_description() -> str:
    """The CPU's model name and feature flags (what -march=native compiles for)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags", "Features")):
                cpu += "|" + line.split(":", 1)[1].strip()
                if line.startswith(("flags", "Features")):
                    break
    except OSError:
        pass
    return cpu


def compiler() -> str | None:
    """$CC, else the first of cc, gcc, clang on PATH."""
    found = os.environ.get("CC")
    if found:
        return shutil.which(found.split()[0])
    return next((p for p in map(shutil.which, ("cc", "gcc", "clang")) if p), None)


def build_key() -> str:
    """Which build of the C kernel is loaded ("" for none): timings taken with one build say
    nothing of another."""
    return _key if library() is not None else ""


def status() -> str:
    """What `library()` found: how the kernel was built, or why there is none."""
    library()
    return _status


def build(cc: str, out: Path, flags_file: Path, sources: tuple[Path, ...] = SOURCES
          ) -> tuple[str, ...] | str:
    """Compile the kernels' C files among `sources` (gemv.c and decode.c; mm.h beside them)
    into `out` with the first flag set that works, noting the flags in `flags_file` first: the
    flags, or the compiler's last complaint."""
    error = ""
    for flags in FLAG_SETS:
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            target = Path(tmp) / out.name
            try:
                done = subprocess.run([cc, *flags, "-shared", "-fPIC",
                                       *(str(p) for p in sources if p.suffix == ".c"),
                                       "-lm", "-o", str(target)], capture_output=True,
                                      text=True, timeout=COMPILE_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired) as err:
                return str(err)
            if done.returncode == 0:
                write_atomic(flags_file, " ".join(flags).encode())
                os.replace(target, out)  # atomic: another process sees the whole file or none
                return flags
            error = (done.stderr.strip().splitlines() or ["exit " + str(done.returncode)])[-1]
    return error


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """`lib`, a build of the kernels, with the argument and result types of its functions."""
    lib.mm_gemv.restype = ctypes.c_int
    lib.mm_gemv.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                            ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                            ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                            ctypes.c_int]
    lib.mm_packed_bytes.restype = ctypes.c_size_t
    lib.mm_packed_bytes.argtypes = [ctypes.c_int] * 4
    lib.mm_quads_max_in.restype = ctypes.c_int
    lib.mm_has_words.restype = ctypes.c_int
    lib.mm_pack.restype = None
    lib.mm_pack.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                            ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    lib.mm_greedy.restype = None
    lib.mm_greedy.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.mm_decode.restype = ctypes.c_int
    lib.mm_decode.argtypes = [ctypes.POINTER(MMModel), ctypes.c_int, *[ctypes.c_void_p] * 7,
                              ctypes.POINTER(ctypes.c_double)]
    lib.mm_decode_greedy.restype = ctypes.c_int
    lib.mm_decode_greedy.argtypes = [ctypes.POINTER(MMModel), ctypes.POINTER(MMWeight),
                                     ctypes.c_int, *[ctypes.c_void_p] * 10,
                                     ctypes.POINTER(ctypes.c_double)]
    return lib


@functools.cache
def library() -> ctypes.CDLL | None:
    """gemv.c built for this machine and loaded, or None (see `status()`)."""
    global _status, _key
    if os.environ.get("MINIMODEL_NATIVE", "1") == "0":
        _status = "off (MINIMODEL_NATIVE=0)"
        return None
    cc = compiler()
    if cc is None:
        _status = "no C compiler found (set CC, or install cc, gcc or clang)"
        return None
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=60).stdout.splitlines()[:1]
    except (OSError, subprocess.TimeoutExpired) as err:
        _status = f"{cc} did not run: {err}"
        return None
    key = hashlib.sha256("\n".join([*(p.read_text() for p in SOURCES), cc, *version,
                                    cpu_description(), repr(FLAG_SETS)]).encode()
                         ).hexdigest()[:16]
    folder = minimodel_home() / "kernels" / "native"
    path, flags_file = folder / f"gemv-{key}.so", folder / f"gemv-{key}.flags"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            flags = build(cc, path, flags_file)
            if isinstance(flags, str):
                _status = f"{Path(cc).name} could not build gemv.c: {flags}"
                return None
        lib = ctypes.CDLL(str(path))
    except OSError as err:
        _status = f"could not build or load gemv.c: {err}"
        return None
    if lib.mm_abi() != ABI:
        _status = f"{path} is of another version: delete it"
        return None
    _key = key
    declare(lib)
    flags = flags_file.read_text().strip() if flags_file.exists() else "?"
    _status = (f"built with {Path(cc).name} {flags}: {lib.mm_lanes()} float lanes, "
               f"{'OpenMP threads' if '-fopenmp' in flags else 'one thread'}"
               f"{', bfloat16 pair products (AVX512_BF16)' if lib.mm_has_pairs() else ''}"
               f"{', int8 quad products (AVX512_VNNI)' if lib.mm_quads_max_in() else ''}"
               f"{', int8 word products (AVX2)' if lib.mm_has_words() else ''}")
    return lib


class MMWeight(ctypes.Structure):
    """decode.c's mm_weight: one product's packed weight, as mm_gemv takes it."""

    _fields_ = [("packed", ctypes.c_void_p), ("scale", ctypes.c_void_p),
                ("bias", ctypes.c_void_p), ("wk", ctypes.c_int32), ("layout", ctypes.c_int32),
                ("sk", ctypes.c_int32), ("in_features", ctypes.c_int32),
                ("out_features", ctypes.c_int32)]


class MMLayer(ctypes.Structure):
    """decode.c's mm_layer: a decoder layer's norms, products and K/V pool."""

    _fields_ = [("in_norm", ctypes.c_void_p), ("q_norm", ctypes.c_void_p),
                ("k_norm", ctypes.c_void_p), ("post_norm", ctypes.c_void_p),
                ("qkv", MMWeight), ("o", MMWeight), ("gate_up", MMWeight), ("down", MMWeight),
                ("pool", ctypes.c_void_p)]


class MMModel(ctypes.Structure):
    """decode.c's mm_model: the shapes, the layers and the tables of a whole model."""

    _fields_ = [*[(n, ctypes.c_int32) for n in ("layers", "C", "Hq", "Hkv", "D", "I", "S",
                                               "xk", "threads", "vocab", "pages",
                                               "positions")],
                ("eps", ctypes.c_float), ("scale", ctypes.c_float),
                ("layer", ctypes.POINTER(MMLayer)), ("embed", ctypes.c_void_p),
                ("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p), ("norm", ctypes.c_void_p)]


@dataclass(frozen=True)
class Packed:
    """A weight in gemv.c's blocked layout: `data` (bytes), its kind and shape, its layout
    (PLAIN; PAIRS of inputs for AVX512_BF16's products, bfloat16 activations only; QUADS of
    int8 inputs for AVX512_VNNI's integer products, either activations; WORDS, int8 inputs in
    pairs for AVX2's 16-bit integer products, bfloat16 activations only), and for int8 the
    per-row scales."""

    data: torch.Tensor
    kind: int
    out_features: int
    in_features: int
    layout: int
    scale: torch.Tensor | None = None

    @property
    def pairs(self) -> bool:
        """Packed in pairs of inputs, for bfloat16 activations only."""
        return self.layout in (PAIRS, WORDS)

    @property
    def nbytes(self) -> int:
        return self.data.numel() + (0 if self.scale is None else self.scale.nbytes)


LAYOUT_NAMES = {PLAIN: "plain", PAIRS: "pairs", QUADS: "quads", WORDS: "words"}


def layouts(kind: int, in_features: int, activations: torch.dtype,
            lib: ctypes.CDLL | None = None) -> list[int]:
    """The layouts this CPU's build (or `lib`, another build) can pack a weight of `kind`
    (KINDS) into for `activations`, the fastest first (what pack chooses)."""
    lib = lib or library()
    if lib is None:
        return []
    found = []
    int8, bf16 = kind == KINDS[torch.int8], activations == torch.bfloat16
    if int8 and 0 < in_features <= lib.mm_quads_max_in():
        found.append(QUADS)
    if int8 and bf16 and lib.mm_has_words():
        found.append(WORDS)
    if bf16 and kind != KINDS[torch.float32] and lib.mm_has_pairs():
        found.append(PAIRS)
    return found + [PLAIN]


def pack(weight: torch.Tensor, scale: torch.Tensor | None = None,
         activations: torch.dtype | None = None, layout: int | None = None) -> Packed:
    """Pack a float32 or bfloat16 weight [out, in], or an int8 one with its per-row `scale`
    (float32 or bfloat16, one per output row), for activations of dtype `activations` (default:
    the weight's dtype; needed for int8), in `layout` (default: the fastest of `layouts`)."""
    lib = library()
    if lib is None:
        raise RuntimeError(f"the C kernel is not available: {_status}")
    if weight.dim() != 2 or weight.dtype not in KINDS or weight.device.type != "cpu":
        raise ValueError(f"pack takes a 2-D CPU float32, bfloat16 or int8 weight, got "
                         f"{weight.dtype} {tuple(weight.shape)} on {weight.device}.")
    if (weight.dtype == torch.int8) != (scale is not None):
        raise ValueError("an int8 weight needs its per-row scale, and only an int8 one takes it.")
    out_features, in_features = weight.shape
    if scale is not None:
        scale = scale.detach().reshape(-1).contiguous()
        if scale.numel() != out_features or scale.dtype not in (torch.float32, torch.bfloat16):
            raise ValueError(f"scale must hold {out_features} float32 or bfloat16 values, one "
                             f"per output row; got {scale.dtype} {tuple(scale.shape)}.")
    activations = activations or weight.dtype
    if activations not in (torch.float32, torch.bfloat16):
        raise ValueError(f"activations must be float32 or bfloat16, got {activations}.")
    weight = weight.detach().contiguous()
    kind = KINDS[weight.dtype]
    offered = layouts(kind, in_features, activations)
    if layout is None:
        layout = offered[0]
    elif layout not in offered:
        names = ", ".join(f"{LAYOUT_NAMES[n]} ({n})" for n in offered)
        raise ValueError(f"layout {layout!r} is not one this CPU's build packs a {weight.dtype} "
                         f"weight [{out_features}, {in_features}] into for {activations} "
                         f"activations; it offers {names}.")
    data = torch.empty(lib.mm_packed_bytes(kind, layout, out_features, in_features),
                       dtype=torch.uint8)
    lib.mm_pack(weight.data_ptr(), kind, layout, out_features, in_features, data.data_ptr(),
                torch.get_num_threads())
    return Packed(data, kind, out_features, in_features, layout, scale)


def weight_struct(packed: Packed, bias: torch.Tensor | None) -> MMWeight:
    """The mm_weight of a packed weight (and its bias, of the activations' dtype): pointers
    into `packed` and `bias`, which the caller keeps alive."""
    scale = packed.scale
    return MMWeight(packed.data.data_ptr(), None if scale is None else scale.data_ptr(),
                    None if bias is None else bias.data_ptr(), packed.kind, packed.layout,
                    0 if scale is None else KINDS[scale.dtype], packed.in_features,
                    packed.out_features)


def gemv(x: torch.Tensor, packed: Packed, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = x @ W.T (* scale) (+ bias) for x [rows, in] float32 or bfloat16; y in x's dtype."""
    lib = library()
    if lib is None:
        raise RuntimeError(f"the C kernel is not available: {_status}")
    kind = KINDS.get(x.dtype, 2) if x.device.type == "cpu" else 2
    if kind == 2 or x.dim() != 2 or x.shape[1] != packed.in_features or (packed.pairs
                                                                        and kind != 1):
        want = "bfloat16" if packed.pairs else "float32 or bfloat16"
        raise ValueError(f"gemv takes x [rows, {packed.in_features}] {want} on the CPU (as the "
                         f"weight was packed for), got {x.dtype} {tuple(x.shape)} on "
                         f"{x.device}.")
    rows = x.shape[0]
    if rows == 0:
        return x.new_empty(0, packed.out_features)
    x = x.contiguous()
    y = torch.empty(rows, packed.out_features, dtype=x.dtype)
    if bias is not None:
        bias = bias.detach().to(x.dtype).contiguous()
    if torch.autograd._profiler_enabled():  # the profiler sees the call as an op of its own
        with labelled(PROFILER_LABEL):
            code = _call(lib, x, kind, packed, bias, y)
    else:
        code = _call(lib, x, kind, packed, bias, y)
    if code:
        raise ValueError(f"gemv.c refused its arguments (code {code}).")
    return y


def _call(lib: ctypes.CDLL, x: torch.Tensor, kind: int, packed: Packed,
          bias: torch.Tensor | None, y: torch.Tensor) -> int:
    scale = packed.scale
    return lib.mm_gemv(x.data_ptr(), kind, packed.data.data_ptr(), packed.kind, packed.layout,
                       None if scale is None else scale.data_ptr(),
                       0 if scale is None else KINDS[scale.dtype],
                       None if bias is None else bias.data_ptr(), y.data_ptr(), x.shape[0],
                       packed.in_features, packed.out_features, torch.get_num_threads())


_FAST_LABEL = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", None)


def labelled(name: str) -> Any:
    """A context in which the profiler records a call as an op named `name`: torch's own fast
    record function (a C++ object, about a microsecond) where this torch has it, else
    torch.profiler.record_function (about ten, which a step of a millisecond would show)."""
    return (_FAST_LABEL or torch.profiler.record_function)(name)


def greedy(logits: torch.Tensor, score: bool = True
           ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(tokens Long [B], logprobs float32 [B]) of a CPU float32 or bfloat16 logits [B, V]: each
    row's argmax (the first of equal maxima; a NaN counts as the largest, as torch.argmax) and
    its log_softmax, in one pass over the row in C (decode.c's mm_greedy). None without the C
    kernel or for another tensor; a logprob is NaN where the row's largest is not finite.
    score=False: (tokens, None), no e^x pass, and a token is -1 where the row's largest is not
    finite (decide those rows otherwise)."""
    lib = library()
    if (lib is None or logits.dim() != 2 or logits.device.type != "cpu"
            or logits.dtype not in (torch.float32, torch.bfloat16) or 0 in logits.shape):
        return None
    logits = logits.contiguous()
    rows, vocab = logits.shape
    tokens = torch.empty(rows, dtype=torch.int64)
    logprobs = torch.empty(rows, dtype=torch.float32) if score else None
    lib.mm_greedy(logits.data_ptr(), KINDS[logits.dtype], rows, vocab, tokens.data_ptr(),
                  None if logprobs is None else logprobs.data_ptr(), torch.get_num_threads())
    return tokens, logprobs
