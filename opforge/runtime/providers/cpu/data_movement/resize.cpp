// resize.cpp: Resize (opsets 10-19) and Upsample (7, 9). Each resized axis gets a table of taps
// (input index and weight per output index) built from the coordinate transformation and the
// interpolation mode; nearest then gathers elements of any dtype, linear and cubic run one
// separable pass per axis in double, as onnx's reference computes them.
#include <cmath>
#include <cstring>
#include <string>

#include "data_movement/data_movement.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using reduction::AxisSplit;
using data_movement::needs_value;

enum class Mode { Nearest, Linear, Cubic };

/// Everything Resize's attributes decide, read once.
struct Options {
  Mode mode = Mode::Nearest;
  std::string coordinates = "half_pixel", nearest = "round_prefer_floor", aspect = "stretch";
  double cubic_a = -0.75, extrapolation = 0;
  bool exclude_outside = false, antialias = false;
  bool legacy = false;  // Upsample and Resize-10: asymmetric, nearest floors (ceils when shrinking)
};

template <class Ctx> Mode read_mode(const Ctx& ctx) {
  const std::string m = ctx.template attr<std::string>("mode");
  if (m == "nearest") return Mode::Nearest;
  if (m == "linear" || m == "bilinear" || m == "trilinear") return Mode::Linear;
  OPFORGE_CHECK(m == "cubic" || m == "bicubic", "attribute 'mode' must be nearest, linear or cubic, got '", m, "'");
  return Mode::Cubic;
}

template <class Ctx> Options read_options(const Ctx& ctx, bool legacy) {
  Options o;
  o.mode = read_mode(ctx);
  o.legacy = legacy;
  if (legacy) return o;
  o.coordinates = ctx.template attr<std::string>("coordinate_transformation_mode");
  o.nearest = ctx.template attr<std::string>("nearest_mode");
  o.cubic_a = ctx.template attr<float>("cubic_coeff_a");
  o.exclude_outside = ctx.template attr<int64_t>("exclude_outside") != 0;
  o.extrapolation = ctx.template attr<float>("extrapolation_value");
  if (ctx.has_attr("antialias")) o.antialias = ctx.template attr<int64_t>("antialias") != 0;
  if (ctx.has_attr("keep_aspect_ratio_policy")) o.aspect = ctx.template attr<std::string>("keep_aspect_ratio_policy");
  static const char* coords[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                 "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"};
  bool known = false;
  for (const char* c : coords) known = known || o.coordinates == c;
  OPFORGE_CHECK(known, "attribute 'coordinate_transformation_mode' has an unknown value '", o.coordinates, "'");
  OPFORGE_CHECK(o.nearest == "round_prefer_floor" || o.nearest == "round_prefer_ceil" || o.nearest == "floor" ||
                o.nearest == "ceil", "attribute 'nearest_mode' has an unknown value '", o.nearest, "'");
  OPFORGE_CHECK(o.aspect == "stretch" || o.aspect == "not_larger" || o.aspect == "not_smaller",
                "attribute 'keep_aspect_ratio_policy' has an unknown value '", o.aspect, "'");
  OPFORGE_CHECK(!(o.antialias && o.mode == Mode::Nearest), "attribute 'antialias' needs mode linear or cubic");
  return o;
}

/// Per-axis scales and output sizes (and roi, 2 * rank values or empty) for one call.
struct Target {
  std::vector<double> scales, roi;
  Shape out;
};

/// A float input (scales, roi) as doubles; an absent or empty one gives none.
template <class Ctx> std::vector<double> input_doubles(const Ctx& ctx, int i, const char* name) {
  if (!ctx.has_input(i) || ctx.input(i).numel() == 0) return {};
  Tensor t = ctx.input(i);
  if (!t.has_data()) throw needs_value("Resize", name);
  std::vector<double> out(static_cast<size_t>(t.numel()));
  const bool ok = opforge::dispatch<float, double>(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (size_t k = 0; k < out.size(); ++k) out[k] = double(t.data<T>()[k]);
  });
  OPFORGE_CHECK(ok, "input '", name, "' must be float or double, got ", opforge::dtype_name(t.dtype()));
  return out;
}

/// The axes the scales, sizes and roi refer to: the attribute's, normalised, or all of them.
template <class Ctx> std::vector<int64_t> resized_axes(const Ctx& ctx, int64_t rank) {
  std::vector<int64_t> axes;
  if (ctx.has_attr("axes")) axes = ctx.template attr<std::vector<int64_t>>("axes");
  if (axes.empty())
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  std::vector<bool> seen(size_t(rank), false);
  for (int64_t& a : axes) {
    a = normalize_axis(a, rank);
    OPFORGE_CHECK(!seen[size_t(a)], "attribute 'axes' repeats axis ", a);
    seen[size_t(a)] = true;
  }
  return axes;
}

/// Output sizes from `sizes`, with keep_aspect_ratio_policy choosing one scale for all axes.
void target_from_sizes(Target& t, const Shape& in, const std::vector<int64_t>& axes, const std::vector<int64_t>& sizes,
                       const Options& o) {
  OPFORGE_CHECK(sizes.size() == axes.size(), "input 'sizes' has ", sizes.size(), " values for ", axes.size(), " axes");
  for (size_t k = 0; k < axes.size(); ++k) {
    OPFORGE_CHECK(sizes[k] >= 0, "input 'sizes' holds a negative size ", sizes[k]);
    const size_t a = size_t(axes[k]);
    t.scales[a] = double(sizes[k]) / double(in[a]);
    t.out[a] = sizes[k];
  }
  if (o.aspect == "stretch") return;
  double scale = o.aspect == "not_larger" ? INFINITY : -INFINITY;
  for (int64_t a : axes)
    scale = o.aspect == "not_larger" ? std::min(scale, t.scales[size_t(a)]) : std::max(scale, t.scales[size_t(a)]);
  for (int64_t a : axes) {
    t.scales[size_t(a)] = scale;
    t.out[size_t(a)] = int64_t(scale * double(in[size_t(a)]) + 0.5);
  }
}

/// scales (index 2 from opset 11, 1 before) or sizes (3) -> scales, output shape and roi.
template <class Ctx> Target resize_target(const Ctx& ctx, const Options& o, int scales_at, int sizes_at) {
  const Shape in = ctx.input(0).sizes();
  const int64_t rank = int64_t(in.size());
  const std::vector<int64_t> axes = resized_axes(ctx, rank);
  Target t{std::vector<double>(size_t(rank), 1.0), {}, in};
  const bool has_sizes = sizes_at >= 0 && ctx.has_input(sizes_at) && ctx.input(sizes_at).numel() != 0;
  const std::vector<double> scales = input_doubles(ctx, scales_at, "scales");
  OPFORGE_CHECK(has_sizes != !scales.empty(), "exactly one of the inputs 'scales' and 'sizes' must be given");
  if (has_sizes) {
    if (!ctx.input(sizes_at).has_data()) throw needs_value("Resize", "sizes");
    target_from_sizes(t, in, axes, read_ints(ctx.input(sizes_at)), o);
  } else {
    OPFORGE_CHECK(scales.size() == axes.size(), "input 'scales' has ", scales.size(), " values for ", axes.size(),
                  " axes");
    for (size_t k = 0; k < axes.size(); ++k) {
      OPFORGE_CHECK(scales[k] > 0, "input 'scales' holds a non-positive scale ", scales[k]);
      const size_t a = size_t(axes[k]);
      t.scales[a] = scales[k];
      t.out[a] = int64_t(std::floor(scales[k] * double(in[a])));
    }
  }
  if (o.coordinates == "tf_crop_and_resize") {
    const std::vector<double> roi = input_doubles(ctx, 1, "roi");
    OPFORGE_CHECK(roi.size() == 2 * axes.size(), "input 'roi' must hold 2 x ", axes.size(), " values, got ",
                  roi.size());
    t.roi.assign(size_t(2 * rank), 0.0);
    for (int64_t d = 0; d < rank; ++d) t.roi[size_t(rank + d)] = 1.0;
    for (size_t k = 0; k < axes.size(); ++k) {
      t.roi[size_t(axes[k])] = roi[k];
      t.roi[size_t(rank + axes[k])] = roi[axes.size() + k];
    }
  }
  return t;
}

/// One axis's taps: for output j, `taps` (index, weight) pairs, or outside[j] for the
/// extrapolation value.
struct AxisTaps {
  int64_t in = 0, out = 0, taps = 0;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<char> outside;
};

/// The input coordinate of output j (onnx's _compute_x_ori); sets `outside` for tf_crop_and_resize.
double source_coordinate(const Options& o, double j, double scale, int64_t in, int64_t out, const double* roi,
                         bool& outside) {
  const double width = scale * double(in);
  const std::string& c = o.coordinates;
  outside = false;
  if (o.legacy || c == "asymmetric") return j / scale;
  // align_corners and tf_crop_and_resize divide by the resized length as the spec defines it,
  // scale * input length (onnx's reference and node tests; onnxruntime takes the whole output size).
  if (c == "align_corners") return width == 1 ? 0.0 : j * double(in - 1) / (width - 1);
  if (c == "tf_crop_and_resize") {
    double x = width == 1 ? (roi[1] - roi[0]) * double(in - 1) / 2 : j * (roi[1] - roi[0]) * double(in - 1) / (width - 1);
    x += roi[0] * double(in - 1);
    outside = x < 0 || x > double(in - 1);
    return x;
  }
  if (c == "pytorch_half_pixel") return width == 1 ? -0.5 : (j + 0.5) / scale - 0.5;
  if (c == "half_pixel_symmetric") {
    const double offset = double(in) / 2 * (1 - double(out) / width);
    return offset + (j + 0.5) / scale - 0.5;
  }
  if (c == "tf_half_pixel_for_nn") return (j + 0.5) / scale;
  return (j + 0.5) / scale - 0.5;  // half_pixel
}

/// Keys' cubic convolution kernel with parameter a.
double cubic_kernel(double x, double a) {
  x = std::abs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

/// Weights for the taps around a coordinate with fractional part `ratio` (1 on an integer).
std::vector<double> tap_weights(const Options& o, double ratio, double scale) {
  if (o.mode == Mode::Nearest) {
    if (ratio == 1) return {0, 1};
    const std::string& m = o.nearest;
    const bool up = m == "ceil" || (m == "round_prefer_floor" && ratio > 0.5) || (m == "round_prefer_ceil" && ratio >= 0.5);
    return {up ? 0.0 : 1.0, up ? 1.0 : 0.0};
  }
  if (!o.antialias) {
    if (o.mode == Mode::Linear) return {1 - ratio, ratio};
    return {cubic_kernel(ratio + 1, o.cubic_a), cubic_kernel(ratio, o.cubic_a), cubic_kernel(1 - ratio, o.cubic_a),
            cubic_kernel(2 - ratio, o.cubic_a)};
  }
  // Antialiasing widens the kernel by 1 / scale when shrinking.
  const double s = std::min(scale, 1.0);
  const int64_t start = int64_t(std::floor((o.mode == Mode::Linear ? -1 : -2) / s)) + 1;
  std::vector<double> w;
  double sum = 0;
  for (int64_t i = start; i < 2 - start; ++i) {
    const double x = s * (double(i) - ratio);
    w.push_back(o.mode == Mode::Linear ? std::max(0.0, 1 - std::abs(x)) : cubic_kernel(x, o.cubic_a));
    sum += w.back();
  }
  for (double& v : w) v /= sum;
  return w;
}

AxisTaps axis_taps(const Options& o, double scale, int64_t in, int64_t out, const double* roi) {
  AxisTaps t;
  t.in = in, t.out = out;
  t.outside.assign(size_t(out), 0);
  for (int64_t j = 0; j < out; ++j) {
    bool outside;
    const double x = source_coordinate(o, double(j), scale, in, out, roi, outside);
    t.outside[size_t(j)] = outside;
    const double fl = std::floor(x);
    std::vector<double> w = tap_weights(o, x == fl ? 1.0 : x - fl, scale);
    const int64_t n = int64_t(w.size());
    if (o.legacy && o.mode == Mode::Nearest) {  // floor on the way up, ceil on the way down
      t.taps = 1;
      t.index.push_back(std::min(in - 1, std::max<int64_t>(0, int64_t(scale < 1 ? std::ceil(x) : fl))));
      t.weight.push_back(1.0);
      continue;
    }
    // Which n neighbours (onnx's _get_neighbor): for even n the window starts left of x unless x is an index.
    const int64_t first = int64_t(fl) + (n % 2 == 0 ? (x == fl ? -(n / 2) : -(n / 2) + 1)
                                                    : (x - fl <= 0.5 ? -((n - 1) / 2) : -((n - 1) / 2) + 1));
    double sum = 0;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t idx = first + k;
      if (o.exclude_outside && (idx < 0 || idx >= in)) w[size_t(k)] = 0;
      sum += w[size_t(k)];
    }
    if (o.exclude_outside && sum != 0)
      for (double& v : w) v /= sum;
    for (int64_t k = 0; k < n; ++k) {
      t.index.push_back(std::min(in - 1, std::max<int64_t>(0, first + k)));
      t.weight.push_back(w[size_t(k)]);
    }
    t.taps = n;
  }
  return t;
}

/// True when an axis is left as it is (as the reference skips it).
bool untouched(const Target& t, const Shape& in, size_t a) {
  const size_t r = in.size();
  const bool roi_full = t.roi.empty() || (std::abs(t.roi[a]) < 1e-9 && std::abs(t.roi[r + a] - 1) < 1e-9);
  return std::abs(t.scales[a] - 1) < 1e-9 && t.out[a] == in[a] && roi_full;
}

/// One separable pass along `axis` over (outer, in, inner) doubles.
std::vector<double> resize_axis(const KernelContext& ctx, const std::vector<double>& src, const Shape& shape,
                                size_t axis, const AxisTaps& t, double extrapolation) {
  AxisSplit s;
  for (size_t d = 0; d < shape.size(); ++d) (d < axis ? s.outer : d == axis ? s.n : s.inner) *= shape[d];
  std::vector<double> dst(size_t(s.outer * t.out * s.inner));
  ctx.parallel_for(s.outer * t.out, reduction::grain_for(s.inner * t.taps), [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      const int64_t o = u / t.out, j = u % t.out;
      double* out = dst.data() + u * s.inner;
      if (t.outside[size_t(j)]) {
        std::fill(out, out + s.inner, extrapolation);
        continue;
      }
      std::fill(out, out + s.inner, 0.0);
      for (int64_t k = 0; k < t.taps; ++k) {
        const double w = t.weight[size_t(j * t.taps + k)];
        const double* in = src.data() + (o * s.n + t.index[size_t(j * t.taps + k)]) * s.inner;
        for (int64_t i = 0; i < s.inner; ++i) out[i] += w * in[i];
      }
    }
  });
  return dst;
}

/// Nearest: one input element per output element, copied as bytes (any dtype).
void gather_nearest(const KernelContext& ctx, const std::vector<AxisTaps>& taps, const Tensor& x, const Tensor& y,
                    const std::vector<char>& fill) {
  const size_t rank = taps.size();
  const int64_t es = opforge::dtype_size(x.dtype()), total = y.numel();
  Shape in_strides(rank, 1);
  for (size_t d = rank - 1; d > 0; --d) in_strides[d - 1] = in_strides[d] * taps[d].in;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  const int64_t inner = rank ? taps[rank - 1].out : 1;
  ctx.parallel_for(inner ? total / inner : 0, reduction::grain_for(inner), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t base = 0, rest = row;
      bool outside = false;
      for (size_t d = rank - 1; d-- > 0;) {
        const int64_t j = rest % taps[d].out;
        rest /= taps[d].out;
        outside = outside || taps[d].outside[size_t(j)];
        base += taps[d].index[size_t(j * taps[d].taps + taps[d].taps - 1)] * in_strides[d];
      }
      const AxisTaps& last = taps[rank - 1];
      for (int64_t j = 0; j < inner; ++j) {
        char* out = dst + (row * inner + j) * es;
        if (outside || last.outside[size_t(j)]) std::memcpy(out, fill.data(), size_t(es));
        else std::memcpy(out, src + (base + last.index[size_t(j * last.taps + last.taps - 1)]) * es, size_t(es));
      }
    }
  });
}

/// Nearest taps keep only the one with weight 1, moved last for gather_nearest.
void keep_nearest_tap(AxisTaps& t) {
  if (t.taps <= 1) return;
  for (int64_t j = 0; j < t.out; ++j) {
    const size_t at = size_t(j * t.taps);
    if (t.weight[at] > t.weight[at + 1]) std::swap(t.index[at], t.index[at + 1]);
  }
}

/// A double as `dtype`, saturated and rounded for integers (onnx's saturate_cast).
template <class T> T saturate(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (std::isnan(v)) return T(0);
    v = std::nearbyint(v);
    return v <= double(std::numeric_limits<T>::lowest()) ? std::numeric_limits<T>::lowest()
           : v >= double(std::numeric_limits<T>::max()) ? std::numeric_limits<T>::max()
                                                        : T(v);
  } else {
    return T(v);
  }
}

#define RESIZE_TYPES float, double, int8_t, uint8_t, int16_t, uint16_t, int32_t, int64_t

void run(KernelContext& ctx, const Options& o, const Target& t) {
  Tensor x = ctx.input(0), y = ctx.output(0);
  const Shape in = x.sizes();
  if (y.numel() == 0) return;
  OPFORGE_CHECK(x.numel() > 0, "cannot resize an empty input to a non-empty output");
  std::vector<AxisTaps> taps;
  for (size_t a = 0; a < in.size(); ++a) {
    const double roi[2] = {t.roi.empty() ? 0.0 : t.roi[a], t.roi.empty() ? 1.0 : t.roi[in.size() + a]};
    taps.push_back(axis_taps(o, t.scales[a], in[a], t.out[a], roi));
  }
  if (o.mode == Mode::Nearest) {
    for (AxisTaps& tp : taps) keep_nearest_tap(tp);
    std::vector<char> fill(size_t(opforge::dtype_size(x.dtype())));
    opforge::dispatch<RESIZE_TYPES>(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T v = saturate<T>(o.extrapolation);
      std::memcpy(fill.data(), &v, sizeof v);
    });
    return gather_nearest(ctx, taps, x, y, fill);
  }
  const bool ok = opforge::dispatch<RESIZE_TYPES>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* src = x.data<T>();
    std::vector<double> cur(src, src + x.numel());
    Shape shape = in;
    for (size_t a = 0; a < in.size(); ++a) {
      if (untouched(t, in, a)) continue;
      cur = resize_axis(ctx, cur, shape, a, taps[a], o.extrapolation);
      shape[a] = t.out[a];
    }
    T* out = y.data<T>();
    for (size_t i = 0; i < cur.size(); ++i) out[i] = saturate<T>(cur[i]);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()), " for linear or cubic resize");
}

/// Resize-11 and later: X, roi, scales, sizes.
void resize_infer(InferContext& ctx) {
  const Options o = read_options(ctx, false);
  ctx.set_output(0, ctx.input(0).dtype(), resize_target(ctx, o, 2, 3).out);
}
void resize_compute(KernelContext& ctx) {
  const Options o = read_options(ctx, false);
  run(ctx, o, resize_target(ctx, o, 2, 3));
}

/// Resize-10 and Upsample-9: X, scales; Upsample-7 takes its scales as an attribute.
template <bool kAttrScales> Target legacy_target(const KernelContext* kctx, const InferContext* ictx) {
  const Tensor x = kctx ? kctx->input(0) : ictx->input(0);
  std::vector<double> scales;
  if constexpr (kAttrScales) {
    for (float s : (kctx ? kctx->attr<std::vector<float>>("scales") : ictx->attr<std::vector<float>>("scales")))
      scales.push_back(s);
  } else {
    scales = kctx ? input_doubles(*kctx, 1, "scales") : input_doubles(*ictx, 1, "scales");
  }
  OPFORGE_CHECK(int64_t(scales.size()) == x.ndim(), "'scales' must hold one value per dim of X (", x.ndim(),
                "), got ", scales.size());
  Target t{scales, {}, x.sizes()};
  for (size_t a = 0; a < scales.size(); ++a) {
    OPFORGE_CHECK(scales[a] > 0, "'scales' holds a non-positive scale ", scales[a]);
    t.out[a] = int64_t(std::floor(scales[a] * double(x.size(int(a)))));
  }
  return t;
}
template <bool kAttrScales> void legacy_infer(InferContext& ctx) {
  read_options(ctx, true);
  ctx.set_output(0, ctx.input(0).dtype(), legacy_target<kAttrScales>(nullptr, &ctx).out);
}
template <bool kAttrScales> void legacy_compute(KernelContext& ctx) {
  run(ctx, read_options(ctx, true), legacy_target<kAttrScales>(&ctx, nullptr));
}

}  // namespace

#define RESIZE_DTYPES                                                                                      \
  {opforge::f32, opforge::f64, opforge::i8, opforge::u8, opforge::i16, opforge::u16, opforge::i32, opforge::i64}

OPFORGE_OP(Upsample)
    .since(7)
    .input("X", RESIZE_DTYPES)
    .output("Y")
    .attr("mode", "nearest")
    .required_attr("scales", opforge::AttrType::Floats)
    .infer(legacy_infer<true>)
    .compute(legacy_compute<true>);
OPFORGE_OP(Upsample)
    .since(9)
    .input("X", RESIZE_DTYPES)
    .input("scales", {opforge::f32})
    .output("Y")
    .attr("mode", "nearest")
    .infer(legacy_infer<false>)
    .compute(legacy_compute<false>);
OPFORGE_OP(Resize)
    .since(10)
    .input("X", RESIZE_DTYPES)
    .input("scales", {opforge::f32})
    .output("Y")
    .attr("mode", "nearest")
    .infer(legacy_infer<false>)
    .compute(legacy_compute<false>);

// Opset 13 makes roi and scales optional (this definition takes them absent at any opset); 18
// adds antialias, axes and keep_aspect_ratio_policy; 19 the value half_pixel_symmetric.
OPFORGE_OP(Resize)
    .since(11)
    .input("X", RESIZE_DTYPES)
    .optional_input("roi", {opforge::f32, opforge::f64})
    .optional_input("scales", {opforge::f32, opforge::f64})
    .optional_input("sizes", {opforge::i64})
    .output("Y")
    .attr("mode", "nearest")
    .attr("coordinate_transformation_mode", "half_pixel")
    .attr("nearest_mode", "round_prefer_floor")
    .attr("cubic_coeff_a", -0.75f)
    .attr("exclude_outside", int64_t(0))
    .attr("extrapolation_value", 0.0f)
    .attr("antialias", int64_t(0)).attr_versions(18)
    .optional_attr("axes", opforge::AttrType::Ints).attr_versions(18)
    .attr("keep_aspect_ratio_policy", "stretch").attr_versions(18)
    .infer(resize_infer)
    .compute(resize_compute);
