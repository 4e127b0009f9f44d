"""sources -> build.ninja -> ninja -> a published cache entry, with check-lock-check."""
import json
import os
import sys
import time
from pathlib import Path

from opforge.builder.spec import BASE_CFLAGS, BuildSpec
from opforge.builder.toolchain import Toolchain, cpu_identity
from opforge.cache import Entry, digest, file_digest, find_entry, key_lock, publish, write_atomic
from opforge.cache.entry import discard

# The warm path (an entry is published) needs only the lookup below; the modules that build are
# imported on a miss, keeping `import opforge` and a cached load to a few milliseconds.
TEMPLATES = Path(__file__).resolve().parent.parent / "templates"



def python_abi() -> str:
    """What makes an extension module loadable by this interpreter."""
    return f"{sys.implementation.cache_tag}{sys.abiflags}-{os.uname().machine}"


_templates_digest = None
_abi_version = None


def abi_version() -> int:
    """The OPFORGE_ABI_VERSION of the headers libraries are built with (the core that loads them
    speaks the same one), read from opforge/abi.h: a build needs no opforge._core."""
    global _abi_version
    if _abi_version is None:
        import re

        text = (TEMPLATES / "opforge" / "abi.h").read_text()
        _abi_version = int(re.search(r"#define OPFORGE_ABI_VERSION (\d+)", text)[1])
    return _abi_version


def templates_digest() -> str:
    """A digest of every header and source opforge ships to op libraries (read once)."""
    global _templates_digest
    if _templates_digest is None:
        files = sorted(p for p in TEMPLATES.rglob("*") if p.is_file())
        _templates_digest = digest([(str(p.relative_to(TEMPLATES)), p.read_bytes()) for p in files])
    return _templates_digest


class InputsChanged(Exception):
    """A source or header the build read changed while it ran: the library may hold code other
    than the bytes its key names, so it is not published (the caller reads them again)."""


def support_flags(spec: BuildSpec, cuda=None) -> tuple:
    """The flags opforge's support object and precompiled header are built with: the library's
    own flags without its include folders (which change neither), so libraries in different
    folders share one support build."""
    flags = [*BASE_CFLAGS, f"-I{TEMPLATES}"]
    if cuda is not None:
        for folder in cuda.include_dirs:
            flags += ["-isystem", folder]
    return tuple(flags) + spec.extra_cflags


def compile_flags(spec: BuildSpec, support_path: "Path | None" = None, cuda=None) -> tuple:
    """Host compiler flags for the library's C++ sources (the PCH folder first, when there is
    one); a CUDA library's host sources also see the CUDA headers."""
    flags = list(BASE_CFLAGS)
    if support_path is not None and (support_path / "pch").is_dir():
        flags.append(f"-I{support_path / 'pch'}")
    flags.append(f"-I{TEMPLATES}")
    flags += [f"-I{p}" for p in spec.extra_include_paths]
    if cuda is not None:
        for folder in cuda.include_dirs:
            flags += ["-isystem", folder]
    if spec.is_extension:
        import sysconfig

        import pybind11

        flags += ["-isystem", pybind11.get_include(), "-isystem", sysconfig.get_paths()["include"]]
    return tuple(flags) + spec.extra_cflags


def cuda_flags(spec: BuildSpec, toolchain: Toolchain, archs) -> tuple:
    """nvcc flags for the library's .cu sources: host compiler, target architectures, includes."""
    from opforge.builder.cuda_arch import gencode_flags

    flags = ["-std=c++17", "-O2", "-ccbin", toolchain.command[-1],
             "-Xcompiler=-fPIC,-fvisibility=hidden", *gencode_flags(archs), f"-I{TEMPLATES}"]
    flags += [f"-I{p}" for p in spec.extra_include_paths]
    return tuple(flags) + spec.extra_cuda_cflags


def relocatable_device_code(flags) -> bool:
    """Whether nvcc `flags` compile relocatable device code (-rdc=true, -dc), whose objects need a
    device-link step before the host linker (the last -rdc given wins, as in nvcc)."""
    flags, relocatable = list(flags), False
    for i, flag in enumerate(flags):
        name, _, value = flag.partition("=")
        if name in ("-dc", "--device-c"):
            relocatable = True
        elif name in ("-rdc", "--relocatable-device-code"):
            value = value or (flags[i + 1] if i + 1 < len(flags) else "")
            relocatable = value.lower() == "true"
    return relocatable


def config_key(spec: BuildSpec, toolchain: Toolchain, cuda=None, archs=()) -> str:
    """Everything but the sources that changes the binary (for CUDA: nvcc, arches, CUDA flags)."""
    flags = compile_flags(spec, cuda=cuda)
    native = cpu_identity() if any("native" in f for f in flags) else ""
    gpu = (cuda.identity, cuda_flags(spec, toolchain, archs)) if cuda is not None else ""
    return digest(abi_version(), templates_digest(), toolchain.identity, flags,
                  spec.extra_ldflags, spec.backend, python_abi() if spec.is_extension else "", native, gpu)


def source_key(spec: BuildSpec, toolchain: Toolchain, cuda=None, archs=()) -> str:
    """The key before headers: configuration plus every source's path and text."""
    return digest(config_key(spec, toolchain, cuda, archs),
                  [(str(p), t) for p, t in zip(spec.sources, spec.texts)])


class Build:
    """One library's build in a cache root: lookup, then (on a miss) build and publish."""

    kind = "ops"   # what the manifest calls the artifact (a variant, such as onnxruntime's, says its own)
    label = ""     # how progress lines name the variant

    def __init__(self, spec: BuildSpec, toolchain: Toolchain, root: Path, cuda=None, progress=None):
        self.spec, self.toolchain, self.root, self.cuda = spec, toolchain, root, cuda
        self.progress = progress   # called with each line of ninja's output (pip's terminal lines)
        self.archs = ()
        if cuda is not None:
            from opforge import config
            from opforge.builder.cuda_arch import target_archs

            self.archs = tuple(target_archs(config.cuda_arch(), cuda.gpu_codes))
        self.key1 = source_key(spec, toolchain, cuda, self.archs)
        self.tag = f"{spec.name}-{self.key1[:16]}"

    @property
    def deps_file(self) -> Path:
        return self.root / "libs" / f"{self.tag}.deps"

    def module_name(self) -> str:
        """The Python name of an extension module build (unique per source key)."""
        return f"{self.spec.name}_{self.key1[:12]}"

    def lookup(self, verify: bool = True) -> "Entry | None":
        """The published entry for the current sources and headers, if valid. No subprocess."""
        try:
            headers = json.loads(self.deps_file.read_text())["headers"]
            key2 = digest(self.key1, [(h, file_digest(h)) for h in headers])
        except (OSError, ValueError, KeyError):
            return None
        return find_entry(self.entry_path(key2), verify=verify)

    def entry_path(self, key2: str) -> Path:
        return self.root / "libs" / f"{self.spec.name}-{key2[:20]}"

    def build(self, clean: bool = False) -> Entry:
        """Builds under the key lock, re-checking first; publishes atomically."""
        with _lock_with_notice(self.root / "locks" / f"{self.tag}.lock", self.spec.name):
            entry = None if clean else self.lookup()
            if entry is not None:
                return entry
            configuration = config_key(self.spec, self.toolchain, self.cuda, self.archs)
            workdir = self.spec.build_dir or self.root / "work" / f"{self.spec.name}-{configuration[:16]}"
            with _lock_with_notice(self.root / "locks" / f"work-{workdir.name}.lock", self.spec.name):
                return self._build_in(workdir, clean)

    def _build_in(self, workdir: Path, clean: bool) -> Entry:
        import shutil

        from opforge.builder import support
        from opforge.builder.diagnostics import build_error
        from opforge.builder.ninja_file import ninja_text
        from opforge.builder.runner import run_ninja, write_if_changed

        if clean:
            shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        started = time.perf_counter()
        print(f"opforge: building '{self.spec.name}'{self.label} ({len(self.spec.sources)} source(s))", flush=True)
        for note in self._arch_notes():
            print(f"opforge: {note}", flush=True)
        sup = support.support_dir(self.root, self.toolchain, support_flags(self.spec, self.cuda), self.cuda)
        plan = self._plan(workdir, sup)
        write_if_changed(workdir / "build.ninja", ninja_text(plan))
        ok, log = run_ninja(workdir, self.spec.verbose, progress=self.progress)
        if not ok and not clean and _work_folder_may_be_at_fault(log):
            # a damaged object or ninja state left by an earlier build fails every later one:
            # start this library's work folder afresh once before blaming the sources
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
            write_if_changed(workdir / "build.ninja", ninja_text(plan))
            ok, log = run_ninja(workdir, self.spec.verbose)
        if not ok:
            raise build_error(self.spec.name, log, "", plan)
        headers = self._headers(plan)
        changed = self._changed_inputs(headers)
        if changed:
            raise InputsChanged(", ".join(changed))
        key2 = digest(self.key1, [(h, file_digest(h)) for h in headers])
        entry = self._publish(Path(plan.output), key2, headers, log, plan)
        write_atomic(self.deps_file, json.dumps({"headers": headers}))
        print(f"opforge: built '{self.spec.name}'{self.label} in {time.perf_counter() - started:.2f} s", flush=True)
        return entry

    def _arch_notes(self) -> list:
        """What the build says about the architectures: a GPU here that nvcc cannot build for."""
        from opforge import config
        from opforge.builder.cuda_arch import fit_to_nvcc, visible_archs

        if self.cuda is None or config.cuda_arch():
            return []
        return fit_to_nvcc(visible_archs(), self.cuda.gpu_codes)[1]

    def _plan(self, workdir: Path, sup: Path):
        from opforge.builder.ninja_file import NinjaPlan

        flags = compile_flags(self.spec, sup, self.cuda)
        if self.spec.is_extension:
            flags += (f"-DOPFORGE_EXTENSION_NAME={self.module_name()}",)
        objects = {src: str(workdir / "obj" / f"{src.stem}-{digest(str(src))[:8]}.o") for src in self.spec.sources}
        host = tuple((objects[s], str(s)) for s in self.spec.sources if s.suffix != ".cu")
        ldflags = self.spec.link_flags()
        if self.cuda is None:
            return NinjaPlan(self.toolchain.command, flags, ldflags, host,
                             (str(sup / "opforge_support.o"),), str(workdir / f"lib{self.spec.name}.so"))
        device = tuple((objects[s], str(s)) for s in self.spec.sources if s.suffix == ".cu")
        nvcc_flags = cuda_flags(self.spec, self.toolchain, self.archs)
        device_link = str(workdir / "obj" / "device_link.o") if relocatable_device_code(nvcc_flags) else ""
        return NinjaPlan(self.toolchain.command, flags, ldflags + self.cuda.runtime_libs, host,
                         (str(sup / "opforge_support.o"), str(sup / "opforge_cuda_support.o")),
                         str(workdir / f"lib{self.spec.name}.so"), self.cuda.command, nvcc_flags, device,
                         device_link)

    def _changed_inputs(self, headers: list) -> list:
        """The sources and headers written since the spec read the sources (a source whose
        text differs, or any input modified after that moment): what this build compiled may
        not be what the key was computed from."""
        changed = [str(p) for p, text in zip(self.spec.sources, self.spec.texts)
                   if not p.is_file() or p.read_text(errors="replace") != text]
        for path in [*map(str, self.spec.sources), *headers]:
            try:
                if os.stat(path).st_mtime_ns >= self.spec.read_at_ns and path not in changed:
                    changed.append(path)
            except OSError:
                changed.append(path)
        return changed

    def _headers(self, plan) -> list:
        """Headers the compiler read, outside opforge's own (covered by the config key)."""
        from opforge.builder.depfile import read_depfile

        seen = []
        skip = (str(TEMPLATES), str(self.root / "support")) + ((self.cuda.root,) if self.cuda else ())
        for obj, src in plan.compiles + plan.cuda_compiles:
            for dep in read_depfile(Path(obj + ".d")):
                path = os.path.abspath(dep)
                if path != src and not path.startswith(skip) and path not in seen:
                    seen.append(path)
        return sorted(seen)

    def _publish(self, built: Path, key2: str, headers: list, log: str, plan) -> Entry:
        import shutil
        import sysconfig
        import tempfile

        staging = Path(tempfile.mkdtemp(prefix=f"{self.spec.name}-", dir=self.root / "tmp"))
        ext = sysconfig.get_config_var("EXT_SUFFIX") if self.spec.is_extension else ".so"
        stem = self.module_name() if self.spec.is_extension else f"{self.spec.name}_{key2[:12]}"
        # a name no earlier publish used: the dynamic loader keeps a library it once opened by
        # its path, so a rebuilt entry under the old name would load the old, bad code again
        artifact = staging / f"{stem}-{os.urandom(4).hex()}{ext}"
        shutil.copy2(built, artifact)
        if self.spec.is_extension:   # op libraries are linked with --no-undefined instead
            from opforge.builder.diagnostics import unloadable_error

            problem = unloadable_error(self.spec.name, artifact, plan)
            if problem is not None:
                discard(staging)
                raise problem
        manifest = {
            "format": 1, "name": self.spec.name, "key": key2, "source_key": self.key1,
            "kind": "extension" if self.spec.is_extension else self.kind,
            "module_name": self.module_name(), "artifact": artifact.name,
            "size": artifact.stat().st_size, "sha256": file_digest(artifact),
            "sources": [str(s) for s in self.spec.sources], "headers": headers,
            "compiler": self.toolchain.version, "created": time.time(), "log": log[-20000:],
            "backend": self.spec.backend,
            "cuda": {"nvcc": self.cuda.version, "archs": [a.name + ("+PTX" if a.ptx else "") for a in self.archs]}
            if self.cuda else None,
        }
        write_atomic(staging / "manifest.json", json.dumps(manifest, indent=1))
        final = publish(staging, self.entry_path(key2))
        entry = find_entry(final)
        if entry is None:
            raise OSError(f"cache entry {final} failed its check right after publishing")
        return entry

    def discard(self, entry: Entry) -> None:
        """Drops an entry that failed to load, so the next build replaces it."""
        discard(entry.path)


def _work_folder_may_be_at_fault(log: str) -> bool:
    """Whether a failed build may be the work folder's fault rather than the sources': ninja
    failed on something other than compiling one source (linking, or its own state)."""
    failed = [line[len("FAILED:"):].strip() for line in log.splitlines() if line.startswith("FAILED:")]
    return not failed or any(not target.endswith(".o") for target in failed)


class _lock_with_notice:
    """A key lock that says so on stdout when it has to wait for another process."""

    def __init__(self, path: Path, name: str):
        self.lock, self.name = key_lock(path), name

    def __enter__(self):
        import filelock

        try:
            self.lock.acquire(timeout=0.5)
        except filelock.Timeout:
            print(f"opforge: waiting for another process building '{self.name}'", flush=True)
            self.lock.acquire()
        return self

    def __exit__(self, *exc):
        self.lock.release()
