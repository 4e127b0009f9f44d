"""Softmax and LogSoftmax, LayerNormalization, and BatchNormalization for inference."""
import numpy as np

from opforge.runtime.providers.cuda.kernel import CudaKernel, cuda_kernel


class _SoftmaxBase(CudaKernel):
    """Before opset 13 the input is flattened to 2-D at `axis` (default 1); from 13 on the op
    runs along one axis (default -1)."""

    def setup(self, node, opset):
        self.flatten = opset < 13
        self.axis = int(self.attr("axis", 1 if self.flatten else -1))

    def along(self, x, fn):
        if not self.flatten:
            return fn(x, self.axis % x.ndim)
        axis = self.axis % max(x.ndim, 1)
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        return fn(x.reshape(rows, -1), 1).reshape(x.shape)


@cuda_kernel("Softmax", since=1)
class Softmax(_SoftmaxBase):
    def compute(self, x):
        def softmax(v, axis):
            e = self.xp.exp(v - v.max(axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)

        return self.along(x, softmax)


@cuda_kernel("LogSoftmax", since=1)
class LogSoftmax(_SoftmaxBase):
    def compute(self, x):
        def log_softmax(v, axis):
            shifted = v - v.max(axis=axis, keepdims=True)
            return shifted - self.xp.log(self.xp.exp(shifted).sum(axis=axis, keepdims=True))

        return self.along(x, log_softmax)


@cuda_kernel("LayerNormalization", since=17)
class LayerNormalization(CudaKernel):
    """Normalises over the axes from `axis` on, in float32 at least (stash_type 1)."""

    def setup(self, node, opset):
        if len([o for o in node.outputs if o]) > 1:
            self.decline("does not give the Mean and InvStdDev outputs")
        self.axis, self.epsilon = int(self.attr("axis", -1)), float(self.attr("epsilon", 1e-5))

    def compute(self, x, scale, bias=None):
        axes = tuple(range(self.axis % x.ndim, x.ndim))
        wide = x.astype(np.promote_types(x.dtype, np.float32), copy=False)
        mean = wide.mean(axis=axes, keepdims=True)
        centred = wide - mean
        variance = (centred * centred).mean(axis=axes, keepdims=True)
        y = (centred / self.xp.sqrt(variance + self.epsilon)).astype(x.dtype, copy=False) * scale
        return y if bias is None else y + bias


@cuda_kernel("BatchNormalization", since=9)
class BatchNormalization(CudaKernel):
    """Inference form: (x - mean) / sqrt(var + epsilon) * scale + B, per channel (axis 1)."""

    def setup(self, node, opset):
        if int(self.attr("training_mode", 0)) or len([o for o in node.outputs if o]) > 1:
            self.decline("runs the inference form only")
        self.epsilon = float(self.attr("epsilon", 1e-5))

    def compute(self, x, scale, bias, mean, var):
        shape = (1, -1) + (1,) * (x.ndim - 2)
        factor = scale / self.xp.sqrt(var + var.dtype.type(self.epsilon))
        shift = bias - mean * factor
        return x * factor.reshape(shape).astype(x.dtype, copy=False) + shift.reshape(shape).astype(x.dtype, copy=False)
