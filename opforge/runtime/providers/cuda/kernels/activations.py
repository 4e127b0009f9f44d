"""Activations and logic ops, so transformer and CNN graphs stay on the GPU instead of crossing
to the CPU for one Erf or one HardSigmoid."""
import math

import numpy as np

from opforge.runtime.providers.cuda.kernel import CudaKernel, cuda_kernel


def erf(xp, x):
    """erf on the device (cupyx's special functions), in x's dtype: cupyx's erf has no float16
    loop (float16 comes back float32, or float64 from cupy 14), so its result is cast back. With
    numpy, the stand-in GPU of the tests, the standard library's erf element by element."""
    if xp is np:
        return np.frompyfunc(math.erf, 1, 1)(x).astype(x.dtype)
    import cupyx.scipy.special

    return cupyx.scipy.special.erf(x).astype(x.dtype, copy=False)


def _one(x, value):
    return x.dtype.type(value)


def _softplus(xp, x):
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|): e^x overflows float16 from x = 11."""
    return xp.maximum(x, _one(x, 0)) + xp.log1p(xp.exp(-xp.abs(x)))


# op type -> (since, attribute defaults, fn(xp, x, attrs)); formulas as the ONNX spec writes them
_ACTIVATIONS = {
    "Erf": (9, {}, lambda xp, x, a: erf(xp, x)),
    "Sin": (7, {}, lambda xp, x, a: xp.sin(x)),
    "Cos": (7, {}, lambda xp, x, a: xp.cos(x)),
    "Sign": (9, {}, lambda xp, x, a: xp.sign(x)),
    "Round": (11, {}, lambda xp, x, a: xp.round(x)),   # half to even, as ONNX asks
    "Softplus": (1, {}, lambda xp, x, a: _softplus(xp, x)),
    "Softsign": (1, {}, lambda xp, x, a: x / (_one(x, 1) + xp.abs(x))),
    "Mish": (18, {}, lambda xp, x, a: x * xp.tanh(_softplus(xp, x))),
    "Elu": (6, {"alpha": 1.0}, lambda xp, x, a: xp.where(x >= 0, x, _one(x, a["alpha"]) * xp.expm1(x))),
    "Celu": (12, {"alpha": 1.0}, lambda xp, x, a: xp.maximum(x, _one(x, 0)) + xp.minimum(
        _one(x, 0), _one(x, a["alpha"]) * xp.expm1(x / _one(x, a["alpha"])))),
    "Selu": (6, {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875},
             lambda xp, x, a: _one(x, a["gamma"]) * xp.where(x > 0, x, _one(x, a["alpha"]) * xp.expm1(x))),
    "ThresholdedRelu": (10, {"alpha": 1.0}, lambda xp, x, a: xp.where(x > _one(x, a["alpha"]), x, _one(x, 0))),
    "HardSigmoid": (6, {"alpha": 0.2, "beta": 0.5}, lambda xp, x, a: xp.clip(
        _one(x, a["alpha"]) * x + _one(x, a["beta"]), _one(x, 0), _one(x, 1))),
    "HardSwish": (14, {}, lambda xp, x, a: x * xp.clip(x / _one(x, 6) + _one(x, 0.5), _one(x, 0), _one(x, 1))),
    "Gelu": (20, {"approximate": "none"}, lambda xp, x, a: _gelu(xp, x, a["approximate"])),
}


def _gelu(xp, x, approximate: str):
    if approximate == "tanh":
        inner = _one(x, math.sqrt(2 / math.pi)) * (x + _one(x, 0.044715) * x * x * x)
        return _one(x, 0.5) * x * (_one(x, 1) + xp.tanh(inner))
    return _one(x, 0.5) * x * (_one(x, 1) + erf(xp, x * _one(x, 1 / math.sqrt(2))))


def _text(value):
    """String attributes arrive as bytes."""
    return value.decode() if isinstance(value, bytes) else value


def _activation(op_type: str, since: int, defaults: dict, fn):
    @cuda_kernel(op_type, since=since)
    class Activation(CudaKernel):
        def setup(self, node, opset):
            self.attrs = {name: _text(self.attr(name, default)) for name, default in defaults.items()}
            if self.attrs.get("approximate", "none") not in ("none", "tanh"):
                self.decline(f"does not know approximate={self.attrs['approximate']!r}")

        def compute(self, x):
            return fn(self.xp, x, self.attrs)

    Activation.__name__ = Activation.__qualname__ = op_type
    return Activation


for _name, (_since, _defaults, _fn) in _ACTIVATIONS.items():
    _activation(_name, _since, _defaults, _fn)


@cuda_kernel("PRelu", since=9)
class PRelu(CudaKernel):
    def compute(self, x, slope):
        return self.xp.where(x < 0, x * slope, x).astype(x.dtype)


BOOL = (np.dtype(bool),)
_LOGIC = {"And": lambda xp, a, b: a & b, "Or": lambda xp, a, b: a | b, "Xor": lambda xp, a, b: a ^ b}


def _logic(op_type: str, fn):
    @cuda_kernel(op_type, since=7)
    class Logic(CudaKernel):
        dtypes = BOOL

        def compute(self, a, b):
            return fn(self.xp, a, b)

    Logic.__name__ = Logic.__qualname__ = op_type
    return Logic


for _name, _fn in _LOGIC.items():
    _logic(_name, _fn)


@cuda_kernel("Not", since=1)
class Not(CudaKernel):
    dtypes = BOOL

    def compute(self, x):
        return ~x
