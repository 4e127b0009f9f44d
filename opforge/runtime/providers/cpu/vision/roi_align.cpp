// roi_align.cpp: RoiAlign (opsets 10, 16), Mask R-CNN's pooling: each (roi, output bin) averages
// or maxes bilinear samples of X, placed and rounded as onnxruntime places them (no fused
// multiply-add, so results match to the last bit). Many rois read a channels-last copy of X.

// Round every product and sum on its own, as onnxruntime's build does.
#pragma GCC optimize("fp-contract=off")
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/float_io.h"
#include "vision/roi_pool.h"

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

void align_infer(InferContext& ctx) {
  const AlignOptions o = align_options(ctx);
  Tensor x = ctx.input(0), rois = ctx.input(1), batch = ctx.input(2);
  check_rois(x, rois, batch);
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
          if (!(y >= T(-1) && y <= T(height) && x >= T(-1) && x <= T(width))) {  // outside X, or NaN
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

/// Most samples one roi may take (48 bytes each): a bound on a corrupt or huge roi's memory.
constexpr int64_t kMaxSamples = int64_t(1) << 24;

/// The samples of roi r; returns how many each bin has.
template <class T>
int64_t roi_samples(const T* r, const AlignOptions& o, int64_t height, int64_t width, std::vector<Sample<T>>& out) {
  const T offset = o.half_pixel ? T(0.5) : T(0), scale = T(o.spatial_scale);
  const T start_w = r[0] * scale - offset, start_h = r[1] * scale - offset;
  T roi_w = r[2] * scale - offset - start_w, roi_h = r[3] * scale - offset - start_h;
  if (!o.half_pixel) {  // opset 10's sampling forces a roi to at least one pixel
    roi_w = std::max(roi_w, T(1));
    roi_h = std::max(roi_h, T(1));
  }
  const T bin_h = roi_h / T(o.out_h), bin_w = roi_w / T(o.out_w);
  // An adaptive grid of a roi of negative size (corners swapped) is empty, as in onnxruntime;
  // so is one of NaN size. An infinite one is refused below (onnxruntime's are undefined).
  auto grid = [&](T size, int64_t bins) {
    if (o.sampling_ratio > 0) return o.sampling_ratio;
    const T n = std::ceil(size / T(bins));
    return n >= T(1) && n < T(kMaxSamples) ? int64_t(n) : n >= T(kMaxSamples) ? kMaxSamples : int64_t(0);
  };
  const int64_t grid_h = grid(roi_h, o.out_h), grid_w = grid(roi_w, o.out_w);
  OPFORGE_CHECK(size_mul(grid_h, grid_w) <= kMaxSamples / size_mul(o.out_h, o.out_w), "a roi of ", double(roi_w), "x", double(roi_h),
                " pixels needs ", grid_h, "x", grid_w, " samples per bin for ", o.out_h * o.out_w,
                " bins, more than the ", kMaxSamples, " a roi may have (set sampling_ratio)");
  bin_samples(height, width, o, start_h, start_w, bin_h, bin_w, grid_h, grid_w, out);
  return grid_h * grid_w;
}

/// One bin's value from its samples' weighted taps: `read(pos)` is the input value at a plane
/// offset. Avg sums each sample's taps, then divides; max takes onnxruntime's maximum over the
/// weighted taps of every sample (not the maximum interpolated value).
template <class T, class Read>
T pool_bin(const Sample<T>* s, int64_t per_bin, bool max_mode, Read&& read) {
  T acc = T(0);
  for (int64_t k = 0; k < per_bin; ++k, ++s) {
    const T v0 = s->w[0] * read(s->pos[0]), v1 = s->w[1] * read(s->pos[1]);
    const T v2 = s->w[2] * read(s->pos[2]), v3 = s->w[3] * read(s->pos[3]);
    if (!max_mode) {
      acc += v0 + v1 + v2 + v3;
    } else {
      const T v = std::max(std::max(std::max(v0, v1), v2), v3);
      acc = k == 0 ? v : std::max(acc, v);
    }
  }
  return max_mode ? acc : acc / T(std::max<int64_t>(per_bin, 1));
}

/// One roi from a channels-first image: bin by bin within each channel plane.
template <class T>
void pool_planes(const T* image, T* out, int64_t channels, int64_t plane, const std::vector<Sample<T>>& samples,
                 int64_t per_bin, int64_t bins, bool max_mode) {
  for (int64_t c = 0; c < channels; ++c) {
    const T* p = image + c * plane;
    for (int64_t b = 0; b < bins; ++b)
      out[c * bins + b] = pool_bin(samples.data() + b * per_bin, per_bin, max_mode, [p](int64_t i) { return p[i]; });
  }
}

/// One roi from a channels-last image (H*W rows of `channels`): every tap reads a contiguous row,
/// so the channel loop vectorises; each channel's sums are formed in the same order as above.
template <class T>
void pool_rows(const T* image, T* out, int64_t channels, const std::vector<Sample<T>>& samples, int64_t per_bin,
               int64_t bins, bool max_mode, std::vector<T>& acc) {
  acc.resize(size_t(channels));
  const T count = T(std::max<int64_t>(per_bin, 1));
  for (int64_t b = 0; b < bins; ++b) {
    T* a = acc.data();
    std::fill(a, a + channels, T(0));
    for (int64_t k = 0; k < per_bin; ++k) {
      const Sample<T>& s = samples[size_t(b * per_bin + k)];
      const T *r0 = image + s.pos[0] * channels, *r1 = image + s.pos[1] * channels;
      const T *r2 = image + s.pos[2] * channels, *r3 = image + s.pos[3] * channels;
      const T w0 = s.w[0], w1 = s.w[1], w2 = s.w[2], w3 = s.w[3];
      if (!max_mode) {
        for (int64_t c = 0; c < channels; ++c) a[c] += w0 * r0[c] + w1 * r1[c] + w2 * r2[c] + w3 * r3[c];
      } else {
        for (int64_t c = 0; c < channels; ++c) {
          const T v = std::max(std::max(std::max(w0 * r0[c], w1 * r1[c]), w2 * r2[c]), w3 * r3[c]);
          a[c] = k == 0 ? v : std::max(a[c], v);
        }
      }
    }
    for (int64_t c = 0; c < channels; ++c) out[c * bins + b] = max_mode ? a[c] : a[c] / count;
  }
}

/// Whether to pool from a channels-last copy of X: when the rois' taps outnumber X's pixels
/// (a detector's hundreds of rois), so that copying X once costs less than the strided reads.
bool channels_last(int64_t channels, int64_t plane, int64_t batches, int64_t num_rois, int64_t bins) {
  return channels >= 4 && size_mul(size_mul(num_rois, bins), 4) >= size_mul(batches, plane);
}

int64_t align_workspace(InferContext& ctx) {
  const AlignOptions o = align_options(ctx);
  Tensor x = ctx.input(0), rois = ctx.input(1);
  const int64_t plane = x.size(2) * x.size(3);
  if (!channels_last(x.size(1), plane, x.size(0), rois.size(0), size_mul(o.out_h, o.out_w))) return 0;
  return x.numel() * int64_t(x.dtype() == OPF_FLOAT64 ? sizeof(double) : sizeof(float));  // the compute type
}

/// X (N, C, H*W) -> (N, H*W, C), in tiles that keep both sides in cache.
template <class T> void to_channels_last(const KernelContext& ctx, const T* x, T* out, int64_t batches,
                                         int64_t channels, int64_t plane) {
  constexpr int64_t tile = 32;
  const int64_t tiles = (plane + tile - 1) / tile;
  ctx.parallel_for(batches * tiles, 4, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t n = u / tiles, p0 = (u % tiles) * tile, p1 = std::min(plane, p0 + tile);
      const T* src = x + n * channels * plane;
      T* dst = out + n * plane * channels;
      for (int64_t c0 = 0; c0 < channels; c0 += tile)
        for (int64_t p = p0; p < p1; ++p)
          for (int64_t c = c0; c < std::min(channels, c0 + tile); ++c) dst[p * channels + c] = src[c * plane + p];
    }
  });
}

/// RoiAlign in compute type T over X, rois and Y as T (16-bit floats converted around it).
template <class T>
void align_compute_typed(KernelContext& ctx, const AlignOptions& o, const T* src, const T* boxes, T* dst) {
  Tensor x = ctx.input(0), rois = ctx.input(1), batch = ctx.input(2), y = ctx.output(0);
  const int64_t batches = x.size(0), channels = x.size(1), height = x.size(2), width = x.size(3);
  const int64_t num_rois = rois.size(0), bins = size_mul(o.out_h, o.out_w), plane = height * width;
  const std::vector<int64_t> batch_of = read_ints(batch);
  for (int64_t n = 0; n < num_rois; ++n)
    OPFORGE_CHECK(batch_of[size_t(n)] >= 0 && batch_of[size_t(n)] < batches, "input 'batch_indices' holds ",
                  batch_of[size_t(n)], " at roi ", n, ", outside the batch of ", batches);
  if (plane == 0) {  // no pixel to sample: every sample lies outside X
    std::fill(dst, dst + y.numel(), T(0));
    return;
  }
  const bool rows = channels_last(channels, plane, batches, num_rois, bins);
  T* hwc = rows ? ctx.workspace<T>() : nullptr;
  OPFORGE_CHECK(!rows || (hwc != nullptr && ctx.workspace_bytes() >= x.numel() * int64_t(sizeof(T))),
                "RoiAlign got no workspace for its channels-last copy of X");
  if (rows) to_channels_last(ctx, src, hwc, batches, channels, plane);
  ctx.parallel_for(num_rois, 1, [&](int64_t begin, int64_t end) {
    std::vector<Sample<T>> samples;
    std::vector<T> acc;
    for (int64_t n = begin; n < end; ++n) {
      const int64_t per_bin = roi_samples(boxes + n * 4, o, height, width, samples);
      const int64_t image = batch_of[size_t(n)] * channels * plane;
      T* out = dst + n * channels * bins;
      if (rows)
        pool_rows(hwc + image, out, channels, samples, per_bin, bins, o.max_mode, acc);
      else
        pool_planes(src + image, out, channels, plane, samples, per_bin, bins, o.max_mode);
    }
  });
}

void align_compute(KernelContext& ctx) {
  const AlignOptions o = align_options(ctx);
  Tensor x = ctx.input(0), rois = ctx.input(1), batch = ctx.input(2);
  check_rois(x, rois, batch);
  OPFORGE_CHECK(rois.dtype() == x.dtype(), "input 'rois' must have X's dtype ", opforge::dtype_name(x.dtype()),
                ", got ", opforge::dtype_name(rois.dtype()));
  Tensor y = ctx.output(0);
  dispatch_compute(x, "X", [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> keep_x, keep_rois, keep_y;
    const bool direct = x.dtype() == int32_t(opforge::dtype_of<C>::value);
    if (!direct) keep_y.resize(size_t(y.numel()));
    align_compute_typed<C>(ctx, o, floats_of<C>(x, keep_x, "X"), floats_of<C>(rois, keep_rois, "rois"),
                           direct ? y.data<C>() : keep_y.data());
    if (!direct) write_floats(keep_y.data(), y);
  });
}

}  // namespace

#define ROI_FLOATS {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}

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
    .workspace(align_workspace)
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
    .workspace(align_workspace)
    .compute(align_compute);
