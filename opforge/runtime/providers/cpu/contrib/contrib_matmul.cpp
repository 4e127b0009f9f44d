// contrib_matmul.cpp: com.microsoft's FusedMatMul (what onnxruntime folds a Transpose and a scalar
// Mul or Div into): Y = alpha * op(A) @ op(B), numpy batch broadcasting, on OpenBLAS.
#include <vector>

#include "gemm/gemm_blas.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;
using opforge_cpu::Shape;

/// The product's dims once A and B are transposed as asked; 1-D operands are promoted as numpy does.
struct FusedShape {
  Shape batch_a, batch_b, batch;
  int64_t m = 1, n = 1, k = 1;
  bool ta = false, tb = false, a_vector = false, b_vector = false;
};

template <class Ctx> FusedShape fused_shape(const Ctx& ctx) {
  const Tensor a = ctx.input(0), b = ctx.input(1);
  OPFORGE_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "inputs A and B must have rank >= 1");
  OPFORGE_CHECK(a.dtype() == b.dtype(), "inputs A and B differ in dtype");
  OPFORGE_CHECK(ctx.template attr<int64_t>("transBatchA") == 0 && ctx.template attr<int64_t>("transBatchB") == 0,
                "attributes transBatchA and transBatchB are not supported");
  FusedShape s;
  Shape as = a.sizes(), bs = b.sizes();
  s.a_vector = as.size() == 1, s.b_vector = bs.size() == 1;
  s.ta = !s.a_vector && ctx.template attr<int64_t>("transA") != 0;
  s.tb = !s.b_vector && ctx.template attr<int64_t>("transB") != 0;
  if (s.a_vector) as.insert(as.begin(), 1);
  if (s.b_vector) bs.push_back(1);
  const size_t ra = as.size(), rb = bs.size();
  s.m = s.ta ? as[ra - 1] : as[ra - 2], s.k = s.ta ? as[ra - 2] : as[ra - 1];
  s.n = s.tb ? bs[rb - 2] : bs[rb - 1];
  const int64_t kb = s.tb ? bs[rb - 1] : bs[rb - 2];
  OPFORGE_CHECK(s.k < 0 || kb < 0 || s.k == kb, "inner dimensions differ: A has K=", s.k, " but B has K=", kb);
  s.batch_a.assign(as.begin(), as.end() - 2);
  s.batch_b.assign(bs.begin(), bs.end() - 2);
  s.batch = opforge_cpu::broadcast_batch(s.batch_a, s.batch_b);
  return s;
}

void fused_matmul_infer(InferContext& ctx) {
  const FusedShape s = fused_shape(ctx);
  Shape out = s.batch;
  if (!s.a_vector) out.push_back(s.m);
  if (!s.b_vector) out.push_back(s.n);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

template <class T> void fused_matmul_run(KernelContext& ctx, const FusedShape& s, const T* a, const T* b, T* y) {
  const Shape strides[2] = {opforge_cpu::broadcast_strides(s.batch_a, s.batch),
                            opforge_cpu::broadcast_strides(s.batch_b, s.batch)};
  std::vector<int64_t> a_off, b_off;
  opforge_cpu::for_each_broadcast(s.batch, strides, [&](int64_t, const int64_t* offs) {
    a_off.push_back(offs[0] * s.m * s.k);
    b_off.push_back(offs[1] * s.k * s.n);
  });
  const T alpha = T(ctx.attr<float>("alpha"));
  opforge_nn::check_blas_dims(s.m, s.n, s.k);
  if (a_off.size() == 1)
    return opforge_nn::parallel_matmul(ctx, s.ta, s.tb, s.m, s.n, s.k, alpha, a + a_off[0], s.ta ? s.m : s.k,
                                       b + b_off[0], s.tb ? s.k : s.n, T(0), y, s.n);
  opforge_nn::blas_threads(1);
  ctx.parallel_for(int64_t(a_off.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      opforge_nn::matmul(s.ta, s.tb, s.m, s.n, s.k, alpha, a + a_off[size_t(i)], s.ta ? s.m : s.k,
                         b + b_off[size_t(i)], s.tb ? s.k : s.n, T(0), y + i * s.m * s.n, s.n);
  });
}

void fused_matmul_compute(KernelContext& ctx) {
  const FusedShape s = fused_shape(ctx);
  const Tensor y = ctx.output(0);
  if (y.numel() == 0) return;
  const bool ok = opforge::dispatch<float, double>(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = y.data<T>();
    if (s.k == 0) return std::fill(out, out + y.numel(), T(0));
    fused_matmul_run<T>(ctx, s, ctx.input(0).data<T>(), ctx.input(1).data<T>(), out);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(y.dtype()));
}

}  // namespace

OPFORGE_OP(FusedMatMul)
    .domain("com.microsoft")
    .since(1)
    .doc("Y = alpha * op(A) @ op(B) with op() an optional transpose of the last two dims.")
    .input("A", {opforge::f32, opforge::f64})
    .input("B", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("alpha", 1.0f)
    .attr("transA", int64_t(0))
    .attr("transB", int64_t(0))
    .attr("transBatchA", int64_t(0))
    .attr("transBatchB", int64_t(0))
    .infer(fused_matmul_infer)
    .compute(fused_matmul_compute);
