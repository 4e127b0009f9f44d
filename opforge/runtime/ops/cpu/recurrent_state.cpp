// recurrent_state.cpp: ops that carry a state across calls, for decoding step by step:
// CausalConvWithState (a depthwise causal Conv1D whose left padding is the previous call's tail)
// and LinearAttention (a matrix state per head, updated by the linear, gated, delta or gated-delta
// rule). Both compute in float, as onnx's reference does.
#include <cmath>

#include "data_movement.h"
#include "elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

// ---- CausalConvWithState ----

/// The activation applied to the convolution: none, or silu (also called swish).
template <class Ctx> bool silu_of(const Ctx& ctx) {
  const std::string a = ctx.template attr<std::string>("activation");
  OPFORGE_CHECK(a == "none" || a == "silu" || a == "swish", "attribute 'activation' = '", a,
                "' is not none, silu or swish");
  return a != "none";
}

void causal_conv_infer(InferContext& ctx) {
  const Shape x = ctx.input(0).sizes(), w = ctx.input(1).sizes();
  OPFORGE_CHECK(x.size() == 3, "input 'input' ", shape_str(x), " must be [batch, channels, length]");
  OPFORGE_CHECK(w.size() == 3 && w[0] == x[1] && w[1] == 1 && w[2] >= 1, "input 'weight' ", shape_str(w),
                " must be [channels = ", x[1], ", 1, kernel]");
  if (ctx.has_input(2))
    OPFORGE_CHECK(ctx.input(2).sizes() == Shape{x[1]}, "input 'bias' ", shape_str(ctx.input(2).sizes()),
                  " must be [channels = ", x[1], "]");
  const Shape state = {x[0], x[1], w[2] - 1};
  if (ctx.has_input(3))
    OPFORGE_CHECK(ctx.input(3).sizes() == state, "input 'past_state' ", shape_str(ctx.input(3).sizes()),
                  " must be ", shape_str(state));
  silu_of(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), x);
  ctx.set_output(1, ctx.input(0).dtype(), state);
}

/// out[b, c, t] = bias[c] + sum_j w[c, j] * padded[b, c, t + j], padded = past_state ++ input;
/// the new state is padded's last kernel - 1 steps.
void causal_conv_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const Shape xs = x.sizes();
  const int64_t batch = xs[0], channels = xs[1], length = xs[2], k = ctx.input(1).sizes()[2];
  const bool silu = silu_of(ctx);
  const std::vector<float> in = read_floats<float>(x, "input 'input'"), w = read_floats<float>(ctx.input(1), "weight");
  const std::vector<float> bias = ctx.has_input(2) ? read_floats<float>(ctx.input(2), "bias") : std::vector<float>();
  const std::vector<float> past = ctx.has_input(3) ? read_floats<float>(ctx.input(3), "past_state") : std::vector<float>();
  std::vector<float> out(size_t(batch * channels * length)), state(size_t(batch * channels * (k - 1)));
  std::vector<float> padded(size_t(length + k - 1));
  for (int64_t bc = 0; bc < batch * channels; ++bc) {
    const int64_t c = bc % channels;
    for (int64_t j = 0; j < k - 1; ++j) padded[size_t(j)] = past.empty() ? 0.f : past[size_t(bc * (k - 1) + j)];
    for (int64_t t = 0; t < length; ++t) padded[size_t(k - 1 + t)] = in[size_t(bc * length + t)];
    for (int64_t t = 0; t < length; ++t) {
      float acc = bias.empty() ? 0.f : bias[size_t(c)];
      for (int64_t j = 0; j < k; ++j) acc += w[size_t(c * k + j)] * padded[size_t(t + j)];
      if (silu) {   // the convolution is rounded to the data's type first, as the reference does
        dispatch_storage(x, "input 'input'", [&](auto tag) {
          using S = typename decltype(tag)::type;
          acc = load_as<float>(store_as<S>(acc));
        });
        acc = acc / (1.f + std::exp(-acc));
      }
      out[size_t(bc * length + t)] = acc;
    }
    for (int64_t j = 0; j < k - 1; ++j) state[size_t(bc * (k - 1) + j)] = padded[size_t(length + j)];
  }
  write_floats(out.data(), ctx.output(0));
  write_floats(state.data(), ctx.output(1));
}

// ---- LinearAttention ----

/// LinearAttention's sizes and update rule, checked against its inputs.
struct LinearDims {
  int64_t batch, steps, q_heads, kv_heads, dk, dv, decay_width, beta_heads;
  bool gating, delta;
};

template <class Ctx> LinearDims linear_dims(const Ctx& ctx) {
  const Shape q = ctx.input(0).sizes(), k = ctx.input(1).sizes(), v = ctx.input(2).sizes();
  LinearDims d{};
  d.q_heads = ctx.template attr<int64_t>("q_num_heads");
  d.kv_heads = ctx.template attr<int64_t>("kv_num_heads");
  OPFORGE_CHECK(d.q_heads > 0 && d.kv_heads > 0 && d.q_heads % d.kv_heads == 0, "q_num_heads (", d.q_heads,
                ") must be a positive multiple of kv_num_heads (", d.kv_heads, ")");
  OPFORGE_CHECK(q.size() == 3 && k.size() == 3 && v.size() == 3, "query, key and value must be [batch, steps, heads * dim]");
  OPFORGE_CHECK(q[2] % d.q_heads == 0 && v[2] % d.kv_heads == 0, "query's and value's last dims must divide by their heads");
  d.batch = q[0], d.steps = q[1], d.dk = q[2] / d.q_heads, d.dv = v[2] / d.kv_heads;
  OPFORGE_CHECK(k[0] == d.batch && k[1] == d.steps && k[2] == d.kv_heads * d.dk && v[0] == d.batch && v[1] == d.steps,
                "key ", shape_str(k), " and value ", shape_str(v), " do not match query ", shape_str(q));
  const std::string rule = ctx.template attr<std::string>("update_rule");
  OPFORGE_CHECK(rule == "linear" || rule == "gated" || rule == "delta" || rule == "gated_delta", "attribute 'update_rule' = '",
                rule, "' is not linear, gated, delta or gated_delta");
  d.gating = rule == "gated" || rule == "gated_delta";
  d.delta = rule == "delta" || rule == "gated_delta";
  OPFORGE_CHECK(ctx.has_input(4) == d.gating, "update_rule '", rule, d.gating ? "' needs" : "' takes no", " input 'decay'");
  OPFORGE_CHECK(ctx.has_input(5) == d.delta, "update_rule '", rule, d.delta ? "' needs" : "' takes no", " input 'beta'");
  if (d.gating) {
    const Shape g = ctx.input(4).sizes();
    OPFORGE_CHECK(g.size() == 3 && g[0] == d.batch && g[1] == d.steps && (g[2] == d.kv_heads || g[2] == d.kv_heads * d.dk),
                  "input 'decay' ", shape_str(g), " must be [batch, steps, kv_num_heads (* d_k)]");
    d.decay_width = g[2] / d.kv_heads;
  }
  if (d.delta) {
    const Shape b = ctx.input(5).sizes();
    OPFORGE_CHECK(b.size() == 3 && b[0] == d.batch && b[1] == d.steps && (b[2] == d.kv_heads || b[2] == 1),
                  "input 'beta' ", shape_str(b), " must be [batch, steps, kv_num_heads or 1]");
    d.beta_heads = b[2];
  }
  if (ctx.has_input(3))
    OPFORGE_CHECK(ctx.input(3).sizes() == (Shape{d.batch, d.kv_heads, d.dk, d.dv}), "input 'past_state' ",
                  shape_str(ctx.input(3).sizes()), " must be [batch, kv_num_heads, d_k, d_v]");
  return d;
}

void linear_attention_infer(InferContext& ctx) {
  const LinearDims d = linear_dims(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), {d.batch, d.steps, d.q_heads * d.dv});
  ctx.set_output(1, ctx.has_input(3) ? ctx.input(3).dtype() : ctx.input(0).dtype(), {d.batch, d.kv_heads, d.dk, d.dv});
}

/// Step by step: decay the state (gated), correct the value by what the state already recalls for
/// the key (delta), add key x value, then read the state with each query head's query.
void linear_attention_compute(KernelContext& ctx) {
  const LinearDims d = linear_dims(ctx);
  const std::vector<float> q = read_floats<float>(ctx.input(0), "query"), k = read_floats<float>(ctx.input(1), "key");
  const std::vector<float> v = read_floats<float>(ctx.input(2), "value");
  const std::vector<float> g = d.gating ? read_floats<float>(ctx.input(4), "decay") : std::vector<float>();
  const std::vector<float> beta = d.delta ? read_floats<float>(ctx.input(5), "beta") : std::vector<float>();
  std::vector<float> state = ctx.has_input(3) ? read_floats<float>(ctx.input(3), "past_state")
                                              : std::vector<float>(size_t(d.batch * d.kv_heads * d.dk * d.dv), 0.f);
  const float given = ctx.attr<float>("scale");
  const float scale = given == 0.f ? 1.f / std::sqrt(float(d.dk)) : given;
  const int64_t group = d.q_heads / d.kv_heads;
  std::vector<float> out(size_t(d.batch * d.steps * d.q_heads * d.dv)), value(size_t(d.dv));
  for (int64_t b = 0; b < d.batch; ++b)
    for (int64_t t = 0; t < d.steps; ++t) {
      const int64_t bt = b * d.steps + t;
      for (int64_t h = 0; h < d.kv_heads; ++h) {
        float* s = &state[size_t(((b * d.kv_heads + h) * d.dk) * d.dv)];
        const float* key = &k[size_t((bt * d.kv_heads + h) * d.dk)];
        for (int64_t m = 0; m < d.dv; ++m) value[size_t(m)] = v[size_t((bt * d.kv_heads + h) * d.dv + m)];
        if (d.gating)
          for (int64_t r = 0; r < d.dk; ++r) {
            const float f = std::exp(g[size_t((bt * d.kv_heads + h) * d.decay_width + (d.decay_width == 1 ? 0 : r))]);
            for (int64_t m = 0; m < d.dv; ++m) s[r * d.dv + m] *= f;
          }
        if (d.delta) {
          const float bb = beta[size_t(bt * d.beta_heads + (d.beta_heads == 1 ? 0 : h))];
          for (int64_t m = 0; m < d.dv; ++m) {
            float recalled = 0.f;
            for (int64_t r = 0; r < d.dk; ++r) recalled += s[r * d.dv + m] * key[r];
            value[size_t(m)] = bb * (value[size_t(m)] - recalled);
          }
        }
        for (int64_t r = 0; r < d.dk; ++r)
          for (int64_t m = 0; m < d.dv; ++m) s[r * d.dv + m] += key[r] * value[size_t(m)];
        for (int64_t hq = h * group; hq < (h + 1) * group; ++hq) {
          const float* query = &q[size_t((bt * d.q_heads + hq) * d.dk)];
          for (int64_t m = 0; m < d.dv; ++m) {
            float acc = 0.f;
            for (int64_t r = 0; r < d.dk; ++r) acc += query[r] * s[r * d.dv + m];
            out[size_t((bt * d.q_heads + hq) * d.dv + m)] = scale * acc;
          }
        }
      }
    }
  write_floats(out.data(), ctx.output(0));
  write_floats(state.data(), ctx.output(1));
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

#define STATE_DTYPES {opforge::f32, opforge::f16, opforge::bf16}

OPFORGE_OP(CausalConvWithState)
    .since(27)
    .input("input", STATE_DTYPES)
    .input("weight", STATE_DTYPES)
    .optional_input("bias", STATE_DTYPES)
    .optional_input("past_state", STATE_DTYPES)
    .output("output")
    .output("present_state")
    .attr("activation", "none")
    .infer(causal_conv_infer)
    .compute(causal_conv_compute);

OPFORGE_OP(LinearAttention)
    .since(27)
    .input("query", STATE_DTYPES)
    .input("key", STATE_DTYPES)
    .input("value", STATE_DTYPES)
    .optional_input("past_state", STATE_DTYPES)
    .optional_input("decay", STATE_DTYPES)
    .optional_input("beta", STATE_DTYPES)
    .output("output")
    .output("present_state")
    .attr("chunk_size", int64_t(64), "a tuning hint; the result does not depend on it")
    .required_attr("kv_num_heads", opforge::AttrType::Int)
    .required_attr("q_num_heads", opforge::AttrType::Int)
    .attr("scale", 0.0f)
    .attr("update_rule", "gated_delta")
    .infer(linear_attention_infer)
    .compute(linear_attention_compute);
