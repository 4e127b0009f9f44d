"""2-D max and average pooling over window views, and the global poolings."""
from opforge.runtime.providers.cuda.kernel import CudaKernel, cuda_kernel
from opforge.runtime.providers.cuda.kernels.windows import padded, pads_for, windows


class _Pool2d(CudaKernel):
    def setup(self, node, opset):
        x_type = node.input_types[0] if node.input_types else None
        if getattr(x_type, "shape", None) is None or len(x_type.shape) != 4:
            self.decline("pools 2-D (NCHW) inputs only")
        if int(self.attr("ceil_mode", 0)) or len([o for o in node.outputs if o]) > 1:
            self.decline("does not do ceil_mode or MaxPool's Indices output")
        self.kernel = tuple(int(k) for k in self.attr("kernel_shape"))
        self.strides = tuple(int(s) for s in self.attr("strides", [1, 1]))
        self.dilations = tuple(int(d) for d in self.attr("dilations", [1, 1]))

    def windows(self, x, fill: float):
        pads = pads_for(self.node, x.shape[2:], self.kernel, self.strides, self.dilations)
        return windows(self.xp, padded(self.xp, x, pads, fill), self.kernel, self.strides, self.dilations), pads


@cuda_kernel("MaxPool", since=8)
class MaxPool(_Pool2d):
    def compute(self, x):
        view, _ = self.windows(x, float("-inf"))
        return view.max(axis=(2, 3))


@cuda_kernel("AveragePool", since=7)
class AveragePool(_Pool2d):
    def setup(self, node, opset):
        super().setup(node, opset)
        if any(int(d) != 1 for d in self.attr("dilations", [1, 1])):
            self.decline("does not do dilated average pooling")
        self.include_pad = bool(self.attr("count_include_pad", 0))

    def compute(self, x):
        view, pads = self.windows(x, 0.0)
        sums = view.sum(axis=(2, 3))
        if self.include_pad or not any(pads):
            return sums / x.dtype.type(self.kernel[0] * self.kernel[1])
        ones = self.xp.ones((1, 1) + x.shape[2:], dtype=x.dtype)
        counts, _ = self.windows(ones, 0.0)
        return sums / counts.sum(axis=(2, 3))


@cuda_kernel("GlobalAveragePool", since=1)
class GlobalAveragePool(CudaKernel):
    def compute(self, x):
        return x.mean(axis=tuple(range(2, x.ndim)), keepdims=True)


@cuda_kernel("GlobalMaxPool", since=1)
class GlobalMaxPool(CudaKernel):
    def compute(self, x):
        return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)
