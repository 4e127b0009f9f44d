"""Builds opforge._core, the compiled half of the package (op loading, eager calls, threads)."""
from pathlib import Path

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension
from setuptools import setup

ParallelCompile("OPFORGE_BUILD_JOBS", default=0).install()  # compile the sources in parallel

HERE = Path(__file__).parent
SOURCES = sorted(str(p.relative_to(HERE)) for p in (HERE / "opforge" / "csrc").glob("*.cpp"))

setup(
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
