"""The built-in kernel library: compiled by `pip install`, loaded at once, rebuilt when stale."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.helpers import run_python
from opforge.runtime.providers.cpu import library as native

FIRST_SESSION = """
    import time
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    import opforge

    start = time.perf_counter()
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("MatMul", ["c", "m"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w"),
         numpy_helper.from_array(np.ones((8, 5), np.float32), "m")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    y, = opforge.InferenceSession(model.SerializeToString()).run(None, {"x": np.ones((1, 3, 8, 8), np.float32)})
    assert float(y[0, 0, 3, 0]) == 27.0 * 6 + 18.0 * 2, y[0, 0, 3, 0]   # a row of Conv: two edges
    print(f"{time.perf_counter() - start:.3f}")
"""


@pytest.mark.skipif(not native.PREBUILT.is_file(), reason="installed with OPFORGE_SKIP_KERNEL_BUILD=1")
def test_the_first_session_on_an_empty_cache_builds_nothing(tmp_path):
    cache = tmp_path / "cache"
    proc = run_python(FIRST_SESSION, env={"OPFORGE_CACHE_DIR": str(cache)})
    assert proc.returncode == 0, proc.stderr
    assert "building" not in proc.stdout
    assert float(proc.stdout.split()[-1]) <= 5.0
    assert not (cache / "libs").exists() or not any((cache / "libs").iterdir())


@pytest.mark.skipif(not native.PREBUILT.is_file(), reason="installed with OPFORGE_SKIP_KERNEL_BUILD=1")
def test_the_prebuilt_library_is_current_and_used():
    assert native._prebuilt_is_current()
    assert native.cpu_kernels().__file__ == str(native.PREBUILT)


def test_a_stale_or_foreign_prebuilt_library_is_not_used(tmp_path, monkeypatch):
    stamp = tmp_path / "stamp.json"
    library = tmp_path / "lib.so"
    library.write_bytes(b"\x7fELF")
    monkeypatch.setattr(native, "STAMP", stamp)
    monkeypatch.setattr(native, "PREBUILT", library)
    from opforge.builder.toolchain import cpu_identity

    stamp.write_text(json.dumps({"inputs": native.inputs_digest(), "cpu": cpu_identity()}))
    assert native._prebuilt_is_current()
    stamp.write_text(json.dumps({"inputs": "an edited kernel", "cpu": cpu_identity()}))
    assert not native._prebuilt_is_current()
    stamp.write_text(json.dumps({"inputs": native.inputs_digest(), "cpu": "another machine"}))
    assert not native._prebuilt_is_current()
    stamp.write_text(json.dumps({"inputs": native.inputs_digest(), "cpu": cpu_identity()}))
    monkeypatch.setenv("OPFORGE_PREBUILT_KERNELS", "0")
    assert not native._prebuilt_is_current()



LOAD_BLAS = """
    import os
    from opforge.runtime.providers.cpu import library   # numpy's OpenBLAS starts its threads here
    before = len(os.listdir("/proc/self/task"))
    if {ours}:
        library._preload_blas()
    else:
        import scipy_openblas32
    print(len(os.listdir("/proc/self/task")) - before, os.environ.get("OPENBLAS_NUM_THREADS"))
"""


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS starts no threads on one core")
@pytest.mark.parametrize("user_value", [None, "2"])
def test_openblas_is_loaded_without_threads_of_its_own(user_value):
    # A multi-threaded OpenBLAS starts a thread per core at load, each polling for work for
    # ~0.1 s: on 2 cores that halved a new session's speed. The kernels call it single-threaded
    # (the session's pool does the threading), so it is loaded with one thread, and the user's
    # OPENBLAS_NUM_THREADS is left as it was.
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)
    if user_value:
        env["OPENBLAS_NUM_THREADS"] = user_value
    plain = subprocess.run([sys.executable, "-c", textwrap.dedent(LOAD_BLAS.format(ours=False))], env=env,
                           capture_output=True, text=True, timeout=120)
    ours = subprocess.run([sys.executable, "-c", textwrap.dedent(LOAD_BLAS.format(ours=True))], env=env,
                          capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and ours.returncode == 0, plain.stderr + ours.stderr
    assert int(plain.stdout.split()[0]) > 0   # loaded as it comes, it does start threads
    assert ours.stdout.split() == ["0", str(user_value)]
