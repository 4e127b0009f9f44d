"""Shared fixtures: a private cache folder per test, or one per session."""
import os
from pathlib import Path

import pytest


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A new, empty opforge cache for this test (set through OPFORGE_CACHE_DIR)."""
    path = tmp_path / "cache"
    monkeypatch.setenv("OPFORGE_CACHE_DIR", str(path))
    return path


@pytest.fixture(scope="session", autouse=True)
def shared_cache(tmp_path_factory):
    """One cache for the whole run, so tests never touch the user's own cache folder.

    ``OPFORGE_TEST_CACHE_DIR`` names a cache to keep between runs (built kernels are reused);
    by default each run starts from an empty one, as on a fresh machine."""
    kept = os.environ.get("OPFORGE_TEST_CACHE_DIR")
    path = Path(kept) if kept else tmp_path_factory.mktemp("shared") / "cache"
    old = os.environ.get("OPFORGE_CACHE_DIR")
    os.environ["OPFORGE_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("OPFORGE_CACHE_DIR", None)
    else:
        os.environ["OPFORGE_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def kernels():
    """All built-in CPU kernels (an OpLibrary), built once per run; OPFORGE_TEST_KERNEL_FILES=
    a.cpp,b.cpp builds only those (developing one kernel family)."""
    from opforge.runtime.providers.cpu import library as native

    only = os.environ.get("OPFORGE_TEST_KERNEL_FILES")
    return native.cpu_kernels(only.split(",") if only else None)


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` launch kernels: they are skipped unless cupy imports and sees a GPU."""
    marked = [item for item in items if item.get_closest_marker("cuda") is not None]
    if not marked:
        return
    from tests.support.cuda_support import gpu_unavailable

    why = gpu_unavailable()
    if why:
        skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {why}")
        for item in marked:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    """The hand-written instruction-set paths the built-in kernels took in this run, so a run's
    output says which kernel variants it tested (and which it could not, on this CPU)."""
    import sys

    library = sys.modules.get("opforge.runtime.providers.cpu.library")
    if library is None or not library._loaded:
        return
    kernels = next(iter(library._loaded.values()))
    paths = library.kernel_paths(kernels)
    march = os.environ.get("OPFORGE_KERNEL_MARCH", "native")
    terminalreporter.write_sep("-", f"kernel paths taken (build -march={march}: "
                                    f"{' '.join(library.kernel_isa(kernels)) or 'no SIMD'})")
    for name, calls in sorted(paths.items()):
        terminalreporter.write_line(f"  {name:<44}{calls:>10} calls")
    isa = library.kernel_isa(kernels)
    untested = [name for name, flags in (("AVX-512", ["avx512f"]), ("AVX2", ["avx2", "fma"]))
                if not set(flags) <= set(isa)]
    if untested:
        terminalreporter.write_line(f"  not tested in this run: the {' and '.join(untested)} paths (this build "
                                    f"has no {' / '.join(untested)}; they run where the CPU has it)")
