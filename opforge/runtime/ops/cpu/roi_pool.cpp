// roi_pool.cpp: pooling over regions of interest, as detectors' box heads use it. RoiAlign
// (opsets 10, 16) averages or maxes bilinear samples of each (rois x output) bin, sampled as
// onnxruntime does; MaxRoiPool (1) takes the max over each bin's integer pixels.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common.h"

namespace {

using namespace opforge_cpu;

/// The RoiAlign attributes.
struct AlignOptions {
  bool max_mode = false;
  bool half_pixel = false;
  int64_t out_h = 1, out_w = 1, sampling_ratio = 0;
  float spatial_scale = 1;
};

template <class Ctx> AlignOptions align_options(const Ctx& ctx) {
  AlignOptions o;
  const std::string mode = ctx.template attr<std::string>("mode");
  OPFORGE_CHECK(mode == "avg" || mode == "max", "attribute 'mode' must be avg or max, got '", mode, "'");
  o.max_mode = mode == "max";
  if (ctx.has_attr("coordinate_transformation_mode")) {  // opset 16; opset 10 samples as output_half_pixel
    const std::string t = ctx.template attr<std::string>("coordinate_transformation_mode");
    OPFORGE_CHECK(t == "half_pixel" || t == "output_half_pixel",
                  "attribute 'coordinate_transformation_mode' must be half_pixel or output_half_pixel, got '", t, "'");
    o.half_pixel = t == "half_pixel";
  }
  o.out_h = ctx.template attr<int64_t>("output_height");
  o.out_w = ctx.template attr<int64_t>("output_width");
  o.sampling_ratio = ctx.template attr<int64_t>("sampling_ratio");
  o.spatial_scale = ctx.template attr<float>("spatial_scale");
  OPFORGE_CHECK(o.out_h >= 1 && o.out_w >= 1, "attributes 'output_height' and 'output_width' must be >= 1, got ",
                o.out_h, " and ", o.out_w);
  OPFORGE_CHECK(o.sampling_ratio >= 0, "attribute 'sampling_ratio' must be >= 0, got ", o.sampling_ratio);
  return o;
}

/// Checks X (N, C, H, W), rois (num_rois, roi_cols) and, when given, batch_indices (num_rois).
void check_rois(const Tensor& x, const Tensor& rois, int64_t roi_cols, const Tensor* batch_indices) {
  OPFORGE_CHECK(x.ndim() == 4, "input 'X' must be (N, C, H, W), got rank ", x.ndim());
  OPFORGE_CHECK(rois.ndim() == 2 && (rois.size(1) < 0 || rois.size(1) == roi_cols), "input 'rois' must be (num_rois, ",
                roi_cols, "), got ", rois.ndim() == 2 ? "a second dim of " + std::to_string(rois.size(1))
                                                      : "rank " + std::to_string(rois.ndim()));
  if (batch_indices == nullptr) return;
  OPFORGE_CHECK(batch_indices->ndim() == 1, "input 'batch_indices' must be (num_rois), got rank ",
                batch_indices->ndim());
  OPFORGE_CHECK(rois.size(0) < 0 || batch_indices->size(0) < 0 || rois.size(0) == batch_indices->size(0),
                "inputs 'rois' and 'batch_indices' disagree on num_rois: ", rois.size(0), " vs ",
                batch_indices->size(0));
}

void align_infer(InferContext& ctx) {
  const AlignOptions o = align_options(ctx);
  Tensor x = ctx.input(0), rois = ctx.input(1), batch = ctx.input(2);
  check_rois(x, rois, 4, &batch);
  ctx.set_output(0, x.dtype(), {rois.size(0), x.size(1), o.out_h, o.out_w});
}

/// The four taps of one bilinear sample: plane offsets and weights (all zero outside the map).
template <class T> struct Sample {
  int64_t pos[4];
  T w[4];
};

/// The samples of every bin of one roi, bin by bin, as onnxruntime's PreCalcForBilinearInterpolate.
template <class T>
void bin_samples(int64_t height, int64_t width, const AlignOptions& o, T start_h, T start_w, T bin_h, T bin_w,
                 int64_t grid_h, int64_t grid_w, std::vector<Sample<T>>& out) {
  out.clear();
  for (int64_t ph = 0; ph < o.out_h; ++ph)
    for (int64_t pw = 0; pw < o.out_w; ++pw)
      for (int64_t iy = 0; iy < grid_h; ++iy) {
        const T yy = start_h + T(ph) * bin_h + T(iy + .5f) * bin_h / T(grid_h);
        for (int64_t ix = 0; ix < grid_w; ++ix) {
          T y = yy, x = start_w + T(pw) * bin_w + T(ix + .5f) * bin_w / T(grid_w);
          Sample<T> s = {{0, 0, 0, 0}, {T(0), T(0), T(0), T(0)}};
          if (y < T(-1) || y > T(height) || x < T(-1) || x > T(width)) {
            out.push_back(s);
            continue;
          }
          y = std::max(y, T(0));
          x = std::max(x, T(0));
          int64_t y_low = int64_t(y), x_low = int64_t(x), y_high, x_high;
          if (y_low >= height - 1) {
            y_high = y_low = height - 1;
            y = T(y_low);
          } else {
            y_high = y_low + 1;
          }
          if (x_low >= width - 1) {
            x_high = x_low = width - 1;
            x = T(x_low);
          } else {
            x_high = x_low + 1;
          }
          const T ly = y - T(y_low), lx = x - T(x_low), hy = T(1) - ly, hx = T(1) - lx;
          s = {{y_low * width + x_low, y_low * width + x_high, y_high * width + x_low, y_high * width + x_high},
               {hy * hx, hy * lx, ly * hx, ly * lx}};
          out.push_back(s);
        }
      }
}

/// Pools one channel plane of one roi into its out_h * out_w bins.
template <class T>
void pool_plane(const T* plane, T* out, const std::vector<Sample<T>>& samples, int64_t per_bin, int64_t bins,
                bool max_mode) {
  const T count = T(std::max<int64_t>(per_bin, 1));
  const Sample<T>* s = samples.data();
  for (int64_t b = 0; b < bins; ++b) {
    T acc = T(0);
    for (int64_t k = 0; k < per_bin; ++k, ++s) {
      const T v0 = s->w[0] * plane[s->pos[0]], v1 = s->w[1] * plane[s->pos[1]];
      const T v2 = s->w[2] * plane[s->pos[2]], v3 = s->w[3] * plane[s->pos[3]];
      if (!max_mode) {
        acc += v0 + v1 + v2 + v3;
      } else {  // onnxruntime's max mode: the largest weighted tap of any sample
        const T v = std::max(std::max(std::max(v0, v1), v2), v3);
        acc = k == 0 ? v : std::max(acc, v);
      }
    }
    out[b] = max_mode ? acc : acc / count;
  }
}

template <class T> void align_compute_typed(KernelContext& ctx, const AlignOptions& o) {
  Tensor x = ctx.input(0), rois = ctx.input(1), batch = ctx.input(2), y = ctx.output(0);
  const int64_t batches = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t num_rois = rois.size(0), bins = o.out_h * o.out_w, plane = height * width;
  const std::vector<int64_t> batch_of = read_ints(batch);
  for (int64_t n = 0; n < num_rois; ++n)
    OPFORGE_CHECK(batch_of[size_t(n)] >= 0 && batch_of[size_t(n)] < batches, "input 'batch_indices' holds ",
                  batch_of[size_t(n)], " at roi ", n, ", outside the batch of ", batches);
  const T* box = rois.data<T>();
  const T* src = x.data<T>();
  T* dst = y.data<T>();
  const T offset = o.half_pixel ? T(0.5) : T(0), scale = T(o.spatial_scale);
  ctx.parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    std::vector<Sample<T>> samples;
    for (int64_t n = begin; n < end; ++n) {
      const T* r = box + n * 4;
      const T start_w = r[0] * scale - offset, start_h = r[1] * scale - offset;
      T roi_w = r[2] * scale - offset - start_w, roi_h = r[3] * scale - offset - start_h;
      if (!o.half_pixel) {  // opset 10's sampling forces a roi to at least one pixel
        roi_w = std::max(roi_w, T(1));
        roi_h = std::max(roi_h, T(1));
      }
      const T bin_h = roi_h / T(o.out_h), bin_w = roi_w / T(o.out_w);
      // A roi of negative size (corners swapped) has no samples, as in onnxruntime.
      const int64_t grid_h = std::max<int64_t>(0, o.sampling_ratio > 0 ? o.sampling_ratio : int64_t(std::ceil(roi_h / T(o.out_h))));
      const int64_t grid_w = std::max<int64_t>(0, o.sampling_ratio > 0 ? o.sampling_ratio : int64_t(std::ceil(roi_w / T(o.out_w))));
      bin_samples(height, width, o, start_h, start_w, bin_h, bin_w, grid_h, grid_w, samples);
      const T* image = src + batch_of[size_t(n)] * channels * plane;
      for (int64_t c = 0; c < channels; ++c)
        pool_plane(image + c * plane, dst + (n * channels + c) * bins, samples, grid_h * grid_w, bins, o.max_mode);
    }
  });
}

void align_compute(KernelContext& ctx) {
  const AlignOptions o = align_options(ctx);
  Tensor x = ctx.input(0), rois = ctx.input(1), batch = ctx.input(2);
  check_rois(x, rois, 4, &batch);
  OPFORGE_CHECK(rois.dtype() == x.dtype(), "input 'rois' must have X's dtype ", opforge::dtype_name(x.dtype()),
                ", got ", opforge::dtype_name(rois.dtype()));
  if (x.dtype() == OPF_FLOAT64)
    align_compute_typed<double>(ctx, o);
  else
    align_compute_typed<float>(ctx, o);
}

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

template <class T> void max_pool_typed(KernelContext& ctx) {
  Tensor x = ctx.input(0), rois = ctx.input(1), y = ctx.output(0);
  const int64_t batches = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t out_h = y.size(2), out_w = y.size(3), plane = height * width;
  const float scale = ctx.attr<float>("spatial_scale");
  const T* box = rois.data<T>();
  const T* src = x.data<T>();
  T* dst = y.data<T>();
  for (int64_t n = 0; n < rois.size(0); ++n) {
    const T* r = box + n * 5;
    OPFORGE_CHECK(r[0] >= 0 && r[0] < T(batches), "input 'rois' names batch ", double(r[0]), " at roi ", n,
                  ", outside the batch of ", batches);
  }
  ctx.parallel_for(rois.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const T* r = box + n * 5;
      const int64_t start_w = int64_t(std::round(float(r[1]) * scale)), start_h = int64_t(std::round(float(r[2]) * scale));
      const int64_t end_w = int64_t(std::round(float(r[3]) * scale)), end_h = int64_t(std::round(float(r[4]) * scale));
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
  if (x.dtype() == OPF_FLOAT64)
    max_pool_typed<double>(ctx);
  else
    max_pool_typed<float>(ctx);
}

}  // namespace

#define ROI_FLOATS {opforge::f32, opforge::f64}

OPFORGE_OP(RoiAlign)
    .since(10)
    .input("X", ROI_FLOATS)
    .input("rois", ROI_FLOATS)
    .input("batch_indices", {opforge::i64})
    .output("Y")
    .attr("mode", "avg")
    .attr("output_height", int64_t(1))
    .attr("output_width", int64_t(1))
    .attr("sampling_ratio", int64_t(0))
    .attr("spatial_scale", 1.0f)
    .infer(align_infer)
    .compute(align_compute);
OPFORGE_OP(RoiAlign)
    .since(16)
    .input("X", ROI_FLOATS)
    .input("rois", ROI_FLOATS)
    .input("batch_indices", {opforge::i64})
    .output("Y")
    .attr("coordinate_transformation_mode", "half_pixel")
    .attr("mode", "avg")
    .attr("output_height", int64_t(1))
    .attr("output_width", int64_t(1))
    .attr("sampling_ratio", int64_t(0))
    .attr("spatial_scale", 1.0f)
    .infer(align_infer)
    .compute(align_compute);
OPFORGE_OP(MaxRoiPool)
    .since(1)
    .input("X", ROI_FLOATS)
    .input("rois", ROI_FLOATS)
    .output("Y")
    .required_attr("pooled_shape", opforge::AttrType::Ints)
    .attr("spatial_scale", 1.0f)
    .infer(max_pool_infer)
    .compute(max_pool_compute);
