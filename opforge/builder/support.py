"""The opforge support object and precompiled op header, built once per toolchain and flags."""
import json
import tempfile
import time
from pathlib import Path

from opforge.builder.build import TEMPLATES, templates_digest
from opforge.builder.runner import run_ninja
from opforge.builder.toolchain import Toolchain
from opforge.cache import digest, file_digest, find_entry, key_lock, publish, write_atomic
from opforge.errors import BuildError

SUPPORT_SOURCE = TEMPLATES / "src" / "opforge_support.cpp"
CUDA_SUPPORT_SOURCE = TEMPLATES / "src" / "opforge_cuda_support.cpp"


def support_dir(root: Path, toolchain: Toolchain, cflags: tuple, cuda=None) -> Path:
    """The folder holding opforge_support.o (and pch/opforge/op.h.gch with gcc), built if missing.

    For a CUDA library (`cuda` a CudaToolchain, `cflags` seeing its headers) it also holds
    opforge_cuda_support.o, the host code that runs CUDA ops (device checks, launch errors).
    """
    key = digest("support", toolchain.identity, cflags, templates_digest(), cuda.identity if cuda else "")
    final = root / "support" / key[:20]
    if find_entry(final) is not None:
        return final
    with key_lock(root / "locks" / f"support-{key[:20]}.lock"):
        if find_entry(final) is None:
            _build(root, toolchain, cflags, key, final, cuda is not None)
    return final


def _ninja(toolchain: Toolchain, cflags: tuple, with_cuda: bool) -> str:
    cxx = " ".join(toolchain.command)
    flags = " ".join(cflags)
    lines = [
        f"cxx = {cxx}", f"cflags = {flags}", "",
        "rule cxx",
        "  command = $cxx $cflags -c $in -o $out",
        "rule pch",
        "  command = $cxx $cflags -x c++-header $in -o $out",
        "",
        f"build opforge_support.o: cxx {SUPPORT_SOURCE}",
    ]
    if with_cuda:
        lines.append(f"build opforge_cuda_support.o: cxx {CUDA_SUPPORT_SOURCE}")
    if toolchain.family == "gcc":
        lines.append(f"build pch/opforge/op.h.gch: pch {TEMPLATES / 'opforge' / 'op.h'}")
    return "\n".join(lines) + "\n"


def _build(root: Path, toolchain: Toolchain, cflags: tuple, key: str, final: Path, with_cuda: bool) -> None:
    staging = Path(tempfile.mkdtemp(prefix="support-", dir=root / "tmp"))
    (staging / "build.ninja").write_text(_ninja(toolchain, cflags, with_cuda))
    ok, log = run_ninja(staging, verbose=False)
    if not ok:
        raise BuildError("building opforge's support object failed with these flags "
                         f"({' '.join(cflags)}):\n{log[-3000:]}", log=log)
    artifact = staging / "opforge_support.o"
    manifest = {"format": 1, "key": key, "artifact": artifact.name, "size": artifact.stat().st_size,
                "sha256": file_digest(artifact), "kind": "support", "created": time.time(),
                "compiler": toolchain.version, "cflags": list(cflags)}
    write_atomic(staging / "manifest.json", json.dumps(manifest, indent=1))
    publish(staging, final)
