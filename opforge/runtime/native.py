"""opforge's built-in CPU kernels: the C++ sources in ops/cpu, built by opforge's own builder.

They are written on the same op contract as user ops (opforge/op.h) and link OpenBLAS from the
scipy-openblas32 wheel for Gemm, MatMul and Conv.
"""
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent / "ops" / "cpu"
LIBRARY_NAME = "opforge_cpu_kernels"
_loaded: dict = {}


def blas_flags() -> "tuple[list, list]":
    """(compile flags, link flags) for OpenBLAS from the scipy-openblas32 wheel."""
    try:
        import scipy_openblas32 as blas
    except ImportError:
        raise ImportError("opforge's CPU kernels need OpenBLAS: pip install scipy-openblas32 "
                          "(a dependency of opforge)") from None
    lib_dir = blas.get_lib_dir()
    return ([f"-I{blas.get_include_dir()}"],
            [f"-L{lib_dir}", f"-l{blas.get_library()}", f"-Wl,-rpath,{lib_dir}"])


def kernel_sources(files=None) -> list:
    """The kernel sources: every .cpp in ops/cpu, or just the named ones."""
    if files:
        return [KERNEL_DIR / f for f in files]
    return sorted(KERNEL_DIR.glob("*.cpp"))


def cpu_kernels(files=None):
    """The built-in kernel library (an OpLibrary), built on first use and cached.

    `files` restricts the build to some sources (for developing one kernel family).
    """
    key = tuple(files or ())
    if key not in _loaded:
        from opforge.builder import CustomOpBuilder

        cflags, ldflags = blas_flags()
        name = LIBRARY_NAME if not files else f"{LIBRARY_NAME}_part"
        _loaded[key] = CustomOpBuilder(
            name, kernel_sources(files), extra_cflags=["-O3", "-march=native", "-fno-math-errno"] + cflags,
            extra_ldflags=ldflags, extra_include_paths=[KERNEL_DIR]).load()
    return _loaded[key]
