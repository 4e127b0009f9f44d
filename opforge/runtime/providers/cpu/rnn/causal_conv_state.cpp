// causal_conv_state.cpp: CausalConvWithState (opset 27): a depthwise causal 1-D convolution whose
// left context is the carried state (the last k-1 positions seen), with an optional fused SiLU.
// Computed in float (double for double), the convolution rounded to the input's dtype before
// the activation, as onnx's reference does.
#include <cmath>
#include <string>

#include "common/float_io.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using opforge_cpu::reduction::exp_fast;

bool differ(int64_t a, int64_t b) { return a >= 0 && b >= 0 && a != b; }

/// True for SiLU (also named Swish); false for none.
bool parse_activation(const std::string& name) {
  OPFORGE_CHECK(name == "none" || name == "silu" || name == "swish",
                "attribute 'activation' must be 'none', 'silu' or 'swish', got '", name, "'");
  return name != "none";
}

/// (batch, channels, length, kernel size), the inputs checked against each other.
struct Geometry {
  int64_t batch = 0, channels = 0, length = 0, kernel = 0;
};

template <class Ctx> Geometry geometry(const Ctx& ctx) {
  parse_activation(ctx.template attr<std::string>("activation"));
  Tensor x = ctx.input(0), w = ctx.input(1);
  OPFORGE_CHECK(x.ndim() == 3, "input 'input' must be 3-D (batch, channels, length), got rank ", x.ndim());
  OPFORGE_CHECK(w.ndim() == 3, "input 'weight' must be 3-D (channels, 1, kernel_size), got rank ", w.ndim());
  Geometry g{x.size(0), x.size(1), x.size(2), w.size(2)};
  OPFORGE_CHECK(!differ(w.size(0), g.channels) && !differ(w.size(1), 1), "input 'weight' has shape (", w.size(0), ", ",
                w.size(1), ", ", g.kernel, "); a depthwise weight must be (channels ", g.channels, ", 1, kernel_size)");
  OPFORGE_CHECK(g.kernel != 0, "input 'weight' has kernel size 0");
  if (ctx.has_input(2)) {
    Tensor b = ctx.input(2);
    OPFORGE_CHECK(b.ndim() == 1 && !differ(b.size(0), g.channels), "input 'bias' must be 1-D with ", g.channels,
                  " channels");
  }
  if (ctx.has_input(3)) {
    Tensor s = ctx.input(3);
    const bool fits = s.ndim() == 3 && !differ(s.size(0), g.batch) && !differ(s.size(1), g.channels) &&
                      !(s.size(2) >= 0 && g.kernel >= 0 && s.size(2) != g.kernel - 1);
    OPFORGE_CHECK(fits, "input 'past_state' must be (batch ", g.batch, ", channels ", g.channels,
                  ", kernel_size - 1 = ", g.kernel - 1, ")");
  }
  for (int i = 1; i < 4; ++i)
    if (ctx.has_input(i))
      OPFORGE_CHECK(ctx.input(i).dtype() == x.dtype(), "inputs 'weight', 'bias' and 'past_state' must have the "
                    "input's dtype ", opforge::dtype_name(x.dtype()));
  return g;
}

void infer(InferContext& ctx) {
  const Geometry g = geometry(ctx);
  const int32_t dt = ctx.input(0).dtype();
  ctx.set_output(0, dt, {g.batch, g.channels, g.length});
  ctx.set_output(1, dt, {g.batch, g.channels, g.kernel < 0 ? -1 : g.kernel - 1});
}

/// y * sigmoid(y) over n values in place, from e^-|y| so the exponent never overflows.
void silu(float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float e = exp_fast(-std::abs(y[i]));
    y[i] *= opforge_cpu::reduction::select_bits(y[i] >= 0.f, 1.f, e) / (1.f + e);
  }
}
void silu(double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] /= 1 + std::exp(-y[i]);
}

/// One (batch, channel) row: `padded` holds the state then the input (kernel - 1 + length);
/// `acc` is scratch of `length`. Tap by tap over the whole row, so the inner loop vectorises.
template <class S, class C>
void convolve_row(const C* padded, const C* w, C bias, bool with_silu, int64_t length, int64_t kernel, C* acc,
                  S* out) {
  std::fill(acc, acc + length, bias);
  for (int64_t j = 0; j < kernel; ++j)
    for (int64_t t = 0; t < length; ++t) acc[t] += w[j] * padded[t + j];
  if constexpr (!std::is_same_v<S, C>)  // the activation reads the convolution rounded to S
    if (with_silu)
      for (int64_t t = 0; t < length; ++t) acc[t] = load_as<C>(store_as<S>(acc[t]));
  if (with_silu) silu(acc, length);
  for (int64_t t = 0; t < length; ++t) out[t] = store_as<S>(acc[t]);
}

template <class S> void run(KernelContext& ctx, const Geometry& g) {
  using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
  const bool with_silu = parse_activation(ctx.attr<std::string>("activation"));
  const std::vector<C> w = read_floats<C>(ctx.input(1), "weight");
  const std::vector<C> bias = ctx.has_input(2) ? read_floats<C>(ctx.input(2), "bias") : std::vector<C>();
  const S* x = ctx.input(0).data<S>();
  const S* past = ctx.has_input(3) ? ctx.input(3).data<S>() : nullptr;
  S* out = ctx.output(0).data<S>();
  S* present = ctx.output(1).data<S>();
  const int64_t keep = g.kernel - 1, span = keep + g.length;
  ctx.parallel_for(g.batch * g.channels, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, span * g.kernel)),
                   [&](int64_t begin, int64_t end) {
    std::vector<C> padded(static_cast<size_t>(span)), acc(static_cast<size_t>(g.length));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t c = row % g.channels;
      for (int64_t j = 0; j < keep; ++j) padded[size_t(j)] = past ? load_as<C>(past[row * keep + j]) : C(0);
      for (int64_t t = 0; t < g.length; ++t) padded[size_t(keep + t)] = load_as<C>(x[row * g.length + t]);
      convolve_row<S, C>(padded.data(), w.data() + c * g.kernel, bias.empty() ? C(0) : bias[size_t(c)], with_silu,
                         g.length, g.kernel, acc.data(), out + row * g.length);
      for (int64_t j = 0; j < keep; ++j) present[row * keep + j] = store_as<S>(padded[size_t(g.length + j)]);
    }
  });
}

void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx);
  dispatch_storage(ctx.input(0), "input", [&](auto tag) { run<typename decltype(tag)::type>(ctx, g); });
}

}  // namespace

#define CAUSAL_CONV_FLOATS {opforge::f32, opforge::f16, opforge::bf16}

OPFORGE_OP(CausalConvWithState)
    .since(27)
    .input("input", CAUSAL_CONV_FLOATS)
    .input("weight", CAUSAL_CONV_FLOATS)
    .optional_input("bias", CAUSAL_CONV_FLOATS)
    .optional_input("past_state", CAUSAL_CONV_FLOATS)
    .output("output")
    .output("present_state")
    .attr("activation", "none")
    .infer(infer)
    .compute(compute);
