// shape_ops.cpp: ops that read or change only a shape (Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze).
#include <algorithm>

#include "data_movement/data_movement.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// Shape-15's [start, end) range of dims, clamped into [0, rank].
template <class Ctx> void shape_range(const Ctx& ctx, int64_t rank, int64_t& start, int64_t& end) {
  start = ctx.has_attr("start") ? ctx.template attr<int64_t>("start") : 0;
  end = ctx.has_attr("end") ? ctx.template attr<int64_t>("end") : rank;
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
}

void shape_infer(InferContext& ctx) {
  int64_t start, end;
  shape_range(ctx, ctx.input(0).ndim(), start, end);
  ctx.set_output(0, opforge::i64, {end - start});
}

void shape_compute(KernelContext& ctx) {
  int64_t start, end;
  shape_range(ctx, ctx.input(0).ndim(), start, end);
  int64_t* out = ctx.output(0).data<int64_t>();
  for (int64_t d = start; d < end; ++d) out[d - start] = ctx.input(0).size(int(d));
}

void size_infer(InferContext& ctx) { ctx.set_output(0, opforge::i64, {}); }

void size_compute(KernelContext& ctx) { *ctx.output(0).data<int64_t>() = ctx.input(0).numel(); }

/// Reshape's output: 0 copies the input dim (unless allowzero), one -1 takes what is left.
Shape reshape_shape(const Shape& in, const Shape& want, bool allowzero) {
  Shape out = want;
  int64_t unknown = -1, known = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0 && !allowzero) {
      OPFORGE_CHECK(i < in.size(), "'shape' entry ", i, " is 0 but the input has rank ", in.size());
      out[i] = in[i];
    } else if (want[i] == -1) {
      OPFORGE_CHECK(unknown < 0, "'shape' ", shape_str(want), " has more than one -1");
      unknown = int64_t(i);
      continue;
    } else {
      OPFORGE_CHECK(want[i] >= 0, "'shape' ", shape_str(want), " has an invalid entry ", want[i]);
    }
    known = (known < 0 || out[i] < 0) ? -1 : known * out[i];
  }
  const int64_t total = dims_product(in, 0, in.size());
  if (total < 0 || known < 0) {
    if (unknown >= 0) out[size_t(unknown)] = -1;
    return out;
  }
  if (unknown >= 0) {
    OPFORGE_CHECK(known != 0 && total % known == 0, "cannot reshape ", shape_str(in), " to ", shape_str(want));
    out[size_t(unknown)] = total / known;
  } else {
    OPFORGE_CHECK(known == total, "cannot reshape ", shape_str(in), " (", total, " elements) to ",
                  shape_str(want));
  }
  return out;
}

void reshape_infer(InferContext& ctx) {
  const bool allowzero = ctx.has_attr("allowzero") && ctx.attr<int64_t>("allowzero") != 0;
  const Shape want = input_ints(ctx, 1, "Reshape", "shape");
  ctx.set_output(0, ctx.input(0).dtype(), reshape_shape(ctx.input(0).sizes(), want, allowzero));
}

void flatten_infer(InferContext& ctx) {
  const Shape in = ctx.input(0).sizes();
  const int64_t rank = int64_t(in.size());
  int64_t axis = ctx.attr<int64_t>("axis");
  OPFORGE_CHECK(axis >= -rank && axis <= rank, "attribute 'axis' ", axis, " is out of range for rank ", rank);
  if (axis < 0) axis += rank;
  ctx.set_output(0, ctx.input(0).dtype(),
                 {dims_product(in, 0, size_t(axis)), dims_product(in, size_t(axis), in.size())});
}

/// Squeeze's axes: the attribute (version 1) or input 1 (version 13); empty when not given.
template <int V> bool squeeze_axes(const InferContext& ctx, Shape& axes) {
  if (V < 13) {
    if (ctx.has_attr("axes")) axes = ctx.attr<Shape>("axes");
    return ctx.has_attr("axes");
  }
  if (!ctx.has_input(1)) return false;
  axes = input_ints(ctx, 1, "Squeeze", "axes");
  return true;
}

template <int V> void squeeze_infer(InferContext& ctx) {
  const Shape in = ctx.input(0).sizes();
  Shape axes;
  std::vector<bool> drop(in.size(), false);
  if (squeeze_axes<V>(ctx, axes)) {
    for (int64_t a : axes) {
      const size_t d = size_t(normalize_axis(a, int64_t(in.size())));
      OPFORGE_CHECK(in[d] == 1 || in[d] < 0, "cannot squeeze axis ", a, " of size ", in[d]);
      drop[d] = true;
    }
  } else {
    for (size_t d = 0; d < in.size(); ++d) {
      OPFORGE_CHECK(in[d] >= 0, "Squeeze without 'axes' needs every dim of the input known");
      drop[d] = in[d] == 1;
    }
  }
  Shape out;
  for (size_t d = 0; d < in.size(); ++d)
    if (!drop[d]) out.push_back(in[d]);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

template <int V> void unsqueeze_infer(InferContext& ctx) {
  const Shape in = ctx.input(0).sizes();
  const Shape axes = V < 13 ? ctx.attr<Shape>("axes") : input_ints(ctx, 1, "Unsqueeze", "axes");
  const int64_t rank = int64_t(in.size() + axes.size());
  std::vector<bool> added(size_t(rank), false);
  for (int64_t a : axes) {
    const size_t d = size_t(normalize_axis(a, rank));
    OPFORGE_CHECK(!added[d], "axis ", a, " appears twice in 'axes'");
    added[d] = true;
  }
  Shape out;
  size_t next = 0;
  for (size_t d = 0; d < size_t(rank); ++d) out.push_back(added[d] ? 1 : in[next++]);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

/// Reshape, Flatten, Squeeze, Unsqueeze: the bytes are unchanged (nothing to do when aliased).
void view_compute(KernelContext& ctx) { copy_input0(ctx); }

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;
// Opset 15 adds start and end.
OPFORGE_OP(Shape)
    .since(1)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("shape", {opforge::i64})
    .attr("start", int64_t(0)).attr_versions(15)
    .optional_attr("end", opforge::AttrType::Int).attr_versions(15)
    .infer(shape_infer)
    .compute(shape_compute);

OPFORGE_OP(Size)
    .since(1)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("size", {opforge::i64})
    .infer(size_infer)
    .compute(size_compute);

// The views below declare .inplace(0, 0): the runtime may alias output and input, and
// view_compute then copies nothing. Opset 14 adds allowzero to Reshape.
OPFORGE_OP(Reshape)
    .since(5)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("shape", {opforge::i64})
    .output("reshaped")
    .attr("allowzero", int64_t(0)).attr_versions(14)
    .inplace(0, 0)
    .infer(reshape_infer)
    .compute(view_compute);

OPFORGE_OP(Flatten)
    .since(1)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .attr("axis", int64_t(1))
    .inplace(0, 0)
    .infer(flatten_infer)
    .compute(view_compute);

OPFORGE_OP(Squeeze)
    .since(1)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("squeezed")
    .optional_attr("axes", opforge::AttrType::Ints)
    .inplace(0, 0)
    .infer(squeeze_infer<1>)
    .compute(view_compute);

OPFORGE_OP(Squeeze)
    .since(13)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .optional_input("axes", {opforge::i64})
    .output("squeezed")
    .inplace(0, 0)
    .infer(squeeze_infer<13>)
    .compute(view_compute);

OPFORGE_OP(Unsqueeze)
    .since(1)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("expanded")
    .required_attr("axes", opforge::AttrType::Ints)
    .inplace(0, 0)
    .infer(unsqueeze_infer<1>)
    .compute(view_compute);

OPFORGE_OP(Unsqueeze)
    .since(13)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .input("axes", {opforge::i64})
    .output("expanded")
    .inplace(0, 0)
    .infer(unsqueeze_infer<13>)
    .compute(view_compute);
