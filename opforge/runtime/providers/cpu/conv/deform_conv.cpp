// deform_conv.cpp: DeformConv (opset 19; 2-D), the deformable convolution of DCNv1/v2. Each
// kernel tap of each output point reads X at its grid position plus a learned (dy, dx) offset,
// bilinearly with zeros outside the image, times an optional mask; the sampled columns then go
// through one GEMM per group, as an im2col convolution's do.
#include <algorithm>
#include <climits>
#include <cmath>
#include <vector>

#include "common/float_io.h"
#include "gemm/gemm_blas.h"

namespace {

using namespace opforge_cpu;

/// The geometry of one call, from the inputs' shapes and the attributes.
struct Geometry {
  int64_t batch = 0, channels = 0, height = 0, width = 0, out_channels = 0;
  int64_t kernel_h = 0, kernel_w = 0, out_h = 0, out_w = 0;
  int64_t stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1, pad_top = 0, pad_left = 0;
  int64_t group = 1, offset_group = 1;

  int64_t taps() const { return kernel_h * kernel_w; }
  int64_t points() const { return out_h * out_w; }
};

/// ints attribute `name` with two values, or `fallback` when absent.
template <class Ctx> std::vector<int64_t> pair_attr(const Ctx& ctx, const char* name, size_t count, int64_t fallback) {
  if (!ctx.has_attr(name)) return std::vector<int64_t>(count, fallback);
  std::vector<int64_t> v = ctx.template attr<std::vector<int64_t>>(name);
  OPFORGE_CHECK(v.size() == count, "attribute '", name, "' must hold ", count, " values for a 2-D DeformConv, got ",
                v.size());
  return v;
}

/// Reads and checks the geometry; -1 dims (unknown during graph inference) give -1 output dims.
template <class Ctx> Geometry geometry(const Ctx& ctx) {
  Tensor x = ctx.input(0), w = ctx.input(1), offset = ctx.input(2);
  OPFORGE_CHECK(x.ndim() == 4, "input 'X' must be (N, C, H, W): only 2-D DeformConv is supported, got rank ",
                x.ndim());
  OPFORGE_CHECK(w.ndim() == 4, "input 'W' must be (out_channels, C / group, kH, kW), got rank ", w.ndim());
  OPFORGE_CHECK(offset.ndim() == 4, "input 'offset' must be (N, offset_group * kH * kW * 2, oH, oW), got rank ",
                offset.ndim());
  Geometry g;
  g.batch = x.size(0), g.channels = x.size(1), g.height = x.size(2), g.width = x.size(3), g.out_channels = w.size(0);
  const std::vector<int64_t> kernel = pair_attr(ctx, "kernel_shape", 2, -1);
  g.kernel_h = kernel[0] < 0 ? w.size(2) : kernel[0];
  g.kernel_w = kernel[1] < 0 ? w.size(3) : kernel[1];
  OPFORGE_CHECK((w.size(2) < 0 || w.size(2) == g.kernel_h) && (w.size(3) < 0 || w.size(3) == g.kernel_w),
                "attribute 'kernel_shape' (", g.kernel_h, ", ", g.kernel_w, ") disagrees with W's (", w.size(2), ", ",
                w.size(3), ")");
  const std::vector<int64_t> strides = pair_attr(ctx, "strides", 2, 1), dilations = pair_attr(ctx, "dilations", 2, 1);
  const std::vector<int64_t> pads = pair_attr(ctx, "pads", 4, 0);
  g.stride_h = strides[0], g.stride_w = strides[1], g.dilation_h = dilations[0], g.dilation_w = dilations[1];
  g.pad_top = pads[0], g.pad_left = pads[1];
  OPFORGE_CHECK(g.stride_h > 0 && g.stride_w > 0 && g.dilation_h > 0 && g.dilation_w > 0,
                "attributes 'strides' and 'dilations' must be positive");
  g.group = ctx.template attr<int64_t>("group");
  g.offset_group = ctx.template attr<int64_t>("offset_group");
  OPFORGE_CHECK(g.group > 0 && g.offset_group > 0, "attributes 'group' and 'offset_group' must be positive");
  if (g.channels >= 0) {
    OPFORGE_CHECK(w.size(1) < 0 || g.channels == w.size(1) * g.group, "X has ", g.channels, " channels; W takes ",
                  w.size(1), " per group for ", g.group, " group(s)");
    OPFORGE_CHECK(g.channels % g.offset_group == 0, "X's ", g.channels, " channels do not split into ",
                  g.offset_group, " offset groups");
  }
  OPFORGE_CHECK(g.out_channels < 0 || g.out_channels % g.group == 0, "W's ", g.out_channels,
                " output channels do not split into ", g.group, " groups");
  OPFORGE_CHECK(g.kernel_h >= 1 && g.kernel_w >= 1, "the kernel must be at least 1x1, got ", g.kernel_h, "x",
                g.kernel_w);
  // -1: unknown during graph inference; 0: the dilated kernel does not fit the padded input.
  auto out_size = [](int64_t in, int64_t pad, int64_t k, int64_t d, int64_t s) {
    const int64_t room = in + pad - (k - 1) * d - 1;
    return in < 0 ? -1 : room < 0 ? 0 : room / s + 1;
  };
  g.out_h = out_size(g.height, pads[0] + pads[2], g.kernel_h, g.dilation_h, g.stride_h);
  g.out_w = out_size(g.width, pads[1] + pads[3], g.kernel_w, g.dilation_w, g.stride_w);
  OPFORGE_CHECK(g.out_h != 0 && g.out_w != 0, "the ", g.kernel_h, "x", g.kernel_w, " kernel (dilations ",
                g.dilation_h, ", ", g.dilation_w, ") does not fit the padded ", g.height, "x", g.width, " input");
  auto agree = [](int64_t a, int64_t b) { return a < 0 || b < 0 || a == b; };
  OPFORGE_CHECK(agree(offset.size(1), g.offset_group * g.taps() * 2) && agree(offset.size(2), g.out_h) &&
                    agree(offset.size(3), g.out_w) && agree(offset.size(0), g.batch),
                "input 'offset' must be (", g.batch, ", ", g.offset_group * g.taps() * 2, ", ", g.out_h, ", ", g.out_w,
                "), got (", offset.size(0), ", ", offset.size(1), ", ", offset.size(2), ", ", offset.size(3), ")");
  if (ctx.has_input(3)) {
    Tensor b = ctx.input(3);
    OPFORGE_CHECK(b.ndim() == 1 && agree(b.size(0), g.out_channels), "input 'B' must be (", g.out_channels, ")");
  }
  if (ctx.has_input(4)) {
    Tensor m = ctx.input(4);
    OPFORGE_CHECK(m.ndim() == 4 && agree(m.size(0), g.batch) && agree(m.size(1), g.offset_group * g.taps()) &&
                      agree(m.size(2), g.out_h) && agree(m.size(3), g.out_w),
                  "input 'mask' must be (", g.batch, ", ", g.offset_group * g.taps(), ", ", g.out_h, ", ", g.out_w,
                  ")");
  }
  return g;
}

void infer(InferContext& ctx) {
  const Geometry g = geometry(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), {g.batch, g.out_channels, g.out_h, g.out_w});
}

/// The column matrix, (channels * kH * kW) x (oH * oW), of one image.
int64_t workspace(InferContext& ctx) {
  const Geometry g = geometry(ctx);
  const int64_t compute_size = ctx.input(0).dtype() == OPF_FLOAT64 ? sizeof(double) : sizeof(float);
  return g.channels * g.taps() * g.points() * compute_size;
}

/// The bilinear reads of every (kernel tap, output point) of one offset group, by field so that
/// the column loop vectorises (as gathers): four plane offsets and four weights per read (mask
/// folded in; zero outside X).
template <class T> struct Taps {
  std::vector<int32_t> pos[4];
  std::vector<T> w[4];
};

/// The taps of one offset group of image n.
template <class T> void deformed_taps(const Geometry& g, const T* offset, const T* mask, Taps<T>& out) {
  const int64_t points = g.points();
  for (int c = 0; c < 4; ++c) {
    out.pos[c].resize(size_t(g.taps() * points));
    out.w[c].resize(size_t(g.taps() * points));
  }
  for (int64_t k = 0; k < g.taps(); ++k) {
    const int64_t ki = k / g.kernel_w, kj = k % g.kernel_w;
    const T* dy = offset + (2 * k) * points;
    const T* dx = offset + (2 * k + 1) * points;
    for (int64_t p = 0; p < points; ++p) {
      const int64_t oh = p / g.out_w, ow = p % g.out_w;
      const T h = T(oh * g.stride_h - g.pad_top + ki * g.dilation_h) + dy[p];
      const T w = T(ow * g.stride_w - g.pad_left + kj * g.dilation_w) + dx[p];
      const T m = mask ? mask[k * points + p] : T(1);
      const size_t at = size_t(k * points + p);
      if (!(h > T(-2) && h < T(g.height + 1) && w > T(-2) && w < T(g.width + 1))) {  // far outside, or NaN
        for (int c = 0; c < 4; ++c) out.pos[c][at] = 0, out.w[c][at] = T(0);
        continue;
      }
      const T h0f = std::floor(h), w0f = std::floor(w);
      const int64_t h0 = int64_t(h0f), w0 = int64_t(w0f);
      const T lh = h - h0f, lw = w - w0f;
      const int64_t rows[2] = {h0, h0 + 1}, cols[2] = {w0, w0 + 1};
      const T wr[2] = {T(1) - lh, lh}, wc[2] = {T(1) - lw, lw};
      for (int c = 0; c < 4; ++c) {
        const int64_t r = rows[c / 2], q = cols[c % 2];
        const bool inside = r >= 0 && r < g.height && q >= 0 && q < g.width;
        out.pos[c][at] = inside ? int32_t(r * g.width + q) : 0;
        out.w[c][at] = inside ? wr[c / 2] * wc[c % 2] * m : T(0);
      }
    }
  }
}

/// DeformConv in compute type T: `in` holds X, W, offset, B and mask as T (null when absent).
template <class T> void compute_typed(KernelContext& ctx, const Geometry& g, const T* const (&in)[5], T* y) {
  const int64_t points = g.points(), taps = g.taps(), plane = g.height * g.width;
  const int64_t per_offset_group = g.channels / g.offset_group, in_per_group = g.channels / g.group;
  const int64_t out_per_group = g.out_channels / g.group, rows = in_per_group * taps;
  const T *x = in[0], *weights = in[1], *offset = in[2], *bias = in[3], *mask = in[4];
  T* col = ctx.workspace<T>();
  OPFORGE_CHECK(col != nullptr || g.channels * taps * points == 0, "DeformConv got no workspace for its columns");
  OPFORGE_CHECK(plane <= INT32_MAX, "input 'X' has ", plane, " pixels per channel, more than DeformConv indexes");
  std::vector<Taps<T>> tap_sets(static_cast<size_t>(g.offset_group));
  for (int64_t n = 0; n < g.batch; ++n) {
    ctx.parallel_for(g.offset_group, 1, [&](int64_t begin, int64_t end) {
      for (int64_t og = begin; og < end; ++og)
        deformed_taps(g, offset + (n * g.offset_group + og) * taps * 2 * points,
                      mask ? mask + (n * g.offset_group + og) * taps * points : nullptr, tap_sets[size_t(og)]);
    });
    const T* image = x + n * g.channels * plane;
    ctx.parallel_for(g.channels * taps, std::max<int64_t>(1, 4096 / std::max<int64_t>(points, 1)),
                     [&](int64_t begin, int64_t end) {
      // Unit u fills column row c * taps + k, k-major so that neighbouring units share k's taps
      // in cache (one offset group's taps for all k outgrow it).
      for (int64_t u = begin; u < end; ++u) {
        const int64_t k = u / g.channels, c = u % g.channels;
        const T* src = image + c * plane;
        const Taps<T>& t = tap_sets[size_t(c / per_offset_group)];
        const int32_t *p0 = t.pos[0].data() + k * points, *p1 = t.pos[1].data() + k * points;
        const int32_t *p2 = t.pos[2].data() + k * points, *p3 = t.pos[3].data() + k * points;
        const T *w0 = t.w[0].data() + k * points, *w1 = t.w[1].data() + k * points;
        const T *w2 = t.w[2].data() + k * points, *w3 = t.w[3].data() + k * points;
        T* dst = col + (c * taps + k) * points;
        for (int64_t p = 0; p < points; ++p)
          dst[p] = w0[p] * src[p0[p]] + w1[p] * src[p1[p]] + w2[p] * src[p2[p]] + w3[p] * src[p3[p]];
      }
    });
    T* out = y + n * g.out_channels * points;
    for (int64_t oc = 0; oc < g.out_channels; ++oc) std::fill(out + oc * points, out + (oc + 1) * points, bias ? bias[oc] : T(0));
    if (rows == 0) continue;  // no input channels: the output is the bias
    for (int64_t gr = 0; gr < g.group; ++gr)
      opforge_nn::parallel_matmul(ctx, false, false, out_per_group, points, rows, T(1),
                                  weights + gr * out_per_group * rows, rows, col + gr * rows * points, points, T(1),
                                  out + gr * out_per_group * points, points);
  }
}

void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx);
  Tensor x = ctx.input(0);
  for (int i = 1; i < 5; ++i)  // W, offset, B, mask
    if (ctx.has_input(i))
      OPFORGE_CHECK(ctx.input(i).dtype() == x.dtype(), "input #", i, " must have X's dtype ",
                    opforge::dtype_name(x.dtype()), ", got ", opforge::dtype_name(ctx.input(i).dtype()));
  opforge_nn::check_blas_dims(g.out_channels / g.group, g.points(), g.channels / g.group * g.taps());
  Tensor y = ctx.output(0);
  dispatch_compute(x, "X", [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> keep[5], keep_y;
    const C* in[5] = {};
    for (int i = 0; i < 5; ++i)
      if (ctx.has_input(i)) in[i] = floats_of<C>(ctx.input(i), keep[i], "input");
    const bool direct = x.dtype() == int32_t(opforge::dtype_of<C>::value);
    if (!direct) keep_y.resize(size_t(y.numel()));
    compute_typed<C>(ctx, g, in, direct ? y.data<C>() : keep_y.data());
    if (!direct) write_floats(keep_y.data(), y);
  });
}

}  // namespace

#define DEFORM_FLOATS {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}

OPFORGE_OP(DeformConv)
    .since(19)
    .input("X", DEFORM_FLOATS)
    .input("W", DEFORM_FLOATS)
    .input("offset", DEFORM_FLOATS)
    .optional_input("B", DEFORM_FLOATS)
    .optional_input("mask", DEFORM_FLOATS)
    .output("Y")
    .optional_attr("dilations", opforge::AttrType::Ints)
    .attr("group", int64_t(1))
    .optional_attr("kernel_shape", opforge::AttrType::Ints)
    .attr("offset_group", int64_t(1))
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(infer)
    .workspace(workspace)
    .compute(compute);
