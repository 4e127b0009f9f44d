// max_roi_pool.cpp: MaxRoiPool (opset 1), Fast R-CNN's pooling: the max over the integer pixels
// of each bin of each roi, with rois rounded and clipped as onnxruntime does.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "float_io.h"
#include "roi_pool.h"

namespace {

using namespace opforge_cpu;

void max_pool_infer(InferContext& ctx) {
  const std::vector<int64_t> pooled = ctx.attr<std::vector<int64_t>>("pooled_shape");
  OPFORGE_CHECK(pooled.size() == 2 && pooled[0] >= 1 && pooled[1] >= 1,
                "attribute 'pooled_shape' must be two sizes >= 1, got ", pooled.size(), " value(s)");
  Tensor x = ctx.input(0), rois = ctx.input(1);
  check_rois(x, rois, 5, nullptr);
  ctx.set_output(0, x.dtype(), {rois.size(0), x.size(1), pooled[0], pooled[1]});
}

/// One pooled bin's start and end along a dim of `len`, offset by the roi's start and clipped.
void bin_range(int64_t p, float bin, int64_t roi_start, int64_t len, int64_t* begin, int64_t* end) {
  *begin = std::min(std::max(int64_t(std::floor(float(p) * bin)) + roi_start, int64_t(0)), len);
  *end = std::min(std::max(int64_t(std::ceil(float(p + 1) * bin)) + roi_start, int64_t(0)), len);
}

/// A roi corner scaled and rounded to a pixel, as onnxruntime rounds it; NaN and far-away corners
/// (undefined there) are pinned to 0 and +-2^40, which clipping to the map treats alike.
int64_t roi_pixel(float v, float scale) {
  const float p = std::round(v * scale), far = float(int64_t(1) << 40);
  return p == p ? int64_t(std::min(far, std::max(-far, p))) : 0;
}

/// MaxRoiPool in compute type T over X, rois and Y as T (16-bit floats converted around it).
template <class T> void max_pool_typed(KernelContext& ctx, const T* src, const T* box, T* dst) {
  Tensor x = ctx.input(0), rois = ctx.input(1), y = ctx.output(0);
  const int64_t batches = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t out_h = y.size(2), out_w = y.size(3), plane = height * width;
  const float scale = ctx.attr<float>("spatial_scale");
  for (int64_t n = 0; n < rois.size(0); ++n) {
    const T* r = box + n * 5;
    OPFORGE_CHECK(r[0] >= 0 && r[0] < T(batches), "input 'rois' names batch ", double(r[0]), " at roi ", n,
                  ", outside the batch of ", batches);
  }
  ctx.parallel_for(rois.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* r = box + n * 5;
      const int64_t start_w = roi_pixel(float(r[1]), scale), start_h = roi_pixel(float(r[2]), scale);
      const int64_t end_w = roi_pixel(float(r[3]), scale), end_h = roi_pixel(float(r[4]), scale);
      // A malformed roi (end before start) pools as 1x1, as in onnxruntime.
      const float bin_h = float(std::max<int64_t>(end_h - start_h + 1, 1)) / float(out_h);
      const float bin_w = float(std::max<int64_t>(end_w - start_w + 1, 1)) / float(out_w);
      const T* image = src + int64_t(r[0]) * channels * plane;
      for (int64_t c = 0; c < channels; ++c) {
        const T* p = image + c * plane;
        T* out = dst + (n * channels + c) * out_h * out_w;
        for (int64_t ph = 0; ph < out_h; ++ph) {
          int64_t h0, h1;
          bin_range(ph, bin_h, start_h, height, &h0, &h1);
          for (int64_t pw = 0; pw < out_w; ++pw) {
            int64_t w0, w1;
            bin_range(pw, bin_w, start_w, width, &w0, &w1);
            T best = h1 <= h0 || w1 <= w0 ? T(0) : std::numeric_limits<T>::lowest();
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w)
                if (p[h * width + w] > best) best = p[h * width + w];
            out[ph * out_w + pw] = best;
          }
        }
      }
    }
  });
}

void max_pool_compute(KernelContext& ctx) {
  Tensor x = ctx.input(0), rois = ctx.input(1);
  OPFORGE_CHECK(rois.dtype() == x.dtype(), "input 'rois' must have X's dtype ", opforge::dtype_name(x.dtype()),
                ", got ", opforge::dtype_name(rois.dtype()));
  Tensor y = ctx.output(0);
  dispatch_compute(x, "X", [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> keep_x, keep_rois, keep_y;
    const bool direct = x.dtype() == int32_t(opforge::dtype_of<C>::value);
    if (!direct) keep_y.resize(size_t(y.numel()));
    max_pool_typed<C>(ctx, floats_of<C>(x, keep_x, "X"), floats_of<C>(rois, keep_rois, "rois"),
                      direct ? y.data<C>() : keep_y.data());
    if (!direct) write_floats(keep_y.data(), y);
  });
}

}  // namespace

OPFORGE_OP(MaxRoiPool)
    .since(1)
    .input("X", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("rois", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .required_attr("pooled_shape", opforge::AttrType::Ints)
    .attr("spatial_scale", 1.0f)
    .infer(max_pool_infer)
    .compute(max_pool_compute);
