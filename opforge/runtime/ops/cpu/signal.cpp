// signal.cpp: signal-processing ops: the Hann, Hamming and Blackman windows, MelWeightMatrix,
// DFT (forward, inverse, one-sided) and STFT. Values are computed in double and rounded to the
// output's type, except inverse complex transforms of float32 data: numpy's ifft (which onnx's
// reference and its test data use) computes those in float, so they run numpy's own FFT in float
// (signal_fft.h) and round as it does. (numpy's forward FFT of float32 data computes in double.)
#include <cmath>
#include <complex>

#include "data_movement.h"
#include "elements.h"
#include "signal_fft.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;
using Complex = std::complex<double>;
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

// ---- DFT ----

/// What one DFT line does: forward, inverse, or inverse of a one-sided spectrum (a real result).
enum class Transform { kForward, kInverse, kInverseReal };

/// One line of a DFT of length n: `in` holds `in_len` complex values (zero-padded or truncated
/// to what the transform reads), `out` receives `out_len` values. `twiddle[j]` is e^(-2 pi i j / n).
void dft_line(const std::vector<Complex>& in, std::vector<Complex>& out, int64_t n, Transform t,
              const std::vector<Complex>& twiddle) {
  const int64_t out_len = int64_t(out.size());
  const int64_t used = std::min<int64_t>(int64_t(in.size()), t == Transform::kInverseReal ? n / 2 + 1 : n);
  for (int64_t k = 0; k < out_len; ++k) {
    Complex acc = 0;
    if (t == Transform::kInverseReal) {
      // the hermitian spectrum: bin 0 and (for even n) bin n/2 count once and real, the others twice
      for (int64_t j = 0; j < used; ++j) {
        const Complex w = std::conj(twiddle[size_t((j * k) % n)]);
        const bool edge = j == 0 || (n % 2 == 0 && j == n / 2);
        acc += edge ? Complex(in[size_t(j)].real() * w.real(), 0) : 2.0 * Complex((in[size_t(j)] * w).real(), 0);
      }
      out[size_t(k)] = acc / double(n);
      continue;
    }
    for (int64_t j = 0; j < used; ++j) {
      const Complex w = twiddle[size_t((j * k) % n)];
      acc += in[size_t(j)] * (t == Transform::kInverse ? std::conj(w) : w);
    }
    out[size_t(k)] = t == Transform::kInverse ? acc / double(n) : acc;
  }
}

std::vector<Complex> twiddles(int64_t n) {
  std::vector<Complex> w(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) w[size_t(j)] = std::polar(1.0, -2 * kPi * double(j) / double(n));
  return w;
}

/// A DFT call, resolved: the signal's view around the axis, the transform and its sizes.
struct DftPlan {
  int64_t outer, len, inner, channels, n, out_len;
  Transform transform;
};

/// Reads the signal dims, axis and lengths of a DFT node; `axis` is the attribute (opset 17) or
/// the input's value (opset 20).
template <class Ctx> DftPlan dft_plan(const Ctx& ctx, const Shape& x, int64_t axis_value) {
  const int64_t rank = int64_t(x.size());
  OPFORGE_CHECK(rank >= 2 && (x.back() == 1 || x.back() == 2), "input 'input' ", shape_str(x),
                " must end in a dim of 1 (real) or 2 (complex)");
  const int64_t axis = normalize_axis(axis_value, rank);
  OPFORGE_CHECK(axis < rank - 1, "the DFT axis must not be the last (real/imaginary) dim");
  const bool inverse = ctx.template attr<int64_t>("inverse") != 0, onesided = ctx.template attr<int64_t>("onesided") != 0;
  DftPlan p{dims_product(x, 0, size_t(axis)), x[size_t(axis)], dims_product(x, size_t(axis) + 1, x.size() - 1),
            x.back(), 0, 0, Transform::kForward};
  if (ctx.num_inputs() > 1 && ctx.has_input(1)) {
    if (!ctx.input(1).has_data()) throw needs_value("DFT", "dft_length");
    p.n = int64_t(read_scalar(ctx.input(1), "dft_length"));
  } else {
    p.n = inverse && onesided ? 2 * (p.len - 1) : p.len;
  }
  OPFORGE_CHECK(p.n > 0, "the DFT length must be positive, got ", p.n);
  p.transform = !inverse ? Transform::kForward : onesided ? Transform::kInverseReal : Transform::kInverse;
  p.out_len = !inverse && onesided ? p.n / 2 + 1 : p.n;
  return p;
}

template <class Ctx> int64_t dft_axis(const Ctx& ctx, int opset) {
  if (opset < 20) return ctx.template attr<int64_t>("axis");
  if (!ctx.has_input(2)) return -2;
  if (!ctx.input(2).has_data()) throw needs_value("DFT", "axis");
  return int64_t(read_scalar(ctx.input(2), "axis"));
}

template <int Opset> void dft_infer(InferContext& ctx) {
  const Shape x = ctx.input(0).sizes();
  const DftPlan p = dft_plan(ctx, x, dft_axis(ctx, Opset));
  Shape out = x;
  out[size_t(normalize_axis(dft_axis(ctx, Opset), int64_t(x.size())))] = p.out_len;
  out.back() = p.transform == Transform::kInverseReal ? 1 : 2;
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

/// One line through numpy's FFT in T when it covers the length (complex transforms only), else
/// through the direct sum in double.
template <class T> void transform_line(const std::vector<Complex>& in, std::vector<Complex>& out, const DftPlan& p,
                                       const fft::Plan<T>& plan, const std::vector<Complex>& twiddle) {
  if (p.transform == Transform::kInverseReal || !plan.covered()) return dft_line(in, out, p.n, p.transform, twiddle);
  std::vector<fft::Cx<T>> line(size_t(p.n), fft::Cx<T>{T(0), T(0)});
  for (int64_t j = 0; j < std::min(p.n, p.len); ++j) line[size_t(j)] = {T(in[size_t(j)].real()), T(in[size_t(j)].imag())};
  if (p.transform == Transform::kForward) plan.template run<true>(line.data(), T(1));
  else plan.template run<false>(line.data(), T(1.0 / double(p.n)));
  for (size_t k = 0; k < out.size(); ++k) out[k] = Complex(line[k].r, line[k].i);
}

/// Runs the plan over every line of `x` (laid out as (outer, len, inner, channels)) into `y`, in
/// T's precision where numpy's FFT applies.
template <class T> void dft_lines(const std::vector<double>& x, std::vector<double>& y, const DftPlan& p) {
  const std::vector<Complex> twiddle = twiddles(p.n);
  const fft::Plan<T> plan(p.n);
  const int64_t out_channels = p.transform == Transform::kInverseReal ? 1 : 2;
  std::vector<Complex> in(size_t(p.len)), out(size_t(p.out_len));
  for (int64_t o = 0; o < p.outer; ++o)
    for (int64_t i = 0; i < p.inner; ++i) {
      for (int64_t j = 0; j < p.len; ++j) {
        const double* v = &x[size_t(((o * p.len + j) * p.inner + i) * p.channels)];
        in[size_t(j)] = Complex(v[0], p.channels == 2 ? v[1] : 0.0);
      }
      transform_line(in, out, p, plan, twiddle);
      for (int64_t k = 0; k < p.out_len; ++k) {
        double* r = &y[size_t(((o * p.out_len + k) * p.inner + i) * out_channels)];
        r[0] = out[size_t(k)].real();
        if (out_channels == 2) r[1] = out[size_t(k)].imag();
      }
    }
}

template <int Opset> void dft_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const DftPlan p = dft_plan(ctx, x.sizes(), dft_axis(ctx, Opset));
  std::vector<double> y(size_t(ctx.output(0).numel()));
  const std::vector<double> values = read_floats<double>(x, "input 'input'");
  if (x.dtype() == OPF_FLOAT32 && p.transform == Transform::kInverse) dft_lines<float>(values, y, p);
  else dft_lines<double>(values, y, p);
  write_floats(y.data(), ctx.output(0));
}

// ---- STFT ----

/// An STFT call, resolved: frames of `frame_length` samples every `step`, each weighted by the
/// window and transformed.
struct StftPlan {
  int64_t batch, length, channels, step, frame_length, frames, bins;
};

template <class Ctx> StftPlan stft_plan(const Ctx& ctx) {
  const Shape x = ctx.input(0).sizes();
  OPFORGE_CHECK(x.size() == 3 && (x[2] == 1 || x[2] == 2), "input 'signal' ", shape_str(x),
                " must be [batch, length, 1 or 2]");
  if (!ctx.input(1).has_data()) throw needs_value("STFT", "frame_step");
  StftPlan p{x[0], x[1], x[2], int64_t(read_scalar(ctx.input(1), "frame_step")), x[1], 0, 0};
  if (ctx.has_input(2)) p.frame_length = ctx.input(2).sizes().at(0);
  if (ctx.num_inputs() > 3 && ctx.has_input(3)) {
    if (!ctx.input(3).has_data()) throw needs_value("STFT", "frame_length");
    p.frame_length = int64_t(read_scalar(ctx.input(3), "frame_length"));
  }
  OPFORGE_CHECK(p.step > 0 && p.frame_length > 0 && p.frame_length <= p.length, "frame_step ", p.step,
                " and frame_length ", p.frame_length, " must be positive, the frame no longer than the signal (",
                p.length, ")");
  if (ctx.has_input(2))
    OPFORGE_CHECK(ctx.input(2).sizes() == Shape{p.frame_length}, "input 'window' ", shape_str(ctx.input(2).sizes()),
                  " must hold frame_length = ", p.frame_length, " values");
  p.frames = 1 + (p.length - p.frame_length) / p.step;
  p.bins = ctx.template attr<int64_t>("onesided") != 0 ? p.frame_length / 2 + 1 : p.frame_length;
  return p;
}

void stft_infer(InferContext& ctx) {
  const StftPlan p = stft_plan(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), {p.batch, p.frames, p.bins, 2});
}

void stft_compute(KernelContext& ctx) {
  const StftPlan p = stft_plan(ctx);
  const std::vector<double> x = read_floats<double>(ctx.input(0), "input 'signal'");
  std::vector<double> window(size_t(p.frame_length), 1.0);
  if (ctx.has_input(2)) window = read_floats<double>(ctx.input(2), "input 'window'");
  const std::vector<Complex> twiddle = twiddles(p.frame_length);
  std::vector<Complex> frame(size_t(p.frame_length)), spectrum(size_t(p.bins));
  std::vector<double> y(size_t(ctx.output(0).numel()));
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t f = 0; f < p.frames; ++f) {
      for (int64_t j = 0; j < p.frame_length; ++j) {
        const double* v = &x[size_t((b * p.length + f * p.step + j) * p.channels)];
        frame[size_t(j)] = Complex(v[0], p.channels == 2 ? v[1] : 0.0) * window[size_t(j)];
      }
      dft_line(frame, spectrum, p.frame_length, Transform::kForward, twiddle);
      for (int64_t k = 0; k < p.bins; ++k) {
        double* r = &y[size_t(((b * p.frames + f) * p.bins + k) * 2)];
        r[0] = spectrum[size_t(k)].real();
        r[1] = spectrum[size_t(k)].imag();
      }
    }
  write_floats(y.data(), ctx.output(0));
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

OPFORGE_OP(DFT)
    .since(17)
    .input("input", SIGNAL_DTYPES)
    .optional_input("dft_length", {opforge::i32, opforge::i64})
    .output("output")
    .attr("axis", int64_t(1))
    .attr("inverse", int64_t(0))
    .attr("onesided", int64_t(0))
    .infer(dft_infer<17>)
    .compute(dft_compute<17>);

OPFORGE_OP(DFT)
    .since(20)
    .input("input", SIGNAL_DTYPES)
    .optional_input("dft_length", {opforge::i32, opforge::i64})
    .optional_input("axis", {opforge::i64})
    .output("output")
    .attr("inverse", int64_t(0))
    .attr("onesided", int64_t(0))
    .infer(dft_infer<20>)
    .compute(dft_compute<20>);

OPFORGE_OP(STFT)
    .since(17)
    .input("signal", SIGNAL_DTYPES)
    .input("frame_step", {opforge::i32, opforge::i64})
    .optional_input("window", SIGNAL_DTYPES)
    .optional_input("frame_length", {opforge::i32, opforge::i64})
    .output("output")
    .attr("onesided", int64_t(1))
    .infer(stft_infer)
    .compute(stft_compute);
