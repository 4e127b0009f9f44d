// crop_and_resize.cpp: com.microsoft CropAndResize (1), TensorFlow's crop_and_resize as tf2onnx
// exports it for TF object-detection models: each roi (normalised [y1, x1, y2, x2]) of its image
// is resized to crop_size with corner-aligned bilinear or nearest sampling; points outside the
// image take extrapolation_value. Sampled and rounded as onnxruntime's contrib kernel.

// Round every product and sum on its own, as onnxruntime's build does.
#pragma GCC optimize("fp-contract=off")

#include <cmath>
#include <string>
#include <vector>

#include "common/float_io.h"
#include "vision/roi_pool.h"

namespace {

using namespace opforge_cpu;

template <class Ctx> bool bilinear_mode(const Ctx& ctx) {
  const std::string mode = ctx.template attr<std::string>("mode");
  OPFORGE_CHECK(mode == "bilinear" || mode == "nearest", "attribute 'mode' must be bilinear or nearest, got '", mode,
                "'");
  return mode == "bilinear";
}

/// crop_size's (height, width), checked; -1s while it is unknown.
template <class Ctx> std::vector<int64_t> crop_size(const Ctx& ctx) {
  Tensor size = ctx.input(3);
  OPFORGE_CHECK(size.ndim() == 1 && (size.size(0) < 0 || size.size(0) == 2),
                "input 'crop_size' must hold two values, [crop_height, crop_width]");
  if (!size.has_data()) return {-1, -1};
  const std::vector<int64_t> hw = read_ints(size);
  OPFORGE_CHECK(hw[0] >= 1 && hw[1] >= 1, "input 'crop_size' must be positive, got [", hw[0], ", ", hw[1], "]");
  return hw;
}

void infer(InferContext& ctx) {
  bilinear_mode(ctx);
  Tensor x = ctx.input(0), rois = ctx.input(1), batch = ctx.input(2);
  check_rois(x, rois, batch);
  const std::vector<int64_t> hw = crop_size(ctx);
  ctx.set_output(0, x.dtype(), {rois.size(0), x.size(1), hw[0], hw[1]});
}

/// The sample coordinate of output row (or column) p of `crop` along a dim of `len`, for a roi
/// spanning [lo, hi] of it (normalised): the first and last land on the roi's edges exactly, a
/// one-long crop samples the roi's centre.
template <class T> T sample_at(int64_t p, int64_t crop, T lo, T hi, T scale, int64_t len) {
  if (crop == 1) return T(0.5 * double(lo + hi) * double(len - 1));
  if (p == 0) return lo * T(len - 1);
  if (p == crop - 1) return hi * T(len - 1);
  return lo * T(len - 1) + T(p) * scale;
}

template <class T>
void crop_typed(KernelContext& ctx, bool bilinear, float extrapolation, const T* src, const T* boxes, T* dst) {
  Tensor x = ctx.input(0), y = ctx.output(0);
  const int64_t batches = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t num_rois = y.size(0), crop_h = y.size(2), crop_w = y.size(3), plane = height * width;
  const std::vector<int64_t> batch_of = read_ints(ctx.input(2));
  for (int64_t n = 0; n < num_rois; ++n)
    OPFORGE_CHECK(batch_of[size_t(n)] >= 0 && batch_of[size_t(n)] < batches, "input 'batch_indices' holds ",
                  batch_of[size_t(n)], " at roi ", n, ", outside the batch of ", batches);
  const T fill = T(extrapolation);
  ctx.parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* r = boxes + n * 4;
      const T y1 = r[0], x1 = r[1], y2 = r[2], x2 = r[3];
      const T scale_h = crop_h > 1 ? (y2 - y1) * T(height - 1) / T(crop_h - 1) : T(0);
      const T scale_w = crop_w > 1 ? (x2 - x1) * T(width - 1) / T(crop_w - 1) : T(0);
      const T* image = src + batch_of[size_t(n)] * channels * plane;
      T* out = dst + n * channels * crop_h * crop_w;
      for (int64_t ph = 0; ph < crop_h; ++ph) {
        const T in_y = sample_at(ph, crop_h, y1, y2, scale_h, height);
        const bool row_inside = in_y >= T(0) && in_y <= T(height - 1);  // NaN: outside
        const int64_t top = row_inside ? int64_t(std::floor(float(in_y))) : 0;
        const int64_t bottom = row_inside ? int64_t(std::ceil(float(in_y))) : 0;
        const float y_lerp = float(in_y - T(top));
        for (int64_t pw = 0; pw < crop_w; ++pw) {
          const T in_x = sample_at(pw, crop_w, x1, x2, scale_w, width);
          T* o = out + ph * crop_w + pw;
          const int64_t o_stride = crop_h * crop_w;
          if (!row_inside || !(in_x >= T(0) && in_x <= T(width - 1))) {
            for (int64_t c = 0; c < channels; ++c) o[c * o_stride] = fill;
            continue;
          }
          if (!bilinear) {
            const int64_t at = int64_t(std::round(float(in_y))) * width + int64_t(std::round(float(in_x)));
            for (int64_t c = 0; c < channels; ++c) o[c * o_stride] = image[c * plane + at];
            continue;
          }
          const int64_t left = int64_t(std::floor(float(in_x))), right = int64_t(std::ceil(float(in_x)));
          const float x_lerp = float(in_x - T(left));
          for (int64_t c = 0; c < channels; ++c) {
            const T* p = image + c * plane;
            const float top_left = float(p[top * width + left]), top_right = float(p[top * width + right]);
            const float bottom_left = float(p[bottom * width + left]), bottom_right = float(p[bottom * width + right]);
            const float upper = top_left + (top_right - top_left) * x_lerp;
            const float lower = bottom_left + (bottom_right - bottom_left) * x_lerp;
            o[c * o_stride] = T(upper + (lower - upper) * y_lerp);
          }
        }
      }
    }
  });
}

void compute(KernelContext& ctx) {
  const bool bilinear = bilinear_mode(ctx);
  Tensor x = ctx.input(0), rois = ctx.input(1), batch = ctx.input(2), y = ctx.output(0);
  check_rois(x, rois, batch);
  OPFORGE_CHECK(rois.dtype() == x.dtype(), "input 'rois' must have X's dtype ", opforge::dtype_name(x.dtype()),
                ", got ", opforge::dtype_name(rois.dtype()));
  const float extrapolation = ctx.attr<float>("extrapolation_value");
  dispatch_compute(x, "X", [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> keep_x, keep_rois, keep_y;
    const bool direct = x.dtype() == int32_t(opforge::dtype_of<C>::value);
    if (!direct) keep_y.resize(size_t(y.numel()));
    crop_typed<C>(ctx, bilinear, extrapolation, floats_of<C>(x, keep_x, "X"), floats_of<C>(rois, keep_rois, "rois"),
                  direct ? y.data<C>() : keep_y.data());
    if (!direct) write_floats(keep_y.data(), y);
  });
}

}  // namespace

OPFORGE_OP(CropAndResize)
    .domain("com.microsoft")
    .since(1)
    .input("X", {opforge::f32, opforge::f64, opforge::f16})
    .input("rois", {opforge::f32, opforge::f64, opforge::f16})
    .input("batch_indices", {opforge::i32})
    .input("crop_size", {opforge::i32})
    .output("Y")
    .attr("extrapolation_value", 0.0f)
    .attr("mode", "bilinear")
    .infer(infer)
    .compute(compute);
