"""The adapter's objects: opforge/interop/ort_adapter and the core's call sequence it runs ops
through (csrc/invoke.cpp, thread_pool.cpp), compiled once per toolchain and flags and cached."""
import json
import tempfile
import time
from pathlib import Path

from opforge.builder.runner import run_ninja
from opforge.builder.toolchain import Toolchain
from opforge.cache import digest, file_digest, find_entry, key_lock, publish, write_atomic
from opforge.errors import BuildError

PACKAGE = Path(__file__).resolve().parent.parent
ADAPTER = PACKAGE / "interop" / "ort_adapter"
CSRC = PACKAGE / "csrc"
# The core's Python-free sources the adapter links: the one call sequence and its thread pool.
CORE_SOURCES = (CSRC / "invoke.cpp", CSRC / "thread_pool.cpp")


def adapter_sources() -> list:
    """Every C++ source compiled into the adapter."""
    return sorted(ADAPTER.glob("*.cpp")) + list(CORE_SOURCES)


def adapter_digest() -> str:
    """A digest of the adapter's sources and every header they may include from csrc."""
    files = adapter_sources() + sorted(ADAPTER.glob("*.h")) + sorted(CSRC.glob("*.h"))
    return digest([(f"{p.parent.name}/{p.name}", p.read_bytes()) for p in files])


def adapter_objects(root: Path, toolchain: Toolchain, cflags: tuple, templates: str) -> list:
    """The adapter's object files for these flags (the library's own, without its include
    folders), built into the cache `root` if missing; raises BuildError if they do not compile."""
    flags = tuple(cflags) + (f"-I{CSRC}", "-pthread")
    key = digest("onnxruntime-adapter", toolchain.identity, flags, adapter_digest(), templates)
    final = root / "support" / f"ort-{key[:20]}"
    if find_entry(final) is None:
        with key_lock(root / "locks" / f"ort-adapter-{key[:20]}.lock"):
            if find_entry(final) is None:
                _build(root, toolchain, flags, key, final)
    return [str(final / f"{p.stem}.o") for p in adapter_sources()]


def _ninja(toolchain: Toolchain, flags: tuple) -> str:
    lines = [f"cxx = {' '.join(toolchain.command)}", f"cflags = {' '.join(flags)}", "",
             "rule cxx", "  command = $cxx $cflags -c $in -o $out", ""]
    lines += [f"build {p.stem}.o: cxx {p}" for p in adapter_sources()]
    return "\n".join(lines) + "\n"


def _build(root: Path, toolchain: Toolchain, flags: tuple, key: str, final: Path) -> None:
    (root / "tmp").mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix="ort-adapter-", dir=root / "tmp"))
    (staging / "build.ninja").write_text(_ninja(toolchain, flags))
    ok, log = run_ninja(staging, verbose=False)
    if not ok:
        raise BuildError(f"building opforge's onnxruntime adapter failed with these flags ({' '.join(flags)}):\n"
                         f"{log[-3000:]}", log=log)
    # The manifest's artifact is the first object; the others sit beside it, written first.
    artifact = staging / f"{adapter_sources()[0].stem}.o"
    manifest = {"format": 1, "key": key, "artifact": artifact.name, "size": artifact.stat().st_size,
                "sha256": file_digest(artifact), "kind": "onnxruntime-adapter", "created": time.time(),
                "compiler": toolchain.version, "cflags": list(flags)}
    write_atomic(staging / "manifest.json", json.dumps(manifest, indent=1))
    publish(staging, final)
