"""Building the example ops and calling them eagerly on numpy arrays."""
import inspect

import numpy as np
import pytest

import opforge
from tests.support.helpers import EXAMPLES


@pytest.fixture(scope="module")
def lib(shared_cache):
    return opforge.load_dir(EXAMPLES / "ops")


def test_library_exposes_every_op(lib):
    assert lib.op_names == ["add_n", "attribute_kinds", "leaky_relu", "softmax_rows"]
    assert {h.name for h in lib.op_table} == set(lib.op_names)
    assert all(h.domain == "com.example" for h in lib.op_table)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_leaky_relu_matches_numpy(lib, dtype):
    x = np.random.default_rng(0).standard_normal((64, 33)).astype(dtype)
    y = lib.leaky_relu(x, alpha=0.2)
    assert y.dtype == dtype and y.shape == x.shape
    expect = np.where(x > 0, x, dtype(0.2) * x)
    np.testing.assert_allclose(y, expect, rtol=1e-3 if dtype == np.float16 else 1e-6)


def test_default_attribute_is_used(lib):
    x = -np.ones(5, np.float32)
    np.testing.assert_allclose(lib.leaky_relu(x), -0.01 * np.ones(5), rtol=1e-6)


def test_large_input_runs_on_the_thread_pool(lib):
    x = np.random.default_rng(1).standard_normal(1 << 20).astype(np.float32)
    np.testing.assert_allclose(lib.leaky_relu(x, alpha=0.5), np.where(x > 0, x, 0.5 * x), rtol=1e-6)


def test_strided_input_is_read_correctly(lib):
    x = np.random.default_rng(2).standard_normal((8, 10)).astype(np.float32)
    view = x[:, ::3].T
    assert not view.flags.c_contiguous
    np.testing.assert_allclose(lib.leaky_relu(view), np.where(view > 0, view, 0.01 * view), rtol=1e-6)


def test_output_is_a_new_array(lib):
    x = np.ones(4, np.float32)
    y = lib.add_n(x)
    assert not np.shares_memory(x, y)
    np.testing.assert_array_equal(y, x)


def test_variadic_input(lib):
    xs = [np.full((3, 2), i, np.float64) for i in range(5)]
    np.testing.assert_array_equal(lib.add_n(*xs), np.full((3, 2), 10.0))


def test_workspace_op(lib):
    x = np.random.default_rng(3).standard_normal((7, 13)).astype(np.float32)
    e = np.exp((x - x.max(-1, keepdims=True)) / 2.0)
    np.testing.assert_allclose(lib.softmax_rows(x, temperature=2.0), e / e.sum(-1, keepdims=True),
                               rtol=1e-5)


def test_every_attribute_kind_crosses_the_abi(lib):
    graph = b"\x0a\x03abc"
    out = lib.attribute_kinds(f=1.5, i=-7, s="four", ints=[10, 20], floats=[0.5, 0.25],
                              strings=["x", "y", "z"], t=np.arange(5, dtype=np.int64),
                              tensors=[np.ones(2), np.zeros(3)], graph=graph, maybe=0)
    np.testing.assert_allclose(out, [1.5, -7, 4, 30, 0.75, 3, 10, 2, len(graph), 1])


def test_attribute_defaults_and_absent_optionals(lib):
    out = lib.attribute_kinds(t=np.array([1.5, 2.5], np.float32))
    np.testing.assert_allclose(out, [0.5, 3, 5, 6, 0.75, 2, 4.0, 0, 0, 0])


def test_help_shows_the_schema(lib):
    doc = lib.softmax_rows.__doc__
    assert str(inspect.signature(lib.softmax_rows)) == "(X, /, *, temperature=1.0)"   # help() prints it
    assert doc.startswith("domain 'com.example', since version 1") and "softmax_rows(" not in doc
    assert "X: float32" in doc and "temperature: float = 1.0" in doc and "Y: float32" in doc

    schema = lib.leaky_relu.schema
    assert schema["attributes"][0]["default"] == 0.01
    assert schema["inplace"] == [0]


@pytest.mark.parametrize("call, message", [
    (lambda lib: lib.leaky_relu(np.ones(3, np.int32)),
     "leaky_relu(): input 'X' (#0) has dtype int32; expected float32, float64, float16"),
    (lambda lib: lib.leaky_relu(), "leaky_relu() takes 1 input, got 0"),
    (lambda lib: lib.leaky_relu(np.ones(2), np.ones(2)), "leaky_relu() takes 1 input, got 2"),
    (lambda lib: lib.leaky_relu(np.ones(2), alpah=1.0),
     "leaky_relu() got an unexpected attribute 'alpah'; its attributes are: alpha"),
    (lambda lib: lib.leaky_relu(np.ones(2), alpha="big"),
     "leaky_relu(): attribute 'alpha' expects a float, got str 'big'"),
    (lambda lib: lib.attribute_kinds(i=1.5, t=np.ones(1)),
     "attribute_kinds(): attribute 'i' expects an int, got float 1.5"),
    (lambda lib: lib.attribute_kinds(), "attribute_kinds(): missing required attribute 't' (tensor)"),
    (lambda lib: lib.add_n(np.ones(2, np.uint8)), "add_n(): input 'inputs' (#0) has dtype uint8"),
])
def test_bad_calls_raise_type_errors_naming_op_and_argument(lib, call, message):
    with pytest.raises(TypeError) as info:
        call(lib)
    assert str(info.value).startswith(message)


def test_op_failure_raises_op_error_with_op_name(lib):
    with pytest.raises(opforge.OpError, match=r"^softmax_rows: .*temperature must be positive"):
        lib.softmax_rows(np.ones((2, 2), np.float32), temperature=-1.0)
    with pytest.raises(opforge.OpError, match=r"^add_n: .*input 1 has another shape"):
        lib.add_n(np.ones(2), np.ones(3))


def test_threads_can_call_ops_concurrently(lib):
    from concurrent.futures import ThreadPoolExecutor

    xs = [np.random.default_rng(i).standard_normal(200_000).astype(np.float32) for i in range(8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda x: lib.leaky_relu(x, alpha=0.3), xs))
    for x, y in zip(xs, results):
        np.testing.assert_allclose(y, np.where(x > 0, x, 0.3 * x), rtol=1e-6)


def test_dlpack_objects_are_accepted(lib):
    class Wrapper:  # a foreign array that only speaks DLPack
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kwargs):
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    x = np.linspace(-1, 1, 9, dtype=np.float32)
    np.testing.assert_allclose(lib.leaky_relu(Wrapper(x), alpha=0.5), np.where(x > 0, x, 0.5 * x))


ADDRESS_OP = """
#include <opforge/op.h>
static void infer(opforge::InferContext& ctx) { ctx.set_output(0, opforge::i64, {}); }
static void run(opforge::KernelContext& ctx) {
  *ctx.output(0).data<int64_t>() = int64_t(reinterpret_cast<intptr_t>(ctx.input(0).raw()));
}
OPFORGE_OP(address_of).input("X").output("A").infer(infer).compute(run);
"""


def test_contiguous_inputs_are_passed_without_a_copy(shared_cache):
    lib = opforge.load_inline("address_of", ADDRESS_OP)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert int(lib.address_of(x)) == x.ctypes.data
    assert int(lib.address_of(x[1:])) == x[1:].ctypes.data     # a contiguous view: no copy either
    strided = x[:, ::2]
    assert int(lib.address_of(strided)) != strided.ctypes.data  # made contiguous for the op


def test_help_tells_an_undeclared_output_dtype_from_the_ops_infer(shared_cache):
    twice = opforge.load_inline("open_output_dtypes", r"""
#include <opforge/op.h>
static void run(opforge::KernelContext& ctx) {}
OPFORGE_OP(twice).input("X", {opforge::f32, opforge::f64}).output("Y").infer(opforge::same_as_input0).compute(run);
""").twice
    assert "Y: same as X (float32 | float64)" in twice.__doc__ and " any" not in twice.__doc__
