"""Builds opforge's compiled parts: opforge._core (op loading, eager calls, the plan executor) and
the built-in CPU kernel library, compiled once here for the installing machine and shipped in the
package (see opforge/runtime/native.py)."""
import importlib.util
import os
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import setup

ParallelCompile("OPFORGE_BUILD_JOBS", default=0).install()  # compile the sources in parallel

HERE = Path(__file__).parent
SOURCES = sorted(str(p.relative_to(HERE)) for p in (HERE / "opforge" / "csrc").glob("*.cpp"))


def _kernel_builder():
    """opforge/runtime/native.py, loaded by path: importing the opforge.runtime package would
    need onnx, which is not installed while the package is being built."""
    import sys

    sys.path.insert(0, str(HERE))   # its build step uses opforge.builder's ninja writer
    spec = importlib.util.spec_from_file_location("_opforge_native", HERE / "opforge" / "runtime" / "native.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithKernels(build_ext):
    """build_ext, then the built-in kernel library (OPFORGE_SKIP_KERNEL_BUILD=1 leaves it to be
    built on first use instead)."""

    def run(self):
        super().run()
        if os.environ.get("OPFORGE_SKIP_KERNEL_BUILD", "") in ("", "0"):
            native = _kernel_builder()
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
        )
    ],
)
