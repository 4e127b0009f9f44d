"""Reductions over axes (from an attribute, or an input read on the host in newer opsets)."""
import numpy as np

from opforge.runtime.providers.cuda.kernel import CudaKernel, cuda_kernel

# op type -> (the array method, the opset from which axes come as an input)
_REDUCTIONS = {"ReduceSum": ("sum", 13), "ReduceMean": ("mean", 18), "ReduceMax": ("max", 18),
               "ReduceMin": ("min", 18), "ReduceProd": ("prod", 18)}


def _reduction(op_type: str, method: str, axes_input_since: int):
    @cuda_kernel(op_type, since=1)
    class Reduce(CudaKernel):
        host_inputs = (1,)

        def setup(self, node, opset):
            self.keepdims = bool(self.attr("keepdims", 1))
            self.noop = bool(self.attr("noop_with_empty_axes", 0))
            self.axes_attr = None if opset >= axes_input_since else self.attr("axes")

        def compute(self, x, axes=None):
            axes = self.axes_attr if axes is None else np.asarray(axes).tolist()
            if axes is not None and len(axes) == 0:
                axes = None
            if axes is None and self.noop:
                return x
            axes = None if axes is None else tuple(int(a) % max(x.ndim, 1) for a in axes)
            return getattr(x, method)(axis=axes, keepdims=self.keepdims)

    Reduce.__name__ = Reduce.__qualname__ = op_type
    return Reduce


for _name, (_method, _since) in _REDUCTIONS.items():
    _reduction(_name, _method, _since)


class _Arg(CudaKernel):
    def setup(self, node, opset):
        if int(self.attr("select_last_index", 0)):
            self.decline("does not do select_last_index")
        self.axis, self.keepdims = int(self.attr("axis", 0)), bool(self.attr("keepdims", 1))

    def reduce(self, x, fn):
        out = fn(x, axis=self.axis).astype(np.int64)
        return self.xp.expand_dims(out, self.axis) if self.keepdims else out


@cuda_kernel("ArgMax", since=1)
class ArgMax(_Arg):
    def compute(self, x):
        return self.reduce(x, self.xp.argmax)


@cuda_kernel("ArgMin", since=1)
class ArgMin(_Arg):
    def compute(self, x):
        return self.reduce(x, self.xp.argmin)
