// rnn.h: what the recurrent layers share with their quantized kin (com.microsoft's
// DynamicQuantizeLSTM): activations, sizes, the per-direction state and one step of a cell row.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "elementwise/elementwise_math.h"
#include "reduce/reduce.h"

namespace opforge_rnn {

using namespace opforge_cpu;

enum class Cell { Rnn, Gru, Lstm };

constexpr int gate_count(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 3 : 4; }
constexpr int activation_count(Cell c) { return c == Cell::Rnn ? 1 : c == Cell::Gru ? 2 : 3; }

/// One activation function with its alpha and beta, as onnxruntime reads them.
struct Activation {
  enum Kind { Sigmoid, Tanh, Relu, Affine, LeakyRelu, ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign,
              Softplus } kind = Sigmoid;
  double alpha = 0, beta = 0;

  template <class T> T operator()(T x) const {
    switch (kind) {
      case Sigmoid: return T(1) / (T(1) + std::exp(-x));
      case Tanh: return std::tanh(x);
      case Relu: return x > 0 ? x : T(0);
      case Affine: return T(alpha) * x + T(beta);
      case LeakyRelu: return x >= 0 ? x : T(alpha) * x;
      case ThresholdedRelu: return x > T(alpha) ? x : T(0);
      case ScaledTanh: return T(alpha) * std::tanh(T(beta) * x);
      case HardSigmoid: return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta)));
      case Elu: return x >= 0 ? x : T(alpha) * (std::exp(x) - T(1));
      case Softsign: return x / (T(1) + std::abs(x));
      case Softplus: return std::log1p(std::exp(x));
    }
    return x;
  }
};

/// Name -> kind and how many of (alpha, beta) it takes, with onnxruntime's defaults.
inline Activation activation_named(const std::string& name, const std::vector<float>& alphas, size_t& ai,
                            const std::vector<float>& betas, size_t& bi) {
  struct Entry { const char* name; Activation::Kind kind; int uses; double alpha, beta; };
  static const Entry table[] = {
      {"sigmoid", Activation::Sigmoid, 0, 0, 0}, {"tanh", Activation::Tanh, 0, 0, 0},
      {"relu", Activation::Relu, 0, 0, 0}, {"affine", Activation::Affine, 2, 1, 0},
      {"leakyrelu", Activation::LeakyRelu, 1, 0.01, 0}, {"thresholdedrelu", Activation::ThresholdedRelu, 1, 1, 0},
      {"scaledtanh", Activation::ScaledTanh, 2, 1, 1}, {"hardsigmoid", Activation::HardSigmoid, 2, 0.2, 0.5},
      {"elu", Activation::Elu, 1, 1, 0}, {"softsign", Activation::Softsign, 0, 0, 0},
      {"softplus", Activation::Softplus, 0, 0, 0}};
  std::string lower;
  for (char c : name) lower += char(std::tolower(static_cast<unsigned char>(c)));
  for (const Entry& e : table) {
    if (lower != e.name) continue;
    Activation a{e.kind, e.alpha, e.beta};
    if (e.uses >= 1 && ai < alphas.size()) a.alpha = alphas[ai++];
    if (e.uses >= 2 && bi < betas.size()) a.beta = betas[bi++];
    return a;
  }
  throw opforge::Error(opforge::str("attribute 'activations' names an unknown function '", name, "'"));
}

/// Sizes read from X, W and R and the attributes.
struct Geometry {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  bool batch_first = false, reverse = false;  // reverse: the only direction runs backwards
};

/// g.dirs, g.reverse and g.hidden from attributes 'direction' and 'hidden_size' (else
/// `r_hidden`, the hidden size R's shape gives).
template <class Ctx> void read_direction(const Ctx& ctx, int64_t r_hidden, Geometry& g) {
  const std::string dir = ctx.template attr<std::string>("direction");
  OPFORGE_CHECK(dir == "forward" || dir == "reverse" || dir == "bidirectional", "attribute 'direction' must be "
                "forward, reverse or bidirectional, got '", dir, "'");
  g.dirs = dir == "bidirectional" ? 2 : 1;
  g.reverse = dir == "reverse";
  g.hidden = ctx.has_attr("hidden_size") ? ctx.template attr<int64_t>("hidden_size") : r_hidden;
  OPFORGE_CHECK(g.hidden > 0, "attribute 'hidden_size' must be positive, got ", g.hidden);
}

/// Optional input i must have `want` elements.
template <class Ctx> void check_count(const Ctx& ctx, int i, int64_t want, const char* name) {
  if (!ctx.has_input(i)) return;
  const int64_t n = ctx.input(i).numel();
  OPFORGE_CHECK(n < 0 || want < 0 || n == want, "input '", name, "' must have ", want, " elements, got ", n);
  OPFORGE_CHECK(ctx.input(i).dtype() == ctx.input(0).dtype() || i == 4, "input '", name, "' must have X's dtype");
}

/// Everything one direction needs: its weights, biases, activations and output slots.
template <class T> struct Direction {
  const T *w, *r, *wb, *rb, *p;  // wb, rb and p may be null
  const float* w_packed = nullptr;  ///< W^T in gemm_packed's panels, packed by the session (float only), or null
  Activation f, g, h;
  int64_t index = 0;
  bool backwards = false;
};

/// What the step loop reads and writes, shared by the directions.
template <class T> struct Run {
  Geometry g;
  const T* x;
  std::vector<int64_t> lens;
  const T *h0, *c0;  // may be null
  T *y, *yh, *yc;     // may be null
  double clip = 0;
  bool linear_before_reset = false, input_forget = false;
  int64_t state_at(int64_t d, int64_t b) const {
    return (g.batch_first ? b * g.dirs + d : d * g.batch + b) * g.hidden;
  }
  int64_t y_at(int64_t t, int64_t d, int64_t b) const {
    return (g.batch_first ? (b * g.seq + t) * g.dirs + d : (t * g.dirs + d) * g.batch + b) * g.hidden;
  }
  int64_t x_row(int64_t t, int64_t b) const { return g.batch_first ? b * g.seq + t : t * g.batch + b; }
  T clipped(T v) const { return clip > 0 ? std::max(T(-clip), std::min(T(clip), v)) : v; }
};

/// Whether a float LSTM step can take lstm_row_plain: the default activations (sigmoid, tanh,
/// tanh), no peepholes, clip or coupled input-forget gate.
template <class T> bool plain_lstm(const Run<T>& run, const Direction<T>& d) {
  return std::is_same_v<T, float> && d.f.kind == Activation::Sigmoid && d.g.kind == Activation::Tanh &&
         d.h.kind == Activation::Tanh && d.p == nullptr && run.clip <= 0 && !run.input_forget;
}

/// cell_row for a plain LSTM step (plain_lstm): one loop without calls, which GCC vectorises
/// with opforge's SIMD sigmoid and tanh (within 4e-7 relative of libm's).
__attribute__((always_inline)) inline void lstm_row_plain(int64_t H, const float* xw, const float* hr, float* h,
                                                          float* c) {
  namespace vm = opforge_cpu::ew::vmath;
  for (int64_t k = 0; k < H; ++k) {
    const float i = vm::sigmoid(xw[k] + hr[k]), o = vm::sigmoid(xw[H + k] + hr[H + k]);
    const float f = vm::sigmoid(xw[2 * H + k] + hr[2 * H + k]), cand = vm::tanh(xw[3 * H + k] + hr[3 * H + k]);
    c[k] = f * c[k] + i * cand;
    h[k] = o * vm::tanh(c[k]);
  }
}

/// One step of one batch row: pre-activations `xw` (input projection with W's bias) and `hr`
/// (recurrent projection with R's bias) -> the new h (and c) in place.
template <Cell K, class T>
void cell_row(const Run<T>& run, const Direction<T>& d, const T* xw, const T* hr, T* h, T* c, const T* rh) {
  const int64_t H = run.g.hidden;
  if constexpr (K == Cell::Lstm && std::is_same_v<T, float>)
    if (plain_lstm(run, d)) return lstm_row_plain(H, xw, hr, h, c);
  for (int64_t k = 0; k < H; ++k) {
    if constexpr (K == Cell::Rnn) {
      h[k] = d.f(run.clipped(xw[k] + hr[k]));
    } else if constexpr (K == Cell::Gru) {
      const T z = d.f(run.clipped(xw[k] + hr[k]));
      // rh: (r * h_prev) R_h^T + Rb_h, or null when linear_before_reset puts r outside it.
      const T r = d.f(run.clipped(xw[H + k] + hr[H + k]));
      const T pre = rh ? xw[2 * H + k] + rh[k] : xw[2 * H + k] + r * hr[2 * H + k];
      const T cand = d.g(run.clipped(pre));
      h[k] = (T(1) - z) * cand + z * h[k];
    } else {
      const T* p = d.p;
      const T cp = c[k];
      const T i = d.f(run.clipped(xw[k] + hr[k] + (p ? p[k] * cp : T(0))));
      T f = d.f(run.clipped(xw[2 * H + k] + hr[2 * H + k] + (p ? p[2 * H + k] * cp : T(0))));
      if (run.input_forget) f = T(1) - i;
      const T cand = d.g(run.clipped(xw[3 * H + k] + hr[3 * H + k]));
      c[k] = f * cp + i * cand;
      const T o = d.f(run.clipped(xw[H + k] + hr[H + k] + (p ? p[H + k] * c[k] : T(0))));
      h[k] = o * d.h(c[k]);
    }
  }
}

/// The activations of direction `dir`: the attribute's (one set, or one per direction) or the defaults.
template <Cell K> std::vector<Activation> activations(const KernelContext& ctx, int64_t dirs, int64_t dir) {
  constexpr int n = activation_count(K);
  std::vector<std::string> names = ctx.has_attr("activations") ? ctx.attr<std::vector<std::string>>("activations")
                                                               : std::vector<std::string>{};
  if (names.empty()) names = K == Cell::Rnn ? std::vector<std::string>{"Tanh"}
                         : K == Cell::Gru   ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                            : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
  OPFORGE_CHECK(int64_t(names.size()) == n || int64_t(names.size()) == n * dirs, "attribute 'activations' must name ",
                n, " functions per direction, got ", names.size());
  const std::vector<float> alphas = ctx.has_attr("activation_alpha") ? ctx.attr<std::vector<float>>("activation_alpha")
                                                                     : std::vector<float>{};
  const std::vector<float> betas = ctx.has_attr("activation_beta") ? ctx.attr<std::vector<float>>("activation_beta")
                                                                   : std::vector<float>{};
  std::vector<Activation> all;
  size_t ai = 0, bi = 0;
  for (const std::string& name : names) all.push_back(activation_named(name, alphas, ai, betas, bi));
  const size_t first = names.size() == size_t(n) ? 0 : size_t(dir * n);
  return std::vector<Activation>(all.begin() + first, all.begin() + first + n);
}

/// Output i's data, or null when the node did not ask for it.
template <class T> T* optional_output(const KernelContext& ctx, int i) {
  return i < ctx.num_outputs() && ctx.output(i).has_data() ? ctx.output(i).data<T>() : nullptr;
}
template <class T> const T* optional_input(const KernelContext& ctx, int i) {
  return ctx.has_input(i) ? ctx.input(i).data<T>() : nullptr;
}

}  // namespace opforge_rnn
