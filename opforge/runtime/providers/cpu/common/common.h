// common.h: helpers shared by opforge's built-in CPU kernels (broadcasting, axes, int inputs).
#pragma once

#include <opforge/op.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace opforge_cpu {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;
using Shape = std::vector<int64_t>;

/// Every dtype numpy can hold, for ops that only move data.
#define OPFORGE_ALL_DTYPES                                                                        \
  {opforge::f32, opforge::f64, opforge::f16, opforge::bf16, opforge::i8, opforge::i16,         \
   opforge::i32, opforge::i64, opforge::u8, opforge::u16, opforge::u32, opforge::u64,           \
   opforge::boolean}

/// Every dtype the C ABI holds, the narrow float8/float4/4-bit/2-bit types included: for Cast,
/// BitCast and the ops that only move whole elements (Reshape, Transpose, Gather, Where...).
#define OPFORGE_ALL_WITH_NARROW_DTYPES                                                            \
  {opforge::f32, opforge::f64, opforge::f16, opforge::bf16, opforge::i8, opforge::i16,         \
   opforge::i32, opforge::i64, opforge::u8, opforge::u16, opforge::u32, opforge::u64,           \
   opforge::boolean, opforge::f8e4m3fn, opforge::f8e4m3fnuz, opforge::f8e5m2,                   \
   opforge::f8e5m2fnuz, opforge::u4, opforge::i4, opforge::f4e2m1, opforge::f8e8m0, opforge::u2, \
   opforge::i2}

/// Numeric dtypes most arithmetic kernels accept.
#define OPFORGE_NUMERIC_DTYPES \
  {opforge::f32, opforge::f64, opforge::i32, opforge::i64}

/// a + b and a * b for sizes, saturating at the int64 limits instead of wrapping: a saturated
/// size is refused by the host as too large for memory, never mistaken for a small one.
inline int64_t size_add(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? (b > 0 ? INT64_MAX : INT64_MIN) : r;
}
inline int64_t size_mul(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? ((a < 0) != (b < 0) ? INT64_MIN : INT64_MAX) : r;
}

/// Product of dims.
inline int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

/// Axis in [-rank, rank) -> [0, rank); throws naming the axis otherwise. A scalar (rank 0) has
/// no axis at all, as in onnxruntime.
inline int64_t normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    throw opforge::Error(opforge::str("axis ", axis, " is out of range for rank ", rank));
  return axis < 0 ? axis + rank : axis;
}

/// Numpy broadcasting of two shapes; throws naming both shapes when they do not broadcast.
inline Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t n = a.size() > b.size() ? a.size() : b.size();
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) {
      std::string sa, sb;
      for (int64_t d : a) sa += (sa.empty() ? "" : ",") + std::to_string(d);
      for (int64_t d : b) sb += (sb.empty() ? "" : ",") + std::to_string(d);
      throw opforge::Error("shapes (" + sa + ") and (" + sb + ") do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

/// The broadcast batch dims of two matrix products' operands (MatMul and its quantized and fused
/// kin), where -1 (unknown during shape inference) may stand for any dim.
inline Shape broadcast_batch(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    OPFORGE_CHECK(da == db || da == 1 || db == 1 || da < 0 || db < 0, "batch dims of A and B do not broadcast: ",
                  da, " vs ", db);
    out[i] = da == 1 ? db : db == 1 ? da : std::max(da, db);
  }
  return out;
}

/// Element strides of `in` broadcast to `out` (0 along broadcast dims), aligned to out's rank.
inline Shape broadcast_strides(const Shape& in, const Shape& out) {
  Shape strides(out.size(), 0);
  int64_t stride = 1;
  for (size_t k = 0; k < in.size(); ++k) {
    size_t i = in.size() - 1 - k, o = out.size() - 1 - k;
    strides[o] = in[i] == 1 ? 0 : stride;
    stride *= in[i];
  }
  return strides;
}

/// The values of a 1-D (or scalar) int32/int64 input, e.g. a shape or axes tensor.
inline std::vector<int64_t> read_ints(const Tensor& t) {
  std::vector<int64_t> out;
  const int64_t n = t.numel();
  if (t.dtype() == OPF_INT64) {
    const int64_t* p = t.data<int64_t>();
    out.assign(p, p + n);
  } else if (t.dtype() == OPF_INT32) {
    const int32_t* p = t.data<int32_t>();
    out.assign(p, p + n);
  } else {
    throw opforge::Error(opforge::str("expected an int32 or int64 tensor, got ", opforge::dtype_name(t.dtype())));
  }
  return out;
}

/// Calls fn(out_index, offsets...) over every element of `out_shape`, where offsets[k] is the
/// element offset into input k given its broadcast strides. The innermost loop is plain, so
/// the compiler vectorises it when strides are 1 or 0.
template <size_t N, class F>
void for_each_broadcast(const Shape& out_shape, const Shape (&strides)[N], F&& fn) {
  const size_t rank = out_shape.size();
  const int64_t total = numel(out_shape);
  if (total == 0) return;
  if (rank == 0) {
    int64_t offs[N] = {};
    fn(int64_t(0), offs);
    return;
  }
  const int64_t inner = out_shape[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t offs[N] = {};
  for (int64_t base = 0; base < total; base += inner) {
    int64_t start[N];
    for (size_t k = 0; k < N; ++k) start[k] = offs[k];
    for (int64_t j = 0; j < inner; ++j) {
      int64_t cur[N];
      for (size_t k = 0; k < N; ++k) cur[k] = start[k] + j * strides[k][rank - 1];
      fn(base + j, cur);
    }
    // advance the outer index (all dims but the last)
    for (int64_t d = int64_t(rank) - 2; d >= 0; --d) {
      if (++index[size_t(d)] < out_shape[size_t(d)]) {
        for (size_t k = 0; k < N; ++k) offs[k] += strides[k][size_t(d)];
        break;
      }
      for (size_t k = 0; k < N; ++k) offs[k] -= strides[k][size_t(d)] * (out_shape[size_t(d)] - 1);
      index[size_t(d)] = 0;
    }
  }
}

}  // namespace opforge_cpu
