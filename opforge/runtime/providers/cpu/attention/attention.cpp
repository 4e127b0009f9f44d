// attention.cpp: Attention (opsets 23-25): scaled dot-product attention with grouped KV heads,
// boolean or additive masks, causal and sliding windows, a KV cache (past/present or
// nonpad_kv_seqlen), softcap and the four qk_matmul_output modes. Each (batch, head, block of
// queries) is two OpenBLAS GEMMs around a row softmax; blocks spread over the host's threads.
#include <cmath>
#include <cstring>
#include <limits>

#include "common/float_io.h"
#include "gemm/gemm_blas.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using opforge_cpu::reduction::exp_fast;

/// Queries per task: bounds the score scratch (kQueryBlock x total keys) and balances threads.
constexpr int64_t kQueryBlock = 64;

/// True when both dims are known and differ (-1 is unknown during graph shape inference).
bool differ(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }
int64_t known_sum(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : a + b; }
int64_t known_product(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : a * b; }

/// Where one (batch, head) slice of a 3-D (B, S, H*D) or 4-D (B, H, S, D) tensor lies.
struct HeadLayout {
  int64_t batch = 0, head = 0, row = 0;  // element strides
  int64_t at(int64_t b, int64_t h) const { return b * batch + h * head; }
};

HeadLayout head_layout(bool three_d, int64_t heads, int64_t seq, int64_t dim) {
  if (three_d) return {seq * heads * dim, dim, heads * dim};
  return {heads * seq * dim, seq * dim, dim};
}

/// Sizes shared by infer and compute, checked against each other.
struct Geometry {
  bool three_d = false;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, q_len = 0, kv_len = 0, past = 0, head_dim = 0, v_dim = 0;
  int64_t total() const { return known_sum(past, kv_len); }
};

/// hidden / heads, or an error naming the tensor when it does not divide.
int64_t per_head(int64_t hidden, int64_t heads, const char* what) {
  if (hidden < 0) return -1;
  OPFORGE_CHECK(hidden % heads == 0, what, "'s hidden size ", hidden, " is not a multiple of its ", heads, " heads");
  return hidden / heads;
}

template <class Ctx> void read_heads_3d(const Ctx& ctx, Geometry& g) {
  OPFORGE_CHECK(ctx.has_attr("q_num_heads") && ctx.has_attr("kv_num_heads"),
                "3-D Q, K and V (batch, sequence, hidden) need the attributes 'q_num_heads' and 'kv_num_heads'");
  g.q_heads = ctx.template attr<int64_t>("q_num_heads");
  g.kv_heads = ctx.template attr<int64_t>("kv_num_heads");
  OPFORGE_CHECK(g.q_heads > 0 && g.kv_heads > 0, "attributes 'q_num_heads' (", g.q_heads, ") and 'kv_num_heads' (",
                g.kv_heads, ") must be positive");
  Tensor q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  g.q_len = q.size(1);
  g.kv_len = k.size(1);
  g.head_dim = per_head(q.size(2), g.q_heads, "Q");
  const int64_t k_dim = per_head(k.size(2), g.kv_heads, "K");
  OPFORGE_CHECK(!differ(k_dim, g.head_dim), "K's head size ", k_dim, " differs from Q's ", g.head_dim);
  g.v_dim = per_head(v.size(2), g.kv_heads, "V");
  OPFORGE_CHECK(!differ(v.size(1), g.kv_len), "V has ", v.size(1), " positions, K has ", g.kv_len);
}

template <class Ctx> void read_heads_4d(const Ctx& ctx, Geometry& g) {
  Tensor q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  g.q_heads = q.size(1);
  g.kv_heads = k.size(1);
  g.q_len = q.size(2);
  g.kv_len = k.size(2);
  g.head_dim = q.size(3);
  g.v_dim = v.size(3);
  OPFORGE_CHECK(!differ(k.size(3), g.head_dim), "K's head size ", k.size(3), " differs from Q's ", g.head_dim);
  OPFORGE_CHECK(!differ(v.size(1), g.kv_heads) && !differ(v.size(2), g.kv_len), "V's heads and positions (",
                v.size(1), ", ", v.size(2), ") differ from K's (", g.kv_heads, ", ", g.kv_len, ")");
}

/// past_key (B, Hkv, P, D) and past_value (B, Hkv, P, Dv): both or neither.
template <class Ctx> void read_past(const Ctx& ctx, Geometry& g) {
  const bool key = ctx.has_input(4), value = ctx.has_input(5);
  OPFORGE_CHECK(key == value, "inputs 'past_key' and 'past_value' must be given together");
  if (!key) return;
  OPFORGE_CHECK(!ctx.has_input(6), "input 'nonpad_kv_seqlen' cannot be combined with 'past_key'/'past_value'");
  Tensor pk = ctx.input(4), pv = ctx.input(5);
  OPFORGE_CHECK(pk.ndim() == 4 && pv.ndim() == 4, "'past_key' and 'past_value' must be 4-D (batch, kv_heads, "
                "past_sequence, head_size), got ranks ", pk.ndim(), " and ", pv.ndim());
  g.past = pk.size(2);
  const bool fits = !differ(pk.size(0), g.batch) && !differ(pk.size(1), g.kv_heads) &&
                    !differ(pk.size(3), g.head_dim) && !differ(pv.size(0), g.batch) &&
                    !differ(pv.size(1), g.kv_heads) && !differ(pv.size(2), g.past) && !differ(pv.size(3), g.v_dim);
  OPFORGE_CHECK(fits, "'past_key' (", pk.size(0), ", ", pk.size(1), ", ", pk.size(2), ", ", pk.size(3),
                ") or 'past_value' does not match batch ", g.batch, ", ", g.kv_heads, " kv heads, head sizes ",
                g.head_dim, "/", g.v_dim);
}

template <class Ctx> Geometry geometry(const Ctx& ctx) {
  Tensor q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  OPFORGE_CHECK(q.ndim() == 3 || q.ndim() == 4, "Q must be 3-D (batch, sequence, hidden) or 4-D (batch, heads, "
                "sequence, head_size), got rank ", q.ndim());
  OPFORGE_CHECK(k.ndim() == q.ndim() && v.ndim() == q.ndim(), "K and V must have Q's rank ", q.ndim(),
                ", got ", k.ndim(), " and ", v.ndim());
  OPFORGE_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), "K and V must have Q's dtype ",
                opforge::dtype_name(q.dtype()));
  Geometry g;
  g.three_d = q.ndim() == 3;
  g.batch = q.size(0);
  OPFORGE_CHECK(!differ(k.size(0), g.batch) && !differ(v.size(0), g.batch), "Q, K and V must share the batch size");
  if (g.three_d) read_heads_3d(ctx, g);
  else read_heads_4d(ctx, g);
  OPFORGE_CHECK(g.q_heads < 0 || g.kv_heads <= 0 || g.q_heads % g.kv_heads == 0, "Q's ", g.q_heads,
                " heads are not a multiple of K/V's ", g.kv_heads);
  read_past(ctx, g);
  return g;
}

/// attn_mask of rank 1-4 broadcasts (right-aligned) to (B, Hq, Sq, M) with M <= the total keys.
void check_mask(const Tensor& m, const Geometry& g) {
  OPFORGE_CHECK(m.ndim() >= 1 && m.ndim() <= 4, "'attn_mask' must have rank 1 to 4, got ", m.ndim());
  const int64_t target[4] = {g.batch, g.q_heads, g.q_len, g.total()};
  for (int k = 1; k <= m.ndim(); ++k) {
    const int64_t d = m.size(-k), t = target[4 - k];
    const bool ok = k == 1 ? !(d >= 0 && t >= 0 && d > t) : (d == 1 || !differ(d, t));
    OPFORGE_CHECK(ok, "'attn_mask' dim ", m.ndim() - k, " (", d, ") does not broadcast to (batch ", g.batch,
                  ", heads ", g.q_heads, ", queries ", g.q_len, ", keys ", g.total(), ")");
  }
}

void check_attrs(const InferContext& ctx) {
  const int64_t mode = ctx.attr<int64_t>("qk_matmul_output_mode");
  OPFORGE_CHECK(mode >= 0 && mode <= 3, "attribute 'qk_matmul_output_mode' must be 0-3, got ", mode);
  OPFORGE_CHECK(ctx.attr<float>("softcap") >= 0, "attribute 'softcap' must be >= 0");
  for (const char* name : {"left_window_size", "right_window_size"})
    if (ctx.has_attr(name))
      OPFORGE_CHECK(ctx.attr<int64_t>(name) >= -1, "attribute '", name, "' must be -1 or >= 0");
}

void infer(InferContext& ctx) {
  check_attrs(ctx);
  const Geometry g = geometry(ctx);
  if (ctx.has_input(3)) check_mask(ctx.input(3), g);
  if (ctx.has_input(6)) OPFORGE_CHECK(ctx.input(6).dtype() == OPF_INT64, "'nonpad_kv_seqlen' must be int64");
  const int32_t dt = ctx.input(0).dtype();
  if (g.three_d) ctx.set_output(0, dt, {g.batch, g.q_len, known_product(g.q_heads, g.v_dim)});
  else ctx.set_output(0, dt, {g.batch, g.q_heads, g.q_len, g.v_dim});
  if (ctx.num_outputs() > 1) ctx.set_output(1, dt, {g.batch, g.kv_heads, g.total(), g.head_dim});
  if (ctx.num_outputs() > 2) ctx.set_output(2, dt, {g.batch, g.kv_heads, g.total(), g.v_dim});
  if (ctx.num_outputs() > 3) ctx.set_output(3, dt, {g.batch, g.q_heads, g.q_len, g.total()});
}

/// Output i's tensor when the node asked for it.
bool wants(const KernelContext& ctx, int i) { return i < ctx.num_outputs() && ctx.output(i).has_data(); }

/// past (B, H, P, D) then new rows (laid out as `src`) into a 4-D (B, H, P + S, D) cache, any dtype.
void concat_cache(const Tensor* past, const Tensor& src, HeadLayout sl, const Geometry& g, int64_t dim, char* dst) {
  const int64_t es = opforge::dtype_size(src.dtype()), total = g.past + g.kv_len;
  const char* s = static_cast<const char*>(src.raw());
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t h = 0; h < g.kv_heads; ++h) {
      char* out = dst + (b * g.kv_heads + h) * total * dim * es;
      if (past) std::memcpy(out, static_cast<const char*>(past->raw()) + (b * g.kv_heads + h) * g.past * dim * es,
                            size_t(g.past * dim * es));
      for (int64_t j = 0; j < g.kv_len; ++j)
        std::memcpy(out + (g.past + j) * dim * es, s + (sl.at(b, h) + j * sl.row) * es, size_t(dim * es));
    }
}

/// Everything that decides which keys a query may see, as an additive bias (0 or -inf) plus the
/// mask's own values.
template <class C> struct Bias {
  std::vector<C> mask;       // attn_mask as additive values; empty when absent
  int64_t stride[4] = {};    // its broadcast strides over (B, Hq, Sq, M)
  int64_t mask_keys = 0;     // M: keys past M are masked out
  bool causal = false;
  int64_t left = -1, right = -1;        // sliding window; -1 is unbounded
  std::vector<int64_t> offset;          // per batch: keys before this block of queries
  std::vector<int64_t> valid;           // per batch: keys that are not padding
};

template <class C> std::vector<C> additive_mask(const Tensor& m) {
  std::vector<C> out(static_cast<size_t>(m.numel()));
  const C neg = -std::numeric_limits<C>::infinity();
  if (m.dtype() == OPF_BOOL) {
    const bool* p = m.data<bool>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = p[i] ? C(0) : neg;
    return out;
  }
  const bool ok = opforge::dispatch<float, double, opforge::float16_t, opforge::bfloat16_t, int8_t, int16_t, int32_t,
                                    int64_t, uint8_t, uint16_t, uint32_t, uint64_t>(m.dtype(), [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = static_cast<const S*>(m.raw());
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_as<C>(p[i]);
  });
  OPFORGE_CHECK(ok, "'attn_mask' has unsupported dtype ", opforge::dtype_name(m.dtype()));
  return out;
}

template <class C> Bias<C> make_bias(const KernelContext& ctx, const Geometry& g) {
  Bias<C> bias;
  if (ctx.has_input(3)) {
    Tensor m = ctx.input(3);
    bias.mask = additive_mask<C>(m);
    const Shape target = {g.batch, g.q_heads, g.q_len, m.size(-1)};
    const Shape strides = broadcast_strides(m.sizes(), target);
    for (int d = 0; d < 4; ++d) bias.stride[d] = strides[size_t(d)];
    bias.mask_keys = m.size(-1);
  }
  bias.causal = ctx.attr<int64_t>("is_causal") != 0;
  if (ctx.has_attr("left_window_size")) bias.left = ctx.attr<int64_t>("left_window_size");
  if (ctx.has_attr("right_window_size")) bias.right = ctx.attr<int64_t>("right_window_size");
  bias.offset.assign(size_t(g.batch), g.past);
  bias.valid.assign(size_t(g.batch), g.total());
  if (ctx.has_input(6)) {
    Tensor n = ctx.input(6);
    OPFORGE_CHECK(n.numel() == g.batch, "'nonpad_kv_seqlen' must hold one length per batch (", g.batch, "), got ",
                  n.numel());
    const std::vector<int64_t> lens = read_ints(n);
    for (int64_t b = 0; b < g.batch; ++b) {
      bias.valid[size_t(b)] = lens[size_t(b)];
      bias.offset[size_t(b)] = lens[size_t(b)] - g.q_len;
    }
  }
  return bias;
}

/// Attention-23/24 without windows; stored as floats that compute reads once.
struct Options {
  double scale = 0, softcap = 0;
  int64_t mode = 0;
};

/// One query row's scores in place: softcap, bias, softmax (a row with no visible key becomes
/// zeros), with the qk_matmul_output copies the mode asks for.
template <class C>
void score_row(C* s, int64_t keys, const Bias<C>& bias, const Options& o, int64_t b, int64_t h, int64_t i, C* qk) {
  constexpr C kNeg = -std::numeric_limits<C>::infinity();
  if (qk && o.mode == 0) std::memcpy(qk, s, size_t(keys) * sizeof(C));
  if (o.softcap > 0) {
    const C cap = C(o.softcap), inv = C(1 / o.softcap);
    for (int64_t j = 0; j < keys; ++j) s[j] = cap * std::tanh(s[j] * inv);
  }
  if (qk && o.mode == 1) std::memcpy(qk, s, size_t(keys) * sizeof(C));
  const int64_t pos = i + bias.offset[size_t(b)], valid = bias.valid[size_t(b)];
  const C* mask = bias.mask.empty() ? nullptr
                                    : bias.mask.data() + b * bias.stride[0] + h * bias.stride[1] + i * bias.stride[2];
  bool any = false;
  C top = kNeg;
  for (int64_t j = 0; j < keys; ++j) {
    bool open = j < valid && (!bias.causal || j <= pos) && (bias.left < 0 || pos - j <= bias.left) &&
                (bias.right < 0 || j - pos <= bias.right);
    C add = C(0);
    if (mask) {
      add = j < bias.mask_keys ? mask[j * bias.stride[3]] : kNeg;
      open = open && add != kNeg;
    }
    // A masked key is -inf outright, so a NaN or infinite score there cannot leak into the row.
    s[j] = open ? s[j] + add : kNeg;
    any = any || open;
    top = s[j] > top ? s[j] : top;
  }
  if (qk && o.mode == 2) std::memcpy(qk, s, size_t(keys) * sizeof(C));
  if (!any) {
    for (int64_t j = 0; j < keys; ++j) s[j] = C(0);
  } else {
    C sum = 0;
    for (int64_t j = 0; j < keys; ++j) sum += s[j] = exp_fast(s[j] - top);
    const C inv = C(1) / sum;
    for (int64_t j = 0; j < keys; ++j) s[j] *= inv;
  }
  if (qk && o.mode == 3) std::memcpy(qk, s, size_t(keys) * sizeof(C));
}

/// Q, K, V (K and V over all keys) and Y in compute type C, with their layouts.
template <class C> struct Operands {
  const C *q, *k, *v;
  HeadLayout ql, kl, vl;
  C* y;
  HeadLayout yl;
  C* qk;  // (B, Hq, Sq, keys) or null
};

template <class C>
void attend(const KernelContext& ctx, const Geometry& g, const Options& o, const Bias<C>& bias, const Operands<C>& x) {
  const int64_t keys = g.total(), blocks = (g.q_len + kQueryBlock - 1) / kQueryBlock;
  const int64_t group = g.q_heads / g.kv_heads;
  opforge_nn::blas_threads(1);
  const int64_t work = std::min(g.q_len, kQueryBlock) * keys * (g.head_dim + g.v_dim);
  ctx.parallel_for(g.batch * g.q_heads * blocks, std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, work)),
                   [&](int64_t begin, int64_t end) {
    std::vector<C> scores(static_cast<size_t>(std::min(g.q_len, kQueryBlock) * keys));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bh = t / blocks, i0 = (t % blocks) * kQueryBlock, rows = std::min(kQueryBlock, g.q_len - i0);
      const int64_t b = bh / g.q_heads, h = bh % g.q_heads, kh = h / group;
      const C* q = x.q + x.ql.at(b, h) + i0 * x.ql.row;
      opforge_nn::matmul(false, true, rows, keys, g.head_dim, C(o.scale), q, x.ql.row, x.k + x.kl.at(b, kh), x.kl.row,
                         C(0), scores.data(), keys);
      for (int64_t r = 0; r < rows; ++r) {
        C* qk = x.qk ? x.qk + ((b * g.q_heads + h) * g.q_len + i0 + r) * keys : nullptr;
        score_row(scores.data() + r * keys, keys, bias, o, b, h, i0 + r, qk);
      }
      opforge_nn::matmul(false, false, rows, g.v_dim, keys, C(1), scores.data(), keys, x.v + x.vl.at(b, kh), x.vl.row,
                         C(0), x.y + x.yl.at(b, h) + i0 * x.yl.row, x.yl.row);
    }
  });
}

/// The scale Q and K are multiplied by, each by its square root rounded to the input's dtype
/// (as the spec's function body does), so low-precision results match it.
template <class S> double effective_scale(const KernelContext& ctx, int64_t head_dim) {
  const double scale = ctx.has_attr("scale") ? ctx.attr<float>("scale") : 1 / std::sqrt(double(head_dim));
  const double root = load_as<double>(store_as<S>(std::sqrt(scale)));
  return root * root;
}

/// The K or V rows over all keys: a cache when there is a past or a present output, else the input.
struct KeySource {
  std::vector<char> own;  // the concatenated cache when no present output holds it
  const void* data = nullptr;
  int64_t count = 0;  // elements at data
  HeadLayout layout;
};

KeySource key_source(const KernelContext& ctx, const Geometry& g, int in, int past, int present, int64_t dim) {
  Tensor src = ctx.input(in);
  KeySource out;
  const HeadLayout given = head_layout(g.three_d, g.kv_heads, g.kv_len, dim);
  if (!ctx.has_input(past) && !wants(ctx, present)) {
    out.data = src.raw();
    out.count = src.numel();
    out.layout = given;
    return out;
  }
  char* dst;
  if (wants(ctx, present)) {
    dst = static_cast<char*>(ctx.output(present).raw());
  } else {
    out.own.resize(size_t(g.batch * g.kv_heads * g.total() * dim * opforge::dtype_size(src.dtype())));
    dst = out.own.data();
  }
  Tensor past_t = ctx.has_input(past) ? ctx.input(past) : Tensor();
  concat_cache(ctx.has_input(past) ? &past_t : nullptr, src, given, g, dim, dst);
  out.data = dst;
  out.count = g.batch * g.kv_heads * g.total() * dim;
  out.layout = head_layout(false, g.kv_heads, g.total(), dim);
  return out;
}

/// Converts n elements of storage S at p to C (a no-op view when S is C).
template <class C, class S> const C* as_compute(const void* p, int64_t n, std::vector<C>& keep) {
  if constexpr (std::is_same_v<C, S>) {
    return static_cast<const C*>(p);
  } else {
    keep.resize(size_t(n));
    const S* s = static_cast<const S*>(p);
    for (int64_t i = 0; i < n; ++i) keep[size_t(i)] = load_as<C>(s[i]);
    return keep.data();
  }
}

template <class S, class C> void run(KernelContext& ctx, const Geometry& g) {
  Options o;
  o.scale = effective_scale<S>(ctx, g.head_dim);
  o.softcap = ctx.attr<float>("softcap");
  o.mode = ctx.attr<int64_t>("qk_matmul_output_mode");
  const Bias<C> bias = make_bias<C>(ctx, g);
  const KeySource ks = key_source(ctx, g, 1, 4, 1, g.head_dim), vs = key_source(ctx, g, 2, 5, 2, g.v_dim);
  std::vector<C> qc, kc, vc, yc, qkc;
  Operands<C> x;
  x.q = as_compute<C, S>(ctx.input(0).raw(), ctx.input(0).numel(), qc);
  x.k = as_compute<C, S>(ks.data, ks.count, kc);
  x.v = as_compute<C, S>(vs.data, vs.count, vc);
  x.ql = head_layout(g.three_d, g.q_heads, g.q_len, g.head_dim);
  x.kl = ks.layout;
  x.vl = vs.layout;
  x.yl = head_layout(g.three_d, g.q_heads, g.q_len, g.v_dim);
  Tensor y = ctx.output(0);
  const bool direct = std::is_same_v<C, S>;
  if (!direct) yc.resize(size_t(y.numel()));
  x.y = direct ? static_cast<C*>(y.raw()) : yc.data();
  x.qk = nullptr;
  if (wants(ctx, 3)) {
    if (!direct) qkc.resize(size_t(ctx.output(3).numel()));
    x.qk = direct ? static_cast<C*>(ctx.output(3).raw()) : qkc.data();
  }
  if (g.total() == 0 || g.head_dim == 0) {  // no keys: every row is fully masked, Y is zeros
    std::fill(x.y, x.y + y.numel(), C(0));
  } else {
    attend(ctx, g, o, bias, x);
  }
  if (!direct) {
    write_floats(yc.data(), y);
    if (x.qk) write_floats(qkc.data(), ctx.output(3));
  }
}

void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx);
  if (ctx.has_input(3)) check_mask(ctx.input(3), g);
  dispatch_storage(ctx.input(0), "Q", [&](auto tag) {
    using S = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
    run<S, C>(ctx, g);
  });
}

}  // namespace

#define ATTENTION_FLOATS {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}

#define ATTENTION_COMMON(VERSION)                                                                  \
  OPFORGE_OP(Attention)                                                                            \
      .since(VERSION)                                                                              \
      .input("Q", ATTENTION_FLOATS)                                                                \
      .input("K", ATTENTION_FLOATS)                                                                \
      .input("V", ATTENTION_FLOATS)                                                                \
      .optional_input("attn_mask")                                                                 \
      .optional_input("past_key", ATTENTION_FLOATS)                                                \
      .optional_input("past_value", ATTENTION_FLOATS)                                              \
      .output("Y")                                                                                 \
      .optional_output("present_key")                                                              \
      .optional_output("present_value")                                                            \
      .optional_output("qk_matmul_output")                                                         \
      .attr("is_causal", int64_t(0))                                                               \
      .attr("qk_matmul_output_mode", int64_t(0))                                                   \
      .attr("softcap", 0.0f)                                                                       \
      .optional_attr("scale", opforge::AttrType::Float)                                            \
      .optional_attr("q_num_heads", opforge::AttrType::Int)                                        \
      .optional_attr("kv_num_heads", opforge::AttrType::Int)                                       \
      .optional_attr("softmax_precision", opforge::AttrType::Int)                                  \
      .infer(infer)                                                                                \
      .compute(compute)

// 23: the original op; 24 adds the input nonpad_kv_seqlen (an external cache's valid lengths,
// which a node of 23 cannot give); 25 adds sliding windows.
ATTENTION_COMMON(23)
    .optional_input("nonpad_kv_seqlen", {opforge::i64})
    .attr("left_window_size", int64_t(-1)).attr_versions(25)
    .attr("right_window_size", int64_t(-1)).attr_versions(25);
