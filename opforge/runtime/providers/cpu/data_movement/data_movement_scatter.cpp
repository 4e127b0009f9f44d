// data_movement_scatter.cpp: ScatterElements (and the older Scatter), ScatterND and TensorScatter:
// the output is the data with some elements or slices replaced by, or reduced with, the updates.
#include <algorithm>

#include "data_movement/data_movement.h"
#include "common/elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// How an update meets the element it lands on (attribute 'reduction').
enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

template <class Ctx> Reduction reduction_of(const Ctx& ctx) {
  const std::string r = ctx.has_attr("reduction") ? ctx.template attr<std::string>("reduction") : "none";
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  throw opforge::Error(opforge::str("attribute 'reduction' = '", r, "' is not none, add, mul, max or min"));
}

/// `old` combined with `update` by `r` (kNone: the update replaces it). bool adds as "or" and
/// multiplies as "and", as numpy does.
template <class S> inline S combine(S old, S update, Reduction r) {
  using C = compute_t<S>;
  const C a = load_as<C>(old), b = load_as<C>(update);
  switch (r) {
    case Reduction::kNone: return update;
    case Reduction::kAdd: return store_as<S>(C(a + b));
    case Reduction::kMul: return store_as<S>(C(a * b));
    case Reduction::kMax: return store_as<S>(std::max(a, b));
    case Reduction::kMin: return store_as<S>(std::min(a, b));
  }
  return update;
}

/// Index `i` into a dim of size n, negative counting from the end; throws when out of range.
inline int64_t checked_index(int64_t i, int64_t n, const char* what) {
  if (i < -n || i >= n) throw opforge::Error(opforge::str(what, " index ", i, " is out of range for size ", n));
  return i < 0 ? i + n : i;
}

void scatter_elements_infer(InferContext& ctx) {
  const Shape data = ctx.input(0).sizes(), idx = ctx.input(1).sizes(), upd = ctx.input(2).sizes();
  OPFORGE_CHECK(!data.empty() && data.size() == idx.size(), "'data' ", shape_str(data), " and 'indices' ",
                shape_str(idx), " must have the same rank >= 1");
  OPFORGE_CHECK(idx == upd, "'indices' ", shape_str(idx), " and 'updates' ", shape_str(upd),
                " must have the same shape");
  const size_t axis = size_t(normalize_axis(ctx.attr<int64_t>("axis"), int64_t(data.size())));
  for (size_t d = 0; d < data.size(); ++d)
    OPFORGE_CHECK(d == axis || idx[d] <= data[d], "'indices' ", shape_str(idx), " is larger than 'data' ",
                  shape_str(data), " along dim ", d);
  reduction_of(ctx);
  ctx.set_output_like(0, 0);
}

/// ScatterElements over every element of the indices, in order (a later duplicate wins).
template <class S, class I>
void scatter_elements(S* out, const S* upd, const I* index, const Shape& data, const Shape& idx, size_t axis,
                      Reduction r) {
  const Shape ds = contiguous_strides(data);
  const int64_t total = numel(idx), rank = int64_t(idx.size());
  Shape pos(idx.size(), 0);
  for (int64_t e = 0; e < total; ++e) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d)
      off += (size_t(d) == axis ? checked_index(int64_t(index[e]), data[axis], "ScatterElements") : pos[d]) * ds[d];
    out[off] = combine(out[off], upd[e], r);
    for (int64_t d = rank - 1; d >= 0 && ++pos[d] == idx[d]; --d) pos[d] = 0;
  }
}

void scatter_elements_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), ind = ctx.input(1), y = ctx.output(0);
  copy_bytes(ctx, y.raw(), x.raw(), y.nbytes());
  if (ind.numel() == 0) return;
  const size_t axis = size_t(normalize_axis(ctx.attr<int64_t>("axis"), x.ndim()));
  const Reduction r = reduction_of(ctx);
  dispatch_elements(x, [&](auto tag) {
    using S = typename decltype(tag)::type;
    opforge::dispatch<int32_t, int64_t>(ind.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      scatter_elements(static_cast<S*>(y.raw()), static_cast<const S*>(ctx.input(2).raw()), ind.data<I>(),
                       x.sizes(), ind.sizes(), axis, r);
    });
  });
}

void scatter_nd_infer(InferContext& ctx) {
  const Shape data = ctx.input(0).sizes(), idx = ctx.input(1).sizes(), upd = ctx.input(2).sizes();
  OPFORGE_CHECK(!data.empty() && !idx.empty(), "'data' and 'indices' must have rank >= 1");
  const int64_t k = idx.back();
  if (k >= 0) {
    OPFORGE_CHECK(k <= int64_t(data.size()), "indices' last dim ", k, " exceeds the rank of data ", data.size());
    Shape want(idx.begin(), idx.end() - 1);
    want.insert(want.end(), data.begin() + k, data.end());
    OPFORGE_CHECK(upd.size() == want.size(), "'updates' ", shape_str(upd), " must have shape ", shape_str(want));
    for (size_t d = 0; d < want.size(); ++d)
      OPFORGE_CHECK(upd[d] < 0 || want[d] < 0 || upd[d] == want[d], "'updates' ", shape_str(upd),
                    " must have shape ", shape_str(want));
  }
  reduction_of(ctx);
  ctx.set_output_like(0, 0);
}

void scatter_nd_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  copy_bytes(ctx, y.raw(), x.raw(), y.nbytes());
  const Shape data = x.sizes(), idx = ctx.input(1).sizes();
  const size_t k = size_t(idx.back());
  const int64_t tuples = dims_product(idx, 0, idx.size() - 1), slice = dims_product(data, k, data.size());
  if (tuples == 0 || slice == 0) return;
  const Shape ds = contiguous_strides(data);
  const int64_t* index = ctx.input(1).data<int64_t>();
  const Reduction r = reduction_of(ctx);
  dispatch_elements(x, [&](auto tag) {
    using S = typename decltype(tag)::type;
    S* out = static_cast<S*>(y.raw());
    const S* upd = static_cast<const S*>(ctx.input(2).raw());
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t off = 0;
      for (size_t j = 0; j < k; ++j) off += checked_index(index[t * int64_t(k) + int64_t(j)], data[j], "ScatterND") * ds[j];
      for (int64_t i = 0; i < slice; ++i) out[off + i] = combine(out[off + i], upd[t * slice + i], r);
    }
  });
}

/// TensorScatter's axis, in [1, rank): dim 0 is the batch that write_indices index.
template <class Ctx> size_t cache_axis(const Ctx& ctx, int64_t rank) {
  const int64_t axis = normalize_axis(ctx.template attr<int64_t>("axis"), rank);
  OPFORGE_CHECK(axis >= 1, "attribute 'axis' must not name the batch dim 0 of 'past_cache'");
  return size_t(axis);
}

void tensor_scatter_infer(InferContext& ctx) {
  const Shape cache = ctx.input(0).sizes(), upd = ctx.input(1).sizes();
  OPFORGE_CHECK(cache.size() >= 2 && cache.size() == upd.size(), "'past_cache' ", shape_str(cache), " and 'update' ",
                shape_str(upd), " must have the same rank >= 2");
  const size_t axis = cache_axis(ctx, int64_t(cache.size()));
  for (size_t d = 0; d < cache.size(); ++d)
    OPFORGE_CHECK(d == axis ? upd[d] <= cache[d] : upd[d] == cache[d], "'update' ", shape_str(upd),
                  " does not fit 'past_cache' ", shape_str(cache), " along dim ", d);
  const std::string mode = ctx.attr<std::string>("mode");
  OPFORGE_CHECK(mode == "linear" || mode == "circular", "attribute 'mode' = '", mode, "' is not linear or circular");
  ctx.set_output_like(0, 0);
}

void tensor_scatter_compute(KernelContext& ctx) {
  const Tensor cache = ctx.input(0), upd = ctx.input(1), y = ctx.output(0);
  copy_bytes(ctx, y.raw(), cache.raw(), y.nbytes());
  const Shape cs = cache.sizes(), us = upd.sizes();
  const size_t axis = cache_axis(ctx, cache.ndim());
  const bool circular = ctx.attr<std::string>("mode") == "circular";
  std::vector<int64_t> starts(size_t(cs[0]), 0);
  if (ctx.has_input(2)) {
    starts = read_ints(ctx.input(2));
    OPFORGE_CHECK(int64_t(starts.size()) == cs[0], "'write_indices' holds ", starts.size(), " values for a batch of ",
                  cs[0]);
  }
  const int64_t es = elem_size(cache), row = dims_product(cs, axis + 1, cs.size()) * es;
  const int64_t per_batch = dims_product(cs, 1, axis), max_len = cs[axis], len = us[axis];
  if (len == 0 || row == 0) return;
  OPFORGE_CHECK(max_len > 0, "'past_cache' has no room along dim ", axis);
  const char* src = static_cast<const char*>(upd.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t b = 0; b < cs[0]; ++b)
    for (int64_t p = 0; p < per_batch; ++p)
      for (int64_t s = 0; s < len; ++s) {
        int64_t at = starts[size_t(b)] + s;
        if (circular) at = ((at % max_len) + max_len) % max_len;
        OPFORGE_CHECK(at >= 0 && at < max_len, "write position ", at, " of batch ", b, " is outside 'past_cache' dim ",
                      axis, " of size ", max_len);
        std::memcpy(dst + ((b * per_batch + p) * max_len + at) * row, src + ((b * per_batch + p) * len + s) * row,
                    size_t(row));
      }
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

// Scatter (opsets 9-10) is ScatterElements under its first name.
OPFORGE_OP(Scatter)
    .since(9)
    .input("data", OPFORGE_ALL_DTYPES)
    .input("indices", {opforge::i32, opforge::i64})
    .input("updates", OPFORGE_ALL_DTYPES)
    .output("output")
    .attr("axis", int64_t(0))
    .infer(scatter_elements_infer)
    .compute(scatter_elements_compute);

OPFORGE_OP(ScatterElements)
    .since(11)
    .input("data", OPFORGE_ALL_DTYPES)
    .input("indices", {opforge::i32, opforge::i64})
    .input("updates", OPFORGE_ALL_DTYPES)
    .output("output")
    .attr("axis", int64_t(0))
    .attr("reduction", "none").attr_versions(16)
    .infer(scatter_elements_infer)
    .compute(scatter_elements_compute);

OPFORGE_OP(ScatterND)
    .since(11)
    .input("data", OPFORGE_ALL_DTYPES)
    .input("indices", {opforge::i64})
    .input("updates", OPFORGE_ALL_DTYPES)
    .output("output")
    .attr("reduction", "none").attr_versions(16)
    .infer(scatter_nd_infer)
    .compute(scatter_nd_compute);

OPFORGE_OP(TensorScatter)
    .since(24)
    .input("past_cache", OPFORGE_ALL_DTYPES)
    .input("update", OPFORGE_ALL_DTYPES)
    .optional_input("write_indices", {opforge::i64})
    .output("present_cache")
    .attr("axis", int64_t(-2))
    .attr("mode", "linear")
    .infer(tensor_scatter_infer)
    .compute(tensor_scatter_compute);
