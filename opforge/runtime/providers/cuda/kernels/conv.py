"""2-D convolution as im2col plus one batched matrix product (cuBLAS under cupy).

cupy 14 has no cuDNN binding, so this is the path on every cupy; 1x1 convolutions with unit
stride skip the im2col copy. Convolutions of other ranks go to the CPU provider.
"""
from opforge.runtime.providers.cuda.kernel import CudaKernel, cuda_kernel
from opforge.runtime.providers.cuda.kernels.windows import padded, pads_for, windows


@cuda_kernel("Conv", since=1)
class Conv(CudaKernel):
    def setup(self, node, opset):
        x_type = node.input_types[0] if node.input_types else None
        if getattr(x_type, "shape", None) is None or len(x_type.shape) != 4:
            self.decline("runs 2-D (NCHW) convolutions only")
        self.group = int(self.attr("group", 1))
        self.strides = tuple(int(s) for s in self.attr("strides", [1, 1]))
        self.dilations = tuple(int(d) for d in self.attr("dilations", [1, 1]))

    def compute(self, x, w, b=None):
        xp = self.xp
        n, m, kernel = x.shape[0], w.shape[0], tuple(w.shape[2:])
        pads = pads_for(self.node, x.shape[2:], kernel, self.strides, self.dilations)
        cols = windows(xp, padded(xp, x, pads), kernel, self.strides, self.dilations)
        oh, ow = cols.shape[4], cols.shape[5]
        g = self.group
        depth = w.shape[1] * kernel[0] * kernel[1]
        if kernel == (1, 1) and self.strides == (1, 1):
            cols = cols.reshape(n, g, depth, oh * ow)
        else:
            cols = xp.ascontiguousarray(cols).reshape(n, g, depth, oh * ow)
        y = xp.matmul(w.reshape(g, m // g, depth), cols).reshape(n, m, oh, ow)
        if b is not None:
            y += b.reshape(1, m, 1, 1)
        return y
