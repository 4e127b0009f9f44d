"""Version negotiation of the adapter (opforge/interop/ort_adapter/runtime.cpp): the oldest C API
it needs, features turned off below the versions that have them, and a clear refusal of a
runtime too old."""
import ctypes
import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

import opforge

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ops"
# The python of a second environment holding an onnxruntime a year or more older (e.g. 1.16.3
# with numpy<2 and onnx).
OLD_PYTHON = os.environ.get("OPFORGE_OLD_ORT_PYTHON", "")


@pytest.fixture(scope="module")
def ort_lib(shared_cache):
    return opforge.load_dir(EXAMPLES).onnxruntime_library()


def real_api_base():
    """onnxruntime's own OrtApiBase, from the library its wheel ships."""
    import onnxruntime

    found = glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*"))
    if not found:
        pytest.skip("this onnxruntime wheel ships no libonnxruntime.so to call its C API directly")
    lib = ctypes.CDLL(found[0])
    lib.OrtGetApiBase.restype = ctypes.c_void_p
    return lib.OrtGetApiBase()


GET_API = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_uint32)
GET_VERSION = ctypes.CFUNCTYPE(ctypes.c_void_p)   # const char*, kept alive by the caller


def test_a_runtime_too_old_is_refused_naming_both_versions(ort_lib):
    real = ctypes.cast(real_api_base(), ctypes.POINTER(ctypes.c_void_p))
    real_get_api = GET_API(real[0])
    # onnxruntime 1.15 as its OrtApiBase shows it: tables up to version 15 only
    fake_get_api = GET_API(lambda v: real_get_api(v) if v <= 15 else 0)
    text = ctypes.create_string_buffer(b"1.15.1")
    fake_version = GET_VERSION(lambda: ctypes.addressof(text))
    base = (ctypes.c_void_p * 2)(ctypes.cast(fake_get_api, ctypes.c_void_p), ctypes.cast(fake_version, ctypes.c_void_p))
    register = ctypes.CDLL(ort_lib).RegisterCustomOps
    register.restype = ctypes.c_void_p
    status = register(None, ctypes.cast(base, ctypes.c_void_p))
    assert status, "an onnxruntime too old must be refused"
    table = ctypes.cast(real_get_api(1), ctypes.POINTER(ctypes.c_void_p))
    message = ctypes.CFUNCTYPE(ctypes.c_char_p, ctypes.c_void_p)(table[2])(status).decode()   # GetErrorMessage
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(table[93])(status)                               # ReleaseStatus
    assert "1.16" in message and "1.15.1" in message and ort_lib in message


OLD_RUN = r"""
import sys, numpy as np, onnxruntime as ort
from onnx import helper, TensorProto as T
lib = sys.argv[1]
node = helper.make_node("softmax_rows", ["x"], ["y"], domain="com.example", temperature=0.5)
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [3, 4])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.example", 1)])
model.ir_version = 8
so = ort.SessionOptions(); so.register_custom_ops_library(lib)
x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
y = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
e = np.exp((x - x.max(1, keepdims=True)) / 0.5)
print(ort.__version__, float(np.abs(y - e / e.sum(1, keepdims=True)).max()))
"""


@pytest.mark.skipif(not OLD_PYTHON or not os.path.exists(OLD_PYTHON),
                    reason="OPFORGE_OLD_ORT_PYTHON names no python of an older onnxruntime's environment")
def test_runs_on_an_onnxruntime_a_year_older(ort_lib):
    done = subprocess.run([OLD_PYTHON, "-c", OLD_RUN, ort_lib], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    version, error = done.stdout.split()
    assert int(version.split(".")[1]) <= 21, f"{version} is not a year older than the tested onnxruntime"
    assert float(error) < 1e-6


def test_declared_entries_answer_as_the_real_library_does(tmp_path):
    """tests/interop/data/abi_probe.cpp, built on opforge's declarations of the ABI, calls the
    entries of the wheel's libonnxruntime.so that work outside a kernel (the others run in every
    test of the adapter) and checks their answers."""
    import onnxruntime

    found = glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*"))
    if not found:
        pytest.skip("this onnxruntime wheel ships no libonnxruntime.so to call its C API directly")
    package = Path(opforge.__file__).parent
    probe = tmp_path / "abi_probe"
    subprocess.run(["c++", "-std=c++17", "-O1", f"-I{package / 'csrc'}", f"-I{package / 'interop' / 'ort_adapter'}",
                    str(Path(__file__).parent / "data" / "abi_probe.cpp"),
                    str(package / "interop" / "ort_adapter" / "runtime.cpp"), "-o", str(probe), "-ldl"], check=True)
    done = subprocess.run([str(probe), found[0]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "FAIL" not in done.stdout and done.stdout.count("ok") >= 10
