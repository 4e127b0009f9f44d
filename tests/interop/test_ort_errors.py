"""Errors of opforge ops inside plain onnxruntime name the op (and the attribute or input): a
compute error, a bad attribute, a missing one, and an input of a dtype the op does not take."""
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T

import opforge
from tests.support.ort_interop import one_op_model, ort_session

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ops"


@pytest.fixture(scope="module")
def ort_lib(shared_cache):
    return opforge.load_dir(EXAMPLES).onnxruntime_library()


def test_compute_error_names_the_op(ort_lib):
    proto = one_op_model("softmax_rows", [("x", T.FLOAT, [2, 3])], [("y", T.FLOAT, None)], temperature=-1.0)
    with pytest.raises(Exception, match=r"softmax_rows: .*temperature must be positive, got -1"):
        ort_session(proto, ort_lib).run(None, {"x": np.ones((2, 3), np.float32)})


def test_attribute_of_another_kind_names_op_and_attribute(ort_lib):
    proto = one_op_model("leaky_relu", [("x", T.FLOAT, [2, 3])], [("y", T.FLOAT, None)], alpha="steep")
    with pytest.raises(Exception, match=r"leaky_relu: attribute 'alpha' is a string in this node; the op declares a float"):
        ort_session(proto, ort_lib)


def test_missing_required_attribute(ort_lib):
    proto = one_op_model("attribute_kinds", [], [("y", T.DOUBLE, None)])
    with pytest.raises(Exception, match=r"attribute_kinds: attribute 't' is required \(a tensor\)"):
        ort_session(proto, ort_lib)


def test_wrong_input_dtype_names_op_and_input(ort_lib):
    proto = one_op_model("leaky_relu", [("x", T.INT32, [2, 3])], [("y", T.INT32, None)])
    with pytest.raises(Exception, match=r"leaky_relu\(\): input 'X' \(#0\) has dtype int32; expected float32, float64, float16"):
        ort_session(proto, ort_lib).run(None, {"x": np.ones((2, 3), np.int32)})


def test_an_error_leaves_the_session_usable(ort_lib):
    proto = one_op_model("add_n", [("a", T.FLOAT, ["N"]), ("b", T.FLOAT, ["M"])], [("y", T.FLOAT, None)])
    session = ort_session(proto, ort_lib)
    with pytest.raises(Exception, match="add_n: .*input 1 has another shape"):
        session.run(None, {"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)})
    assert session.run(None, {"a": np.ones(2, np.float32), "b": np.ones(2, np.float32)})[0].tolist() == [2, 2]
