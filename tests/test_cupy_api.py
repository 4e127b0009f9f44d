"""The GPU code paths against the real cupy, where it imports (no GPU needed): every cupy name
opforge and the stand-in cupy of the tests (fake_cupy) use exists, with the parameters they pass.
The CPU tests run those paths on numpy and on the stand-in, which would hide a misspelt or
removed cupy function until someone ran on a GPU."""
import ast
import inspect
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from tests.support import fake_cupy
cupy = pytest.importorskip("cupy", reason="cupy is not installed (pip install cupy-cuda13x)")

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "opforge"
ARRAY_MODULE = ("xp", "self.xp", "self.device.xp")   # the CUDA provider's kernels: cupy, or numpy in tests


def parameters(fn) -> list:
    """Parameter names of a function or class; Cython ones from their docstring's first line."""
    try:
        return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]
    except (TypeError, ValueError):
        first = (fn.__doc__ or "").strip().splitlines()[0]
        inside = first[first.index("(") + 1:first.rindex(")")]
        names = [re.split(r"\s+", part.split("=")[0].strip())[-1] for part in inside.split(",") if part.strip()]
        return [n.lstrip("*") for n in names if n not in ("self", "cls", "*")]


def fake_callables():
    """(dotted name, fake object, real object) for every callable the stand-in cupy offers."""
    fake = fake_cupy.module()
    pairs = [(f"cupy.{n}", getattr(fake, n), getattr(cupy, n, None))
             for n in ("empty", "asarray", "asnumpy", "ascontiguousarray")]
    for name, value in vars(fake.cuda).items():
        pairs.append((f"cupy.cuda.{name}", value, getattr(cupy.cuda, name, None)))
    for name in ("getDeviceCount", "getDevice", "setDevice"):
        pairs.append((f"cupy.cuda.runtime.{name}", getattr(fake.cuda.runtime, name),
                      getattr(cupy.cuda.runtime, name, None)))
    for cls, real in ((fake_cupy.Stream, cupy.cuda.Stream), (fake_cupy.MemoryPool, cupy.cuda.MemoryPool),
                      (fake_cupy.Event, cupy.cuda.Event), (fake_cupy._Device, cupy.cuda.Device)):
        for name, value in vars(cls).items():
            if not name.startswith("_") and callable(getattr(cls, name)):
                pairs.append((f"{real.__name__}.{name}", getattr(cls, name), getattr(real, name, None)))
    return [p for p in pairs if callable(p[1]) and not p[0].endswith("runtime")]


@pytest.mark.parametrize("name, fake, real", fake_callables(), ids=lambda v: v if isinstance(v, str) else "")
def test_stand_in_cupy_matches_cupy(name, fake, real):
    """Each stand-in function exists in cupy and takes its parameters in the same places."""
    assert real is not None, f"{name} is in the stand-in but not in cupy {cupy.__version__}"
    mine, theirs = parameters(fake), parameters(real)
    assert theirs[:len(mine)] == mine, f"{name}: stand-in takes {mine}, cupy takes {theirs}"


def test_stand_in_arrays_offer_what_cupy_arrays_do():
    for name in ("shape", "dtype", "flags", "device", "__cuda_array_interface__", "__dlpack_device__",
                 "get", "astype", "strides", "data", "ndim"):
        assert hasattr(cupy.ndarray, name), name
    for name in ("shape", "dtype", "flags", "device", "__cuda_array_interface__", "get", "astype", "strides",
                 "data", "ndim"):
        assert hasattr(fake_cupy.ndarray(np.ones(2)), name), name


def attribute_chains(root_names, folders=(PACKAGE,)) -> set:
    """(file, dotted name) for names used under `root_names` (e.g. 'cp' -> 'cuda.Device') in
    the Python files of `folders`, files named relative to the package."""
    found = set()
    for path in [p for folder in folders for p in folder.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            parts, inner = [], node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if not isinstance(inner, ast.Name):
                continue
            parts.append(inner.id)
            dotted = ".".join(reversed(parts))
            for root in root_names:
                if dotted.startswith(root + "."):
                    where = path.relative_to(PACKAGE if path.is_relative_to(PACKAGE) else ROOT)
                    found.add((where.as_posix(), dotted[len(root) + 1:]))
    return found


def _resolve(module, dotted: str):
    value = module
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _longest_prefixes(chains) -> dict:
    """chain -> where, keeping only chains that are not a prefix of another (a.b.c covers a.b)."""
    names = {name for _, name in chains}
    return {name: sorted(where for where, n in chains if n == name) for name in names
            if not any(other.startswith(name + ".") for other in names)}


def test_cupy_names_used_by_opforge_exist():
    """In the package, and in the GPU parts of the CUDA benchmark and example."""
    chains = attribute_chains(("cupy", "cp"), (PACKAGE, ROOT / "benchmarks", ROOT / "examples"))
    assert any(name == "cuda.Device" for _, name in chains)   # the scan finds opforge's use
    assert any(name == "ElementwiseKernel" for _, name in chains)   # and the benchmark's
    missing = []
    for name, where in _longest_prefixes(chains).items():
        try:
            _resolve(cupy, name)
        except AttributeError:
            if not hasattr(cupy.ndarray, name.split(".")[-1]):   # a method of an array bound to cp/cupy
                missing.append(f"cupy.{name} ({', '.join(where)})")
    assert not missing, missing


def test_array_module_names_in_cuda_kernels_exist_in_cupy_and_numpy():
    """The provider's kernels are tested with numpy as their array module: a function numpy has
    and cupy lacks would pass those tests and fail on a GPU."""
    import cupyx.scipy.special

    chains = attribute_chains(ARRAY_MODULE)
    assert ("runtime/providers/cuda/kernels/windows.py", "lib.stride_tricks.as_strided") in chains
    missing = []
    for name, where in _longest_prefixes(chains).items():
        # device.py is the real GPU's; kernels (kernel.py, kernels/) run on numpy in the tests too
        tested_on_numpy = any(w.startswith("runtime/providers/cuda/kernel") for w in where)
        for module in (cupy, np) if tested_on_numpy else (cupy,):
            try:
                _resolve(module, name)
            except AttributeError:
                missing.append(f"{module.__name__}.{name} ({', '.join(where)})")
    assert not missing, missing
    assert callable(cupyx.scipy.special.erf)


def test_user_compute_stream_wraps_the_callers_pointer_without_deprecation():
    from opforge.runtime.providers.cuda.device import external_stream

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stream = external_stream(cupy, 0x1234, 0)
    assert stream.ptr == 0x1234


def test_bound_device_pointer_is_wrapped_as_cupy_memory():
    """bind_input(..., 'cuda', ...) builds its array over cupy.cuda.UnownedMemory: the memory
    objects construct without a GPU (the array itself needs one)."""
    memory = cupy.cuda.UnownedMemory(0x2000, 64, None, 0)
    assert cupy.cuda.MemoryPointer(memory, 0).ptr == 0x2000


def test_cupy_without_a_gpu_leaves_cuda_unlisted_and_calls_refused():
    import opforge
    from opforge.runtime.providers.cuda import unavailable_reason

    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        count = 0
    if count:
        pytest.skip("this machine has a GPU")
    assert unavailable_reason() and "CUDAExecutionProvider" not in opforge.get_available_providers()
    assert "cupy" in sys.modules
