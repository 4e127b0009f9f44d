"""CustomOpBuilder, load_inline and load_dir: build C++ ops in one line and load them."""
import re
from pathlib import Path

from opforge import config
from opforge.builder.build import Build, InputsChanged
from opforge.builder.loader import load_entry
from opforge.builder.spec import CPP_SUFFIXES, CUDA_SUFFIXES, make_spec
from opforge.builder.toolchain import detect
from opforge.builder.cuda_toolchain import detect_cuda
from opforge.cache import cache_root, digest, write_atomic
from opforge.errors import BuildError, CacheError

_BUILD_ATTEMPTS = 3   # builds tried while the inputs keep changing under them


class CustomOpBuilder:
    """Builds a library of ops from C++ sources, caches it, and loads it.

    Args:
        name: the library's name, a Python identifier.
        sources: paths of C++ (and, for CUDA, .cu) sources. Sources define ops with
            <opforge/op.h>, or a pybind11 module with PYBIND11_MODULE(OPFORGE_EXTENSION_NAME, m).
        backend: "CPU" or "CUDA"; by default CUDA when a source is a .cu file. In a CUDA
            library .cu files go to nvcc, .cpp files to the host compiler, and its ops take
            device arrays (cupy) unless an op says .backend(OPF_BACKEND_CPU).
        extra_cflags, extra_ldflags, extra_include_paths: passed to the compiler and linker.
        build_dir: where objects are kept between builds (default: in the cache).
        verbose: print compiler commands and output (also set by OPFORGE_VERBOSE=1). Without
            it, a build that takes more than a second shows ninja's [n/N] progress.
        extra_cuda_cflags: passed to nvcc (CUDA libraries).
    """

    def __init__(self, name, sources, backend=None, extra_cflags=None, extra_ldflags=None,
                 extra_include_paths=None, build_dir=None, verbose=False, extra_cuda_cflags=None):
        self.spec = make_spec(name, sources, backend, extra_cflags, extra_ldflags,
                              extra_include_paths, build_dir, verbose or config.verbose(),
                              extra_cuda_cflags)

    def load(self):
        """Builds if needed and returns the library, from the sources as they are now (a builder
        kept in a notebook cell loads each edit).

        Returns an OpLibrary (a module whose attributes are the ops) or, for pybind11 sources,
        the extension module. Raises BuildError when compiling or linking fails (a symbol no
        source defines included), CacheError when the cache folder is unsafe. A cached entry
        that is corrupt or fails to load is rebuilt. A library is cached under the digest of
        exactly the bytes it was compiled from: a source or header edited while it builds is
        read again and the library built again.
        """
        root = cache_root()
        toolchain = detect(root)
        cuda = detect_cuda(root) if self.spec.is_cuda else None
        for attempt in range(_BUILD_ATTEMPTS):
            self.spec = self.spec.reread()
            build = Build(self.spec, toolchain, root, cuda)
            try:
                entry = build.lookup() or build.build(clean=attempt > 0)
                try:
                    return _with_spec(self._owned(load_entry(entry, self.spec.name)), self.spec)
                except (ImportError, CacheError):   # unloadable, or changed since the lookup
                    build.discard(entry)
                    return _with_spec(self._owned(load_entry(build.build(clean=True), self.spec.name)), self.spec)
            except InputsChanged as changed:
                last = str(changed)
        raise _kept_changing(self.spec.name, last)


    def _owned(self, loaded):
        """An op library remembers this builder, so that reload() can build it again."""
        if hasattr(loaded, "op_table"):
            loaded.builder = self
        return loaded


def _with_spec(library, spec):
    """An OpLibrary keeps the spec it was built from, for builds of other kinds from the same
    sources (OpLibrary.onnxruntime_library)."""
    if hasattr(library, "op_table"):
        library.build_spec = spec
    return library


def build_entry(spec, root, progress=None, kind=Build, cuda=None):
    """The published cache entry of `spec` in the cache `root` (built there if needed), read as
    CustomOpBuilder.load reads it: again when an input changes while it builds. For builds that
    do not load what they make (the built-in kernels at install; `kind`, a Build subclass, for
    other artifacts of the same sources, with `cuda` the CUDA toolchain of a CUDA library)."""
    for attempt in range(_BUILD_ATTEMPTS):
        spec = spec.reread()
        build = kind(spec, detect(root), root, cuda, progress=progress)
        try:
            return build.lookup() or build.build(clean=attempt > 0)
        except InputsChanged as changed:
            last = str(changed)
    raise _kept_changing(spec.name, last)


def _kept_changing(name: str, last: str) -> BuildError:
    return BuildError(f"library '{name}': its inputs kept changing while it was built ({last}); "
                      "nothing was cached. If a file's modification time is in the future, touch it; "
                      "else load again once the files are saved")


def load_inline(name, cpp_source="", backend=None, extra_cflags=None, extra_ldflags=None,
                extra_include_paths=None, build_dir=None, verbose=False, cuda_source=None,
                extra_cuda_cflags=None):
    """Builds ops from source text (a str or a list of str) and returns the library.

    `cpp_source` is saved under the cache as <name>.cpp and `cuda_source` (which makes a CUDA
    library) as <name>.cu, named by their content, and built as with CustomOpBuilder; compile
    errors point into those files.
    """
    texts = {".cpp": cpp_source, ".cu": cuda_source}
    texts = {suffix: t if isinstance(t, str) else "\n".join(t) for suffix, t in texts.items() if t}
    folder = cache_root() / "inline" / f"{name}-{digest(sorted(texts.items()))[:16]}"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    paths = []
    for suffix, text in texts.items():
        path = folder / f"{name}{suffix}"
        if not path.exists() or path.read_text() != text:
            write_atomic(path, text)
        paths.append(path)
    return CustomOpBuilder(name, paths, backend, extra_cflags, extra_ldflags,
                           extra_include_paths, build_dir, verbose, extra_cuda_cflags).load()


def load_dir(folder, name=None, backend=None, extra_cflags=None, extra_ldflags=None,
             extra_include_paths=None, build_dir=None, verbose=False, extra_cuda_cflags=None):
    """Builds every C++ and CUDA source in `folder` (not recursive) into one library and loads it.

    The folder itself is on the include path. The library is named after the folder unless
    `name` is given. Raises FileNotFoundError if the folder holds no sources.
    """
    folder = Path(folder).expanduser().absolute()
    if not folder.is_dir():
        raise FileNotFoundError(f"op folder {folder} does not exist")
    suffixes = CPP_SUFFIXES + CUDA_SUFFIXES
    sources = sorted(p for p in folder.iterdir() if p.suffix in suffixes and p.is_file())
    if not sources:
        raise FileNotFoundError(f"no C++ sources ({', '.join(suffixes)}) in {folder}")
    lib_name = name or _identifier(folder.name)
    includes = [folder] + list(extra_include_paths or [])
    return CustomOpBuilder(lib_name, sources, backend, extra_cflags, extra_ldflags, includes,
                           build_dir, verbose, extra_cuda_cflags).load()


def _identifier(text: str) -> str:
    ident = re.sub(r"\W", "_", text) or "ops"
    return ident if not ident[0].isdigit() else f"ops_{ident}"


__all__ = ["CustomOpBuilder", "load_inline", "load_dir"]
