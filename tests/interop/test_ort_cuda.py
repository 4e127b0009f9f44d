"""CUDA libraries as onnxruntime custom-op libraries: their CUDA ops register for onnxruntime's
CUDA provider (and launch on its compute stream), their CPU ops for the CPU provider. Building and
registering needs nvcc only; launching needs a GPU and onnxruntime's CUDA provider."""
import numpy as np
import pytest
from onnx import TensorProto as T

from tests.support.cuda_support import build_test_library, requires_nvcc
from tests.support.ort_interop import one_op_model, ort_session


@pytest.fixture(scope="module")
def cuda_ort_lib(shared_cache):
    import os

    os.environ.setdefault("OPFORGE_CUDA_ARCH", "80")
    return build_test_library().onnxruntime_library()


@requires_nvcc
def test_cpu_op_of_a_cuda_library_runs_on_the_cpu_provider(cuda_ort_lib):
    proto = one_op_model("numel", [("x", T.FLOAT, [3, 5])], [("n", T.INT64, [1])], domain="")
    got = ort_session(proto, cuda_ort_lib).run(None, {"x": np.zeros((3, 5), np.float32)})[0]
    assert got.tolist() == [15]


@requires_nvcc
def test_cuda_op_registers_for_the_cuda_provider_only(cuda_ort_lib):
    proto = one_op_model("scale", [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], alpha=2.0)
    with pytest.raises(Exception, match=r"(?i)scale.*(implementation|kernel)|(implementation|kernel).*scale"):
        ort_session(proto, cuda_ort_lib)   # a CPU-only session: no CPU kernel of scale exists


@pytest.mark.cuda
@requires_nvcc
def test_cuda_op_runs_on_onnxruntime_cuda_provider(cuda_ort_lib):
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("this onnxruntime has no CUDA provider (pip install onnxruntime-gpu)")
    proto = one_op_model("scale", [("x", T.FLOAT, [1000])], [("y", T.FLOAT, [1000])], alpha=2.0)
    so = onnxruntime.SessionOptions()
    so.register_custom_ops_library(cuda_ort_lib)
    session = onnxruntime.InferenceSession(proto.SerializeToString(), so, providers=["CUDAExecutionProvider"])
    x = np.arange(1000, dtype=np.float32)
    from tests.support.cuda_support import CUDA_OPS

    factor = float((CUDA_OPS / "factor.cuh").read_text().split("OPF_TEST_FACTOR")[1].split()[0].rstrip("f"))
    assert np.allclose(session.run(None, {"x": x})[0], factor * 2.0 * x)


@requires_nvcc
def test_in_opforge_its_cpu_ops_run_and_its_cuda_ops_say_where_they_run(cuda_ort_lib):
    import opforge

    so = opforge.SessionOptions()
    so.register_custom_ops_library(cuda_ort_lib)
    numel = one_op_model("numel", [("x", T.FLOAT, [2, 3])], [("n", T.INT64, [1])], domain="")
    assert opforge.InferenceSession(numel.SerializeToString(), so).run(None, {"x": np.zeros((2, 3), np.float32)})[0] == 6
    scale = one_op_model("scale", [("x", T.FLOAT, [4])], [("y", T.FLOAT, [4])], alpha=2.0)
    with pytest.raises(Exception, match="scale of .* runs on onnxruntime's CUDAExecutionProvider"):
        opforge.InferenceSession(scale.SerializeToString(), so)
