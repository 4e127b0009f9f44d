// flex_attention.cpp: FlexAttention (ai.onnx.preview, 1) without its score_mod and prob_mod
// graphs: softmax(Q K^T * scale) V over 4-D (batch, heads, sequence, size) tensors with grouped
// KV heads. The ABI carries no graph attributes; a node that has them is expanded into standard
// ops at load (opforge/runtime/functions.py), so this kernel only ever sees the plain form.
// Rounding follows onnx's reference: Q and K are each scaled by sqrt(scale) in their own dtype,
// the scores are rounded to that dtype, then softmax and the product with V run in the softmax
// precision (float for float16/bfloat16 unless the attribute says otherwise).
#include <cmath>
#include <limits>

#include "common/float_io.h"
#include "gemm/gemm_blas.h"

namespace {

using namespace opforge_cpu;

/// Queries per task: bounds the score scratch (kQueryBlock x keys) and balances threads.
constexpr int64_t kQueryBlock = 64;

bool differ(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

/// Sizes shared by infer and compute.
struct Geometry {
  int64_t batch = 0, q_heads = 0, kv_heads = 0, queries = 0, keys = 0, head_dim = 0, v_dim = 0;
};

template <class Ctx> Geometry geometry(const Ctx& ctx) {
  Tensor q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  OPFORGE_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4, "Q, K and V must be 4-D (batch, heads, sequence, "
                "head_size), got ranks ", q.ndim(), ", ", k.ndim(), " and ", v.ndim());
  OPFORGE_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "K and V must have Q's dtype ",
                opforge::dtype_name(q.dtype()));
  Geometry g{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
  OPFORGE_CHECK(!differ(k.size(0), g.batch) && !differ(v.size(0), g.batch), "Q, K and V must share the batch size");
  OPFORGE_CHECK(!differ(k.size(3), g.head_dim), "K's head size ", k.size(3), " differs from Q's ", g.head_dim);
  OPFORGE_CHECK(!differ(v.size(1), g.kv_heads) && !differ(v.size(2), g.keys), "V's heads and positions (", v.size(1),
                ", ", v.size(2), ") differ from K's (", g.kv_heads, ", ", g.keys, ")");
  OPFORGE_CHECK(g.q_heads < 0 || g.kv_heads < 0 || (g.kv_heads > 0 && g.q_heads % g.kv_heads == 0), "Q's ", g.q_heads,
                " heads are not a multiple of K/V's ", g.kv_heads);
  if (ctx.has_attr("softmax_precision")) {
    const int64_t p = ctx.template attr<int64_t>("softmax_precision");
    OPFORGE_CHECK(p == OPF_FLOAT32 || p == OPF_FLOAT64 || p == OPF_FLOAT16 || p == OPF_BFLOAT16,
                  "attribute 'softmax_precision' must be a floating dtype (1, 10, 11 or 16), got ", p);
  }
  return g;
}

void infer(InferContext& ctx) {
  const Geometry g = geometry(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), {g.batch, g.q_heads, g.queries, g.v_dim});
}

/// x rounded to the dtype `dt` (a no-op for float and double).
template <class C> C round_to(C x, int32_t dt) {
  if (dt == OPF_FLOAT16) return C(opforge::to_float(opforge::from_float(float(x), opforge::float16_t{})));
  if (dt == OPF_BFLOAT16) return C(opforge::to_float(opforge::from_float(float(x), opforge::bfloat16_t{})));
  if (dt == OPF_FLOAT32) return C(float(x));
  return x;
}

/// Q or K times sqrt(scale), each product rounded to the input dtype, as C.
template <class S, class C> std::vector<C> scaled(const Tensor& t, C root, int32_t dt) {
  std::vector<C> out(static_cast<size_t>(t.numel()));
  const S* p = t.data<S>();
  for (size_t i = 0; i < out.size(); ++i) out[i] = round_to<C>(load_as<C>(p[i]) * root, dt);
  return out;
}

/// One row of scores, rounded to the input dtype then the softmax one, into probabilities.
template <class C> void softmax_row(C* s, int64_t n, int32_t input_dt, int32_t softmax_dt) {
  C top = -std::numeric_limits<C>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    s[j] = round_to<C>(round_to<C>(s[j], input_dt), softmax_dt);
    top = s[j] > top ? s[j] : top;
  }
  C sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += s[j] = std::exp(s[j] - top);
  for (int64_t j = 0; j < n; ++j) s[j] = round_to<C>(s[j] / sum, softmax_dt);
}

template <class S> void run(KernelContext& ctx, const Geometry& g) {
  const int32_t dt = ctx.input(0).dtype();
  const int32_t softmax_dt = ctx.has_attr("softmax_precision") ? int32_t(ctx.attr<int64_t>("softmax_precision"))
                             : dt == OPF_FLOAT64                ? OPF_FLOAT64
                                                                : OPF_FLOAT32;
  using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
  const float scale = ctx.has_attr("scale") ? ctx.attr<float>("scale") : float(1 / std::sqrt(double(g.head_dim)));
  const C root = round_to<C>(C(std::sqrt(scale)), dt);
  const std::vector<C> q = scaled<S, C>(ctx.input(0), root, dt), k = scaled<S, C>(ctx.input(1), root, dt);
  std::vector<C> keep_v;
  const C* v = floats_of<C>(ctx.input(2), keep_v, "V");
  Tensor y = ctx.output(0);
  std::vector<C> out(static_cast<size_t>(y.numel()));
  const int64_t group = g.q_heads / g.kv_heads, blocks = (g.queries + kQueryBlock - 1) / kQueryBlock;
  opforge_nn::blas_threads(1);
  const int64_t work = std::min(g.queries, kQueryBlock) * g.keys * (g.head_dim + g.v_dim);
  ctx.parallel_for(g.batch * g.q_heads * blocks, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, work)),
                   [&](int64_t begin, int64_t end) {
    std::vector<C> scores(static_cast<size_t>(std::min(g.queries, kQueryBlock) * g.keys));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / blocks, i0 = (task % blocks) * kQueryBlock;
      const int64_t rows = std::min(kQueryBlock, g.queries - i0), first = bh * g.queries + i0;
      const int64_t kv = (bh / g.q_heads) * g.kv_heads + (bh % g.q_heads) / group;
      opforge_nn::matmul(false, true, rows, g.keys, g.head_dim, C(1), q.data() + first * g.head_dim, g.head_dim,
                         k.data() + kv * g.keys * g.head_dim, g.head_dim, C(0), scores.data(), g.keys);
      for (int64_t i = 0; i < rows; ++i) softmax_row(scores.data() + i * g.keys, g.keys, dt, softmax_dt);
      opforge_nn::matmul(false, false, rows, g.v_dim, g.keys, C(1), scores.data(), g.keys, v + kv * g.keys * g.v_dim,
                         g.v_dim, C(0), out.data() + first * g.v_dim, g.v_dim);
    }
  });
  write_floats(out.data(), y);
}

void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx);
  if (g.queries * g.q_heads * g.batch * g.v_dim == 0) return;
  OPFORGE_CHECK(g.keys > 0 && g.head_dim > 0, "FlexAttention needs at least one key of a non-empty head size");
  dispatch_storage(ctx.input(0), "Q", [&](auto tag) { run<typename decltype(tag)::type>(ctx, g); });
}

}  // namespace

#define FLEX_ATTENTION_FLOATS {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}

OPFORGE_OP(FlexAttention)
    .domain("ai.onnx.preview")
    .since(1)
    .input("Q", FLEX_ATTENTION_FLOATS)
    .input("K", FLEX_ATTENTION_FLOATS)
    .input("V", FLEX_ATTENTION_FLOATS)
    .output("Y")
    .optional_attr("scale", opforge::AttrType::Float)
    .optional_attr("softmax_precision", opforge::AttrType::Int)
    .infer(infer)
    .compute(compute);
