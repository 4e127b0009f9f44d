// quant_matmul.h: batched 8-bit matrix products (numpy matmul shapes) on the int8 GEMM, shared by
// MatMulInteger, QLinearMatMul and com.microsoft's MatMulIntegerToFloat and DynamicQuantizeMatMul.
#pragma once

#include <algorithm>
#include <vector>

#include "quantization/quant_gemm.h"

namespace opforge_quant {

/// A (batch_a..., M, K) times B (batch_b..., K, N), with 1-D operands promoted as numpy does.
struct QMatMulShape {
  Shape batch_a, batch_b, batch;
  int64_t m = 1, n = 1, k = 1;
  bool a_vector = false, b_vector = false;

  /// The output's shape: the broadcast batch dims, then M and N unless promoted.
  Shape output() const {
    Shape out = batch;
    if (!a_vector) out.push_back(m);
    if (!b_vector) out.push_back(n);
    return out;
  }
};

inline QMatMulShape qmatmul_shape(const Tensor& a, const Tensor& b) {
  OPFORGE_CHECK(a.ndim() >= 1 && b.ndim() >= 1, "inputs A and B must have rank >= 1, got ranks ", a.ndim(), " and ",
                b.ndim());
  QMatMulShape s;
  Shape as = a.sizes(), bs = b.sizes();
  s.a_vector = as.size() == 1;
  s.b_vector = bs.size() == 1;
  if (s.a_vector) as.insert(as.begin(), 1);
  if (s.b_vector) bs.push_back(1);
  s.m = as[as.size() - 2], s.k = as.back(), s.n = bs.back();
  const int64_t kb = bs[bs.size() - 2];
  OPFORGE_CHECK(s.k < 0 || kb < 0 || s.k == kb, "inner dimensions differ: A has K=", s.k, " but B has K=", kb);
  s.batch_a.assign(as.begin(), as.end() - 2);
  s.batch_b.assign(bs.begin(), bs.end() - 2);
  s.batch = opforge_cpu::broadcast_batch(s.batch_a, s.batch_b);
  return s;
}

/// Checks that a zero point (or scale) input holds one value, or one per `what` along its last
/// axis (shape (count) or (1, count), as onnxruntime writes per-column parameters), naming it.
template <class Ctx> void expect_scalar_or(const Ctx& ctx, int i, const char* name, int64_t count, const char* what) {
  if (!ctx.has_input(i)) return;
  const Tensor t = ctx.input(i);
  int64_t leading = 1;
  for (int d = 0; d + 1 < t.ndim(); ++d) leading *= t.size(d);
  const int64_t last = t.ndim() == 0 ? 1 : t.size(-1);
  OPFORGE_CHECK(t.ndim() <= 2 && leading == 1 && (last == 1 || last == count || last < 0 || count < 0), "input ",
                name, " must be a scalar or hold one value per ", what, " (", count, "), got rank ", t.ndim(),
                " with ", last, " values along its last axis");
}

/// acc (batch * M * N int32) = the batched product of A and B less their zero points; B is
/// packed once per distinct matrix (once in all when it has no batch dims, as a weight).
inline void qmatmul(const KernelContext& ctx, const QMatMulShape& s, const Tensor& a, const Tensor& b,
                    const std::vector<int32_t>& za, const std::vector<int32_t>& zb, int32_t* acc) {
  const Shape strides[2] = {opforge_cpu::broadcast_strides(s.batch_a, s.batch),
                            opforge_cpu::broadcast_strides(s.batch_b, s.batch)};
  std::vector<int64_t> a_off, b_off;
  opforge_cpu::for_each_broadcast(s.batch, strides, [&](int64_t, const int64_t* offs) {
    a_off.push_back(offs[0] * s.m * s.k);
    b_off.push_back(offs[1] * s.k * s.n);
  });
  const auto* a_data = static_cast<const uint8_t*>(a.raw());
  const auto* b_data = static_cast<const uint8_t*>(b.raw());
  const bool a_signed = a.dtype() == OPF_INT8, b_signed = b.dtype() == OPF_INT8;
  // A not broadcast and one B: a single GEMM over the stacked rows of A.
  if (opforge_cpu::numel(s.batch_b) == 1 && opforge_cpu::numel(s.batch_a) == opforge_cpu::numel(s.batch) &&
      za.size() == 1) {
    static thread_local PackedB pb;
    pack_b(ctx, Q8Matrix{b_data, s.n, b_signed}, s.k, s.n, pb);
    qgemm(ctx, int64_t(a_off.size()) * s.m, Q8Matrix{a_data, s.k, a_signed}, za, pb, zb, acc, s.n);
    return;
  }
  int64_t packed_at = -1;
  static thread_local PackedB pb;
  for (size_t i = 0; i < a_off.size(); ++i) {
    if (b_off[i] != packed_at) pack_b(ctx, Q8Matrix{b_data + b_off[i], s.n, b_signed}, s.k, s.n, pb);
    packed_at = b_off[i];
    qgemm(ctx, s.m, Q8Matrix{a_data + a_off[i], s.k, a_signed}, za, pb, zb, acc + int64_t(i) * s.m * s.n, s.n);
  }
}

}  // namespace opforge_quant
