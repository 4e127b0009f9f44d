"""Elementwise ops with numpy broadcasting (ONNX's multidirectional broadcasting)."""
import numpy as np

from opforge.runtime.providers.cuda.kernel import DEVICE_DTYPES, FLOATS, NUMBERS, CudaKernel, cuda_kernel

_UNARY = {
    "Relu": lambda xp, x: xp.maximum(x, x.dtype.type(0)),
    "Sigmoid": lambda xp, x: x.dtype.type(1) / (x.dtype.type(1) + xp.exp(-x)),
    "Tanh": lambda xp, x: xp.tanh(x),
    "Exp": lambda xp, x: xp.exp(x),
    "Log": lambda xp, x: xp.log(x),
    "Sqrt": lambda xp, x: xp.sqrt(x),
    "Neg": lambda xp, x: -x,
    "Abs": lambda xp, x: xp.abs(x),
    "Reciprocal": lambda xp, x: x.dtype.type(1) / x,
    "Floor": lambda xp, x: xp.floor(x),
    "Ceil": lambda xp, x: xp.ceil(x),
}

_BINARY = {
    "Add": lambda xp, a, b: a + b,
    "Sub": lambda xp, a, b: a - b,
    "Mul": lambda xp, a, b: a * b,
    "Div": lambda xp, a, b: a / b,
}

_COMPARE = {
    "Equal": lambda xp, a, b: a == b,
    "Less": lambda xp, a, b: a < b,
    "Greater": lambda xp, a, b: a > b,
    "LessOrEqual": lambda xp, a, b: a <= b,
    "GreaterOrEqual": lambda xp, a, b: a >= b,
}


def _unary(op_type: str, fn):
    @cuda_kernel(op_type, since=6)
    class Unary(CudaKernel):
        def compute(self, x):
            return fn(self.xp, x)

    Unary.__name__ = Unary.__qualname__ = op_type
    return Unary


def _binary(op_type: str, fn, dtypes):
    @cuda_kernel(op_type, since=7)
    class Binary(CudaKernel):
        def compute(self, a, b):
            return fn(self.xp, a, b)

    Binary.dtypes = dtypes
    Binary.__name__ = Binary.__qualname__ = op_type
    return Binary


for _name, _fn in _UNARY.items():
    _unary(_name, _fn)
for _name, _fn in _BINARY.items():
    _binary(_name, _fn, NUMBERS if _name != "Div" else FLOATS)   # integer Div truncates: CPU
for _name, _fn in _COMPARE.items():
    _binary(_name, _fn, NUMBERS)


@cuda_kernel("Pow", since=7)
class Pow(CudaKernel):
    def compute(self, base, exponent):
        return self.xp.power(base, exponent.astype(base.dtype, copy=False))


@cuda_kernel("Max", since=8)
class Max(CudaKernel):
    def compute(self, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = self.xp.maximum(out, x)
        return out


@cuda_kernel("Min", since=8)
class Min(CudaKernel):
    def compute(self, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = self.xp.minimum(out, x)
        return out


@cuda_kernel("Sum", since=8)
class Sum(CudaKernel):
    def compute(self, *xs):
        out = xs[0]
        for x in xs[1:]:
            out = out + x
        return out


@cuda_kernel("LeakyRelu", since=6)
class LeakyRelu(CudaKernel):
    def setup(self, node, opset):
        self.alpha = float(self.attr("alpha", 0.01))

    def compute(self, x):
        return self.xp.where(x >= 0, x, x * x.dtype.type(self.alpha))


@cuda_kernel("Clip", since=11)
class Clip(CudaKernel):
    host_inputs = (1, 2)

    def compute(self, x, low=None, high=None):
        if low is not None:
            x = self.xp.maximum(x, x.dtype.type(np.asarray(low)))
        if high is not None:
            x = self.xp.minimum(x, x.dtype.type(np.asarray(high)))
        return x


@cuda_kernel("Where", since=9)
class Where(CudaKernel):
    dtypes = DEVICE_DTYPES

    def compute(self, condition, x, y):
        return self.xp.where(condition, x, y)


@cuda_kernel("Identity", since=1)
class Identity(CudaKernel):
    dtypes = DEVICE_DTYPES

    def compute(self, x):
        return x


@cuda_kernel("Cast", since=6)
class Cast(CudaKernel):
    dtypes = DEVICE_DTYPES

    def setup(self, node, opset):
        from onnx.helper import tensor_dtype_to_np_dtype

        self.to = np.dtype(tensor_dtype_to_np_dtype(int(self.attr("to"))))
        if self.to not in DEVICE_DTYPES:
            self.decline(f"does not cast to {self.to}")

    def compute(self, x):
        return x.astype(self.to)
