// gemm.cpp: the Gemm kernel (alpha * op(A) * op(B) + beta * C) on OpenBLAS sgemm/dgemm
// (float16/bfloat16 widened to float32 for sgemm).
#include <algorithm>
#include <vector>

#include "common/common.h"
#include "gemm/gemm_blas.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

struct GemmDims {
  int64_t m, n, k;
};

/// M, N and K of op(A) (M x K) times op(B) (K x N); -1 where a dim is unknown.
GemmDims gemm_dims(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  OPFORGE_CHECK(a.ndim() == 2, "input A must be 2-D, got rank ", a.ndim());
  OPFORGE_CHECK(b.ndim() == 2, "input B must be 2-D, got rank ", b.ndim());
  OPFORGE_CHECK(a.dtype() == b.dtype(), "inputs A and B differ in dtype: ", opforge::dtype_name(a.dtype()),
                " and ", opforge::dtype_name(b.dtype()));
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const int64_t kb = tb ? b.size(1) : b.size(0), n = tb ? b.size(0) : b.size(1);
  OPFORGE_CHECK(k < 0 || kb < 0 || k == kb, "inner dimensions differ: op(A) is ", m, "x", k, " but op(B) is ",
                kb, "x", n);
  return {m, n, k};
}

/// Checks that C broadcasts to (M, N) in one direction, as Gemm requires.
void check_bias(const Tensor& c, const Tensor& a, const GemmDims& d) {
  OPFORGE_CHECK(c.dtype() == a.dtype(), "input C has dtype ", opforge::dtype_name(c.dtype()), "; expected ",
                opforge::dtype_name(a.dtype()));
  OPFORGE_CHECK(c.ndim() <= 2, "input C must have rank 0, 1 or 2, got ", c.ndim());
  const int64_t cols = c.ndim() >= 1 ? c.size(-1) : 1, rows = c.ndim() == 2 ? c.size(0) : 1;
  OPFORGE_CHECK(cols == 1 || cols == d.n || cols < 0 || d.n < 0, "input C has ", cols,
                " columns, which do not broadcast to N=", d.n);
  OPFORGE_CHECK(rows == 1 || rows == d.m || rows < 0 || d.m < 0, "input C has ", rows,
                " rows, which do not broadcast to M=", d.m);
}

void gemm_infer(InferContext& ctx) {
  const Tensor a = ctx.input(0), b = ctx.input(1);
  const GemmDims d = gemm_dims(a, b, ctx.attr<int64_t>("transA") != 0, ctx.attr<int64_t>("transB") != 0);
  if (ctx.has_input(2)) check_bias(ctx.input(2), a, d);
  ctx.set_output(0, a.dtype(), {d.m, d.n});
}

/// y (M x N) = C (its elements at cp) broadcast to (M, N).
template <class T>
void broadcast_bias(const Tensor& c, const T* cp, int64_t m, int64_t n, T* y) {
  const int64_t cols = c.ndim() >= 1 ? c.size(-1) : 1, rows = c.ndim() == 2 ? c.size(0) : 1;
  for (int64_t i = 0; i < m; ++i) {
    const T* src = cp + (rows == 1 ? 0 : i * cols);
    T* dst = y + i * n;
    if (cols == n)
      std::copy(src, src + n, dst);
    else
      std::fill(dst, dst + n, src[0]);
  }
}

/// The Gemm on elements of type T at a, b, c (c null without C) into out.
template <class T>
void gemm_run(KernelContext& ctx, const T* ap, const T* bp, const T* cp, T* out) {
  const Tensor a = ctx.input(0), b = ctx.input(1);
  const bool ta = ctx.attr<int64_t>("transA") != 0, tb = ctx.attr<int64_t>("transB") != 0;
  const T alpha = ctx.attr<float>("alpha"), beta = ctx.attr<float>("beta");
  const GemmDims d = gemm_dims(a, b, ta, tb);
  if (d.m == 0 || d.n == 0) return;
  const bool with_c = cp != nullptr && beta != T(0);
  if (with_c) broadcast_bias(ctx.input(2), cp, d.m, d.n, out);
  if (d.k == 0) {  // op(A) * op(B) is all zeros
    for (int64_t i = 0; i < d.m * d.n; ++i) out[i] = with_c ? beta * out[i] : T(0);
    return;
  }
  opforge_nn::check_blas_dims(d.m, d.n, d.k);
  opforge_nn::parallel_matmul(ctx, ta, tb, d.m, d.n, d.k, alpha, ap, a.size(1), bp, b.size(1),
                              with_c ? beta : T(0), out, d.n);
}

/// A tensor's elements widened to float (float16/bfloat16 Gemm runs on sgemm, rounded once).
template <class H> std::vector<float> widened(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const H* p = t.data<H>();
  for (size_t i = 0; i < out.size(); ++i) out[i] = opforge::to_float(p[i]);
  return out;
}

void gemm_compute(KernelContext& ctx) {
  const bool has_c = ctx.has_input(2);
  const bool ok = opforge::dispatch<float, double>(ctx.input(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    gemm_run<T>(ctx, ctx.input(0).data<T>(), ctx.input(1).data<T>(), has_c ? ctx.input(2).data<T>() : nullptr,
                ctx.output(0).data<T>());
  }) || opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(ctx.input(0).dtype(), [&](auto tag) {
    using H = typename decltype(tag)::type;
    const std::vector<float> a = widened<H>(ctx.input(0)), b = widened<H>(ctx.input(1));
    const std::vector<float> c = has_c ? widened<H>(ctx.input(2)) : std::vector<float>();
    const Tensor y = ctx.output(0);
    std::vector<float> out(static_cast<size_t>(y.numel()));
    gemm_run<float>(ctx, a.data(), b.data(), has_c ? c.data() : nullptr, out.data());
    H* yp = y.data<H>();
    for (size_t i = 0; i < out.size(); ++i) yp[i] = opforge::from_float(out[i], H{});
  });
  OPFORGE_CHECK(ok, "Gemm supports float32, float64, float16 and bfloat16, got ",
                opforge::dtype_name(ctx.input(0).dtype()));
}

}  // namespace

// Opset 7 dropped broadcast (C always broadcasts); 11 made C optional.
OPFORGE_OP(Gemm)
    .since(1)
    .doc("Y = alpha * op(A) * op(B) + beta * C, C optional and broadcast to (M, N).")
    .input("A", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("B", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .optional_input("C", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .attr("alpha", 1.0f)
    .attr("beta", 1.0f)
    .attr("broadcast", int64_t(0)).attr_versions(1, 6)
    .attr("transA", int64_t(0))
    .attr("transB", int64_t(0))
    .infer(gemm_infer)
    .compute(gemm_compute);
