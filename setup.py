"""Builds opforge's compiled parts: opforge._core (op loading, eager calls, the plan executor) and
the built-in CPU kernel library, compiled once here for the installing machine and shipped in the
package (see opforge/runtime/providers/cpu/library.py)."""
import importlib.util
import os
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ParallelCompile("OPFORGE_BUILD_JOBS", default=0).install()  # compile the sources in parallel

HERE = Path(__file__).parent
SOURCES = sorted(str(p.relative_to(HERE)) for p in (HERE / "opforge" / "csrc").glob("*.cpp"))
# The headers _core's sources include: setuptools recompiles only when a source or one of these is
# newer than the built module (a changed header alone would leave the stale module in place).
DEPENDS = sorted(str(p.relative_to(HERE)) for p in [*(HERE / "opforge" / "csrc").glob("*.h"),
                                                    *(HERE / "opforge" / "templates").rglob("*.h")])


def _kernel_builder():
    """opforge/runtime/providers/cpu/library.py, loaded by path: importing the opforge.runtime
    package would need onnx, which is not installed while the package is being built."""
    import sys

    sys.path.insert(0, str(HERE))   # its build step uses opforge.builder's ninja writer
    library = HERE / "opforge" / "runtime" / "providers" / "cpu" / "library.py"
    spec = importlib.util.spec_from_file_location("_opforge_native", library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithKernels(build_ext):
    """build_ext, then the built-in kernel library (OPFORGE_SKIP_KERNEL_BUILD=1 leaves it to be
    built on first use instead).

    Each pip command builds in new temporary folders, so a second `pip install -e .` (to add an
    extra, say) would compile _core and every kernel again from scratch. Both are skipped when
    the copy already in the source tree was built from the same inputs: _core's stamp records
    its sources, headers, flags, compiler, Python and pybind11; the kernels' the same for them.
    """

    def build_extension(self, ext):
        built = HERE / "opforge" / Path(self.get_ext_filename(ext.name)).name   # the in-place copy
        stamp, key = built.with_name(built.name + ".json"), self._core_key(ext)
        if built.is_file() and stamp.is_file() and stamp.read_text() == key:
            print(f"opforge: {built.name} is current (same sources, flags and compiler): not recompiled")
            target = Path(self.get_ext_fullpath(ext.name))
            if target.resolve() != built.resolve():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(built.read_bytes())
            return
        super().build_extension(ext)
        if self._into_tree:
            self._core_stamp = (stamp, key)   # written once the build is copied into the tree

    def _core_key(self, ext) -> str:
        import hashlib
        import subprocess
        import sys

        import pybind11

        h = hashlib.sha256()
        for path in sorted([*(HERE / "opforge" / "csrc").iterdir(), *(HERE / "opforge" / "templates").rglob("*")]):
            if path.is_file():
                h.update(str(path.relative_to(HERE)).encode() + path.read_bytes())
        compiler = self.compiler.compiler_so
        version = subprocess.run([compiler[0], "--version"], capture_output=True, text=True).stdout
        h.update(repr((compiler, ext.extra_compile_args, version, sys.version, pybind11.__version__)).encode())
        return h.hexdigest()

    def run(self):
        self._into_tree = self.inplace   # editable installs build in place too; run() clears it meanwhile
        super().run()
        stamp = getattr(self, "_core_stamp", None)
        if stamp is not None:
            stamp[0].write_text(stamp[1])
        if os.environ.get("OPFORGE_SKIP_KERNEL_BUILD", "") in ("", "0"):
            native = _kernel_builder()
            if native.prebuilt_matches_sources():
                print("opforge: the built-in CPU kernels are current (same sources, flags, compiler "
                      "and CPU): not recompiled", flush=True)
                built = native.PREBUILT
            else:
                print("opforge: compiling the built-in CPU kernels (a few minutes on 2 cores)", flush=True)
                built = native.build_prebuilt(Path(self.build_temp) / "opforge_kernels")
            if not self.inplace:   # a wheel or a regular install: ship it in the build tree too
                target = Path(self.build_lib) / built.relative_to(HERE)
                target.parent.mkdir(parents=True, exist_ok=True)
                for path in (built, native.STAMP):
                    (target.parent / path.name).write_bytes(path.read_bytes())


setup(
    cmdclass={"build_ext": BuildWithKernels},
    ext_modules=[
        Pybind11Extension(
            "opforge._core",
            SOURCES,
            include_dirs=["opforge/templates"],
            cxx_std=17,
            extra_compile_args=["-O2", "-fvisibility=hidden"],
            libraries=["dl"],
            depends=DEPENDS,
        )
    ],
)
