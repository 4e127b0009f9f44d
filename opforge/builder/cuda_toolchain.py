"""The CUDA compiler: which nvcc, its release, and where its headers and libraries are.

Looked for in this order: $NVCC, `nvcc` on PATH, then the nvcc of NVIDIA's pip wheels
(`pip install "opforge[cuda]"`). What nvcc says about itself is read once per binary and
remembered in the cache, so a warm load starts no subprocess.
"""
import json
import os
import re
import sys
from pathlib import Path
from typing import NamedTuple

from opforge import config
from opforge.builder.toolchain import which
from opforge.cache.keys import digest
from opforge.errors import BuildError

# The wheels `opforge[cuda]` installs: nvcc, the runtime (static library), the front-end
# headers, NVVM, and the C++ core libraries (cuda/std, cub, thrust) that cuda_runtime.h includes.
CUDA_WHEELS = ("nvidia-cuda-nvcc", "nvidia-cuda-runtime", "nvidia-cuda-crt", "nvidia-nvvm",
               "nvidia-cuda-cccl")
MISSING = (
    "no CUDA compiler (nvcc) found: looked at $NVCC, `nvcc` on PATH and NVIDIA's pip wheels. "
    "Install them with `pip install \"opforge[cuda]\"` (that is `pip install " + " ".join(CUDA_WHEELS) +
    " cupy-cuda13x`), or install the CUDA toolkit and put its bin/ on PATH, or set NVCC to nvcc's path")


class CudaToolchain(NamedTuple):
    """An nvcc and what it reports: release ("13.0"), banner, and its include and library dirs."""

    command: tuple
    real_path: str
    release: str
    version: str
    include_dirs: tuple     # cuda_runtime.h and friends (the host compiler needs them too)
    library_dirs: tuple     # libcudart_static.a
    root: str               # the toolkit's top folder: headers under it are keyed by the release
    gpu_codes: tuple = ()   # the architectures it builds code for ("80", "120"); () if not known

    @property
    def identity(self) -> str:
        return digest(self.command, self.real_path, self.version)

    @property
    def runtime_libs(self) -> tuple:
        """Link flags for the CUDA runtime, linked statically: the library then loads on a
        machine with no CUDA installed (calls made there report that no device is available)."""
        return tuple(f"-L{d}" for d in self.library_dirs) + ("-lcudart_static", "-lrt", "-lpthread", "-ldl")


def find_nvcc() -> "str | None":
    """The nvcc to use: $NVCC, else nvcc on PATH, else one from the pip wheels; None if none."""
    named = config.nvcc()
    if named:
        found = which(named)
        if not found:
            raise BuildError(f"NVCC={named!r} is not an executable: set NVCC to nvcc's path, or unset "
                             "it to use nvcc from PATH or the pip wheels (pip install \"opforge[cuda]\")")
        return found
    return which("nvcc") or wheel_nvcc()


def wheel_nvcc() -> "str | None":
    """nvcc from the nvidia-cuda-nvcc wheel: site-packages/nvidia/cu13/bin (CUDA 13 wheels) or
    site-packages/nvidia/cuda_nvcc/bin (CUDA 12 wheels)."""
    for folder in sys.path:
        base = Path(folder or ".") / "nvidia"
        if not base.is_dir():
            continue
        for candidate in sorted(base.glob("*/bin/nvcc"), reverse=True):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def detect_cuda(root: Path) -> CudaToolchain:
    """The CUDA toolchain, its self-description read once per nvcc binary and cached.

    Raises BuildError saying what to install when no nvcc is found.
    """
    found = find_nvcc()
    if not found:
        raise BuildError(MISSING)
    real = os.path.realpath(found)
    st = os.stat(real)
    memo = root / "toolchains" / ("nvcc-" + digest(found, real, st.st_size, st.st_mtime_ns)[:24] + ".json")
    try:
        info = json.loads(memo.read_text())
        info["gpu_codes"]   # a memo from before nvcc's architectures were asked is asked again
    except (OSError, ValueError, KeyError):
        info = probe(found)
        from opforge.cache.entry import write_atomic

        write_atomic(memo, json.dumps(info))
    return CudaToolchain((found,), real, info["release"], info["version"], tuple(info["include_dirs"]),
                         tuple(info["library_dirs"]), info["root"], tuple(info["gpu_codes"]))


def probe(nvcc: str) -> dict:
    """What `nvcc --version`, a dry run and `--list-gpu-code` say: release, banner, include and
    library folders, the architectures it builds for."""
    version = _run([nvcc, "--version"])
    found = re.search(r"release (\d+\.\d+)", version)
    if not found:
        raise BuildError(f"{nvcc} --version did not name a CUDA release:\n{version}")
    dry = _run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull])
    variables = dict(re.findall(r"^#\$ (\w+)=(.*)$", dry, flags=re.MULTILINE))
    include_dirs = _paths(variables.get("INCLUDES", ""), "-I")
    library_dirs = [d for d in _paths(variables.get("LIBRARIES", ""), "-L") if not d.endswith("stubs")]
    top = os.path.normpath(variables.get("TOP", os.path.join(os.path.dirname(nvcc), "..")))
    banner = [ln for ln in version.splitlines() if ln.strip()][-2:]
    codes = re.findall(r"^sm_(\w+)$", _run([nvcc, "--list-gpu-code"]), flags=re.MULTILINE)
    return {"release": found.group(1), "version": " ".join(banner), "include_dirs": include_dirs,
            "library_dirs": library_dirs, "root": top, "gpu_codes": codes}


def _paths(text: str, flag: str) -> list:
    import shlex

    words = shlex.split(text)
    return [os.path.normpath(w[len(flag):]) for w in words if w.startswith(flag) and len(w) > len(flag)]


def _run(argv) -> str:
    import subprocess

    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except OSError as exc:
        raise BuildError(f"cannot run the CUDA compiler {argv[0]}: {exc}") from None
    return out.stdout + out.stderr
