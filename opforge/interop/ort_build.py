"""An op library built as an onnxruntime custom-op library: the library's objects, opforge's
support object and the adapter (opforge/interop/ort_adapter), linked into one shared library
that exports RegisterCustomOps; cached, locked and published like any build."""
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from opforge.builder.build import Build, support_flags, templates_digest
from opforge.cache import digest
from opforge.interop.adapter_objects import adapter_digest, adapter_objects


class OnnxruntimeBuild(Build):
    """The build of a library's onnxruntime variant: its own key (the library's plus the
    adapter's sources), the library's work folder (its objects are shared), another output."""

    kind = "onnxruntime"
    label = " for onnxruntime"

    def __init__(self, spec, toolchain, root, cuda=None, progress=None):
        super().__init__(spec, toolchain, root, cuda, progress)
        self.key1 = digest(self.key1, "onnxruntime", adapter_digest())
        self.tag = f"{spec.name}-ort-{self.key1[:16]}"

    def entry_path(self, key2: str) -> Path:
        return self.root / "libs" / f"{self.spec.name}-ort-{key2[:20]}"

    def _plan(self, workdir: Path, sup: Path):
        plan = super()._plan(workdir, sup)
        objects = adapter_objects(self.root, self.toolchain, support_flags(self.spec, self.cuda), templates_digest())
        return dataclasses.replace(plan, extra_objects=plan.extra_objects + tuple(objects),
                                   ldflags=plan.ldflags + ("-pthread", "-ldl"),
                                   output=str(workdir / f"lib{self.spec.name}_onnxruntime.so"))


def onnxruntime_library(library, path=None) -> str:
    """The path of `library`'s onnxruntime custom-op library (see OpLibrary.onnxruntime_library),
    built into the cache if needed; copied to `path` when given (written whole, then renamed)."""
    from opforge.builder.api import build_entry
    from opforge.builder.cuda_toolchain import detect_cuda
    from opforge.cache import cache_root

    spec = getattr(library, "build_spec", None)
    if spec is None:
        raise ValueError(f"library '{library.__name__}' was loaded from a built file ({library.__file__}), "
                         "not from sources: load it with CustomOpBuilder, load_inline or load_dir to build "
                         "its onnxruntime library")
    root = cache_root()
    cuda = detect_cuda(root) if spec.is_cuda else None
    built = str(build_entry(spec, root, kind=OnnxruntimeBuild, cuda=cuda).artifact)
    if path is None:
        return built
    return _copy(built, Path(path))


def sources_changed(library) -> bool:
    """Whether `library`'s sources or the headers they include changed since its loaded file was
    built from them (then its onnxruntime library, built from them as they are now, runs other
    code than the library; reload() it first). Starts no build."""
    from opforge.builder.build import Build
    from opforge.builder.cuda_toolchain import detect_cuda
    from opforge.builder.toolchain import detect
    from opforge.cache import cache_root

    root = cache_root()
    spec = library.build_spec.reread()
    entry = Build(spec, detect(root), root, detect_cuda(root) if spec.is_cuda else None).lookup(verify=False)
    return entry is None or Path(entry.artifact).resolve() != Path(library.__file__).resolve()


def _copy(source: str, target: Path) -> str:
    target = target.expanduser().absolute()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    os.close(fd)
    try:
        shutil.copyfile(source, tmp)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(target)
