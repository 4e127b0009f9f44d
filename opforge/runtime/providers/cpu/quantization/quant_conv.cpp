// quant_conv.cpp: ConvInteger (int32 sums) and QLinearConv (requantized per output channel), as
// im2col (padding reads x's zero point, so it adds nothing) times the weights on the int8 GEMM.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "conv/conv.h"
#include "quantization/quant_gemm.h"

namespace {

using namespace opforge_quant;

/// Where each operand sits among the op's inputs.
struct ConvInputs {
  int x, x_zp, w, w_zp, bias;
};
constexpr ConvInputs kConvInteger{0, 2, 1, 3, -1};
constexpr ConvInputs kQLinearConv{0, 2, 3, 5, 8};

struct QConvShape {
  opforge_nn::Window w;
  int64_t n, c, m, group, cg, mg;
};

template <class Ctx> QConvShape qconv_shape(const Ctx& ctx, ConvInputs in) {
  const Tensor x = ctx.input(in.x), wt = ctx.input(in.w);
  OPFORGE_CHECK(wt.ndim() == x.ndim(), "weight W has rank ", wt.ndim(), " but input x has rank ", x.ndim());
  OPFORGE_CHECK(x.ndim() >= 3, "input x must have rank >= 3 (N, C, spatial...), got ", x.ndim());
  std::vector<int64_t> kernel(wt.shape() + 2, wt.shape() + wt.ndim());
  if (ctx.has_attr("kernel_shape")) {
    const auto ks = ctx.template attr<std::vector<int64_t>>("kernel_shape");
    OPFORGE_CHECK(ks.size() == kernel.size(), "attribute 'kernel_shape' has ", int64_t(ks.size()),
                  " values; expected ", int64_t(kernel.size()));
    for (size_t i = 0; i < ks.size(); ++i)
      OPFORGE_CHECK(kernel[i] < 0 || ks[i] == kernel[i], "attribute 'kernel_shape' ", ks[i],
                    " differs from W's spatial dim ", kernel[i]);
  }
  QConvShape s;
  s.w = opforge_nn::forward_window(ctx, x, kernel);
  s.n = x.size(0), s.c = x.size(1), s.m = wt.size(0);
  s.group = ctx.template attr<int64_t>("group");
  OPFORGE_CHECK(s.group > 0, "attribute 'group' must be positive, got ", s.group);
  OPFORGE_CHECK(s.c < 0 || s.c % s.group == 0, "input channels ", s.c, " are not divisible by group ", s.group);
  OPFORGE_CHECK(s.m < 0 || s.m % s.group == 0, "output channels ", s.m, " are not divisible by group ", s.group);
  s.cg = s.c < 0 ? -1 : s.c / s.group;
  s.mg = s.m < 0 ? -1 : s.m / s.group;
  OPFORGE_CHECK(s.cg < 0 || wt.size(1) < 0 || wt.size(1) == s.cg, "weight W has ", wt.size(1),
                " input channels per group; expected C / group = ", s.cg);
  if (ctx.has_input(in.x_zp)) {
    OPFORGE_CHECK(ctx.input(in.x_zp).dtype() == x.dtype(), "x_zero_point's dtype differs from x's");
    expect_single(ctx, in.x_zp, "x_zero_point");
  }
  if (ctx.has_input(in.w_zp)) {
    const Tensor z = ctx.input(in.w_zp);
    OPFORGE_CHECK(z.dtype() == wt.dtype(), "w_zero_point's dtype differs from w's");
    OPFORGE_CHECK(z.ndim() <= 1 && (z.numel() == 1 || z.numel() == s.m || s.m < 0), "w_zero_point must be a scalar "
                  "or hold one value per output channel (", s.m, ")");
  }
  if (in.bias >= 0 && ctx.has_input(in.bias)) {
    const Tensor b = ctx.input(in.bias);
    OPFORGE_CHECK(b.ndim() == 1 && (b.size(0) == s.m || b.size(0) < 0 || s.m < 0), "bias B must have shape (", s.m,
                  ")");
  }
  return s;
}

std::vector<int64_t> output_dims(const QConvShape& s) {
  std::vector<int64_t> out{s.n, s.m};
  for (int64_t d : s.w.out_dims()) out.push_back(d);
  return out;
}

/// Whether a conv can read its im2col rows as shifted copies of each zero-padded input plane: 2-D,
/// stride 1, no dilation, pads not negative.
bool shifted_rows(const opforge_nn::Window& w) {
  return w.in[0] == 1 && w.k[0] == 1 && w.stride[1] == 1 && w.stride[2] == 1 && w.dil[1] == 1 && w.dil[2] == 1 &&
         w.pad[1] >= 0 && w.pad[2] >= 0 && w.pad_end[1] >= 0 && w.pad_end[2] >= 0;
}

/// im2col over a "virtual" output grid as wide as the padded input (Wp = out_w + k_w - 1): tap
/// (i, j) of virtual position v is padded[v + i * Wp + j], so each row of `col` is one memcpy of
/// out_h * Wp bytes; the k_w - 1 extra columns per output row are computed and dropped. This
/// replaces a short copy per output row and tap (most of a 13x13 3x3 conv's time).
void im2col_shifted(const KernelContext& ctx, const opforge_nn::Window& w, const uint8_t* x, int64_t channels,
                    uint8_t zp, uint8_t* col) {
  const int64_t wp = w.out[2] + w.k[2] - 1, hp = w.out[1] + w.k[1] - 1, nv = w.out[1] * wp;
  const int64_t plane = hp * wp + w.k[2];  // the last taps read up to k_w - 1 bytes past the plane
  std::vector<uint8_t>& padded = scratch<uint8_t, 3>(size_t(channels * plane));
  ctx.parallel_for(channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      uint8_t* pc = padded.data() + c * plane;
      std::fill(pc, pc + plane, zp);
      for (int64_t ih = 0; ih < w.in[1]; ++ih)
        std::memcpy(pc + (ih + w.pad[1]) * wp + w.pad[2], x + (c * w.in[1] + ih) * w.in[2], size_t(w.in[2]));
      for (int64_t i = 0; i < w.k[1]; ++i)
        for (int64_t j = 0; j < w.k[2]; ++j)
          std::memcpy(col + ((c * w.k[1] + i) * w.k[2] + j) * nv, pc + i * wp + j, size_t(nv));
    }
  });
}

/// The sums over the window of (x - x_zp) * (w - w_zp), group by group, into y (N, M, positions):
/// as int32 (T int32_t), or requantized by `rq` (T uint8_t, the bytes of uint8 or int8; rq's scale
/// and bias hold one value per output channel).
template <class T>
void qconv(const KernelContext& ctx, ConvInputs in, const QConvShape& s, const QRequant* rq, T* y) {
  const Tensor x = ctx.input(in.x), wt = ctx.input(in.w);
  const int32_t x_zp = zero_points(ctx, in.x_zp, 1)[0];
  const std::vector<int32_t> w_zp = zero_points(ctx, in.w_zp, ctx.has_input(in.w_zp) ? ctx.input(in.w_zp).numel() : 1);
  const int64_t p = s.w.out_size(), kc = s.cg * s.w.k_size();
  const bool x_signed = x.dtype() == OPF_INT8, w_signed = wt.dtype() == OPF_INT8;
  const auto* xd = static_cast<const uint8_t*>(x.raw());
  const auto* wd = static_cast<const uint8_t*>(wt.raw());
  const bool direct = s.w.is_pointwise(), shifted = !direct && shifted_rows(s.w);
  // Columns of B: output positions, or with shifted rows the virtual grid's (wp per output row,
  // the first out_w of them kept).
  const int64_t wp = shifted ? s.w.out[2] + s.w.k[2] - 1 : s.w.out[2], n = shifted ? s.w.out[1] * wp : p;
  const int64_t kept = shifted ? s.w.out[2] : n, width = shifted ? wp : n;
  const int64_t taps = s.w.k_size();
  std::vector<uint8_t>& col = scratch<uint8_t, 0>(direct ? 0 : size_t(kc * n));
  for (int64_t b = 0; b < s.n; ++b)
    for (int64_t g = 0; g < s.group; ++g) {
      const uint8_t* xg = xd + (b * s.c + g * s.cg) * s.w.in_size();
      if (shifted)
        im2col_shifted(ctx, s.w, xg, s.cg, uint8_t(x_zp), col.data());
      else if (!direct)  // whole rows at a time, channels spread over the threads
        ctx.parallel_for(s.cg, 1, [&](int64_t c0, int64_t c1) {
          opforge_nn::im2col(s.w, xg + c0 * s.w.in_size(), c1 - c0, 0, p, col.data() + c0 * taps * p, uint8_t(x_zp));
        });
      const uint8_t* bmat = direct ? xg : col.data();
      std::vector<int32_t> za(1, w_zp[0]);
      if (w_zp.size() > 1) za.assign(w_zp.begin() + g * s.mg, w_zp.begin() + (g + 1) * s.mg);
      T* yg = y + (b * s.m + g * s.mg) * p;
      // B's panels are packed on the threads that multiply them.
      const QPanelSource source = [&](int64_t c0, int64_t, uint8_t*, int64_t* ld) -> const uint8_t* {
        return *ld = n, bmat + c0;
      };
      const Q8Matrix a{wd + g * s.mg * kc, kc, w_signed};
      if constexpr (std::is_same_v<T, int32_t>) {
        // Blocks over the virtual columns go out one output row's run at a time.
        qgemm_streamed(ctx, s.mg, a, za, kc, n, x_signed, source, {x_zp},
                       [&](int64_t r0, int64_t c0, int64_t rows, int64_t cols, const int32_t* block, int64_t ld) {
                         for (int64_t v = c0; v < c0 + cols;) {
                           const int64_t row = v / width, run_end = std::min(c0 + cols, (row + 1) * width);
                           const int64_t stop = std::min(run_end, row * width + kept);
                           for (int64_t r = 0; v < stop && r < rows; ++r)  // none when v is dropped
                             std::copy(block + r * ld + (v - c0), block + r * ld + (stop - c0),
                                       yg + (r0 + r) * p + row * kept + v % width);
                           v = run_end;
                         }
                       });
      } else {
        QRequant group = *rq;
        group.scale += g * s.mg;
        if (group.bias != nullptr) group.bias += g * s.mg;
        qgemm_streamed_requantized(ctx, s.mg, a, za, kc, n, x_signed, source, {x_zp}, group,
                                   Q8Output{yg, p, width, kept});
      }
    }
}

void conv_integer_infer(InferContext& ctx) {
  ctx.set_output(0, OPF_INT32, output_dims(qconv_shape(ctx, kConvInteger)));
}

void conv_integer_compute(KernelContext& ctx) {
  const QConvShape s = qconv_shape(ctx, kConvInteger);
  qconv(ctx, kConvInteger, s, nullptr, ctx.output(0).data<int32_t>());
}

void qlinear_conv_infer(InferContext& ctx) {
  const QConvShape s = qconv_shape(ctx, kQLinearConv);
  expect_single(ctx, 1, "x_scale");
  expect_single(ctx, 6, "y_scale");
  expect_single(ctx, 7, "y_zero_point");
  const Tensor ws = ctx.input(4);
  OPFORGE_CHECK(ws.ndim() <= 1 && (ws.numel() == 1 || ws.numel() == s.m || s.m < 0), "w_scale must be a scalar "
                "or hold one value per output channel (", s.m, ")");
  ctx.set_output(0, ctx.input(7).dtype(), output_dims(s));
}

void qlinear_conv_compute(KernelContext& ctx) {
  const QConvShape s = qconv_shape(ctx, kQLinearConv);
  const Tensor y = ctx.output(0);
  const float xs = scales(ctx.input(1))[0], ys = scales(ctx.input(6))[0];
  const std::vector<float> ws = scales(ctx.input(4));
  std::vector<float> scale(size_t(s.m));
  for (int64_t ch = 0; ch < s.m; ++ch)  // onnxruntime's order
    scale[size_t(ch)] = xs * ws[ws.size() == 1 ? 0 : size_t(ch)] / ys;
  const int32_t* bias = ctx.has_input(8) ? ctx.input(8).data<int32_t>() : nullptr;
  const int32_t y_dtype = y.dtype();
  OPFORGE_CHECK(y_dtype == OPF_UINT8 || y_dtype == OPF_INT8, "unsupported output dtype ", opforge::dtype_name(y_dtype));
  const QRequant rq{scale.data(), bias, zero_points(ctx, 7, 1)[0], y_dtype == OPF_INT8};
  qconv(ctx, kQLinearConv, s, &rq, static_cast<uint8_t*>(y.raw()));
}

}  // namespace

#define QCONV_ATTRS(OP)                                        \
  OP.attr("auto_pad", "NOTSET")                                \
      .optional_attr("dilations", opforge::AttrType::Ints)     \
      .attr("group", int64_t(1))                               \
      .optional_attr("kernel_shape", opforge::AttrType::Ints)  \
      .optional_attr("pads", opforge::AttrType::Ints)          \
      .optional_attr("strides", opforge::AttrType::Ints)

QCONV_ATTRS(OPFORGE_OP(ConvInteger)
                .since(10)
                .input("x", OPFORGE_Q8_DTYPES)
                .input("w", OPFORGE_Q8_DTYPES)
                .optional_input("x_zero_point", OPFORGE_Q8_DTYPES)
                .optional_input("w_zero_point", OPFORGE_Q8_DTYPES)
                .output("y", {opforge::i32}))
    .infer(conv_integer_infer)
    .compute(conv_integer_compute);

QCONV_ATTRS(OPFORGE_OP(QLinearConv)
                .since(10)
                .input("x", OPFORGE_Q8_DTYPES)
                .input("x_scale", {opforge::f32})
                .input("x_zero_point", OPFORGE_Q8_DTYPES)
                .input("w", OPFORGE_Q8_DTYPES)
                .input("w_scale", {opforge::f32})
                .input("w_zero_point", OPFORGE_Q8_DTYPES)
                .input("y_scale", {opforge::f32})
                .input("y_zero_point", OPFORGE_Q8_DTYPES)
                .optional_input("B", {opforge::i32})
                .output("y", OPFORGE_Q8_DTYPES))
    .infer(qlinear_conv_infer)
    .compute(qlinear_conv_compute);
