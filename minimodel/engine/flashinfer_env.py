"""Can FlashInfer run here, and which attention backend does an engine use?

FlashInfer's kernels need CUDA, the `flashinfer-python` package, and either prebuilt kernels
or nvcc and ninja to compile them on first use; and they exist for some dtypes and head
dimensions only. This module asks those questions (without compiling anything), so that
`attention_backend="auto"` picks FlashInfer only where it will run and says why not otherwise,
and `minimodel info` can report it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from minimodel.engine.attention import BACKENDS, FLASHINFER_HEAD_DIMS, flashinfer_kernel_problem


def _nvcc() -> str | None:
    """The nvcc FlashInfer's JIT would call (its own search order), if it exists."""
    if os.environ.get("FLASHINFER_NVCC"):
        return shutil.which(os.environ["FLASHINFER_NVCC"])
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return str(Path(home, "bin", "nvcc")) if Path(home, "bin", "nvcc").is_file() else None
    return shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None
    )


def flashinfer_build_problem() -> str | None:
    """Why FlashInfer could not get its kernels here, or None: it compiles them on first use
    with nvcc and ninja, unless prebuilt ones are installed (flashinfer-jit-cache, an AOT dir)."""
    from flashinfer.jit import env as jit_env

    aot = Path(jit_env.FLASHINFER_AOT_DIR)
    if jit_env.has_flashinfer_jit_cache() or (aot.is_dir() and any(aot.iterdir())):
        return None
    missing = [name for name, found in (("nvcc", _nvcc()), ("ninja", shutil.which("ninja")))
               if not found]
    if not missing:
        return None
    return (f"FlashInfer compiles its kernels on first use and finds no {' or '.join(missing)} "
            "(install the CUDA toolkit and ninja, set CUDA_HOME, or install prebuilt kernels: "
            "pip install flashinfer-jit-cache)")


def flashinfer_status(device: torch.device | str) -> tuple[bool, str]:
    """(usable, why): FlashInfer needs a CUDA device, the flashinfer-python package, and a way
    to get its kernels (nvcc + ninja to compile them, or prebuilt ones)."""
    if torch.device(device).type != "cuda":
        return False, f"device is {torch.device(device).type!r}; FlashInfer kernels need CUDA"
    if not torch.cuda.is_available():
        return False, "torch reports no CUDA device"
    try:
        import flashinfer
    except Exception as e:  # ImportError, or a broken CUDA/JIT install
        return False, (
            f"flashinfer does not import ({type(e).__name__}: {e}); "
            "install it with: pip install -e '.[gpu]'"
        )
    problem = flashinfer_build_problem()
    if problem:
        return False, problem
    return True, f"flashinfer {getattr(flashinfer, '__version__', '?')} imports on CUDA"


def select_backend(
    name: str,
    device: torch.device | str,
    dtype: torch.dtype | None = None,
    head_dim: int | None = None,
) -> tuple[str, str]:
    """Resolve "auto" | "torch" | "flashinfer" for a device (and, when given, the model's dtype
    and head_dim) -> (backend name, reason). "flashinfer" that cannot run raises ValueError."""
    if name not in ("auto", *BACKENDS):
        raise ValueError(
            f"attention_backend must be 'auto', 'torch' or 'flashinfer', got {name!r}."
        )
    if name == "torch":
        return "torch", "asked for"
    ok, why = flashinfer_status(device)
    if ok and dtype is not None and head_dim is not None:
        kernel_problem = flashinfer_kernel_problem(dtype, head_dim)
        if kernel_problem:
            ok, why = False, kernel_problem
    if name == "flashinfer":
        if not ok:
            raise ValueError(f"attention_backend='flashinfer' cannot run here: {why}.")
        return "flashinfer", why
    return ("flashinfer", why) if ok else ("torch", f"FlashInfer not used: {why}")


def backend_report() -> dict[str, Any]:
    """Which attention backends this machine can run, and why not (for `minimodel info`)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    ok, why = flashinfer_status("cuda")
    auto, auto_why = select_backend("auto", device)
    dims = "/".join(str(d) for d in FLASHINFER_HEAD_DIMS)
    needs = f"kernels for bfloat16/float16 and head_dim {dims}; auto picks torch otherwise"
    return {
        "device": device,
        "backends": {
            "torch": {"available": True, "reason": "pure PyTorch: runs on CPU and GPU"},
            "flashinfer": {"available": ok, "reason": f"{why}; {needs}"},
        },
        "auto": {"backend": auto, "reason": auto_why},
        "cuda_graphs": {
            "available": ok,
            "reason": "decode graphs with the flashinfer backend"
            if ok
            else "CUDA graphs need CUDA and the flashinfer backend",
        },
    }
