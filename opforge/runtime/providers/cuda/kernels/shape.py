"""Data movement: Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Concat, Gather,
Slice, and Shape (whose output is small and lives on the host). Shapes, axes and starts are
read on the host; views are returned where the array module gives them."""
import numpy as np

from opforge.runtime.providers.cuda.kernel import DEVICE_DTYPES, CudaKernel, cuda_kernel


def _ints(value) -> list:
    return [int(v) for v in np.asarray(value).reshape(-1)]


class _Movement(CudaKernel):
    dtypes = DEVICE_DTYPES   # any dtype a cupy array holds; strings stay on the CPU


@cuda_kernel("Transpose", since=1)
class Transpose(_Movement):
    def compute(self, x):
        perm = self.attr("perm")
        return self.xp.transpose(x, None if perm is None else [int(p) for p in perm])


@cuda_kernel("Reshape", since=5)
class Reshape(_Movement):
    host_inputs = (1,)

    def compute(self, x, shape):
        dims = _ints(shape)
        if not int(self.attr("allowzero", 0)):
            dims = [x.shape[i] if d == 0 else d for i, d in enumerate(dims)]
        return x.reshape(dims)


@cuda_kernel("Flatten", since=1)
class Flatten(_Movement):
    def compute(self, x):
        axis = int(self.attr("axis", 1))
        axis = axis + x.ndim if axis < 0 else axis   # -1 is the last axis, as in [-r, r]
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        return x.reshape(rows, int(np.prod(x.shape[axis:], dtype=np.int64)))


@cuda_kernel("Squeeze", since=1)
class Squeeze(_Movement):
    host_inputs = (1,)

    def compute(self, x, axes=None):
        axes = self.attr("axes") if axes is None and self.opset < 13 else axes
        if axes is None:
            return self.xp.squeeze(x)
        return self.xp.squeeze(x, axis=tuple(a % x.ndim for a in _ints(axes)))


@cuda_kernel("Unsqueeze", since=1)
class Unsqueeze(_Movement):
    host_inputs = (1,)

    def compute(self, x, axes=None):
        axes = _ints(self.attr("axes") if axes is None else axes)
        rank = x.ndim + len(axes)
        shape = list(x.shape)
        for axis in sorted(a % rank for a in axes):
            shape.insert(axis, 1)
        return x.reshape(shape)


@cuda_kernel("Expand", since=8)
class Expand(_Movement):
    host_inputs = (1,)

    def compute(self, x, shape):
        target = np.broadcast_shapes(tuple(x.shape), tuple(_ints(shape)))
        return self.xp.broadcast_to(x, target).copy()


@cuda_kernel("Concat", since=4)
class Concat(_Movement):
    def compute(self, *xs):
        axis = int(self.attr("axis"))
        return self.xp.concatenate(xs, axis=axis % xs[0].ndim)


@cuda_kernel("Gather", since=1)
class Gather(_Movement):
    def compute(self, data, indices):
        axis = int(self.attr("axis", 0)) % data.ndim
        indices = self.xp.asarray(indices)
        indices = self.xp.where(indices < 0, indices + data.shape[axis], indices)
        return self.xp.take(data, indices, axis=axis)


@cuda_kernel("Slice", since=10)
class Slice(_Movement):
    host_inputs = (1, 2, 3, 4)

    def compute(self, x, starts, ends, axes=None, steps=None):
        starts, ends = _ints(starts), _ints(ends)
        axes = _ints(axes) if axes is not None else list(range(len(starts)))
        steps = _ints(steps) if steps is not None else [1] * len(starts)
        index = [slice(None)] * x.ndim
        for start, end, axis, step in zip(starts, ends, axes, steps):
            index[axis % x.ndim] = slice(start, end, step)
        return x[tuple(index)]


@cuda_kernel("Shape", since=1)
class Shape(_Movement):
    host_outputs = (0,)

    def compute(self, x):
        start, end = int(self.attr("start", 0)), self.attr("end")
        dims = list(x.shape)[start:None if end is None else int(end)]
        return np.array(dims, dtype=np.int64)
