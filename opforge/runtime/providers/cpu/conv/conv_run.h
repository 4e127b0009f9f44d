// conv_run.h: what Conv and com.microsoft's FusedConv share: the checked shape of a convolution,
// its epilogue (bias, residual Z, activation) and the entry that computes one.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "common/common.h"
#include "conv/conv.h"

namespace opforge_conv {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;
using opforge_nn::Window;

struct ConvShape {
  Window w;
  int64_t n, c, m, group, cg, mg;  ///< cg / mg: input / output channels per group
  /// One input channel per group, in several groups. A single input channel feeding every
  /// output (group 1: audio and grayscale front ends) is a GEMM over the taps instead; as a
  /// direct loop per output plane it would re-read the input for each output.
  bool depthwise() const { return cg == 1 && group > 1; }
  /// Rows of one group's im2col matrix: cg * kernel taps.
  int64_t col_rows() const { return cg * w.k_size(); }
};

/// Checks X, W, B and the attributes, and works out the window and channel counts.
template <class Ctx>
ConvShape conv_shape(const Ctx& ctx) {
  const Tensor x = ctx.input(0), wt = ctx.input(1);
  OPFORGE_CHECK(x.dtype() == wt.dtype(), "inputs X and W differ in dtype: ", opforge::dtype_name(x.dtype()),
                " and ", opforge::dtype_name(wt.dtype()));
  OPFORGE_CHECK(wt.ndim() == x.ndim(), "weight W has rank ", wt.ndim(), " but input X has rank ", x.ndim());
  std::vector<int64_t> kernel(wt.shape() + 2, wt.shape() + wt.ndim());
  if (ctx.has_attr("kernel_shape")) {
    const auto ks = ctx.template attr<std::vector<int64_t>>("kernel_shape");
    OPFORGE_CHECK(ks.size() == kernel.size(), "attribute 'kernel_shape' has ", int64_t(ks.size()),
                  " values; expected ", int64_t(kernel.size()));
    for (size_t i = 0; i < ks.size(); ++i)
      OPFORGE_CHECK(kernel[i] < 0 || ks[i] == kernel[i], "attribute 'kernel_shape' ", ks[i],
                    " differs from W's spatial dim ", kernel[i]);
    kernel = ks;
  }
  ConvShape s;
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
  if (ctx.has_input(2)) {
    const Tensor b = ctx.input(2);
    OPFORGE_CHECK(b.ndim() == 1 && (b.size(0) == s.m || b.size(0) < 0 || s.m < 0), "bias B must have shape (",
                  s.m, "), got rank ", b.ndim());
  }
  return s;
}

/// The output dims: (N, M, spatial...).
inline std::vector<int64_t> conv_output_dims(const ConvShape& s) {
  std::vector<int64_t> out{s.n, s.m};
  for (int64_t d : s.w.out_dims()) out.push_back(d);
  return out;
}

/// FusedConv's activations (onnxruntime's names); Conv has none. HardSwish is PackedConv's
/// alone (onnxruntime's FusedConv has none, and a saved graph's FusedConv must load there).
enum class Activation { None, Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid, HardSwish };

/// What is applied to each output element after the convolution's sum, in this order:
/// + bias[channel], + z[element], then the activation with parameters a, b
/// (LeakyRelu: alpha; Clip: min, max; HardSigmoid: alpha, beta; HardSwish: 1/6, 1/2, ONNX's
/// x * HardSigmoid(x) with those).
struct Epilogue {
  Activation act = Activation::None;
  float a = 0.f, b = 0.f;
  /// The activation as a function of one value.
  template <class T> T apply(T v) const {
    switch (act) {
      case Activation::Relu: return v < T(0) ? T(0) : v;
      case Activation::LeakyRelu: return v < T(0) ? T(a) * v : v;
      case Activation::Clip: return std::min(std::max(v, T(a)), T(b));
      case Activation::HardSigmoid: return std::min(std::max(T(a) * v + T(b), T(0)), T(1));
      case Activation::HardSwish: return v * std::min(std::max(T(a) * v + T(b), T(0)), T(1));
      case Activation::Sigmoid: return T(1) / (T(1) + std::exp(-v));
      case Activation::Tanh: return std::tanh(v);
      default: return v;
    }
  }
};

/// The activations cheap enough to apply in registers; Sigmoid and Tanh run after the store.
inline bool in_register(Activation a) {
  return a == Activation::None || a == Activation::Relu || a == Activation::LeakyRelu ||
         a == Activation::Clip || a == Activation::HardSigmoid || a == Activation::HardSwish;
}

/// How the AVX2 epilogues apply an activation in registers: 0 not at all (none, or one applied
/// after the store), 1 Relu, 2 another of in_register's (avx2::activate).
inline int register_act(Activation a) {
  return !in_register(a) || a == Activation::None ? 0 : a == Activation::Relu ? 1 : 2;
}

/// Whether [a, a + an) and [b, b + bn) share a byte: Y planned over X, or Z over Y.
inline bool overlap(const void* a, int64_t an, const void* b, int64_t bn) {
  const char *p = static_cast<const char*>(a), *q = static_cast<const char*>(b);
  return p < q + bn && q < p + an;
}

/// The epilogue of FusedConv's (onnxruntime's) activation name and activation_params; throws
/// for an unknown name or too few parameters. `hard_swish`: HardSwish is known too (PackedConv).
Epilogue epilogue_of(const std::string& name, const std::vector<float>& params, bool hard_swish = false);

/// The epilogue a fused node's attributes 'activation' and 'activation_params' name (FusedConv,
/// PackedConv, which also knows HardSwish); throws for one it does not know.
template <class Ctx>
Epilogue epilogue_attrs(const Ctx& ctx, bool hard_swish = false) {
  std::vector<float> params;
  if (ctx.has_attr("activation_params")) params = ctx.template attr<std::vector<float>>("activation_params");
  return epilogue_of(ctx.template attr<std::string>("activation"), params, hard_swish);
}

/// Whether conv_gemm_f32 has tiles for this build's CPU (AVX-512).
#if defined(__AVX512F__)
constexpr bool kHasGemmF32 = true;
#else
constexpr bool kHasGemmF32 = false;
#endif

/// Conv's infer, shared with FusedConv.
void conv_infer(InferContext& ctx);
/// Scratch bytes of a convolution (im2col of one group, for the paths that need it).
int64_t conv_workspace(InferContext& ctx);
/// Y = epilogue(conv(X, W) + B + Z) for Conv and FusedConv, Z (when given) of Y's shape.
void conv_run(KernelContext& ctx, const Tensor* z, const Epilogue& e);

/// Scratch bytes conv_gemm_f32 needs (a zero-padded copy of the input, for padded stride-1 convs).
int64_t conv_gemm_f32_workspace(const ConvShape& s);
/// The float32 convolution on opforge's own GEMM tiles; false when this CPU has no such path.
bool conv_gemm_f32(KernelContext& ctx, const ConvShape& s, const float* x, const float* w, const float* bias,
                   const float* z, float* y, const Epilogue& e);

/// The float32 depthwise convolution of 2-D convs with stride 1, or 2 along rows, on AVX-512
/// (conv_depthwise_f32.cpp) or AVX2 + FMA (conv_depthwise_avx2.cpp); false when it does not
/// apply (the generic loop then runs).
bool conv_depthwise_f32(KernelContext& ctx, const ConvShape& s, const float* x, const float* w, const float* bias,
                        const float* z, float* y, const Epilogue& e);

/// Applies the activation to rows [0, rows) x columns [p0, p1) of y (leading dimension ld).
void activate_rows(const Epilogue& e, float* y, int64_t ld, int64_t rows, int64_t p0, int64_t p1);

}  // namespace opforge_conv
