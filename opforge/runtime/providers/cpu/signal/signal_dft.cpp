// signal_dft.cpp: DFT (forward, inverse, one-sided) and STFT, computed in double and rounded to
// the output's type, except inverse complex transforms of float32 data: numpy's ifft (which onnx's
// reference and its test data use) computes those in float, so they run numpy's own FFT in float
// (signal_fft.h) and round as it does. (numpy's forward FFT of float32 data computes in double.)
#include <algorithm>
#include <cmath>
#include <complex>
#include <utility>

#include "data_movement/data_movement.h"
#include "common/elements.h"
#include "signal/signal_fft.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;
using Complex = std::complex<double>;
constexpr double kPi = 3.14159265358979323846;

/// What one DFT line does: forward, inverse, or inverse of a one-sided spectrum (a real result).
enum class Transform { kForward, kInverse, kInverseReal };

/// One line of a DFT of length n by the direct sum: `in` holds `in_len` complex values (zero-padded or truncated
/// to what the transform reads), `out` receives `out_len` values. `twiddle[j]` is e^(-2 pi i j / n).
void direct_line(const std::vector<Complex>& in, std::vector<Complex>& out, int64_t n, Transform t,
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

/// In-place radix-2 FFT of a power-of-two length: e^(sign 2 pi i j k / n), unscaled.
void fft_pow2(std::vector<Complex>& a, int sign) {
  const size_t n = a.size();
  for (size_t i = 1, j = 0; i < n; ++i) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (size_t len = 2; len <= n; len <<= 1)
    for (size_t k = 0; k < len / 2; ++k) {
      const Complex w = std::polar(1.0, sign * 2 * kPi * double(k) / double(len));
      for (size_t i = 0; i < n; i += len) {
        const Complex u = a[i + k], v = a[i + k + len / 2] * w;
        a[i + k] = u + v;
        a[i + k + len / 2] = u - v;
      }
    }
}

/// The same line as direct_line, in O(n log n) for any n: Bluestein's chirp turns the DFT into a
/// convolution done with power-of-two FFTs. A one-sided inverse first completes the hermitian
/// spectrum (the imaginary parts of bin 0 and, for even n, bin n/2 are ignored, as numpy does).
void bluestein_line(const std::vector<Complex>& in, std::vector<Complex>& out, int64_t n, Transform t) {
  std::vector<Complex> x(static_cast<size_t>(n), Complex(0));
  if (t == Transform::kInverseReal) {
    const int64_t used = std::min<int64_t>(int64_t(in.size()), n / 2 + 1);
    for (int64_t k = 0; k < used; ++k) {
      const bool edge = k == 0 || (n % 2 == 0 && k == n / 2);
      x[size_t(k)] = edge ? Complex(in[size_t(k)].real(), 0) : in[size_t(k)];
      if (!edge) x[size_t(n - k)] = std::conj(in[size_t(k)]);
    }
  } else {
    for (int64_t k = 0; k < std::min<int64_t>(int64_t(in.size()), n); ++k) x[size_t(k)] = in[size_t(k)];
  }
  const int sign = t == Transform::kForward ? -1 : 1;
  size_t m = 1;
  while (m < size_t(2 * n - 1)) m <<= 1;
  std::vector<Complex> chirp(static_cast<size_t>(n)), a(m, Complex(0)), b(m, Complex(0));
  for (int64_t k = 0; k < n; ++k)   // k^2 mod 2n keeps the angle small and exact
    chirp[size_t(k)] = std::polar(1.0, sign * kPi * double((k * k) % (2 * n)) / double(n));
  for (int64_t k = 0; k < n; ++k) a[size_t(k)] = x[size_t(k)] * chirp[size_t(k)];
  b[0] = std::conj(chirp[0]);
  for (int64_t k = 1; k < n; ++k) b[size_t(k)] = b[m - size_t(k)] = std::conj(chirp[size_t(k)]);
  fft_pow2(a, -1);
  fft_pow2(b, -1);
  for (size_t i = 0; i < m; ++i) a[i] *= b[i];
  fft_pow2(a, 1);
  const double scale = (t == Transform::kForward ? 1.0 : 1.0 / double(n)) / double(m);
  for (size_t k = 0; k < out.size(); ++k) {
    const Complex v = a[k] * chirp[k] * scale;
    out[k] = t == Transform::kInverseReal ? Complex(v.real(), 0) : v;
  }
}

/// One line of a DFT of length n (see direct_line); long ones go through bluestein_line.
void dft_line(const std::vector<Complex>& in, std::vector<Complex>& out, int64_t n, Transform t,
              const std::vector<Complex>& twiddle) {
  if (n > 64) return bluestein_line(in, out, n, t);
  direct_line(in, out, n, t, twiddle);
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
