// linear_attention.cpp: LinearAttention (opset 27): the recurrent state S (d_k x d_v per KV head)
// of linear, gated, delta and gated-delta attention, run token by token in float as onnx's
// reference does. Each (batch, KV head) is independent and goes to its own task; the query heads
// that share a KV head read its state after every step.
#include <cmath>
#include <cstring>
#include <string>

#include "common/float_io.h"

namespace {

using namespace opforge_cpu;

/// True when both dims are known and differ (-1 is unknown during graph shape inference).
bool differ(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

/// The update rule, as two switches.
struct Rule {
  bool gated = false, delta = false;
};

Rule parse_rule(const std::string& name) {
  OPFORGE_CHECK(name == "linear" || name == "gated" || name == "delta" || name == "gated_delta",
                "attribute 'update_rule' must be 'linear', 'gated', 'delta' or 'gated_delta', got '", name, "'");
  return {name == "gated" || name == "gated_delta", name == "delta" || name == "gated_delta"};
}

/// Sizes shared by infer and compute (-1 where a dim is not known yet).
struct Geometry {
  int64_t batch = 0, steps = 0, q_heads = 0, kv_heads = 0, key_dim = 0, value_dim = 0;
  int64_t decay_width = 0;  // 1 (one decay per head) or key_dim (one per key dim); 0 without decay
  int64_t beta_heads = 0;   // kv_heads or 1 (shared by all heads); 0 without beta
};

int64_t per_head(int64_t hidden, int64_t heads, const char* what) {
  if (hidden < 0) return -1;
  OPFORGE_CHECK(hidden % heads == 0, "input '", what, "' has last dim ", hidden, ", not a multiple of its ", heads,
                " heads");
  return hidden / heads;
}

/// Input i is 3-D (batch, steps, ...) matching the query's batch and steps.
void check_packed(const Tensor& t, const char* what, const Geometry& g) {
  OPFORGE_CHECK(t.ndim() == 3, "input '", what, "' must be 3-D (batch, sequence, heads * size), got rank ", t.ndim());
  OPFORGE_CHECK(!differ(t.size(0), g.batch) && !differ(t.size(1), g.steps), "input '", what,
                "' has (batch, sequence) (", t.size(0), ", ", t.size(1), "), query has (", g.batch, ", ", g.steps, ")");
}

template <class Ctx> void read_gates(const Ctx& ctx, const Rule& rule, Geometry& g) {
  const bool decay = ctx.has_input(4), beta = ctx.has_input(5);
  OPFORGE_CHECK(decay == rule.gated, "update_rule '", ctx.template attr<std::string>("update_rule"),
                rule.gated ? "' needs the input 'decay'" : "' takes no input 'decay'");
  OPFORGE_CHECK(beta == rule.delta, "update_rule '", ctx.template attr<std::string>("update_rule"),
                rule.delta ? "' needs the input 'beta'" : "' takes no input 'beta'");
  if (decay) {
    Tensor d = ctx.input(4);
    check_packed(d, "decay", g);
    const int64_t last = d.size(2);
    OPFORGE_CHECK(last < 0 || g.key_dim < 0 || last == g.kv_heads || last == g.kv_heads * g.key_dim,
                  "input 'decay' has last dim ", last, "; it must be kv_num_heads (", g.kv_heads,
                  ") or kv_num_heads * head size (", g.kv_heads * g.key_dim, ")");
    g.decay_width = last == g.kv_heads ? 1 : g.key_dim;
  }
  if (beta) {
    Tensor b = ctx.input(5);
    check_packed(b, "beta", g);
    const int64_t last = b.size(2);
    OPFORGE_CHECK(last < 0 || last == g.kv_heads || last == 1, "input 'beta' has last dim ", last,
                  "; it must be kv_num_heads (", g.kv_heads, ") or 1");
    g.beta_heads = last;
  }
}

template <class Ctx> Geometry geometry(const Ctx& ctx) {
  OPFORGE_CHECK(ctx.has_attr("q_num_heads") && ctx.has_attr("kv_num_heads"),
                "attributes 'q_num_heads' and 'kv_num_heads' are required");
  Geometry g;
  g.q_heads = ctx.template attr<int64_t>("q_num_heads");
  g.kv_heads = ctx.template attr<int64_t>("kv_num_heads");
  OPFORGE_CHECK(g.q_heads > 0 && g.kv_heads > 0 && g.q_heads % g.kv_heads == 0, "q_num_heads (", g.q_heads,
                ") must be a positive multiple of kv_num_heads (", g.kv_heads, ")");
  const Rule rule = parse_rule(ctx.template attr<std::string>("update_rule"));
  Tensor q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  OPFORGE_CHECK(q.ndim() == 3, "input 'query' must be 3-D (batch, sequence, heads * size), got rank ", q.ndim());
  g.batch = q.size(0);
  g.steps = q.size(1);
  check_packed(k, "key", g);
  check_packed(v, "value", g);
  OPFORGE_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "'key' and 'value' must have the query's dtype ",
                opforge::dtype_name(q.dtype()));
  g.key_dim = per_head(q.size(2), g.q_heads, "query");
  OPFORGE_CHECK(!differ(per_head(k.size(2), g.kv_heads, "key"), g.key_dim), "input 'key' has head size ",
                k.size(2) / g.kv_heads, ", query has ", g.key_dim);
  g.value_dim = per_head(v.size(2), g.kv_heads, "value");
  if (ctx.has_input(3)) {
    Tensor s = ctx.input(3);
    const bool fits = s.ndim() == 4 && !differ(s.size(0), g.batch) && !differ(s.size(1), g.kv_heads) &&
                      !differ(s.size(2), g.key_dim) && !differ(s.size(3), g.value_dim);
    OPFORGE_CHECK(fits, "input 'past_state' must be (batch ", g.batch, ", kv_num_heads ", g.kv_heads, ", ", g.key_dim,
                  ", ", g.value_dim, ")");
  }
  read_gates(ctx, rule, g);
  return g;
}

void infer(InferContext& ctx) {
  const Geometry g = geometry(ctx);
  const int32_t dt = ctx.input(0).dtype();
  const int32_t state_dt = ctx.has_input(3) ? ctx.input(3).dtype() : dt;
  const int64_t hidden = g.value_dim < 0 ? -1 : g.q_heads * g.value_dim;
  ctx.set_output(0, dt, {g.batch, g.steps, hidden});
  ctx.set_output(1, state_dt, {g.batch, g.kv_heads, g.key_dim, g.value_dim});
}

/// Every input as float, in its packed (batch, step, head, size) order.
struct Operands {
  std::vector<float> q, k, v, decay, beta;
  float* out = nullptr;    // (batch, step, q head, value_dim)
  float* state = nullptr;  // (batch, kv head, key_dim, value_dim), holding the past state on entry
};

/// Runs the recurrence for one (batch, KV head) over every step.
void recur(const Operands& x, const Geometry& g, const Rule& rule, float scale, int64_t b, int64_t h,
           std::vector<float>& v_row) {
  const int64_t dk = g.key_dim, dv = g.value_dim, group = g.q_heads / g.kv_heads;
  float* s = x.state + (b * g.kv_heads + h) * dk * dv;
  for (int64_t t = 0; t < g.steps; ++t) {
    const int64_t bt = b * g.steps + t;
    const float* k = x.k.data() + (bt * g.kv_heads + h) * dk;
    const float* v = x.v.data() + (bt * g.kv_heads + h) * dv;
    if (rule.gated) {
      const float* d = x.decay.data() + (bt * g.kv_heads + h) * g.decay_width;
      for (int64_t i = 0; i < dk; ++i) {
        const float f = std::exp(d[g.decay_width == 1 ? 0 : i]);
        for (int64_t m = 0; m < dv; ++m) s[i * dv + m] *= f;
      }
    }
    std::memcpy(v_row.data(), v, size_t(dv) * sizeof(float));
    if (rule.delta) {  // v <- beta * (v - S^T k)
      const float beta = x.beta[size_t(bt * g.beta_heads + (g.beta_heads == 1 ? 0 : h))];
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t m = 0; m < dv; ++m) v_row[size_t(m)] -= s[i * dv + m] * k[i];
      for (int64_t m = 0; m < dv; ++m) v_row[size_t(m)] *= beta;
    }
    for (int64_t i = 0; i < dk; ++i)
      for (int64_t m = 0; m < dv; ++m) s[i * dv + m] += k[i] * v_row[size_t(m)];
    for (int64_t qh = h * group; qh < (h + 1) * group; ++qh) {
      const float* q = x.q.data() + (bt * g.q_heads + qh) * dk;
      float* o = x.out + (bt * g.q_heads + qh) * dv;
      std::fill(o, o + dv, 0.0f);
      for (int64_t i = 0; i < dk; ++i)
        for (int64_t m = 0; m < dv; ++m) o[m] += q[i] * s[i * dv + m];
      for (int64_t m = 0; m < dv; ++m) o[m] *= scale;
    }
  }
}

void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx);
  const Rule rule = parse_rule(ctx.attr<std::string>("update_rule"));
  const float attr_scale = ctx.attr<float>("scale");
  const float scale = attr_scale == 0.0f ? float(1 / std::sqrt(double(g.key_dim))) : attr_scale;
  Operands x;
  x.q = read_floats<float>(ctx.input(0), "query");
  x.k = read_floats<float>(ctx.input(1), "key");
  x.v = read_floats<float>(ctx.input(2), "value");
  if (rule.gated) x.decay = read_floats<float>(ctx.input(4), "decay");
  if (rule.delta) x.beta = read_floats<float>(ctx.input(5), "beta");
  Tensor out = ctx.output(0), present = ctx.output(1);
  std::vector<float> out_f(size_t(out.numel())), state_f;
  if (ctx.has_input(3)) state_f = read_floats<float>(ctx.input(3), "past_state");
  else state_f.assign(size_t(present.numel()), 0.0f);
  x.out = out_f.data();
  x.state = state_f.data();
  const int64_t work = g.steps * g.key_dim * g.value_dim * (2 + g.q_heads / g.kv_heads);
  ctx.parallel_for(g.batch * g.kv_heads, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, work)),
                   [&](int64_t begin, int64_t end) {
    std::vector<float> v_row(size_t(g.value_dim));
    for (int64_t task = begin; task < end; ++task)
      recur(x, g, rule, scale, task / g.kv_heads, task % g.kv_heads, v_row);
  });
  write_floats(out_f.data(), out);
  write_floats(state_f.data(), present);
}

}  // namespace

#define LINEAR_ATTENTION_FLOATS {opforge::f32, opforge::f16, opforge::bf16}

OPFORGE_OP(LinearAttention)
    .since(27)
    .input("query", LINEAR_ATTENTION_FLOATS)
    .input("key", LINEAR_ATTENTION_FLOATS)
    .input("value", LINEAR_ATTENTION_FLOATS)
    .optional_input("past_state", LINEAR_ATTENTION_FLOATS)
    .optional_input("decay", LINEAR_ATTENTION_FLOATS)
    .optional_input("beta", LINEAR_ATTENTION_FLOATS)
    .output("output")
    .output("present_state")
    .attr("update_rule", "gated_delta")
    .attr("scale", 0.0f)
    .attr("chunk_size", int64_t(64))
    .optional_attr("q_num_heads", opforge::AttrType::Int)
    .optional_attr("kv_num_heads", opforge::AttrType::Int)
    .infer(infer)
    .compute(compute);
