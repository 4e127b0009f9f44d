// signal.cpp: the Hann, Hamming and Blackman windows and MelWeightMatrix, computed in double and
// rounded to the output's type. The transforms (DFT, STFT) are in signal_dft.cpp.
#include <cmath>

#include "data_movement/data_movement.h"
#include "common/elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;
constexpr double kPi = 3.14159265358979323846;

/// The dtype named by attribute 'output_datatype', which must be a floating one.
template <class Ctx> int32_t output_datatype(const Ctx& ctx) {
  const int32_t dtype = int32_t(ctx.template attr<int64_t>("output_datatype"));
  OPFORGE_CHECK(is_float_dtype(dtype), "attribute 'output_datatype' = ", dtype,
                " must name float16, bfloat16, float or double");
  return dtype;
}

// ---- windows ----

/// A window's length: input 'size', a one-value integer.
int64_t window_size(const Tensor& size) {
  const double n = read_scalar(size, "size");
  OPFORGE_CHECK(n >= 0, "input 'size' must not be negative, got ", n);
  return int64_t(n);
}

void window_infer(InferContext& ctx) {
  if (!ctx.input(0).has_data()) throw needs_value("a window op", "size");
  ctx.set_output(0, output_datatype(ctx), {window_size(ctx.input(0))});
}

/// w[n] = sum_k a[k] cos(2 pi k n / N), N the size (periodic) or size - 1 (symmetric).
template <int K> void window_compute(KernelContext& ctx, const double (&a)[K]) {
  const int64_t size = window_size(ctx.input(0));
  const double n_1 = double(ctx.attr<int64_t>("periodic") != 0 ? size : size - 1);
  std::vector<double> w(static_cast<size_t>(size));
  for (int64_t n = 0; n < size; ++n)
    for (int k = 0; k < K; ++k) w[size_t(n)] += a[k] * std::cos(2 * kPi * k * double(n) / n_1);
  write_floats(w.data(), ctx.output(0));
}

void hann_compute(KernelContext& ctx) { window_compute(ctx, {0.5, -0.5}); }
void hamming_compute(KernelContext& ctx) { window_compute(ctx, {25.0 / 46.0, -21.0 / 46.0}); }
void blackman_compute(KernelContext& ctx) { window_compute(ctx, {0.42, -0.5, 0.08}); }

// ---- MelWeightMatrix ----

struct MelInputs {
  int64_t bins, dft_length, sample_rate;
  double lower, upper;
};

template <class Ctx> MelInputs mel_inputs(const Ctx& ctx) {
  MelInputs m{int64_t(read_scalar(ctx.input(0), "num_mel_bins")), int64_t(read_scalar(ctx.input(1), "dft_length")),
              int64_t(read_scalar(ctx.input(2), "sample_rate")), read_scalar(ctx.input(3), "lower_edge_hertz"),
              read_scalar(ctx.input(4), "upper_edge_hertz")};
  OPFORGE_CHECK(m.bins > 0 && m.dft_length > 0 && m.sample_rate > 0,
                "num_mel_bins, dft_length and sample_rate must be positive");
  OPFORGE_CHECK(0 <= m.lower && m.lower < m.upper, "lower_edge_hertz ", m.lower, " must be in [0, upper_edge_hertz ",
                m.upper, ")");
  return m;
}

void mel_infer(InferContext& ctx) {
  for (int i = 0; i < 2; ++i)
    if (!ctx.input(i).has_data()) throw needs_value("MelWeightMatrix", i == 0 ? "num_mel_bins" : "dft_length");
  const MelInputs m = mel_inputs(ctx);
  ctx.set_output(0, output_datatype(ctx), {m.dft_length / 2 + 1, m.bins});
}

/// Triangular filters between mel-spaced points, each point rounded down to a DFT bin.
void mel_compute(KernelContext& ctx) {
  const MelInputs m = mel_inputs(ctx);
  const int64_t spectrum = m.dft_length / 2 + 1;
  const double low_mel = 2595 * std::log1p(m.lower / 700) / std::log(10.0);
  const double high_mel = 2595 * std::log1p(m.upper / 700) / std::log(10.0);
  const double step = (high_mel - low_mel) / double(m.bins + 2);
  std::vector<int64_t> point(size_t(m.bins + 2));
  for (int64_t i = 0; i < m.bins + 2; ++i) {
    const double hz = 700 * std::expm1((double(i) * step + low_mel) / 2595 * std::log(10.0));
    point[size_t(i)] = int64_t(std::floor(double(m.dft_length + 1) * hz / double(m.sample_rate)));
  }
  std::vector<double> w(size_t(spectrum * m.bins), 0.0);
  auto at = [&](int64_t j, int64_t i) -> double& {
    OPFORGE_CHECK(j >= 0 && j < spectrum, "mel point ", j, " falls outside the ", spectrum, " DFT bins");
    return w[size_t(j * m.bins + i)];
  };
  for (int64_t i = 0; i < m.bins; ++i) {
    const int64_t lo = point[size_t(i)], mid = point[size_t(i + 1)], hi = point[size_t(i + 2)];
    if (mid == lo) at(mid, i) = 1;
    for (int64_t j = lo; mid > lo && j <= mid; ++j) at(j, i) = double(j - lo) / double(mid - lo);
    for (int64_t j = mid; j < hi; ++j) at(j, i) = double(hi - j) / double(hi - mid);
  }
  write_floats(w.data(), ctx.output(0));
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

#define SIGNAL_DTYPES {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}

#define WINDOW_OP(NAME, COMPUTE)                      \
  OPFORGE_OP(NAME)                                    \
      .since(17)                                      \
      .input("size", {opforge::i32, opforge::i64})    \
      .output("output", SIGNAL_DTYPES)                \
      .attr("output_datatype", int64_t(OPF_FLOAT32))  \
      .attr("periodic", int64_t(1))                   \
      .infer(window_infer)                            \
      .compute(COMPUTE)

WINDOW_OP(HannWindow, hann_compute);
WINDOW_OP(HammingWindow, hamming_compute);
WINDOW_OP(BlackmanWindow, blackman_compute);

OPFORGE_OP(MelWeightMatrix)
    .since(17)
    .input("num_mel_bins", {opforge::i32, opforge::i64})
    .input("dft_length", {opforge::i32, opforge::i64})
    .input("sample_rate", {opforge::i32, opforge::i64})
    .input("lower_edge_hertz", SIGNAL_DTYPES)
    .input("upper_edge_hertz", SIGNAL_DTYPES)
    .output("output", SIGNAL_DTYPES)
    .attr("output_datatype", int64_t(OPF_FLOAT32))
    .infer(mel_infer)
    .compute(mel_compute);
