// contrib_group_query_attention.cpp: com.microsoft's GroupQueryAttention as onnxruntime's CPU kernel
// computes it: query heads sharing fewer key/value heads, a BNSH key/value cache (past in, present
// out), per-batch lengths from seqlens_k, rotary embedding, causal and local-window masking,
// softcap, an attention bias, and the smooth softmax (with or without per-head sinks).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "data_movement/data_movement.h"
#include "elementwise/elementwise_math.h"
#include "gemm/gemm_blas.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

enum Input { kQuery, kKey, kValue, kPastKey, kPastValue, kSeqlensK, kTotal, kCos, kSin, kPositionIds, kBias, kSink };

/// Sizes of one call, read from the inputs and attributes.
struct Gqa {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head = 0;
  int64_t past_buffer = 0;   ///< rows of past_key (0 without a cache)
  int64_t present = 0;       ///< rows of present_key: max(total, past_buffer)
  int64_t total = 0;         ///< total_sequence_length, the longest sequence of the batch
  int64_t rotary_half = 0;   ///< columns of cos_cache (0 without rotary)
  bool packed = false;       ///< query holds Q, K and V
  bool first_prompt = false; ///< the sequence starts here: no past rows are read
  int64_t q_row() const { return (packed ? heads + 2 * kv_heads : heads) * head; }
  int64_t kv_row() const { return packed ? q_row() : kv_heads * head; }
};

/// What onnxruntime's op adds beyond a float cache: quantized caches and the QK output.
template <class Ctx> void refuse_unsupported(const Ctx& ctx) {
  OPFORGE_CHECK(ctx.template attr<int64_t>("qk_output") == 0, "attribute qk_output is not supported");
  OPFORGE_CHECK(ctx.template attr<int64_t>("sliding_window_cache") == 0, "attribute sliding_window_cache is not "
                "supported");
  OPFORGE_CHECK(!ctx.has_attr("kv_cache_bit_width") && ctx.template attr<std::string>("k_quant_type") == "NONE" &&
                    ctx.template attr<std::string>("v_quant_type") == "NONE",
                "a quantized key/value cache is not supported");
}

template <class Ctx> Gqa gqa_shape(const Ctx& ctx) {
  refuse_unsupported(ctx);
  const Tensor q = ctx.input(kQuery);
  OPFORGE_CHECK(q.ndim() == 3, "query must be (B, S, D), got rank ", q.ndim());
  Gqa g;
  g.heads = ctx.template attr<int64_t>("num_heads"), g.kv_heads = ctx.template attr<int64_t>("kv_num_heads");
  OPFORGE_CHECK(g.heads > 0 && g.kv_heads > 0 && g.heads % g.kv_heads == 0, "num_heads ", g.heads,
                " must be a positive multiple of kv_num_heads ", g.kv_heads);
  g.batch = q.size(0), g.seq = q.size(1);
  g.packed = !ctx.has_input(kKey);
  OPFORGE_CHECK(ctx.has_input(kKey) == ctx.has_input(kValue), "key and value must both be given, or neither "
                "(packed QKV)");
  const int64_t width = g.packed ? g.heads + 2 * g.kv_heads : g.heads;
  OPFORGE_CHECK(q.size(2) % width == 0, "query's hidden size ", q.size(2), " is not ", width, " heads");
  g.head = q.size(2) / width;
  OPFORGE_CHECK(g.head % 8 == 0, "the head size ", g.head, " must be a multiple of 8");
  if (!g.packed) {
    const Tensor k = ctx.input(kKey), v = ctx.input(kValue);
    for (const Tensor& t : {k, v})
      OPFORGE_CHECK(t.ndim() == 3 && t.size(0) == g.batch && t.size(1) == g.seq && t.size(2) == g.kv_heads * g.head,
                    "key and value must be (B, S, kv_num_heads * head) = (", g.batch, ", ", g.seq, ", ",
                    g.kv_heads * g.head, ")");
  }
  OPFORGE_CHECK(ctx.has_input(kPastKey) == ctx.has_input(kPastValue), "past_key and past_value go together");
  if (ctx.has_input(kPastKey)) {
    const Tensor pk = ctx.input(kPastKey), pv = ctx.input(kPastValue);
    for (const Tensor& t : {pk, pv})
      OPFORGE_CHECK(t.ndim() == 4 && t.size(0) == g.batch && t.size(1) == g.kv_heads && t.size(3) == g.head &&
                        t.size(2) == pk.size(2),
                    "past_key and past_value must be (B, kv_num_heads, L, head) = (", g.batch, ", ", g.kv_heads,
                    ", L, ", g.head, ")");
    g.past_buffer = pk.size(2);
  }
  const Tensor total = ctx.input(kTotal);
  if (!total.has_data()) throw opforge_cpu::data_movement::needs_value("GroupQueryAttention", "total_sequence_length");
  OPFORGE_CHECK(total.numel() == 1, "total_sequence_length must hold one value");
  g.total = total.data<int32_t>()[0];
  OPFORGE_CHECK(g.total >= g.seq || g.past_buffer > 0, "total_sequence_length ", g.total,
                " is shorter than the query's ", g.seq, " tokens");
  g.present = std::max(g.total, g.past_buffer);
  g.first_prompt = g.seq == g.total;
  OPFORGE_CHECK(ctx.has_input(kCos) == ctx.has_input(kSin), "cos_cache and sin_cache go together");
  const bool rotary = ctx.template attr<int64_t>("do_rotary") != 0;
  OPFORGE_CHECK(!rotary || ctx.has_input(kCos), "do_rotary needs cos_cache and sin_cache");
  if (rotary) {
    const Tensor cos = ctx.input(kCos), sin = ctx.input(kSin);
    OPFORGE_CHECK(cos.ndim() == 2 && sin.ndim() == 2 && cos.size(1) == sin.size(1) && cos.size(0) == sin.size(0) &&
                      cos.size(1) * 2 <= g.head && cos.size(1) % 8 == 0,
                  "cos_cache and sin_cache must be (max positions, rotary_dim / 2) with rotary_dim / 2 a multiple "
                  "of 8 and at most half the head size ", g.head);
    g.rotary_half = cos.size(1);
  }
  const int64_t window = ctx.template attr<int64_t>("local_window_size");
  OPFORGE_CHECK(ctx.template attr<int64_t>("causal") != 0 || window == -1, "local_window_size needs causal=1");
  return g;
}

void gqa_infer(InferContext& ctx) {
  const Gqa g = gqa_shape(ctx);
  ctx.set_output(0, OPF_FLOAT32, {g.batch, g.seq, g.heads * g.head});
  for (int o = 1; o < ctx.num_outputs() && o < 3; ++o)
    ctx.set_output(o, OPF_FLOAT32, {g.batch, g.kv_heads, g.present, g.head});
}

/// Per batch row: the position of its first new token (cache rows before it are past) and its
/// total length, checked against the buffers.
struct Lengths {
  std::vector<int64_t> past, total;
};

Lengths lengths(const KernelContext& ctx, const Gqa& g) {
  const Tensor sk = ctx.input(kSeqlensK);
  OPFORGE_CHECK(sk.numel() == g.batch, "seqlens_k must hold one length per batch row (", g.batch, ")");
  const int32_t* seqlens = sk.data<int32_t>();
  Lengths l;
  for (int64_t b = 0; b < g.batch; ++b) {
    const int64_t total = int64_t(seqlens[b]) + 1, past = g.first_prompt ? 0 : total - g.seq;
    OPFORGE_CHECK(total >= 1 && total <= g.present && past >= 0 && past <= g.past_buffer &&
                      past + g.seq <= g.present,
                  "seqlens_k[", b, "] = ", seqlens[b], " does not fit ", g.seq, " new tokens, a past of ",
                  g.past_buffer, " rows and total_sequence_length ", g.total);
    l.past.push_back(past), l.total.push_back(total);
  }
  return l;
}

/// x (B, S, heads, H at row stride `row`) rotated into out (B, S, heads, H), positions from `pos`.
void rotate(const KernelContext& ctx, const Gqa& g, const float* x, int64_t row, int64_t heads,
            const std::vector<int64_t>& pos, float* out) {
  const Tensor cos_t = ctx.input(kCos);
  const float *cos = cos_t.data<float>(), *sin = ctx.input(kSin).data<float>();
  const int64_t half = g.rotary_half, H = g.head;
  const bool interleaved = ctx.attr<int64_t>("rotary_interleaved") != 0;
  for (int64_t bs = 0; bs < g.batch * g.seq; ++bs) {
    const int64_t p = pos[size_t(bs)];
    OPFORGE_CHECK(p >= 0 && p < cos_t.size(0), "position ", p, " is outside the rotary caches' ", cos_t.size(0),
                  " rows");
    const float *c = cos + p * half, *s = sin + p * half;
    for (int64_t n = 0; n < heads; ++n) {
      const float* xi = x + bs * row + n * H;
      float* yo = out + (bs * heads + n) * H;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
        yo[i0] = xi[i0] * c[i] - xi[i1] * s[i];
        yo[i1] = xi[i1] * c[i] + xi[i0] * s[i];
      }
      std::copy(xi + 2 * half, xi + H, yo + 2 * half);
    }
  }
}

/// Rotary positions of every (b, s): position_ids when given (only its first value for a first
/// prompt), else the token's place in its sequence.
std::vector<int64_t> rotary_positions(const KernelContext& ctx, const Gqa& g, const Lengths& l) {
  std::vector<int64_t> pos(size_t(g.batch * g.seq));
  const int64_t* ids = ctx.has_input(kPositionIds) ? ctx.input(kPositionIds).data<int64_t>() : nullptr;
  if (ids) OPFORGE_CHECK(ctx.input(kPositionIds).numel() == g.batch * g.seq, "position_ids must be (B, S)");
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t s = 0; s < g.seq; ++s)
      pos[size_t(b * g.seq + s)] = !ids ? l.past[size_t(b)] + s : g.first_prompt ? ids[0] + s : ids[b * g.seq + s];
  return pos;
}

/// present (B, kv_heads, present rows, H): the past rows, then the new ones, zeros after.
void fill_cache(const Gqa& g, const Lengths& l, const float* past, const float* fresh, int64_t fresh_row,
                float* present) {
  std::fill(present, present + g.batch * g.kv_heads * g.present * g.head, 0.0f);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t n = 0; n < g.kv_heads; ++n) {
      float* dst = present + (b * g.kv_heads + n) * g.present * g.head;
      const int64_t p = l.past[size_t(b)];
      if (past && p > 0) std::memcpy(dst, past + (b * g.kv_heads + n) * g.past_buffer * g.head, size_t(p * g.head) * 4);
      for (int64_t s = 0; s < g.seq; ++s)
        std::memcpy(dst + (p + s) * g.head, fresh + (b * g.seq + s) * fresh_row + n * g.head, size_t(g.head) * 4);
    }
}

/// How a score row becomes weights: its causal span, window, softcap, bias and softmax kind.
struct Scoring {
  bool causal = true;
  int64_t window = -1;
  float softcap = 0.f;
  bool smooth = false;
  const float* sink = nullptr;
  const float* bias = nullptr;
  int64_t bias_batch = 0, bias_head = 0, bias_row = 0;  ///< strides; 0 where the bias broadcasts
};

/// row[0, T) of query i (past p before it) -> softmax weights, zero outside its visible span.
void weigh(const Scoring& sc, float* row, int64_t i, int64_t p, int64_t T, const float* bias, float sink) {
  const int64_t end = sc.causal ? std::min(p + i + 1, T) : T;
  const int64_t begin = sc.window >= 0 && end > sc.window ? end - sc.window : 0;
  float m = sc.smooth || sc.sink ? sink : -std::numeric_limits<float>::infinity();
  if (sc.softcap > 0.f)
    for (int64_t j = begin; j < end; ++j) row[j] = sc.softcap * std::tanh(row[j] / sc.softcap);
  if (bias)
    for (int64_t j = begin; j < end; ++j) row[j] += bias[j];
  for (int64_t j = begin; j < end; ++j) m = std::max(m, row[j]);
  for (int64_t j = begin; j < end; ++j) row[j] = opforge_cpu::ew::vmath::exp(row[j] - m);  // SIMD
  float part[8] = {};
  int64_t j = begin;
  for (; j + 8 <= end; j += 8)
    for (int k = 0; k < 8; ++k) part[k] += row[j + k];
  float sum = sc.smooth || sc.sink ? std::exp(sink - m) : 0.f;
  for (; j < end; ++j) sum += row[j];
  for (float s : part) sum += s;
  const float inv = 1.f / sum;
  for (int64_t j = begin; j < end; ++j) row[j] *= inv;
  std::fill(row, row + begin, 0.f);
  std::fill(row + end, row + T, 0.f);
}

Scoring scoring(const KernelContext& ctx, const Gqa& g) {
  Scoring sc;
  sc.causal = ctx.attr<int64_t>("causal") != 0;
  sc.window = ctx.attr<int64_t>("local_window_size");
  sc.softcap = ctx.attr<float>("softcap");
  sc.smooth = ctx.attr<int64_t>("smooth_softmax") == 1;
  if (ctx.has_input(kSink)) {
    OPFORGE_CHECK(ctx.input(kSink).numel() == g.heads, "head_sink must hold num_heads (", g.heads, ") values");
    sc.sink = ctx.input(kSink).data<float>();
  }
  if (ctx.has_input(kBias)) {
    const Tensor bias = ctx.input(kBias);
    OPFORGE_CHECK(bias.ndim() == 4 && (bias.size(0) == 1 || bias.size(0) == g.batch) &&
                      (bias.size(1) == 1 || bias.size(1) == g.heads) && bias.size(2) == g.seq &&
                      bias.size(3) == g.total,
                  "attention_bias must be (B or 1, num_heads or 1, S, total_sequence_length) = (", g.batch, ", ",
                  g.heads, ", ", g.seq, ", ", g.total, ")");
    sc.bias = bias.data<float>();
    sc.bias_row = g.total;
    sc.bias_head = bias.size(1) == 1 ? 0 : g.seq * g.total;
    sc.bias_batch = bias.size(0) == 1 ? 0 : bias.size(1) * g.seq * g.total;
  }
  return sc;
}

void gqa_compute(KernelContext& ctx) {
  const Gqa g = gqa_shape(ctx);
  const Lengths l = lengths(ctx, g);
  const int64_t H = g.head, group = g.heads / g.kv_heads;
  const float* q = ctx.input(kQuery).data<float>();
  const float* k = g.packed ? q + g.heads * H : ctx.input(kKey).data<float>();
  const float* v = g.packed ? q + (g.heads + g.kv_heads) * H : ctx.input(kValue).data<float>();
  int64_t q_row = g.q_row(), k_row = g.kv_row();
  std::vector<float> q_rot, k_rot;
  if (g.rotary_half > 0) {
    const std::vector<int64_t> pos = rotary_positions(ctx, g, l);
    q_rot.resize(size_t(g.batch * g.seq * g.heads * H)), k_rot.resize(size_t(g.batch * g.seq * g.kv_heads * H));
    rotate(ctx, g, q, q_row, g.heads, pos, q_rot.data());
    rotate(ctx, g, k, k_row, g.kv_heads, pos, k_rot.data());
    q = q_rot.data(), k = k_rot.data(), q_row = g.heads * H, k_row = g.kv_heads * H;
  }
  std::vector<float> own_key, own_value;  // the caches, when the node does not output them
  const auto cache = [&](int o, std::vector<float>& own) {
    if (o < ctx.num_outputs() && ctx.output(o).has_data()) return ctx.output(o).data<float>();
    own.resize(size_t(g.batch * g.kv_heads * g.present * H));
    return own.data();
  };
  float *key_cache = cache(1, own_key), *value_cache = cache(2, own_value);
  const bool past = ctx.has_input(kPastKey);
  fill_cache(g, l, past ? ctx.input(kPastKey).data<float>() : nullptr, k, k_row, key_cache);
  fill_cache(g, l, past ? ctx.input(kPastValue).data<float>() : nullptr, v, g.kv_row(), value_cache);
  const Scoring sc = scoring(ctx, g);
  const float scale = ctx.attr<float>("scale") != 0.f ? ctx.attr<float>("scale") : 1.0f / std::sqrt(float(H));
  float* y = ctx.output(0).data<float>();
  opforge_nn::blas_threads(1);
  // Work items: (batch, head, block of query rows); a causal block reads only the key rows up to
  // its last query, so the masked upper triangle is never computed.
  constexpr int64_t kRows = 64;
  const int64_t blocks = (g.seq + kRows - 1) / kRows;
  ctx.parallel_for(g.batch * g.heads * blocks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t bn = item / blocks, i0 = item % blocks * kRows, rows = std::min(kRows, g.seq - i0);
      const int64_t b = bn / g.heads, n = bn % g.heads, T = l.total[size_t(b)], p = l.past[size_t(b)];
      const int64_t span = sc.causal ? std::min(p + i0 + rows, T) : T;
      const int64_t cache_at = (b * g.kv_heads + n / group) * g.present * H;
      scores.resize(size_t(rows * span));
      opforge_nn::matmul(false, true, rows, span, H, scale, q + (b * g.seq + i0) * q_row + n * H, q_row,
                         key_cache + cache_at, H, 0.0f, scores.data(), span);
      const float* bias = sc.bias ? sc.bias + b * sc.bias_batch + n * sc.bias_head : nullptr;
      for (int64_t i = 0; i < rows; ++i)
        weigh(sc, scores.data() + i * span, i0 + i, p, span, bias ? bias + (i0 + i) * sc.bias_row : nullptr,
              sc.sink ? sc.sink[n] : 0.f);
      opforge_nn::matmul(false, false, rows, H, span, 1.0f, scores.data(), span, value_cache + cache_at, H, 0.0f,
                         y + (b * g.seq + i0) * g.heads * H + n * H, g.heads * H);
    }
  });
}

}  // namespace

OPFORGE_OP(GroupQueryAttention)
    .domain("com.microsoft")
    .since(1)
    .input("query", {opforge::f32})
    .optional_input("key", {opforge::f32})
    .optional_input("value", {opforge::f32})
    .optional_input("past_key", {opforge::f32})
    .optional_input("past_value", {opforge::f32})
    .input("seqlens_k", {opforge::i32})
    .input("total_sequence_length", {opforge::i32})
    .optional_input("cos_cache", {opforge::f32})
    .optional_input("sin_cache", {opforge::f32})
    .optional_input("position_ids", {opforge::i64})
    .optional_input("attention_bias", {opforge::f32})
    .optional_input("head_sink", {opforge::f32})
    .output("output")
    .optional_output("present_key")
    .optional_output("present_value")
    .required_attr("num_heads", opforge::AttrType::Int)
    .required_attr("kv_num_heads", opforge::AttrType::Int)
    .attr("scale", 0.0f, "0: 1 / sqrt(head size)")
    .attr("softcap", 0.0f)
    .attr("local_window_size", int64_t(-1))
    .attr("do_rotary", int64_t(0))
    .attr("rotary_interleaved", int64_t(0))
    .attr("smooth_softmax", int64_t(-1))
    .attr("causal", int64_t(1))
    .attr("qk_output", int64_t(0))
    .attr("sliding_window_cache", int64_t(0))
    .optional_attr("kv_cache_bit_width", opforge::AttrType::Int)
    .attr("k_quant_type", "NONE")
    .attr("v_quant_type", "NONE")
    .infer(gqa_infer)
    .compute(gqa_compute);
