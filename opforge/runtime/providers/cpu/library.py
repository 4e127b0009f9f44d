"""opforge's built-in CPU kernels: the C++ sources of this folder's family folders, on the same op
contract as user ops.

They link OpenBLAS from the scipy-openblas32 wheel for Gemm, MatMul and Conv. `pip install`
compiles them once, for the installing machine (`build_prebuilt`, called by setup.py), into a
library that ships inside the package, so the first session starts at once and `opforge cache
clean` never removes them. Where that library is missing, or no longer matches the sources or
the CPU (an edited kernel, a package copied to another machine), they are built on first use
into the user's cache, as a user's op library is.

This module imports nothing from opforge at load time: setup.py runs it before opforge (and its
dependencies) can be imported.
"""
import hashlib
import json
import os
from pathlib import Path

KERNEL_DIR = Path(__file__).resolve().parent
TEMPLATES = KERNEL_DIR.parents[2] / "templates"
LIBRARY_NAME = "opforge_cpu_kernels"
PREBUILT = KERNEL_DIR / f"lib{LIBRARY_NAME}.so"
STAMP = KERNEL_DIR / f"lib{LIBRARY_NAME}.json"
KERNEL_CFLAGS = ["-O3", "-march=native", "-fno-math-errno"]
_loaded: dict = {}


def kernel_cflags(march: str = "native") -> list:
    """The kernels' compile flags for the target ``march`` (config.kernel_march)."""
    return [f"-march={march}" if flag == "-march=native" else flag for flag in KERNEL_CFLAGS]


def blas_flags(rpath: bool = True) -> "tuple[list, list]":
    """(compile flags, link flags) for OpenBLAS from the scipy-openblas32 wheel. Without
    ``rpath`` the library finds OpenBLAS by its soname, preloaded by `_preload_blas`."""
    try:
        import scipy_openblas32 as blas
    except ImportError:
        raise ImportError("opforge's CPU kernels need OpenBLAS: pip install scipy-openblas32 "
                          "(a dependency of opforge)") from None
    lib_dir = blas.get_lib_dir()
    link = [f"-L{lib_dir}", f"-l{blas.get_library()}"] + ([f"-Wl,-rpath,{lib_dir}"] if rpath else [])
    return [f"-I{blas.get_include_dir()}"], link


def kernel_sources(files=None) -> list:
    """The kernel sources: every .cpp of the family folders here, or just the named ones (a
    file name, or its path below this folder)."""
    every = sorted(KERNEL_DIR.glob("*/*.cpp"))
    if files:
        by_name = {p.name: p for p in every}
        return [by_name.get(f) or KERNEL_DIR / f for f in files]
    return every


def inputs_digest() -> str:
    """A digest of everything the kernel library is compiled from: its sources and headers and
    the op headers and support source opforge ships (the prebuilt library must match them)."""
    h = hashlib.sha256()
    files = sorted(p for p in KERNEL_DIR.glob("*/*") if p.suffix in (".cpp", ".h"))
    files += sorted(p for p in TEMPLATES.rglob("*") if p.is_file())
    for path in files:
        h.update(str(path.relative_to(KERNEL_DIR.parents[2])).encode())
        h.update(path.read_bytes())
    h.update(" ".join(KERNEL_CFLAGS).encode())
    return h.hexdigest()


def cpu_kernels(files=None):
    """The built-in kernel library (an OpLibrary): the prebuilt one when it is current, else
    built on first use and cached. `files` restricts the build to some sources (for developing
    one kernel family); set OPFORGE_PREBUILT_KERNELS=0 to always build from the sources, and
    OPFORGE_KERNEL_MARCH to build them for another target than this machine (with
    OPFORGE_KERNEL_FAMILIES, only those family folders: see kernel_layers)."""
    from opforge import config

    march = config.kernel_march()
    if not files and march != "native":
        files = family_files(config.kernel_families())
    return _library(files, march)


def kernel_layers() -> list:
    """The built-in kernel libraries a session registers, each over the one before (its ops
    override theirs): cpu_kernels(), below it the native library where cpu_kernels() holds only
    some families built for another target (OPFORGE_KERNEL_FAMILIES)."""
    from opforge import config

    if config.kernel_march() != "native" and config.kernel_families():
        return [_library(None, "native"), cpu_kernels()]
    return [cpu_kernels()]


def family_files(families) -> list:
    """The sources of the named family folders ("conv", "pool" ...), as paths below this folder."""
    unknown = [f for f in families if not (KERNEL_DIR / f).is_dir() or f.startswith((".", "_"))]
    if unknown:
        known = sorted(p.name for p in KERNEL_DIR.iterdir() if p.is_dir() and any(p.glob("*.cpp")))
        raise ValueError(f"OPFORGE_KERNEL_FAMILIES names {', '.join(unknown)}: the kernel families are "
                         f"{', '.join(known)}")
    return [str(p.relative_to(KERNEL_DIR)) for f in families for p in sorted((KERNEL_DIR / f).glob("*.cpp"))]


def _library(files, march: str):
    key = (tuple(files or ()), march)
    if key not in _loaded:
        _preload_blas()
        native = march == "native"
        _loaded[key] = _load_prebuilt() if native and not files and _prebuilt_is_current() else _build(files, march)
    return _loaded[key]


def _build(files, march: str = "native"):
    from opforge.builder import CustomOpBuilder

    cflags, ldflags = blas_flags()
    name = LIBRARY_NAME if not files else f"{LIBRARY_NAME}_part"
    if march != "native":
        name += "_" + "".join(c if c.isalnum() else "_" for c in march)
    return CustomOpBuilder(name, kernel_sources(files), extra_cflags=kernel_cflags(march) + cflags,
                           extra_ldflags=ldflags, extra_include_paths=[KERNEL_DIR]).load()


def kernel_paths(library=None) -> dict:
    """{path name: calls} of the hand-written instruction-set paths the kernel library's calls
    took so far in this process ("conv.depthwise.same3x3.avx512": 12, ...): how a test knows the
    path it targets is the one that ran. ``library``: an OpLibrary (default: cpu_kernels())."""
    import ctypes

    lib = ctypes.CDLL((library or cpu_kernels()).__file__)
    read = lib.opforge_kernel_paths
    read.restype, read.argtypes = ctypes.c_int32, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    capacity = 0
    while True:
        names, calls = (ctypes.c_char_p * max(capacity, 1))(), (ctypes.c_uint64 * max(capacity, 1))()
        count = read(names, calls, capacity)
        if count <= capacity:
            # a path counted in a template has a counter per instantiation (MaxPool's int8 and
            # uint8), each under the same name: their calls add up
            paths: dict = {}
            for i in range(count):
                paths[names[i].decode()] = paths.get(names[i].decode(), 0) + int(calls[i])
            return paths
        capacity = count + 16


def kernel_isa(library=None) -> list:
    """The instruction sets the kernel library's hand-written paths were compiled for."""
    import ctypes

    isa = ctypes.CDLL((library or cpu_kernels()).__file__).opforge_kernel_isa
    isa.restype = ctypes.c_char_p
    return isa().decode().split()


def _prebuilt_is_current() -> bool:
    from opforge import config
    from opforge.builder.toolchain import cpu_identity

    if not config.prebuilt_kernels() or not PREBUILT.is_file():
        return False
    stamp = _read_stamp()
    return stamp.get("inputs") == inputs_digest() and stamp.get("cpu") == cpu_identity()


def _read_stamp() -> dict:
    try:
        return json.loads(STAMP.read_text())
    except (OSError, ValueError):
        return {}


def prebuilt_matches_sources() -> bool:
    """Whether PREBUILT was compiled from these sources, for this CPU, by the compiler $CXX
    names now: setup.py then keeps it instead of compiling every kernel again."""
    from opforge.builder.toolchain import cpu_identity

    stamp = _read_stamp()
    return (PREBUILT.is_file() and stamp.get("inputs") == inputs_digest()
            and stamp.get("cpu") == cpu_identity() and stamp.get("compiler") == _compiler_version())


def _compiler_version() -> str:
    import subprocess

    argv = os.environ.get("CXX", "c++").split()
    try:
        return subprocess.run(argv + ["--version"], capture_output=True, text=True).stdout
    except OSError:
        return ""


def _load_prebuilt():
    from opforge import _core, config
    from opforge.builder.ops import OpLibrary

    _core.set_default_threads(config.num_threads())
    return OpLibrary(LIBRARY_NAME, str(PREBUILT), _core.load_library(str(PREBUILT)))


def _preload_blas() -> None:
    """Loads OpenBLAS globally, so the prebuilt library (linked without a path to it: the one it
    was linked against lived in pip's temporary build environment) finds it by its soname.

    It is loaded with OPENBLAS_NUM_THREADS=1 (the caller's value is put back at once; importing
    scipy_openblas32 is what loads it). The kernels only ever call it single-threaded
    (gemm_blas.h: the session's own pool does the threading), and a multi-threaded OpenBLAS
    starts a thread per core at load that polls for work for ~0.1 s before sleeping: on 2 cores
    that took a core from the session's pool, and a 2-thread conv ran at 1-thread speed for the
    first ~60 ms of a session's life."""
    import ctypes

    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import scipy_openblas32 as blas

        path = os.path.join(blas.get_lib_dir(), f"lib{blas.get_library()}.so")
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    finally:
        if saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved


class _TerminalProgress:
    """Progress written to the terminal itself (/dev/tty), a line per tenth of the build: pip
    shows a build backend's output only with -v, and this build takes minutes. Nothing is
    written where there is no terminal (CI logs keep pip's own output)."""

    def __init__(self, what: str):
        self.what, self.tty, self.shown = what, None, -1

    def __enter__(self):
        import re

        self.step = re.compile(r"^\[(\d+)/(\d+)\]")
        try:
            self.tty = open("/dev/tty", "w")
        except OSError:
            self.tty = None
        return self if self.tty is not None else None

    def __call__(self, line: str) -> None:
        found = self.step.match(line)
        if found is None:
            return
        done, total = int(found[1]), int(found[2])
        tenth = done * 10 // max(total, 1)
        if tenth > self.shown:
            self.shown = tenth
            self.tty.write(f"\r\n{self.what}: {done}/{total} ({tenth * 10}%)")
            self.tty.flush()

    def __exit__(self, *exc):
        if self.tty is not None:
            self.tty.write("\r\n")
            self.tty.close()


def build_prebuilt(work: Path, verbose: bool = False) -> Path:
    """Compiles the kernel library into the package (PREBUILT, with its STAMP) through the
    builder, as any user library is built (its support object, depfiles, diagnostics), with a
    cache of its own under the folder `work`. Called by setup.py at install; raises BuildError
    naming the first compiler error if the build fails."""
    import shutil

    from opforge.builder.api import build_entry
    from opforge.builder.spec import make_spec
    from opforge.builder.toolchain import cpu_identity
    from opforge.cache.root import checked_root

    root = checked_root(Path(work).absolute() / "cache")
    blas_cflags, blas_ldflags = blas_flags(rpath=False)
    spec = make_spec(LIBRARY_NAME, kernel_sources(), extra_cflags=KERNEL_CFLAGS + blas_cflags,
                     extra_ldflags=blas_ldflags, extra_include_paths=[KERNEL_DIR], verbose=verbose)
    # the digest of the sources as they are when compiling starts: a source added or edited
    # during the build must leave the library stale, not stamped current
    inputs = inputs_digest()
    with _TerminalProgress("opforge: compiling the built-in CPU kernels") as progress:
        entry = build_entry(spec, root, progress)
    tmp = PREBUILT.with_name(PREBUILT.name + ".tmp")
    shutil.copyfile(entry.artifact, tmp)
    os.replace(tmp, PREBUILT)
    STAMP.write_text(json.dumps({"inputs": inputs, "cpu": cpu_identity(), "compiler": _compiler_version(),
                                 "cflags": list(spec.extra_cflags)}, indent=1))
    return PREBUILT
