"""Every OPFORGE_* setting (and the conventional CXX / NVCC), typed, in one place.

Nothing else in opforge reads os.environ; settings are read when asked for, so a notebook
that changes the environment sees the change.
"""
import os
from pathlib import Path


def cache_dir() -> Path:
    """$OPFORGE_CACHE_DIR, else $XDG_CACHE_HOME/opforge, else ~/.cache/opforge."""
    explicit = os.environ.get("OPFORGE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "opforge"


def cxx() -> str:
    """The C++ compiler: $CXX, else c++ from PATH."""
    return os.environ.get("CXX") or "c++"


def nvcc() -> "str | None":
    """The CUDA compiler named by $NVCC, or None (then nvcc on PATH, then the pip wheels)."""
    return os.environ.get("NVCC") or None


def cuda_arch() -> "str | None":
    """$OPFORGE_CUDA_ARCH: the GPU architectures CUDA libraries are built for, e.g. "80;90" or
    "8.6;9.0+PTX"; it overrides the visible GPU (None: the visible GPU, else a default list)."""
    return os.environ.get("OPFORGE_CUDA_ARCH") or None


def verbose() -> bool:
    """$OPFORGE_VERBOSE=1 streams compiler commands and output."""
    return os.environ.get("OPFORGE_VERBOSE", "") not in ("", "0")


def num_threads() -> int:
    """Threads for eager op calls: $OPFORGE_NUM_THREADS, else every core."""
    value = os.environ.get("OPFORGE_NUM_THREADS")
    return int(value) if value else (os.cpu_count() or 1)


def build_jobs() -> int:
    """Parallel compile jobs: $OPFORGE_BUILD_JOBS, else cores + 1."""
    value = os.environ.get("OPFORGE_BUILD_JOBS")
    return int(value) if value else (os.cpu_count() or 1) + 1


def unload_libraries() -> bool:
    """$OPFORGE_UNLOAD_LIBRARIES=0 keeps every op library loaded for the life of the process;
    by default a CPU library replaced by a reload is unloaded once nothing runs or holds its
    ops (CUDA libraries are always kept: the CUDA runtime holds their kernels)."""
    return os.environ.get("OPFORGE_UNLOAD_LIBRARIES", "1") not in ("0", "")


def cache_max_bytes() -> int:
    """$OPFORGE_CACHE_MAX_BYTES: `opforge cache clean --auto` evicts oldest entries above it."""
    return int(os.environ.get("OPFORGE_CACHE_MAX_BYTES", str(4 << 30)))


def prebuilt_kernels() -> bool:
    """$OPFORGE_PREBUILT_KERNELS=0 builds the built-in kernels from their sources into the cache
    instead of loading the library `pip install` compiled."""
    return os.environ.get("OPFORGE_PREBUILT_KERNELS", "1") not in ("0", "")


def kernel_march() -> str:
    """$OPFORGE_KERNEL_MARCH: the -march the built-in CPU kernels are compiled for, "native"
    (default: the library `pip install` built for this machine) or another target the compiler
    knows ("haswell" for AVX2 + FMA only, "x86-64-v2" for SSE4.2), built on first use into the
    cache: how tests run the instruction-set paths below the machine's."""
    return os.environ.get("OPFORGE_KERNEL_MARCH", "").strip() or "native"


def kernel_families() -> list:
    """$OPFORGE_KERNEL_FAMILIES=conv,pool,...: with OPFORGE_KERNEL_MARCH, only these family
    folders of the built-in kernels are compiled for that target, and their ops override the
    native library's, which serves every other op (a test of the conv paths below this machine's
    then compiles conv's sources, not all of them). Empty (default): all of them."""
    return [f.strip() for f in os.environ.get("OPFORGE_KERNEL_FAMILIES", "").split(",") if f.strip()]


GEMM_ISAS = ("auto", "avx512", "avx2", "neon", "portable", "blas")


def gemm_isa() -> str:
    """$OPFORGE_GEMM_ISA: the tile code of MatMul/Gemm on packed weights. "auto" (default) takes
    the best this CPU has (AVX-512F, else AVX2 + FMA) and leaves weights unpacked, on OpenBLAS,
    where it has neither (aarch64 included: its NEON tile is not measured against OpenBLAS yet);
    "avx512", "avx2", "neon" or "portable" (plain loops) force one; "blas" never packs. Raises
    ValueError for another value."""
    value = os.environ.get("OPFORGE_GEMM_ISA", "auto").strip().lower() or "auto"
    if value not in GEMM_ISAS:
        raise ValueError(f"OPFORGE_GEMM_ISA must be one of {', '.join(GEMM_ISAS)}; got {value!r}")
    return value
