// quant_lstm_contrib.cpp: com.microsoft's DynamicQuantizeLSTM, as onnxruntime's CPU kernel computes
// it: W (input x 4H) and R (H x 4H) are 8-bit with scales per direction or per gate column; each
// GEMM quantizes its float operand to uint8 on the fly (one scale and zero point for the whole
// matrix, as DynamicQuantizeLinear) and multiplies on the int8 GEMM. The input projection covers
// every step at once; each step quantizes the batch's hidden state as onnxruntime single-threaded
// does (its threads split the batch into chunks quantized apart; this kernel does not follow
// that, so its results do not depend on a thread count).
#include "quantization/quant_gemm.h"
#include "rnn/rnn.h"

namespace {

using namespace opforge_rnn;
using opforge_quant::PackedB;
using opforge_quant::Q8Matrix;

enum Input { kX, kW, kR, kB, kLens, kH0, kC0, kP, kWScale, kWZero, kRScale, kRZero };

template <class Ctx> Geometry geometry(const Ctx& ctx) {
  const Tensor x = ctx.input(kX), w = ctx.input(kW), r = ctx.input(kR);
  OPFORGE_CHECK(x.ndim() == 3 && w.ndim() == 3 && r.ndim() == 3, "X, W and R must be 3-D, got ranks ", x.ndim(),
                ", ", w.ndim(), ", ", r.ndim());
  Geometry g;
  g.seq = x.size(0), g.batch = x.size(1), g.input = x.size(2);
  read_direction(ctx, r.size(1), g);
  auto fits = [](int64_t d, int64_t want) { return d < 0 || want < 0 || d == want; };
  OPFORGE_CHECK(fits(w.size(0), g.dirs) && fits(w.size(1), g.input) && fits(w.size(2), 4 * g.hidden), "W must be (",
                g.dirs, ", ", g.input, ", ", 4 * g.hidden, "), got (", w.size(0), ", ", w.size(1), ", ", w.size(2), ")");
  OPFORGE_CHECK(fits(r.size(0), g.dirs) && fits(r.size(1), g.hidden) && fits(r.size(2), 4 * g.hidden), "R must be (",
                g.dirs, ", ", g.hidden, ", ", 4 * g.hidden, "), got (", r.size(0), ", ", r.size(1), ", ", r.size(2),
                ")");
  const int64_t states = g.batch >= 0 ? g.dirs * g.batch * g.hidden : -1;
  check_count(ctx, kB, g.dirs * 8 * g.hidden, "B");
  check_count(ctx, kLens, g.batch, "sequence_lens");
  check_count(ctx, kH0, states, "initial_h");
  check_count(ctx, kC0, states, "initial_c");
  check_count(ctx, kP, g.dirs * 3 * g.hidden, "P");
  for (int i : {kWScale, kWZero, kRScale, kRZero}) {
    const Tensor t = ctx.input(i);
    OPFORGE_CHECK((t.ndim() == 1 || (t.ndim() == 2 && fits(t.size(1), 4 * g.hidden))) && fits(t.size(0), g.dirs),
                  "input ", i, " (a scale or zero point) must be (", g.dirs, ") per tensor or (", g.dirs, ", ",
                  4 * g.hidden, ") per gate column, got rank ", t.ndim());
  }
  OPFORGE_CHECK(ctx.input(kWZero).dtype() == w.dtype() && ctx.input(kRZero).dtype() == r.dtype(),
                "W_zero_point and R_zero_point must have the dtypes of W and R");
  return g;
}

void infer(InferContext& ctx) {
  const Geometry g = geometry(ctx);
  ctx.set_output(0, OPF_FLOAT32, {g.seq, g.dirs, g.batch, g.hidden});
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, OPF_FLOAT32, {g.dirs, g.batch, g.hidden});
}

/// One direction's 8-bit weights: packed for the GEMM, with the float factor of each column
/// (its scale; one for all columns per tensor) and the zero point onnxruntime uses (the first).
struct QuantWeights {
  PackedB packed;
  std::vector<float> scales;
  int32_t zero = 0;
};

QuantWeights quant_weights(const KernelContext& ctx, int w, int scale, int zero, int64_t dir, int64_t k, int64_t n,
                           const char* name) {
  const Tensor wt = ctx.input(w), st = ctx.input(scale), zt = ctx.input(zero);
  const int64_t per = st.ndim() == 2 ? n : 1;
  OPFORGE_CHECK(zt.numel() == st.numel(), name, "'s scale and zero point differ in size");
  QuantWeights q;
  const float* s = st.data<float>() + dir * per;
  q.scales.assign(s, s + per);
  const bool is_signed = wt.dtype() == OPF_INT8;
  const auto* z = static_cast<const uint8_t*>(zt.raw());
  // onnxruntime's int8 GEMM takes one zero point per matrix: per-column ones must all be zero
  // (int8) or one value for the whole tensor (uint8).
  for (int64_t i = 0; i < zt.numel() && st.ndim() == 2; ++i)
    OPFORGE_CHECK(is_signed ? z[i] == 0 : z[i] == z[0], name, "'s per-column zero points must be ",
                  is_signed ? "zero (int8)" : "one value (uint8)");
  z += dir * per;
  q.zero = is_signed ? 0 : int32_t(z[0]);
  const auto* data = static_cast<const uint8_t*>(wt.raw()) + dir * k * n;
  opforge_quant::pack_b(ctx, Q8Matrix{data, n, is_signed}, k, n, q.packed);
  return q;
}

/// out (m x n) = (a quantized to uint8) times the weights, scaled back to float; added to out
/// when `accumulate`, as onnxruntime's GEMM output processor does.
void quant_gemm(const KernelContext& ctx, const float* a, int64_t m, int64_t k, const QuantWeights& w, float* out,
                bool accumulate) {
  const int64_t n = w.packed.n;
  float a_scale;
  int32_t a_zero;
  opforge_quant::dynamic_qparams(a, m * k, &a_scale, &a_zero);
  std::vector<uint8_t> aq(size_t(m * k));
  opforge_quant::quantize_row(a, m * k, a_scale, a_zero, aq.data());
  std::vector<int32_t> acc(size_t(m * n));
  opforge_quant::qgemm(ctx, m, Q8Matrix{aq.data(), k, false}, {a_zero}, w.packed, {w.zero}, acc.data(), n);
  std::vector<float> mult(w.scales.size());
  for (size_t i = 0; i < mult.size(); ++i) mult[i] = a_scale * w.scales[i];
  for (int64_t i = 0; i < m * n; ++i) {
    const float v = float(acc[size_t(i)]) * mult[mult.size() == 1 ? 0 : size_t(i % n)];
    out[i] = accumulate ? out[i] + v : v;
  }
}

void run_direction(const KernelContext& ctx, const Run<float>& run, const Direction<float>& d) {
  const Geometry& g = run.g;
  const int64_t H = g.hidden, G = 4 * H, steps = *std::max_element(run.lens.begin(), run.lens.end());
  const QuantWeights w = quant_weights(ctx, kW, kWScale, kWZero, d.index, g.input, G, "W");
  const QuantWeights r = quant_weights(ctx, kR, kRScale, kRZero, d.index, H, G, "R");
  // onnxruntime quantizes the rows of the steps it runs (reversed per sequence for a backward
  // direction: the same values, so the same scale).
  std::vector<float> xw(size_t(steps * g.batch * G));
  if (steps > 0) quant_gemm(ctx, run.x, steps * g.batch, g.input, w, xw.data(), false);
  // Fused biases (W's plus R's), added after both products as onnxruntime adds them.
  std::vector<float> bias(size_t(G), 0.f), pre(size_t(g.batch * G));
  for (int64_t k = 0; k < G && d.wb; ++k) bias[size_t(k)] = d.wb[k] + d.rb[k];
  std::vector<float> h(size_t(g.batch * H), 0.f), c(h.size(), 0.f);
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t k = 0; k < H; ++k) {
      if (run.h0) h[size_t(b * H + k)] = run.h0[run.state_at(d.index, b) + k];
      if (run.c0) c[size_t(b * H + k)] = run.c0[run.state_at(d.index, b) + k];
    }
  // What onnxruntime multiplies by R: the last step's outputs, zero for a finished sequence when
  // it writes Y (its rows there are zero), its last state when it does not.
  std::vector<float> previous = h;
  for (int64_t step = 0; step < steps; ++step) {
    std::fill(pre.begin(), pre.end(), 0.f);
    for (int64_t b = 0; b < g.batch; ++b) {
      if (step >= run.lens[size_t(b)]) continue;
      const int64_t t = d.backwards ? run.lens[size_t(b)] - 1 - step : step;
      std::copy_n(xw.data() + run.x_row(t, b) * G, G, pre.data() + b * G);
    }
    quant_gemm(ctx, previous.data(), g.batch, H, r, pre.data(), true);
    for (int64_t b = 0; b < g.batch; ++b) {
      float* prev = previous.data() + b * H;
      if (step >= run.lens[size_t(b)]) {
        if (run.y) std::fill(prev, prev + H, 0.f);
        continue;
      }
      const int64_t t = d.backwards ? run.lens[size_t(b)] - 1 - step : step;
      cell_row<Cell::Lstm, float>(run, d, pre.data() + b * G, bias.data(), h.data() + b * H, c.data() + b * H, nullptr);
      std::copy_n(h.data() + b * H, H, prev);
      if (run.y) std::copy_n(h.data() + b * H, H, run.y + run.y_at(t, d.index, b));
    }
  }
  for (int64_t b = 0; b < g.batch; ++b) {
    const bool empty = run.lens[size_t(b)] == 0;  // onnxruntime's states of an empty sequence are zero
    if (run.yh) std::fill_n(run.yh + run.state_at(d.index, b), H, 0.f);
    if (run.yc) std::fill_n(run.yc + run.state_at(d.index, b), H, 0.f);
    if (empty) continue;
    if (run.yh) std::copy_n(h.data() + b * H, H, run.yh + run.state_at(d.index, b));
    if (run.yc) std::copy_n(c.data() + b * H, H, run.yc + run.state_at(d.index, b));
  }
}

void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx);
  Run<float> run;
  run.g = g;
  run.x = ctx.input(kX).data<float>();
  run.lens.assign(size_t(g.batch), g.seq);
  if (ctx.has_input(kLens)) {
    run.lens = read_ints(ctx.input(kLens));
    for (int64_t len : run.lens)
      OPFORGE_CHECK(len >= 0 && len <= g.seq, "sequence_lens value ", len, " is outside [0, ", g.seq, "]");
  }
  run.h0 = optional_input<float>(ctx, kH0);
  run.c0 = optional_input<float>(ctx, kC0);
  run.y = optional_output<float>(ctx, 0);
  run.yh = optional_output<float>(ctx, 1);
  run.yc = optional_output<float>(ctx, 2);
  if (run.y) std::fill(run.y, run.y + ctx.output(0).numel(), 0.f);
  run.clip = ctx.has_attr("clip") ? ctx.attr<float>("clip") : 0.0;
  run.input_forget = ctx.attr<int64_t>("input_forget") != 0;
  const float* bias = optional_input<float>(ctx, kB);
  const float* peep = optional_input<float>(ctx, kP);
  for (int64_t dir = 0; dir < g.dirs; ++dir) {
    Direction<float> d;
    d.w = d.r = nullptr;  // the 8-bit weights are read by quant_weights
    d.wb = bias ? bias + dir * 8 * g.hidden : nullptr;
    d.rb = bias ? bias + dir * 8 * g.hidden + 4 * g.hidden : nullptr;
    d.p = peep ? peep + dir * 3 * g.hidden : nullptr;
    const std::vector<Activation> acts = activations<Cell::Lstm>(ctx, g.dirs, dir);
    d.f = acts[0], d.g = acts[1], d.h = acts[2];
    d.index = dir;
    d.backwards = g.reverse || dir == 1;
    run_direction(ctx, run, d);
  }
}

}  // namespace

OPFORGE_OP(DynamicQuantizeLSTM)
    .domain("com.microsoft")
    .since(1)
    .input("X", {opforge::f32})
    .input("W", OPFORGE_Q8_DTYPES)
    .input("R", OPFORGE_Q8_DTYPES)
    .optional_input("B", {opforge::f32})
    .optional_input("sequence_lens", {opforge::i32})
    .optional_input("initial_h", {opforge::f32})
    .optional_input("initial_c", {opforge::f32})
    .optional_input("P", {opforge::f32})
    .input("W_scale", {opforge::f32})
    .input("W_zero_point", OPFORGE_Q8_DTYPES)
    .input("R_scale", {opforge::f32})
    .input("R_zero_point", OPFORGE_Q8_DTYPES)
    .optional_output("Y")
    .optional_output("Y_h")
    .optional_output("Y_c")
    .optional_attr("activation_alpha", opforge::AttrType::Floats)
    .optional_attr("activation_beta", opforge::AttrType::Floats)
    .optional_attr("activations", opforge::AttrType::Strings)
    .optional_attr("clip", opforge::AttrType::Float)
    .attr("direction", "forward")
    .optional_attr("hidden_size", opforge::AttrType::Int)
    .attr("input_forget", int64_t(0))
    .infer(infer)
    .compute(compute);
