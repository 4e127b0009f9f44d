// attention_flex.cpp: FlexAttention (ai.onnx.preview) without its score_mod / prob_mod
// subgraphs, which a C kernel cannot run: a node that has them runs on the executor's kernel
// (runtime/flex_attention.py), and this op does not declare them. Rounds as onnx's reference does: Q and K are scaled by
// sqrt(scale) in their own type, scores are rounded to it, softmax and the product with V run in
// float (double for double data, or as softmax_precision says).
#include <cmath>

#include "data_movement.h"
#include "elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

struct FlexDims {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, dk, dv;
};

template <class Ctx> FlexDims flex_dims(const Ctx& ctx) {
  const Shape q = ctx.input(0).sizes(), k = ctx.input(1).sizes(), v = ctx.input(2).sizes();
  OPFORGE_CHECK(q.size() == 4 && k.size() == 4 && v.size() == 4, "Q, K and V must be rank 4 [batch, heads, length, dim]");
  const FlexDims d{q[0], q[1], k[1], q[2], k[2], q[3], v[3]};
  OPFORGE_CHECK(k[0] == d.batch && v[0] == d.batch && v[1] == d.kv_heads && v[2] == d.kv_len && k[3] == d.dk,
                "K ", shape_str(k), " and V ", shape_str(v), " do not match Q ", shape_str(q));
  OPFORGE_CHECK(d.kv_heads > 0 && d.q_heads % d.kv_heads == 0, "Q's ", d.q_heads, " heads must be a multiple of K's ",
                d.kv_heads);
  if (ctx.has_attr("softmax_precision")) {
    const int64_t p = ctx.template attr<int64_t>("softmax_precision");
    OPFORGE_CHECK(p == OPF_FLOAT32 || p == OPF_FLOAT64, "softmax_precision = ", p,
                  " is not float or double, which this kernel computes in");
  }
  return d;
}

void flex_infer(InferContext& ctx) {
  const FlexDims d = flex_dims(ctx);
  ctx.set_output(0, ctx.input(2).dtype(), {d.batch, d.q_heads, d.q_len, d.dv});
}

/// One (batch, query head): scores of each query row against every key, softmax, times V.
template <class S, class C>
void flex_head(const S* q, const S* k, const S* v, S* y, const FlexDims& d, S sqrt_scale) {
  using W = compute_t<S>;   // the data's own arithmetic (float for the 16-bit types)
  auto scaled = [&](S x) { return load_as<C>(store_as<S>(W(load_as<W>(x) * load_as<W>(sqrt_scale)))); };
  std::vector<C> kk(static_cast<size_t>(d.kv_len * d.dk)), row(static_cast<size_t>(d.kv_len)), acc(static_cast<size_t>(d.dv));
  for (int64_t j = 0; j < d.kv_len * d.dk; ++j) kk[size_t(j)] = scaled(k[j]);
  for (int64_t i = 0; i < d.q_len; ++i) {
    C best = -INFINITY;
    for (int64_t j = 0; j < d.kv_len; ++j) {
      W dot = 0;
      for (int64_t e = 0; e < d.dk; ++e) dot += W(scaled(q[i * d.dk + e]) * kk[size_t(j * d.dk + e)]);
      row[size_t(j)] = load_as<C>(store_as<S>(dot));   // the score in the data's type, as numpy's matmul gives it
      best = std::max(best, row[size_t(j)]);
    }
    C sum = 0;
    for (auto& r : row) sum += (r = std::exp(r - best));
    std::fill(acc.begin(), acc.end(), C(0));
    for (int64_t j = 0; j < d.kv_len; ++j)
      for (int64_t m = 0; m < d.dv; ++m) acc[size_t(m)] += row[size_t(j)] / sum * load_as<C>(v[j * d.dv + m]);
    for (int64_t m = 0; m < d.dv; ++m) y[i * d.dv + m] = store_as<S>(acc[size_t(m)]);
  }
}

void flex_compute(KernelContext& ctx) {
  const FlexDims d = flex_dims(ctx);
  const Tensor q = ctx.input(0);
  const double scale = ctx.has_attr("scale") ? ctx.attr<double>("scale") : 1.0 / std::sqrt(double(d.dk));
  const bool wide = ctx.has_attr("softmax_precision") ? ctx.attr<int64_t>("softmax_precision") == OPF_FLOAT64
                                                      : q.dtype() == OPF_FLOAT64;
  const int64_t group = d.q_heads / d.kv_heads;
  dispatch_storage(q, "input 'Q'", [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S root = store_as<S>(std::sqrt(float(scale)));
    const S* qs = static_cast<const S*>(q.raw());
    const S* ks = static_cast<const S*>(ctx.input(1).raw());
    const S* vs = static_cast<const S*>(ctx.input(2).raw());
    S* ys = static_cast<S*>(ctx.output(0).raw());
    for (int64_t b = 0; b < d.batch; ++b)
      for (int64_t h = 0; h < d.q_heads; ++h) {
        const int64_t kv = b * d.kv_heads + h / group, qh = b * d.q_heads + h;
        const S* qp = qs + qh * d.q_len * d.dk;
        const S* kp = ks + kv * d.kv_len * d.dk;
        const S* vp = vs + kv * d.kv_len * d.dv;
        S* yp = ys + qh * d.q_len * d.dv;
        if (wide) flex_head<S, double>(qp, kp, vp, yp, d, root);
        else flex_head<S, float>(qp, kp, vp, yp, d, root);
      }
  });
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(FlexAttention)
    .domain("ai.onnx.preview")
    .since(1)
    .input("Q", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("K", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("V", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .optional_attr("scale", opforge::AttrType::Float)
    .optional_attr("softmax_precision", opforge::AttrType::Int)
    .infer(flex_infer)
    .compute(flex_compute);
