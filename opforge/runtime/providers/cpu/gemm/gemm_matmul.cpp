// gemm_matmul.cpp: the MatMul kernel (numpy matmul: 1-D promotion, broadcast batch dims) on
// OpenBLAS for float32/float64 (and float16/bfloat16, widened to float32) and plain loops for
// the integer types.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/common.h"
#include "gemm/gemm_blas.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;
using opforge_cpu::Shape;

/// Both operands as batched matrices: A (batch_a..., M, K), B (batch_b..., K, N).
struct MatMulShape {
  Shape batch_a, batch_b, batch;  ///< the operands' batch dims and their broadcast
  int64_t m = 1, n = 1, k = 1;
  bool a_vector = false, b_vector = false;  ///< 1-D operands, whose promoted dim is dropped
};

MatMulShape matmul_shape(const Tensor& a, const Tensor& b) {
  OPFORGE_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "MatMul inputs must have rank >= 1, got ranks ", a.ndim(),
                " and ", b.ndim());
  OPFORGE_CHECK(a.dtype() == b.dtype(), "inputs A and B differ in dtype: ", opforge::dtype_name(a.dtype()),
                " and ", opforge::dtype_name(b.dtype()));
  MatMulShape s;
  Shape as = a.sizes(), bs = b.sizes();
  s.a_vector = as.size() == 1;
  s.b_vector = bs.size() == 1;
  if (s.a_vector) as.insert(as.begin(), 1);
  if (s.b_vector) bs.push_back(1);
  s.m = as[as.size() - 2];
  s.k = as.back();
  s.n = bs.back();
  const int64_t kb = bs[bs.size() - 2];
  OPFORGE_CHECK(s.k < 0 || kb < 0 || s.k == kb, "inner dimensions differ: A has K=", s.k, " but B has K=", kb);
  s.batch_a.assign(as.begin(), as.end() - 2);
  s.batch_b.assign(bs.begin(), bs.end() - 2);
  s.batch = opforge_cpu::broadcast_batch(s.batch_a, s.batch_b);
  return s;
}

void matmul_infer(InferContext& ctx) {
  const MatMulShape s = matmul_shape(ctx.input(0), ctx.input(1));
  Shape out = s.batch;
  if (!s.a_vector) out.push_back(s.m);
  if (!s.b_vector) out.push_back(s.n);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

/// Element offsets of each output batch's A and B matrices.
void batch_offsets(const MatMulShape& s, std::vector<int64_t>* a_off, std::vector<int64_t>* b_off) {
  const Shape strides[2] = {opforge_cpu::broadcast_strides(s.batch_a, s.batch),
                            opforge_cpu::broadcast_strides(s.batch_b, s.batch)};
  const int64_t a_mat = s.m * s.k, b_mat = s.k * s.n;
  opforge_cpu::for_each_broadcast(s.batch, strides, [&](int64_t, const int64_t* offs) {
    a_off->push_back(offs[0] * a_mat);
    b_off->push_back(offs[1] * b_mat);
  });
}

template <class T>
void matmul_blas(KernelContext& ctx, const MatMulShape& s, const T* a, const T* b, T* y) {
  const int64_t batch = opforge_cpu::numel(s.batch), threads = ctx.num_threads();
  // B shared by every batch, A not broadcast: one GEMM over the stacked rows of A.
  if (opforge_cpu::numel(s.batch_b) == 1 && opforge_cpu::numel(s.batch_a) == batch) {
    opforge_nn::check_blas_dims(batch * s.m, s.n, s.k);
    opforge_nn::parallel_matmul(ctx, false, false, batch * s.m, s.n, s.k, T(1), a, s.k, b, s.n, T(0), y, s.n);
    return;
  }
  opforge_nn::check_blas_dims(s.m, s.n, s.k);
  std::vector<int64_t> a_off, b_off;
  batch_offsets(s, &a_off, &b_off);
  // Many or small matrices: one thread per matrix; else each matrix is split across threads.
  const bool small = s.m * s.n * s.k < (1 << 20);
  if (threads > 1 && (batch % threads == 0 || batch >= 4 * threads || (small && batch >= threads))) {
    opforge_nn::blas_threads(1);
    ctx.parallel_for(batch, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        opforge_nn::matmul(false, false, s.m, s.n, s.k, T(1), a + a_off[size_t(i)], s.k, b + b_off[size_t(i)], s.n,
                           T(0), y + i * s.m * s.n, s.n);
    });
    return;
  }
  for (int64_t i = 0; i < batch; ++i)
    opforge_nn::parallel_matmul(ctx, false, false, s.m, s.n, s.k, T(1), a + a_off[size_t(i)], s.k,
                                b + b_off[size_t(i)], s.n, T(0), y + i * s.m * s.n, s.n);
}

/// Integer MatMul: plain row-times-matrix loops (the inner loop over N vectorises).
template <class T>
void matmul_ints(KernelContext& ctx, const MatMulShape& s, const T* a, const T* b, T* y) {
  std::vector<int64_t> a_off, b_off;
  batch_offsets(s, &a_off, &b_off);
  const int64_t rows = int64_t(a_off.size()) * s.m;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.n * s.k));
  ctx.parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t bi = r / s.m, i = r % s.m;
      const T* ar = a + a_off[size_t(bi)] + i * s.k;
      const T* bm = b + b_off[size_t(bi)];
      T* yr = y + r * s.n;
      std::fill(yr, yr + s.n, T(0));
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const T av = ar[kk];
        const T* br = bm + kk * s.n;
        for (int64_t j = 0; j < s.n; ++j) yr[j] += av * br[j];
      }
    }
  });
}

/// The n elements at p, widened to float.
template <class H> std::vector<float> widened(const H* p, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = opforge::to_float(p[i]);
  return out;
}

/// float16/bfloat16: the float32 product of the widened operands (float accumulation, as
/// onnxruntime's MLAS does), rounded once per element.
template <class H> void matmul_half(KernelContext& ctx, const MatMulShape& s, const Tensor& a, const Tensor& b,
                                    const Tensor& y) {
  H* out = y.data<H>();
  if (s.k == 0) {
    std::fill(out, out + y.numel(), opforge::from_float(0.f, H{}));
    return;
  }
  const std::vector<float> fa = widened(a.data<H>(), a.numel()), fb = widened(b.data<H>(), b.numel());
  std::vector<float> fy(static_cast<size_t>(y.numel()));
  matmul_blas<float>(ctx, s, fa.data(), fb.data(), fy.data());
  for (int64_t i = 0; i < y.numel(); ++i) out[i] = opforge::from_float(fy[size_t(i)], H{});
}

void matmul_compute(KernelContext& ctx) {
  const Tensor a = ctx.input(0), b = ctx.input(1), y = ctx.output(0);
  const MatMulShape s = matmul_shape(a, b);
  if (y.numel() == 0) return;
  if (opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(y.dtype(), [&](auto tag) {
        matmul_half<typename decltype(tag)::type>(ctx, s, a, b, y);
      }))
    return;
  const bool ok = opforge::dispatch<float, double, int32_t, int64_t, uint32_t, uint64_t>(y.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* out = y.data<T>();
    if (s.k == 0) {
      std::fill(out, out + y.numel(), T(0));
    } else if constexpr (std::is_floating_point_v<T>) {
      matmul_blas<T>(ctx, s, a.data<T>(), b.data<T>(), out);
    } else {
      matmul_ints<T>(ctx, s, a.data<T>(), b.data<T>(), out);
    }
  });
  OPFORGE_CHECK(ok, "MatMul does not support dtype ", opforge::dtype_name(y.dtype()));
}

}  // namespace
// Opset 9 adds the integers and bfloat16.
OPFORGE_OP(MatMul)
    .since(1)
    .doc("Matrix product with numpy semantics (1-D promotion, broadcast batch dims).")
    .input("A", {opforge::f32, opforge::f64, opforge::f16})
    .dtypes_since(9, {opforge::i32, opforge::i64, opforge::u32, opforge::u64, opforge::bf16})
    .input("B", {opforge::f32, opforge::f64, opforge::f16})
    .dtypes_since(9, {opforge::i32, opforge::i64, opforge::u32, opforge::u64, opforge::bf16})
    .output("Y")
    .infer(matmul_infer)
    .compute(matmul_compute);
