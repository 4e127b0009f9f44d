// reduce_topk.cpp: TopK: the k largest (or smallest) elements along an axis and their indices,
// ties broken by the lower index, as ONNX specifies.
#include <algorithm>
#include <numeric>

#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using namespace opforge_cpu::reduction;

/// k from the attribute (opset 1) or from input 1 (opset 10 on), which infer needs the value of.
template <class Ctx> int64_t read_k(const Ctx& ctx) {
  if (ctx.num_inputs() < 2) return ctx.template attr<int64_t>("k");
  Tensor k = ctx.input(1);
  if (!k.has_data()) throw opforge::NeedsValue("needs the value of input 'K'");
  const std::vector<int64_t> v = read_ints(k);
  OPFORGE_CHECK(v.size() == 1, "input 'K' must hold one value, got ", v.size());
  return v[0];
}

/// The axis and k, validated against the input's shape.
template <class Ctx> std::pair<int64_t, int64_t> axis_and_k(const Ctx& ctx) {
  Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() >= 1, "input 'X' must have rank >= 1, got a scalar");
  const int64_t axis = normalize_axis(ctx.template attr<int64_t>("axis"), x.ndim());
  const int64_t k = read_k(ctx), n = x.size(int(axis));
  OPFORGE_CHECK(k >= 0 && (n < 0 || k <= n), "k = ", k, " must be in [0, ", n, "], the size of axis ", axis);
  return {axis, k};
}

void infer_topk(InferContext& ctx) {
  const auto [axis, k] = axis_and_k(ctx);
  Shape out = ctx.input(0).sizes();
  out[size_t(axis)] = k;
  ctx.set_output(0, ctx.input(0).dtype(), out);
  ctx.set_output(1, opforge::i64, out);
}

/// a > b, with NaN above every number so that sorting sees a strict weak order.
template <class T> bool above(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a) return b == b;
    if (b != b) return false;
  }
  return a > b;
}

/// Slice element a goes before b: the larger (or smaller) value, ties to the lower index.
template <class T> struct Before {
  const T* col;
  bool largest;
  bool operator()(int64_t a, int64_t b) const {
    const T va = largest ? col[a] : col[b], vb = largest ? col[b] : col[a];
    if (above(va, vb)) return true;
    if (above(vb, va)) return false;
    return a < b;
  }
};

/// Small k: insertion into a sorted list of k. Once full, most elements fail one comparison
/// against the current k-th value (a NaN always goes on to the exact test).
template <bool kLargest, class T> void topk_insert(const T* col, int64_t n, int64_t k, int64_t* order) {
  const Before<T> before{col, kLargest};
  int64_t size = 0;
  T kth = T(0);
  for (int64_t j = 0; j < n; ++j) {
    const T v = col[j];
    if (size == k && !(kLargest ? v > kth : v < kth) && v == v) continue;
    if (size == k && !before(j, order[k - 1])) continue;
    int64_t pos = size < k ? size++ : k - 1;
    for (; pos > 0 && before(j, order[pos - 1]); --pos) order[pos] = order[pos - 1];
    order[pos] = j;
    kth = col[order[size - 1]];
  }
}

/// The first k of `order` become the top k of the n contiguous values in `col`.
template <class T> void topk_slice(const T* col, int64_t n, int64_t k, bool largest, int64_t* order) {
  if (k <= 16) return largest ? topk_insert<true>(col, n, k, order) : topk_insert<false>(col, n, k, order);
  const Before<T> before{col, largest};
  std::iota(order, order + n, int64_t(0));
  if (k < n) std::nth_element(order, order + k - 1, order + n, before);
  std::sort(order, order + k, before);
}

template <class T>
void topk(const KernelContext& ctx, const T* x, T* values, int64_t* indices, AxisSplit s, int64_t k, bool largest) {
  ctx.parallel_for(s.outer * s.inner, grain_for(4 * s.n), [&](int64_t b, int64_t e) {
    std::vector<T> scratch(static_cast<size_t>(s.inner == 1 ? 0 : s.n));
    std::vector<int64_t> order(static_cast<size_t>(s.n));
    for (int64_t u = b; u < e; ++u) {
      const int64_t o = u / s.inner, i = u % s.inner;
      const T* col = x + o * s.n * s.inner + i;
      if (s.inner > 1) {  // gather the strided slice so comparisons read contiguous memory
        for (int64_t j = 0; j < s.n; ++j) scratch[size_t(j)] = col[j * s.inner];
        col = scratch.data();
      }
      topk_slice(col, s.n, k, largest, order.data());
      for (int64_t j = 0; j < k; ++j) {
        const int64_t at = (o * k + j) * s.inner + i;
        values[at] = col[order[size_t(j)]];
        indices[at] = order[size_t(j)];
      }
    }
  });
}

/// sorted=0 allows any order; the sorted order is one of them.
void compute_topk(KernelContext& ctx) {
  const auto [axis, k] = axis_and_k(ctx);
  Tensor x = ctx.input(0);
  const AxisSplit s = split_at(x.sizes(), axis);
  const bool largest = !ctx.has_attr("largest") || ctx.attr<int64_t>("largest") != 0;
  if (k == 0 || s.outer * s.inner == 0) return;
  const bool ok = opforge::dispatch<float, double, int32_t, int64_t, int8_t, int16_t, uint8_t,
                                    uint16_t, uint32_t, uint64_t>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    topk(ctx, x.data<T>(), ctx.output(0).data<T>(), ctx.output(1).data<int64_t>(), s, k, largest);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

}  // namespace

using opforge::AttrType;

OPFORGE_OP(TopK)
    .since(1)
    .input("X", {opforge::f32, opforge::f64})
    .output("Values")
    .output("Indices", {opforge::i64})
    .attr("axis", int64_t(-1))
    .required_attr("k", AttrType::Int)
    .infer(infer_topk)
    .compute(compute_topk);

// Opset 11 adds the integer dtypes, largest and sorted.
OPFORGE_OP(TopK)
    .since(10)
    .input("X", {opforge::f32, opforge::f64})
    .dtypes_since(11, {opforge::i32, opforge::i64, opforge::i8, opforge::i16, opforge::u8,
                       opforge::u16, opforge::u32, opforge::u64})
    .input("K", {opforge::i64})
    .output("Values")
    .output("Indices", {opforge::i64})
    .attr("axis", int64_t(-1))
    .attr("largest", int64_t(1)).attr_versions(11)
    .attr("sorted", int64_t(1)).attr_versions(11)
    .infer(infer_topk)
    .compute(compute_topk);
