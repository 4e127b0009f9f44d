// data_movement.h: helpers for kernels that only move bytes (copies by element size, strided copies).
#pragma once

#include <opforge/op.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/common.h"

namespace opforge_cpu {
namespace data_movement {

/// Calls f(type_tag<U>{}) with U an unsigned integer of `elem_size` bytes (1, 2, 4 or 8).
template <class F> void dispatch_bytes(int64_t elem_size, F&& f) {
  switch (elem_size) {
    case 1: f(opforge::type_tag<uint8_t>{}); return;
    case 2: f(opforge::type_tag<uint16_t>{}); return;
    case 4: f(opforge::type_tag<uint32_t>{}); return;
    case 8: f(opforge::type_tag<uint64_t>{}); return;
    default: throw opforge::Error(opforge::str("cannot move elements of ", elem_size, " bytes"));
  }
}

/// Bytes per element of t; throws for strings and unknown types.
inline int64_t elem_size(const Tensor& t) {
  int64_t es = opforge::dtype_size(t.dtype());
  OPFORGE_CHECK(es > 0, "dtype ", opforge::dtype_name(t.dtype()), " cannot be moved by this kernel");
  return es;
}

/// memcpy of `bytes`, split across the host threads when it is large.
inline void copy_bytes(const KernelContext& ctx, void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0 || dst == src) return;
  constexpr int64_t kChunk = int64_t(1) << 18;
  if (bytes < 4 * kChunk) {
    std::memcpy(dst, src, size_t(bytes));
    return;
  }
  ctx.parallel_for((bytes + kChunk - 1) / kChunk, 1, [&](int64_t b, int64_t e) {
    int64_t lo = b * kChunk, hi = e * kChunk < bytes ? e * kChunk : bytes;
    std::memcpy(static_cast<char*>(dst) + lo, static_cast<const char*>(src) + lo, size_t(hi - lo));
  });
}

/// Output 0 is input 0 with another shape: copies the bytes unless the runtime aliased them.
inline void copy_input0(const KernelContext& ctx) {
  copy_bytes(ctx, ctx.output(0).raw(), ctx.input(0).raw(), ctx.output(0).nbytes());
}

/// The bit pattern of `value` converted to `dtype`, in the low bytes of a uint64_t.
uint64_t scalar_bits(int32_t dtype, double value);

/// Fills n elements of `elem_size` bytes at dst with the low bytes of `bits`.
inline void fill_bits(void* dst, int64_t n, int64_t elem_size, uint64_t bits) {
  dispatch_bytes(elem_size, [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* p = static_cast<U*>(dst);
    const U v = U(bits);
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

/// Writes a contiguous output of `shape` whose element at multi-index i is src[sum(i * strides)].
/// Strides are in elements and may be negative (reversed slices) or 0 (broadcasting); `src`
/// points at the element of index (0, ..., 0). Used by Transpose, Slice, Expand, Tile, DepthToSpace.
void strided_copy(const KernelContext& ctx, void* dst, const void* src, int64_t elem_size,
                  const Shape& shape, const Shape& strides);

/// Contiguous element strides of a shape.
inline Shape contiguous_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t st = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = st;
    st *= shape[i];
  }
  return s;
}

/// Product of shape[begin, end); -1 if any of those dims is unknown.
inline int64_t dims_product(const Shape& shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) {
    if (shape[i] < 0) return -1;
    n *= shape[i];
  }
  return n;
}

/// The message an infer throws when a shape-from-data input has no value yet.
inline opforge::NeedsValue needs_value(const char* op, const char* input) {
  return opforge::NeedsValue(opforge::str(op, " needs the value of input '", input, "' to infer its output shape"));
}

/// The values of an int32/int64 input, or the needs-value error when it has none.
inline std::vector<int64_t> input_ints(const InferContext& ctx, int i, const char* op, const char* name) {
  Tensor t = ctx.input(i);
  if (!t.has_data()) throw needs_value(op, name);
  return read_ints(t);
}

/// A shape as "(2, 3)", for messages.
inline std::string shape_str(const Shape& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + ")";
}

}  // namespace data_movement
}  // namespace opforge_cpu
