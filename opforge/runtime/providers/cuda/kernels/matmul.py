"""MatMul and Gemm through the device's matmul (cuBLAS under cupy)."""
from opforge.runtime.providers.cuda.kernel import CudaKernel, cuda_kernel


@cuda_kernel("MatMul", since=1)
class MatMul(CudaKernel):
    def compute(self, a, b):
        return self.xp.matmul(a, b)


@cuda_kernel("Gemm", since=7)
class Gemm(CudaKernel):
    """Y = alpha * A' B' + beta * C, A' and B' transposed when transA / transB say so."""

    def setup(self, node, opset):
        self.alpha = float(self.attr("alpha", 1.0))
        self.beta = float(self.attr("beta", 1.0))
        self.trans_a, self.trans_b = bool(self.attr("transA", 0)), bool(self.attr("transB", 0))

    def compute(self, a, b, c=None):
        y = self.xp.matmul(a.T if self.trans_a else a, b.T if self.trans_b else b)
        if self.alpha != 1.0:
            y *= y.dtype.type(self.alpha)
        if c is not None and self.beta != 0.0:
            y += c if self.beta == 1.0 else c * c.dtype.type(self.beta)
        return y
