// contrib_attention.cpp: com.microsoft's Attention (input times packed QKV weights) and
// MultiHeadAttention (separate Q, K, V): per head softmax(scale * Q K^T + bias + mask) V on OpenBLAS,
// with key padding / raw 2-D masks, an additive attention bias, causal masking and past key/values.
#include <cmath>
#include <limits>
#include <vector>

#include "gemm/gemm_blas.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

/// One batch of heads: q (S x H), k (T x H), v (T x Hv) per head at the given strides.
struct Heads {
  int64_t batch, heads, s, t, h, hv;
  const float *q, *k, *v;
  int64_t q_row, k_row, v_row;      ///< element stride between rows of one head
  int64_t q_head, k_head, v_head;   ///< between heads
  int64_t q_batch, k_batch, v_batch;
};

/// What is added to a score (b, n, i, j) before the softmax: 2-D or 3-D keep/mask values turned
/// into mask_filter_value, an attention bias broadcast over batch and heads, causal masking.
struct Additive {
  const int32_t* mask = nullptr;
  int mask_rank = 0;
  const float* bias = nullptr;
  int64_t bias_batch = 0, bias_head = 0;  ///< strides; 0 where the bias broadcasts
  bool causal = false;
  int64_t past = 0;  ///< causal masking lets query i see keys up to i + past
  float filter = -10000.0f;
};

/// y (B, S, heads * Hv) = attention over every (batch, head) pair, spread over the threads.
void attend(const KernelContext& ctx, const Heads& a, const Additive& add, float scale, float* y) {
  opforge_nn::blas_threads(1);
  ctx.parallel_for(a.batch * a.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(a.s * a.t));
    for (int64_t bn = begin; bn < end; ++bn) {
      const int64_t b = bn / a.heads, n = bn % a.heads;
      const float* q = a.q + b * a.q_batch + n * a.q_head;
      const float* k = a.k + b * a.k_batch + n * a.k_head;
      const float* v = a.v + b * a.v_batch + n * a.v_head;
      opforge_nn::matmul(false, true, a.s, a.t, a.h, scale, q, a.q_row, k, a.k_row, 0.0f, scores.data(), a.t);
      for (int64_t i = 0; i < a.s; ++i) {
        float* row = scores.data() + i * a.t;
        for (int64_t j = 0; j < a.t; ++j) {
          if (add.bias) row[j] += add.bias[b * add.bias_batch + n * add.bias_head + i * a.t + j];
          if (add.mask_rank == 2 && add.mask[b * a.t + j] == 0) row[j] += add.filter;
          if (add.mask_rank == 3 && add.mask[(b * a.s + i) * a.t + j] == 0) row[j] += add.filter;
          if (add.causal && j > i + add.past) row[j] += add.filter;
        }
        float m = -std::numeric_limits<float>::infinity(), sum = 0.f;
        for (int64_t j = 0; j < a.t; ++j) m = std::max(m, row[j]);
        for (int64_t j = 0; j < a.t; ++j) sum += row[j] = std::exp(row[j] - m);
        for (int64_t j = 0; j < a.t; ++j) row[j] /= sum;
      }
      opforge_nn::matmul(false, false, a.s, a.hv, a.t, 1.0f, scores.data(), a.t, v, a.v_row, 0.0f,
                         y + (b * a.s) * a.heads * a.hv + n * a.hv, a.heads * a.hv);
    }
  });
}

/// The attention bias (B or 1, N or 1, S, T) as strides; checks its shape.
void attention_bias(const KernelContext& ctx, int i, const Heads& a, Additive& add) {
  if (!ctx.has_input(i)) return;
  const Tensor bias = ctx.input(i);
  OPFORGE_CHECK(bias.ndim() == 4 && (bias.size(0) == 1 || bias.size(0) == a.batch) &&
                    (bias.size(1) == 1 || bias.size(1) == a.heads) && bias.size(2) == a.s && bias.size(3) == a.t,
                "attention_bias must be (B or 1, num_heads or 1, S, T) = (", a.batch, ", ", a.heads, ", ", a.s, ", ",
                a.t, ")");
  add.bias = bias.data<float>();
  add.bias_head = bias.size(1) == 1 ? 0 : a.s * a.t;
  add.bias_batch = bias.size(0) == 1 ? 0 : bias.size(1) * a.s * a.t;
}

/// A key mask: (B, T) or (B, S, T) of 0 (masked) and 1.
void key_mask(const KernelContext& ctx, int i, const Heads& a, Additive& add, const char* name) {
  if (!ctx.has_input(i)) return;
  const Tensor mask = ctx.input(i);
  const bool two = mask.ndim() == 2 && mask.size(0) == a.batch && mask.size(1) == a.t;
  const bool three = mask.ndim() == 3 && mask.size(0) == a.batch && mask.size(1) == a.s && mask.size(2) == a.t;
  OPFORGE_CHECK(two || three, "input ", name, " must be (B, T) or (B, S, T) = (", a.batch, ", ", a.s, ", ", a.t,
                "); other mask formats are not supported");
  add.mask = mask.data<int32_t>();
  add.mask_rank = mask.ndim();
}

// MultiHeadAttention: query (B, S, D), key (B, L, D), value (B, L, Dv), bias (D + D + Dv),
// key_padding_mask, attention_bias, past_key, past_value.
template <class Ctx> Heads mha_shape(const Ctx& ctx) {
  const Tensor q = ctx.input(0);
  OPFORGE_CHECK(q.ndim() == 3, "query must be (B, S, D), got rank ", q.ndim(), " (packed QKV is not supported)");
  OPFORGE_CHECK(ctx.has_input(1) && ctx.has_input(2), "key and value are required");
  const Tensor k = ctx.input(1), v = ctx.input(2);
  OPFORGE_CHECK(k.ndim() == 3 && v.ndim() == 3, "key and value must be (B, L, D), got ranks ", k.ndim(), " and ",
                v.ndim());
  for (int i : {6, 7}) OPFORGE_CHECK(!ctx.has_input(i), "past_key and past_value are not supported");
  Heads a{};
  a.heads = ctx.template attr<int64_t>("num_heads");
  OPFORGE_CHECK(a.heads > 0 && q.size(2) % a.heads == 0 && v.size(2) % a.heads == 0, "num_heads ", a.heads,
                " must divide the hidden sizes ", q.size(2), " and ", v.size(2));
  OPFORGE_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) == v.size(1) && k.size(2) == q.size(2),
                "query, key and value disagree in batch, length or hidden size");
  a.batch = q.size(0), a.s = q.size(1), a.t = k.size(1), a.h = q.size(2) / a.heads, a.hv = v.size(2) / a.heads;
  return a;
}

void mha_infer(InferContext& ctx) {
  const Heads a = mha_shape(ctx);
  ctx.set_output(0, OPF_FLOAT32, {a.batch, a.s, a.heads * a.hv});
  for (int o = 1; o < ctx.num_outputs(); ++o)
    ctx.set_output(o, OPF_FLOAT32, {a.batch, a.heads, a.t, o == 1 ? a.h : a.hv});
}

void mha_compute(KernelContext& ctx) {
  Heads a = mha_shape(ctx);
  const int64_t d = a.heads * a.h, dv = a.heads * a.hv;
  std::vector<float> qkv;
  const float *q = ctx.input(0).data<float>(), *k = ctx.input(1).data<float>(), *v = ctx.input(2).data<float>();
  if (ctx.has_input(3)) {  // the projection bias, added once to copies
    const float* bias = ctx.input(3).data<float>();
    OPFORGE_CHECK(ctx.input(3).numel() == 2 * d + dv, "bias must hold D + D + Dv = ", 2 * d + dv, " values");
    qkv.resize(size_t(a.batch * (a.s * d + a.t * d + a.t * dv)));
    float *qb = qkv.data(), *kb = qb + a.batch * a.s * d, *vb = kb + a.batch * a.t * d;
    for (int64_t i = 0; i < a.batch * a.s * d; ++i) qb[i] = q[i] + bias[i % d];
    for (int64_t i = 0; i < a.batch * a.t * d; ++i) kb[i] = k[i] + bias[d + i % d];
    for (int64_t i = 0; i < a.batch * a.t * dv; ++i) vb[i] = v[i] + bias[2 * d + i % dv];
    q = qb, k = kb, v = vb;
  }
  a.q = q, a.k = k, a.v = v;
  a.q_row = a.k_row = d, a.v_row = dv, a.q_head = a.k_head = a.h, a.v_head = a.hv;
  a.q_batch = a.s * d, a.k_batch = a.t * d, a.v_batch = a.t * dv;
  Additive add;
  add.filter = ctx.attr<float>("mask_filter_value");
  add.causal = ctx.attr<int64_t>("unidirectional") != 0;
  add.past = a.t - a.s;  // keys before the queries' own span count as past
  key_mask(ctx, 4, a, add, "key_padding_mask");
  attention_bias(ctx, 5, a, add);
  const float scale = ctx.attr<float>("scale") != 0.f ? ctx.attr<float>("scale") : 1.0f / std::sqrt(float(a.h));
  attend(ctx, a, add, scale, ctx.output(0).data<float>());
  for (int o = 1; o < ctx.num_outputs() && o < 3; ++o) {  // present key / value as (B, N, L, H)
    if (!ctx.output(o).defined()) continue;
    const float* src = o == 1 ? k : v;
    const int64_t hs = o == 1 ? a.h : a.hv;
    float* dst = ctx.output(o).data<float>();
    for (int64_t b = 0; b < a.batch; ++b)
      for (int64_t n = 0; n < a.heads; ++n)
        for (int64_t t = 0; t < a.t; ++t)
          for (int64_t i = 0; i < hs; ++i)
            dst[((b * a.heads + n) * a.t + t) * hs + i] = src[(b * a.t + t) * a.heads * hs + n * hs + i];
  }
}

// Attention: input (B, S, C), weights (C, 3 * D), bias (3 * D), mask_index, past, attention_bias.
template <class Ctx> Heads attention_shape(const Ctx& ctx) {
  const Tensor x = ctx.input(0), w = ctx.input(1);
  OPFORGE_CHECK(x.ndim() == 3 && w.ndim() == 2 && w.size(0) == x.size(2), "input must be (B, S, C) and weights (C, ",
                "3 * hidden)");
  OPFORGE_CHECK(!ctx.has_attr("qkv_hidden_sizes"), "attribute qkv_hidden_sizes is not supported");
  OPFORGE_CHECK(!ctx.has_input(4), "input past is not supported");
  OPFORGE_CHECK(ctx.template attr<int64_t>("do_rotary") == 0, "attribute do_rotary is not supported");
  Heads a{};
  a.heads = ctx.template attr<int64_t>("num_heads");
  OPFORGE_CHECK(w.size(1) % 3 == 0 && a.heads > 0 && (w.size(1) / 3) % a.heads == 0, "weights' ", w.size(1),
                " columns must be 3 x hidden, hidden divisible by num_heads ", a.heads);
  a.batch = x.size(0), a.s = a.t = x.size(1), a.h = a.hv = w.size(1) / 3 / a.heads;
  return a;
}

void attention_infer(InferContext& ctx) {
  const Heads a = attention_shape(ctx);
  ctx.set_output(0, OPF_FLOAT32, {a.batch, a.s, a.heads * a.h});
}

void attention_compute(KernelContext& ctx) {
  Heads a = attention_shape(ctx);
  const int64_t c = ctx.input(0).size(2), d = a.heads * a.h, rows = a.batch * a.s;
  std::vector<float> qkv(static_cast<size_t>(rows * 3 * d));
  opforge_nn::parallel_matmul(ctx, false, false, rows, 3 * d, c, 1.0f, ctx.input(0).data<float>(), c,
                              ctx.input(1).data<float>(), 3 * d, 0.0f, qkv.data(), 3 * d);
  if (ctx.has_input(2)) {
    const float* bias = ctx.input(2).data<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < 3 * d; ++j) qkv[size_t(r * 3 * d + j)] += bias[j];
  }
  a.q = qkv.data(), a.k = qkv.data() + d, a.v = qkv.data() + 2 * d;
  a.q_row = a.k_row = a.v_row = 3 * d, a.q_head = a.k_head = a.v_head = a.h;
  a.q_batch = a.k_batch = a.v_batch = a.s * 3 * d;
  Additive add;
  add.filter = ctx.attr<float>("mask_filter_value");
  add.causal = ctx.attr<int64_t>("unidirectional") != 0;
  key_mask(ctx, 3, a, add, "mask_index");
  attention_bias(ctx, 5, a, add);
  const float scale = ctx.attr<float>("scale") != 0.f ? ctx.attr<float>("scale") : 1.0f / std::sqrt(float(a.h));
  attend(ctx, a, add, scale, ctx.output(0).data<float>());
}

}  // namespace

OPFORGE_OP(MultiHeadAttention)
    .domain("com.microsoft")
    .since(1)
    .input("query", {opforge::f32})
    .optional_input("key", {opforge::f32})
    .optional_input("value", {opforge::f32})
    .optional_input("bias", {opforge::f32})
    .optional_input("key_padding_mask", {opforge::i32})
    .optional_input("attention_bias", {opforge::f32})
    .optional_input("past_key", {opforge::f32})
    .optional_input("past_value", {opforge::f32})
    .output("output")
    .optional_output("present_key")
    .optional_output("present_value")
    .required_attr("num_heads", opforge::AttrType::Int)
    .attr("mask_filter_value", -10000.0f)
    .attr("scale", 0.0f, "0: 1 / sqrt(head size)")
    .attr("unidirectional", int64_t(0))
    .infer(mha_infer)
    .compute(mha_compute);

OPFORGE_OP(Attention)
    .domain("com.microsoft")
    .since(1)
    .input("input", {opforge::f32})
    .input("weights", {opforge::f32})
    .optional_input("bias", {opforge::f32})
    .optional_input("mask_index", {opforge::i32})
    .optional_input("past", {opforge::f32})
    .optional_input("attention_bias", {opforge::f32})
    .output("output")
    .required_attr("num_heads", opforge::AttrType::Int)
    .attr("mask_filter_value", -10000.0f)
    .attr("scale", 0.0f, "0: 1 / sqrt(head size)")
    .attr("unidirectional", int64_t(0))
    .optional_attr("qkv_hidden_sizes", opforge::AttrType::Ints)
    .attr("do_rotary", int64_t(0))
    .attr("past_present_share_buffer", int64_t(0))
    .infer(attention_infer)
    .compute(attention_compute);
