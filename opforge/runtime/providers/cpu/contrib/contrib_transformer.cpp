// contrib_transformer.cpp: com.microsoft's fused transformer pieces that onnxruntime's optimizer
// writes into saved models: BiasGelu, FastGelu, QuickGelu, SkipLayerNormalization and
// SkipSimplifiedLayerNormalization (float32).
#include <cmath>
#include <vector>

#include "common/common.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

/// Checks that input `i` (when given) is 1-D with the last dim of input 0, naming it.
template <class Ctx> void expect_last_dim(const Ctx& ctx, int i, const char* name) {
  if (!ctx.has_input(i)) return;
  const Tensor x = ctx.input(0), t = ctx.input(i);
  const int64_t h = x.ndim() ? x.size(-1) : 1;
  OPFORGE_CHECK(t.ndim() == 1 && (t.size(0) == h || t.size(0) < 0 || h < 0), "input ", name,
                " must be 1-D with the input's last dim (", h, ")");
}

/// Output 0 is input 0's shape; input `bias` (when given) is added along the last dim.
template <int kBias> void bias_infer(InferContext& ctx) {
  OPFORGE_CHECK(ctx.input(0).ndim() >= 1, "input X must have rank >= 1");
  if (kBias >= 0) expect_last_dim(ctx, kBias, "bias");
  ctx.set_output_like(0, 0);
}

enum class Act { BiasGelu, FastGelu, QuickGelu };

template <Act A> inline float activate(float x, float alpha) {
  if constexpr (A == Act::BiasGelu) return 0.5f * x * (1.0f + std::erf(x * float(M_SQRT1_2)));
  if constexpr (A == Act::FastGelu)
    return 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
  return x / (1.0f + std::exp(-alpha * x));
}

template <Act A> void activation_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const float* xp = x.data<float>();
  const float* bias = ctx.has_input(1) ? ctx.input(1).data<float>() : nullptr;
  const float alpha = A == Act::QuickGelu ? ctx.attr<float>("alpha") : 0.f;
  float* y = ctx.output(0).data<float>();
  const int64_t n = x.numel(), h = x.size(-1);
  ctx.parallel_for(n, 8192, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = activate<A>(xp[i] + (bias ? bias[i % h] : 0.f), alpha);
  });
}

// SkipLayerNormalization: input, skip, gamma, beta, bias; the simplified form: input, skip, gamma, bias.
template <bool kSimplified> void skip_norm_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0), skip = ctx.input(1);
  OPFORGE_CHECK(x.ndim() == 2 || x.ndim() == 3, "input must be 2-D or 3-D, got rank ", x.ndim());
  const int64_t h = x.size(-1);
  OPFORGE_CHECK(skip.ndim() >= 2 && skip.ndim() <= x.ndim() && (skip.size(-1) == h || h < 0 || skip.size(-1) < 0),
                "skip must end in the input's (sequence, hidden) dims");
  if (skip.ndim() == 3)
    OPFORGE_CHECK(skip.size(0) == 1 || skip.size(0) == x.size(0) || x.size(0) < 0 || skip.size(0) < 0,
                  "skip's batch dim must be 1 or the input's");
  expect_last_dim(ctx, 2, "gamma");
  expect_last_dim(ctx, 3, kSimplified ? "bias" : "beta");
  if (!kSimplified) expect_last_dim(ctx, 4, "bias");
  std::vector<int64_t> stats = x.sizes();
  stats.back() = 1;
  ctx.set_output(0, x.dtype(), x.sizes());
  for (int o = 1; o < ctx.num_outputs(); ++o) ctx.set_output(o, x.dtype(), o == 3 ? x.sizes() : stats);
}

/// Each row: v = input + skip + bias, then (v - mean) / sqrt(var + eps) * gamma + beta, or for
/// the simplified form v / sqrt(mean(v^2) + eps) * gamma; optional outputs: mean, 1 / std, v.
template <bool kSimplified> void skip_norm_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), skip = ctx.input(1);
  const int64_t h = x.size(-1), rows = h == 0 ? 0 : x.numel() / h, skip_rows = h == 0 ? 1 : skip.numel() / h;
  const float *xp = x.data<float>(), *sp = skip.data<float>(), *gamma = ctx.input(2).data<float>();
  const int bias_at = kSimplified ? 3 : 4;
  const float* beta = !kSimplified && ctx.has_input(3) ? ctx.input(3).data<float>() : nullptr;
  const float* bias = ctx.has_input(bias_at) ? ctx.input(bias_at).data<float>() : nullptr;
  const float eps = ctx.attr<float>("epsilon");
  float* y = ctx.output(0).data<float>();
  auto optional = [&](int o) { return ctx.num_outputs() > o && ctx.output(o).defined() ? ctx.output(o).data<float>() : nullptr; };
  float *mean_out = optional(1), *inv_out = optional(2), *sum_out = optional(3);
  ctx.parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(h, 1)), [&](int64_t b, int64_t e) {
    std::vector<float> v(static_cast<size_t>(h));
    for (int64_t r = b; r < e; ++r) {
      const float *xr = xp + r * h, *sr = sp + (r % skip_rows) * h;
      float sum = 0.f, sq = 0.f;
      for (int64_t i = 0; i < h; ++i) {
        v[size_t(i)] = xr[i] + sr[i] + (bias ? bias[i] : 0.f);
        sum += v[size_t(i)], sq += v[size_t(i)] * v[size_t(i)];
      }
      const float mean = kSimplified ? 0.f : sum / float(h);
      const float inv = 1.0f / std::sqrt(sq / float(h) - mean * mean + eps);
      float* yr = y + r * h;
      for (int64_t i = 0; i < h; ++i) yr[i] = (v[size_t(i)] - mean) * inv * gamma[i] + (beta ? beta[i] : 0.f);
      if (mean_out) mean_out[r] = mean;
      if (inv_out) inv_out[r] = inv;
      if (sum_out) std::copy(v.begin(), v.end(), sum_out + r * h);
    }
  });
}

}  // namespace

#define CONTRIB_ACTIVATION(NAME, KIND)                 \
  OPFORGE_OP(NAME)                                     \
      .domain("com.microsoft")                         \
      .since(1)                                        \
      .input("X", {opforge::f32})                      \
      .output("Y")

CONTRIB_ACTIVATION(BiasGelu, Act::BiasGelu)
    .input("bias", {opforge::f32})
    .infer(bias_infer<1>)
    .compute(activation_compute<Act::BiasGelu>);
CONTRIB_ACTIVATION(FastGelu, Act::FastGelu)
    .optional_input("bias", {opforge::f32})
    .infer(bias_infer<1>)
    .compute(activation_compute<Act::FastGelu>);
CONTRIB_ACTIVATION(QuickGelu, Act::QuickGelu)
    .attr("alpha", 1.702f)
    .infer(bias_infer<-1>)
    .compute(activation_compute<Act::QuickGelu>);

OPFORGE_OP(SkipLayerNormalization)
    .domain("com.microsoft")
    .since(1)
    .input("input", {opforge::f32})
    .input("skip", {opforge::f32})
    .input("gamma", {opforge::f32})
    .optional_input("beta", {opforge::f32})
    .optional_input("bias", {opforge::f32})
    .output("output")
    .optional_output("mean")
    .optional_output("inv_std_var")
    .optional_output("input_skip_bias_sum")
    .attr("epsilon", 1e-12f)
    .infer(skip_norm_infer<false>)
    .compute(skip_norm_compute<false>);

OPFORGE_OP(SkipSimplifiedLayerNormalization)
    .domain("com.microsoft")
    .since(1)
    .input("input", {opforge::f32})
    .input("skip", {opforge::f32})
    .input("gamma", {opforge::f32})
    .optional_input("bias", {opforge::f32})
    .output("output")
    .optional_output("mean")
    .optional_output("inv_std_var")
    .optional_output("input_skip_bias_sum")
    .attr("epsilon", 1e-12f)
    .infer(skip_norm_infer<true>)
    .compute(skip_norm_compute<true>);
