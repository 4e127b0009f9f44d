// data_movement_place.cpp: ops that put input elements at computed places of a new tensor:
// OneHot, ReverseSequence and CenterCropPad.
#include <algorithm>
#include <cmath>

#include "data_movement/data_movement.h"
#include "common/elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// OneHot's depth: a one-value input of any numeric type, cast to int64 as the spec says.
int64_t one_hot_depth(const Tensor& depth) {
  const double d = read_scalar(depth, "depth");
  OPFORGE_CHECK(d >= 1, "input 'depth' must be at least 1, got ", d);
  return int64_t(d);
}

void one_hot_infer(InferContext& ctx) {
  const Tensor values = ctx.input(2);
  OPFORGE_CHECK(values.ndim() == 1 && values.sizes()[0] == 2, "input 'values' must be [off_value, on_value], got shape ",
                shape_str(values.sizes()));
  if (!ctx.input(1).has_data()) throw needs_value("OneHot", "depth");
  Shape out = ctx.input(0).sizes();
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), int64_t(out.size()) + 1);
  out.insert(out.begin() + axis, one_hot_depth(ctx.input(1)));
  ctx.set_output(0, values.dtype(), out);
}

void one_hot_compute(KernelContext& ctx) {
  const Tensor values = ctx.input(2), y = ctx.output(0);
  const Shape in = ctx.input(0).sizes();
  const int64_t depth = one_hot_depth(ctx.input(1));
  const size_t axis = size_t(normalize_axis(ctx.attr<int64_t>("axis"), int64_t(in.size()) + 1));
  const int64_t outer = dims_product(in, 0, axis), inner = dims_product(in, axis, in.size()), es = elem_size(values);
  const char* value = static_cast<const char*>(values.raw());
  char* out = static_cast<char*>(y.raw());
  for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(out + i * es, value, size_t(es));
  const std::vector<double> index = read_doubles(ctx.input(0));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double k = index[size_t(o * inner + i)];
      if (k < 0) k += double(depth);
      // an index outside [-depth, depth) or not a whole number leaves its row all off_value
      if (k < 0 || k >= double(depth) || k != std::floor(k)) continue;
      std::memcpy(out + ((o * depth + int64_t(k)) * inner + i) * es, value + es, size_t(es));
    }
}

/// ReverseSequence's attributes checked against a rank-2+ input: (batch axis, time axis).
template <class Ctx> std::pair<size_t, size_t> sequence_axes(const Ctx& ctx, int64_t rank) {
  OPFORGE_CHECK(rank >= 2, "input 'input' must have rank >= 2, got ", rank);
  const int64_t b = ctx.template attr<int64_t>("batch_axis"), t = ctx.template attr<int64_t>("time_axis");
  OPFORGE_CHECK((b == 0 && t == 1) || (b == 1 && t == 0), "attributes batch_axis = ", b, " and time_axis = ", t,
                " must be 0 and 1 (either way round)");
  return {size_t(b), size_t(t)};
}

void reverse_sequence_infer(InferContext& ctx) {
  const Shape x = ctx.input(0).sizes(), lens = ctx.input(1).sizes();
  const auto axes = sequence_axes(ctx, int64_t(x.size()));
  OPFORGE_CHECK(lens.size() == 1 && (lens[0] < 0 || x[axes.first] < 0 || lens[0] == x[axes.first]),
                "input 'sequence_lens' ", shape_str(lens), " must hold one length per batch entry (",
                x[axes.first], ")");
  ctx.set_output_like(0, 0);
}

void reverse_sequence_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const Shape shape = x.sizes();
  const auto [batch_axis, time_axis] = sequence_axes(ctx, x.ndim());
  const std::vector<int64_t> lens = read_ints(ctx.input(1));
  const int64_t row = dims_product(shape, 2, shape.size()) * elem_size(x), steps = shape[time_axis];
  const int64_t batch_stride = batch_axis == 0 ? steps * row : row, time_stride = time_axis == 0 ? shape[1] * row : row;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t b = 0; b < shape[batch_axis]; ++b) {
    const int64_t len = lens[size_t(b)];
    OPFORGE_CHECK(len >= 0 && len <= steps, "sequence_lens[", b, "] = ", len, " is outside [0, ", steps, "]");
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t from = t < len ? len - 1 - t : t;
      std::memcpy(dst + b * batch_stride + t * time_stride, src + b * batch_stride + from * time_stride, size_t(row));
    }
  }
}

/// CenterCropPad's target size per dim of the input (dims not in 'axes' keep their size).
template <class Ctx> Shape crop_pad_target(const Ctx& ctx, const Shape& in, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> axes;
  if (ctx.has_attr("axes")) {
    axes = ctx.template attr<std::vector<int64_t>>("axes");
  } else {
    for (size_t d = 0; d < in.size(); ++d) axes.push_back(int64_t(d));
  }
  OPFORGE_CHECK(sizes.size() == axes.size(), "input 'shape' holds ", sizes.size(), " sizes for ", axes.size(), " axes");
  Shape out = in;
  for (size_t i = 0; i < axes.size(); ++i) {
    OPFORGE_CHECK(sizes[i] >= 0, "input 'shape' holds a negative size ", sizes[i]);
    out[size_t(normalize_axis(axes[i], int64_t(in.size())))] = sizes[i];
  }
  return out;
}

void center_crop_pad_infer(InferContext& ctx) {
  const Shape in = ctx.input(0).sizes();
  ctx.set_output(0, ctx.input(0).dtype(), crop_pad_target(ctx, in, input_ints(ctx, 1, "CenterCropPad", "shape")));
}

/// Copies the centred overlap of input and output (cropped where the output is smaller, the rest
/// of the output zero where it is larger).
void center_crop_pad_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const Shape in = x.sizes(), out = y.sizes();
  const int64_t es = elem_size(x);
  if (in.empty()) return copy_input0(ctx);
  std::memset(y.raw(), 0, size_t(y.nbytes()));
  Shape overlap(in.size()), in_start(in.size()), out_start(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    overlap[d] = std::min(in[d], out[d]);
    in_start[d] = in[d] > out[d] ? (in[d] - out[d]) / 2 : 0;
    out_start[d] = out[d] > in[d] ? (out[d] - in[d]) / 2 : 0;
  }
  if (numel(overlap) == 0) return;
  const Shape is = contiguous_strides(in), os = contiguous_strides(out);
  int64_t src_off = 0, dst_off = 0;
  for (size_t d = 0; d < in.size(); ++d) src_off += in_start[d] * is[d], dst_off += out_start[d] * os[d];
  const size_t last = in.size() - 1;
  const int64_t row = overlap[last], rows = numel(overlap) / row;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  Shape pos(in.size(), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t from = src_off, to = dst_off;
    for (size_t d = 0; d < last; ++d) from += pos[d] * is[d], to += pos[d] * os[d];
    std::memcpy(dst + to * es, src + from * es, size_t(row * es));
    for (size_t d = last; d-- > 0 && ++pos[d] == overlap[d];) pos[d] = 0;
  }
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(OneHot)
    .since(9)
    .input("indices", OPFORGE_ALL_DTYPES)
    .input("depth", OPFORGE_ALL_DTYPES)
    .input("values", OPFORGE_ALL_DTYPES)
    .output("output")
    .attr("axis", int64_t(-1))
    .infer(one_hot_infer)
    .compute(one_hot_compute);

OPFORGE_OP(ReverseSequence)
    .since(10)
    .input("input", OPFORGE_ALL_DTYPES)
    .input("sequence_lens", {opforge::i64})
    .output("Y")
    .attr("batch_axis", int64_t(1))
    .attr("time_axis", int64_t(0))
    .infer(reverse_sequence_infer)
    .compute(reverse_sequence_compute);

OPFORGE_OP(CenterCropPad)
    .since(18)
    .input("input_data", OPFORGE_ALL_DTYPES)
    .input("shape", {opforge::i32, opforge::i64})
    .output("output_data")
    .optional_attr("axes", opforge::AttrType::Ints)
    .infer(center_crop_pad_infer)
    .compute(center_crop_pad_compute);
