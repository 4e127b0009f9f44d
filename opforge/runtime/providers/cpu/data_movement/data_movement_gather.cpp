// data_movement_gather.cpp: Gather, GatherElements and GatherND (indices may be negative).
#include <algorithm>

#include "data_movement/data_movement.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// Index `i` into a dim of size n, negative counting from the end; throws when out of range.
inline int64_t checked_index(int64_t i, int64_t n, const char* what) {
  if (i < -n || i >= n) throw opforge::Error(opforge::str(what, " index ", i, " is out of range for size ", n));
  return i < 0 ? i + n : i;
}

/// Copies `count` elements of type U (count 1 is the common case of a scalar gather).
template <class U> inline void copy_elems(U* d, const U* s, int64_t count) {
  if (count == 1) *d = *s;
  else std::memcpy(d, s, size_t(count) * sizeof(U));
}

void gather_infer(InferContext& ctx) {
  const Shape data = ctx.input(0).sizes(), idx = ctx.input(1).sizes();
  OPFORGE_CHECK(!data.empty(), "Gather needs an input 'data' of rank >= 1");
  const size_t axis = size_t(normalize_axis(ctx.attr<int64_t>("axis"), int64_t(data.size())));
  Shape out(data.begin(), data.begin() + long(axis));
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + long(axis) + 1, data.end());
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void gather_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const Shape data = x.sizes();
  const size_t axis = size_t(normalize_axis(ctx.attr<int64_t>("axis"), int64_t(data.size())));
  const int64_t outer = dims_product(data, 0, axis), n = data[axis];
  const int64_t inner = dims_product(data, axis + 1, data.size()), es = elem_size(x);
  const Shape idx = read_ints(ctx.input(1));
  Shape rows(idx.size());
  for (size_t j = 0; j < idx.size(); ++j) rows[j] = checked_index(idx[j], n, "Gather");
  const int64_t items = outer * int64_t(idx.size());
  if (y.numel() == 0) return;
  dispatch_bytes(es, [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(x.raw());
    U* dst = static_cast<U*>(y.raw());
    const int64_t nidx = int64_t(idx.size());
    ctx.parallel_for(items, std::max<int64_t>(1, 32768 / inner), [&](int64_t b, int64_t e) {
      for (int64_t w = b; w < e; ++w) {
        const int64_t o = w / nidx, j = w - o * nidx;
        copy_elems(dst + w * inner, src + (o * n + rows[size_t(j)]) * inner, inner);
      }
    });
  });
}

void gather_elements_infer(InferContext& ctx) {
  const Shape data = ctx.input(0).sizes(), idx = ctx.input(1).sizes();
  OPFORGE_CHECK(data.size() == idx.size() && !data.empty(), "'data' ", shape_str(data), " and 'indices' ",
                shape_str(idx), " must have the same rank >= 1");
  normalize_axis(ctx.attr<int64_t>("axis"), int64_t(data.size()));
  ctx.set_output(0, ctx.input(0).dtype(), idx);
}

/// GatherElements over rows of the indices' last dim; I is the index type, U the element bits.
template <class I, class U>
void gather_elements_rows(const KernelContext& ctx, U* dst, const U* src, const I* index, const Shape& data,
                          const Shape& idx, size_t axis) {
  const Shape ds = contiguous_strides(data);
  const size_t last = idx.size() - 1;
  const int64_t inner = idx[last], rows = numel(idx) / inner, n = data[axis], axis_stride = ds[axis];
  ctx.parallel_for(rows, std::max<int64_t>(1, 32768 / inner), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t rest = row, base = 0;
      for (size_t d = last; d-- > 0;) {
        if (d != axis) base += (rest % idx[d]) * ds[d];
        rest /= idx[d];
      }
      const I* ir = index + row * inner;
      U* out = dst + row * inner;
      for (int64_t j = 0; j < inner; ++j) {
        const int64_t k = checked_index(int64_t(ir[j]), n, "GatherElements");
        out[j] = src[base + k * axis_stride + (axis == last ? 0 : j)];
      }
    }
  });
}

void gather_elements_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), ind = ctx.input(1), y = ctx.output(0);
  if (y.numel() == 0) return;
  const size_t axis = size_t(normalize_axis(ctx.attr<int64_t>("axis"), x.ndim()));
  dispatch_bytes(elem_size(x), [&](auto tag) {
    using U = typename decltype(tag)::type;
    opforge::dispatch<int32_t, int64_t>(ind.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      gather_elements_rows(ctx, static_cast<U*>(y.raw()), static_cast<const U*>(x.raw()), ind.data<I>(),
                           x.sizes(), ind.sizes(), axis);
    });
  });
}

/// GatherND's batch_dims, checked against data and indices.
template <class Ctx> size_t nd_batch_dims(const Ctx& ctx, const Shape& data, const Shape& idx) {
  const int64_t b = ctx.has_attr("batch_dims") ? ctx.template attr<int64_t>("batch_dims") : 0;
  OPFORGE_CHECK(!idx.empty() && !data.empty(), "'data' and 'indices' must have rank >= 1");
  OPFORGE_CHECK(b >= 0 && b < int64_t(std::min(data.size(), idx.size())), "attribute 'batch_dims' ", b,
                " must be in [0, min(rank(data), rank(indices)))");
  OPFORGE_CHECK(idx.back() < 0 || idx.back() <= int64_t(data.size()) - b, "indices' last dim ", idx.back(),
                " exceeds the rank of data ", data.size(), " minus batch_dims ", b);
  for (size_t d = 0; d < size_t(b); ++d)
    OPFORGE_CHECK(data[d] == idx[d], "batch dim ", d, " differs: data ", data[d], ", indices ", idx[d]);
  return size_t(b);
}

void gather_nd_infer(InferContext& ctx) {
  const Shape data = ctx.input(0).sizes(), idx = ctx.input(1).sizes();
  const size_t b = nd_batch_dims(ctx, data, idx);
  OPFORGE_CHECK(idx.back() >= 0, "GatherND needs the size of the indices' last dim");
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + long(b + size_t(idx.back())), data.end());
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void gather_nd_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const Shape data = x.sizes(), idx = ctx.input(1).sizes();
  const size_t b = nd_batch_dims(ctx, data, idx), k = size_t(idx.back());
  if (y.numel() == 0) return;
  const Shape ds = contiguous_strides(data);
  const int64_t per_batch = dims_product(idx, b, idx.size() - 1), slice = dims_product(data, b + k, data.size());
  const int64_t batch_stride = dims_product(data, b, data.size()), tuples = dims_product(idx, 0, idx.size() - 1);
  const int64_t* index = ctx.input(1).data<int64_t>();
  dispatch_bytes(elem_size(x), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(x.raw());
    U* dst = static_cast<U*>(y.raw());
    ctx.parallel_for(tuples, std::max<int64_t>(1, 32768 / std::max<int64_t>(slice, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t t = lo; t < hi; ++t) {
        int64_t off = (t / per_batch) * batch_stride;
        for (size_t j = 0; j < k; ++j)
          off += checked_index(index[t * int64_t(k) + int64_t(j)], data[b + j], "GatherND") * ds[b + j];
        copy_elems(dst + t * slice, src + off, slice);
      }
    });
  });
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Gather)
    .since(1)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("indices", {opforge::i32, opforge::i64})
    .output("output")
    .attr("axis", int64_t(0))
    .infer(gather_infer)
    .compute(gather_compute);

OPFORGE_OP(GatherElements)
    .since(11)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("indices", {opforge::i32, opforge::i64})
    .output("output")
    .attr("axis", int64_t(0))
    .infer(gather_elements_infer)
    .compute(gather_elements_compute);
// Opset 12 adds batch_dims.
OPFORGE_OP(GatherND)
    .since(11)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("indices", {opforge::i64})
    .output("output")
    .attr("batch_dims", int64_t(0)).attr_versions(12)
    .infer(gather_nd_infer)
    .compute(gather_nd_compute);
