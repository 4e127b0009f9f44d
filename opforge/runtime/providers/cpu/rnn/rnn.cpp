// rnn.cpp: the recurrent layers RNN, GRU and LSTM (opsets 7 and 14, which adds `layout`): forward,
// reverse or bidirectional, per-batch sequence_lens, initial states, peepholes, clip, custom
// activations and GRU's linear_before_reset. Input projections of all steps are one GEMM; each
// step adds one (batch x hidden) GEMM on the recurrent weights.
#include <cstdlib>
#include <memory>
#include <type_traits>

#include "gemm/gemm_blas.h"
#include "gemm/gemm_packed.h"
#include "rnn/rnn.h"

namespace {

using namespace opforge_rnn;

template <class Ctx> Geometry geometry(const Ctx& ctx, Cell cell) {
  Tensor x = ctx.input(0), w = ctx.input(1), r = ctx.input(2);
  OPFORGE_CHECK(x.ndim() == 3 && w.ndim() == 3 && r.ndim() == 3, "X, W and R must be 3-D, got ranks ", x.ndim(), ", ",
                w.ndim(), ", ", r.ndim());
  Geometry g;
  g.batch_first = ctx.has_attr("layout") && ctx.template attr<int64_t>("layout") != 0;
  g.seq = x.size(g.batch_first ? 1 : 0), g.batch = x.size(g.batch_first ? 0 : 1), g.input = x.size(2);
  read_direction(ctx, r.size(2), g);
  const int64_t gh = gate_count(cell) * g.hidden;
  auto fits = [](int64_t d, int64_t want) { return d < 0 || want < 0 || d == want; };
  OPFORGE_CHECK(fits(w.size(0), g.dirs) && fits(w.size(1), gh) && fits(w.size(2), g.input), "W must be (",
                g.dirs, ", ", gh, ", ", g.input, "), got (", w.size(0), ", ", w.size(1), ", ", w.size(2), ")");
  OPFORGE_CHECK(fits(r.size(0), g.dirs) && fits(r.size(1), gh) && fits(r.size(2), g.hidden), "R must be (",
                g.dirs, ", ", gh, ", ", g.hidden, "), got (", r.size(0), ", ", r.size(1), ", ", r.size(2), ")");
  return g;
}

template <Cell K> void infer(InferContext& ctx) {
  const Geometry g = geometry(ctx, K);
  const int64_t states = g.batch >= 0 ? g.dirs * g.batch * g.hidden : -1;
  check_count(ctx, 3, g.dirs * 2 * gate_count(K) * g.hidden, "B");
  check_count(ctx, 4, g.batch, "sequence_lens");
  check_count(ctx, 5, states, "initial_h");
  if (K == Cell::Lstm) check_count(ctx, 6, states, "initial_c"), check_count(ctx, 7, g.dirs * 3 * g.hidden, "P");
  const int32_t dt = ctx.input(0).dtype();
  if (g.batch_first) ctx.set_output(0, dt, {g.batch, g.seq, g.dirs, g.hidden});
  else ctx.set_output(0, dt, {g.seq, g.dirs, g.batch, g.hidden});
  const Shape state = g.batch_first ? Shape{g.batch, g.dirs, g.hidden} : Shape{g.dirs, g.batch, g.hidden};
  for (int i = 1; i < ctx.num_outputs(); ++i) ctx.set_output(i, dt, state);
}

/// r * h_prev for GRU's candidate gate when linear_before_reset is 0, for every batch row.
template <class T> void reset_hidden(const Run<T>& run, const T* xw_all, const T* hr, const T* h, T* out,
                                     const Direction<T>& d, int64_t step) {
  const int64_t H = run.g.hidden, G3 = 3 * H;
  for (int64_t b = 0; b < run.g.batch; ++b) {
    if (step >= run.lens[size_t(b)]) continue;
    const int64_t t = d.backwards ? run.lens[size_t(b)] - 1 - step : step;
    const T* xw = xw_all + run.x_row(t, b) * G3;
    for (int64_t k = 0; k < H; ++k)
      out[b * H + k] = d.f(run.clipped(xw[H + k] + hr[b * G3 + H + k])) * h[b * H + k];
  }
}

/// Steps (times batch rows) from which float input projections run on opforge's packed tiles
/// (pack_rnn_weights.py's PACKED_ROWS: it does not pack W for sequences known to be shorter).
constexpr int64_t kPackedRows = 8;

/// xw (rows x G) = x @ W^T, the input projections of every step at once. float over several
/// steps runs on opforge's packed GEMM tiles (AVX-512 whatever $OPENBLAS_CORETYPE says:
/// gemm_packed.h), W packed by the session (PackedLSTM, PackedGRU, PackedRNN) or else for this
/// call; otherwise, and for a single step, one OpenBLAS GEMM (or GEMV).
template <class T> void project_inputs(const KernelContext& ctx, const Run<T>& run, const Direction<T>& d,
                                       int64_t rows, int64_t G, T* xw) {
  const int64_t in = run.g.input;
  if constexpr (std::is_same_v<T, float>) {
    if (rows >= kPackedRows && in > 0) {
      std::unique_ptr<float, decltype(&std::free)> own(nullptr, &std::free);
      const float* packed = d.w_packed;
      if (packed == nullptr) {
        const size_t floats = size_t(opforge_gemm::packed_floats(G, in));
        own.reset(static_cast<float*>(std::aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64)));
        OPFORGE_CHECK(own != nullptr, "out of memory packing W");
        opforge_gemm::pack_rows(d.w, G, in, in, own.get());
        packed = own.get();
      }
      return opforge_gemm::packed_product(ctx, run.x, in, packed, xw, rows, G, in);
    }
  }
  opforge_nn::parallel_matmul(ctx, false, true, rows, G, in, T(1), run.x, in, d.w, in, T(0), xw, G);
}

template <Cell K, class T> void run_direction(const KernelContext& ctx, const Run<T>& run, const Direction<T>& d) {
  const Geometry& g = run.g;
  const int64_t H = g.hidden, G = gate_count(K) * H, rows = g.seq * g.batch;
  // Input projections of every step at once, with both biases except GRU's R_h bias.
  std::vector<T> xw(size_t(rows * G));
  project_inputs(ctx, run, d, rows, G, xw.data());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < G; ++k) xw[size_t(i * G + k)] += d.wb ? d.wb[k] : T(0);
  std::vector<T> h(size_t(g.batch * H), T(0)), c(h.size(), T(0)), hr(size_t(g.batch * G)), rh, reset;
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t k = 0; k < H; ++k) {
      if (run.h0) h[size_t(b * H + k)] = run.h0[run.state_at(d.index, b) + k];
      if (run.c0) c[size_t(b * H + k)] = run.c0[run.state_at(d.index, b) + k];
    }
  const bool gru_reset_first = K == Cell::Gru && !run.linear_before_reset;
  if (gru_reset_first) rh.resize(size_t(g.batch * H)), reset.resize(rh.size());
  for (int64_t step = 0; step < g.seq; ++step) {
    opforge_nn::parallel_matmul(ctx, false, true, g.batch, G, H, T(1), h.data(), H, d.r, H, T(0), hr.data(), G);
    for (int64_t b = 0; b < g.batch; ++b)
      for (int64_t k = 0; k < G; ++k) hr[size_t(b * G + k)] += d.rb ? d.rb[k] : T(0);
    if (gru_reset_first) {
      reset_hidden(run, xw.data(), hr.data(), h.data(), reset.data(), d, step);
      opforge_nn::parallel_matmul(ctx, false, true, g.batch, H, H, T(1), reset.data(), H, d.r + 2 * H * H, H, T(0),
                                  rh.data(), H);
      for (int64_t b = 0; b < g.batch; ++b)
        for (int64_t k = 0; k < H; ++k) rh[size_t(b * H + k)] += d.rb ? d.rb[2 * H + k] : T(0);
    }
    for (int64_t b = 0; b < g.batch; ++b) {
      if (step >= run.lens[size_t(b)]) continue;
      const int64_t t = d.backwards ? run.lens[size_t(b)] - 1 - step : step;
      cell_row<K>(run, d, xw.data() + run.x_row(t, b) * G, hr.data() + b * G, h.data() + b * H, c.data() + b * H,
                  gru_reset_first ? rh.data() + b * H : nullptr);
      if (run.y) std::copy(h.begin() + b * H, h.begin() + (b + 1) * H, run.y + run.y_at(t, d.index, b));
    }
  }
  for (int64_t b = 0; b < g.batch; ++b) {
    if (run.yh) std::copy(h.begin() + b * H, h.begin() + (b + 1) * H, run.yh + run.state_at(d.index, b));
    if (run.yc) std::copy(c.begin() + b * H, c.begin() + (b + 1) * H, run.yc + run.state_at(d.index, b));
  }
}

template <Cell K, class T> void recur(KernelContext& ctx, const Geometry& g) {
  Run<T> run;
  run.g = g;
  run.x = ctx.input(0).data<T>();
  run.lens.assign(size_t(g.batch), g.seq);
  if (ctx.has_input(4)) {
    run.lens = read_ints(ctx.input(4));
    for (int64_t len : run.lens)
      OPFORGE_CHECK(len >= 0 && len <= g.seq, "sequence_lens value ", len, " is outside [0, ", g.seq, "]");
  }
  run.h0 = optional_input<T>(ctx, 5);
  run.c0 = K == Cell::Lstm ? optional_input<T>(ctx, 6) : nullptr;
  run.y = optional_output<T>(ctx, 0);
  run.yh = optional_output<T>(ctx, 1);
  run.yc = K == Cell::Lstm ? optional_output<T>(ctx, 2) : nullptr;
  if (run.y) std::fill(run.y, run.y + ctx.output(0).numel(), T(0));  // steps past a sequence's end stay 0
  run.clip = ctx.has_attr("clip") ? ctx.attr<float>("clip") : 0.0;
  run.linear_before_reset = K == Cell::Gru && ctx.attr<int64_t>("linear_before_reset") != 0;
  run.input_forget = K == Cell::Lstm && ctx.attr<int64_t>("input_forget") != 0;
  const int64_t G = gate_count(K) * g.hidden;
  const T* bias = optional_input<T>(ctx, 3);
  const T* peep = K == Cell::Lstm ? optional_input<T>(ctx, 7) : nullptr;
  // the session's packing of W (the Packed* forms' last input), one block per direction
  const int packed_at = K == Cell::Lstm ? 8 : 6;
  const float* w_packed = nullptr;
  if (ctx.num_inputs() > packed_at && ctx.has_input(packed_at)) {
    check_count(ctx, packed_at, g.dirs * opforge_gemm::packed_floats(G, g.input), "W_packed");
    if constexpr (std::is_same_v<T, float>) w_packed = ctx.input(packed_at).data<float>();
  }
  std::vector<Direction<T>> dirs(size_t(g.dirs));
  for (int64_t dir = 0; dir < g.dirs; ++dir) {
    Direction<T>& d = dirs[size_t(dir)];
    d.w = ctx.input(1).data<T>() + dir * G * g.input;
    d.r = ctx.input(2).data<T>() + dir * G * g.hidden;
    d.wb = bias ? bias + dir * 2 * G : nullptr;
    d.rb = bias ? bias + dir * 2 * G + G : nullptr;
    d.p = peep ? peep + dir * 3 * g.hidden : nullptr;
    d.w_packed = w_packed ? w_packed + dir * opforge_gemm::packed_floats(G, g.input) : nullptr;
    const std::vector<Activation> acts = activations<K>(ctx, g.dirs, dir);
    d.f = acts[0];
    if (acts.size() > 1) d.g = acts[1];
    if (acts.size() > 2) d.h = acts[2];
    d.index = dir;
    d.backwards = g.reverse || dir == 1;
  }
  // The two directions of a bidirectional layer share nothing but their reads (each has its own
  // buffers and writes its own slices of Y, Y_h and Y_c): one per thread, as onnxruntime runs
  // them. Their GEMMs then run on their thread alone (a nested parallel_for is serial).
  ctx.parallel_for(g.dirs, 1, [&](int64_t begin, int64_t end) {
    for (int64_t dir = begin; dir < end; ++dir) run_direction<K>(ctx, run, dirs[size_t(dir)]);
  });
}

template <Cell K> void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx, K);
  check_count(ctx, 3, g.dirs * 2 * gate_count(K) * g.hidden, "B");
  check_count(ctx, 5, g.dirs * g.batch * g.hidden, "initial_h");
  if (K == Cell::Lstm) check_count(ctx, 6, g.dirs * g.batch * g.hidden, "initial_c"), check_count(ctx, 7, g.dirs * 3 * g.hidden, "P");
  const bool ok = opforge::dispatch<float, double>(ctx.input(0).dtype(), [&](auto tag) {
    recur<K, typename decltype(tag)::type>(ctx, g);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(ctx.input(0).dtype()));
}

}  // namespace

// Inputs and attributes common to the three; opset 14 adds `layout` (batch-first X, Y and states).
#define RNN_COMMON(NAME, VERSION, KIND)                                                        \
  OPFORGE_OP(NAME)                                                                             \
      .since(VERSION)                                                                          \
      .input("X", {opforge::f32, opforge::f64})                                                \
      .input("W", {opforge::f32, opforge::f64})                                                \
      .input("R", {opforge::f32, opforge::f64})                                                \
      .optional_input("B", {opforge::f32, opforge::f64})                                       \
      .optional_input("sequence_lens", {opforge::i32, opforge::i64})                           \
      .optional_input("initial_h", {opforge::f32, opforge::f64})                               \
      .optional_output("Y")                                                                    \
      .optional_output("Y_h")                                                                  \
      .optional_attr("activation_alpha", opforge::AttrType::Floats)                            \
      .optional_attr("activation_beta", opforge::AttrType::Floats)                             \
      .optional_attr("activations", opforge::AttrType::Strings)                                \
      .optional_attr("clip", opforge::AttrType::Float)                                         \
      .attr("direction", "forward")                                                            \
      .optional_attr("hidden_size", opforge::AttrType::Int)                                    \
      .infer(infer<KIND>)                                                                      \
      .compute(compute<KIND>)

// Opset 14 adds layout (batch-major X and Y) to all three.
RNN_COMMON(RNN, 7, Cell::Rnn).attr("layout", int64_t(0)).attr_versions(14);
RNN_COMMON(GRU, 7, Cell::Gru).attr("linear_before_reset", int64_t(0)).attr("layout", int64_t(0)).attr_versions(14);
RNN_COMMON(LSTM, 7, Cell::Lstm)
    .optional_input("initial_c", {opforge::f32, opforge::f64})
    .optional_input("P", {opforge::f32, opforge::f64})
    .optional_output("Y_c")
    .attr("input_forget", int64_t(0))
    .attr("layout", int64_t(0)).attr_versions(14);

// The forms the session rewrites a float RNN, GRU or LSTM on constant W into (pack_rnn_weights.py):
// W packed once into gemm_packed's panels of W^T, one block of packed_floats(G, input) per
// direction, read by the input projections of every step; W itself stays for single steps.
#define PACKED_DOC(NAME) \
  "ONNX's " NAME " with W_packed, W^T packed by the session as gemm_packed's 32-column panels per direction"
RNN_COMMON(PackedRNN, 1, Cell::Rnn)
    .domain("com.opforge")
    .doc(PACKED_DOC("RNN"))
    .optional_input("W_packed", {opforge::f32})
    .attr("layout", int64_t(0));
RNN_COMMON(PackedGRU, 1, Cell::Gru)
    .domain("com.opforge")
    .doc(PACKED_DOC("GRU"))
    .optional_input("W_packed", {opforge::f32})
    .attr("linear_before_reset", int64_t(0))
    .attr("layout", int64_t(0));
RNN_COMMON(PackedLSTM, 1, Cell::Lstm)
    .domain("com.opforge")
    .doc(PACKED_DOC("LSTM"))
    .optional_input("initial_c", {opforge::f32, opforge::f64})
    .optional_input("P", {opforge::f32, opforge::f64})
    .optional_input("W_packed", {opforge::f32})
    .optional_output("Y_c")
    .attr("input_forget", int64_t(0))
    .attr("layout", int64_t(0));
