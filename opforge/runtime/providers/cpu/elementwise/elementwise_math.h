// elementwise_math.h: branch-free float32 exp, log, tanh, erf and friends that loops vectorise.
//
// libm's scalar calls keep a loop from vectorising; these inline polynomial forms (Cephes's for
// exp and log, Eigen's for tanh) stay within a few ulp and become SIMD code under -O3 -march=native.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace opforge_cpu::ew {
namespace vmath {

// Forced inline: a loop vectorises only when every call in it is inlined, and GCC stops inlining
// exp once a file has many callers of it.
#define OPFORGE_VMATH inline __attribute__((always_inline))

OPFORGE_VMATH float from_bits(int32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
OPFORGE_VMATH int32_t to_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

/// c ? a : b as bit masks, never a branch. GCC does not if-convert a conditional floating-point
/// operation that might trap, so `c ? x * y : x` keeps a loop scalar; this keeps it SIMD.
template <class T> OPFORGE_VMATH T select(bool c, T a, T b) {
  using U = std::conditional_t<
      sizeof(T) == 8, uint64_t,
      std::conditional_t<sizeof(T) == 4, uint32_t,
                         std::conditional_t<sizeof(T) == 2, uint16_t, uint8_t>>>;
  U ua, ub;
  std::memcpy(&ua, &a, sizeof(T));
  std::memcpy(&ub, &b, sizeof(T));
  const U mask = U(U(0) - U(c));
  const U bits = U((ua & mask) | (ub & U(~mask)));
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

/// e^x, overflowing to inf and underflowing through subnormals to 0 as expf does.
OPFORGE_VMATH float exp(float x) {
  float xc = select(x > 88.73f, 88.73f, x);
  xc = select(xc < -104.f, -104.f, xc);
  const float fn = std::nearbyint(xc * 1.44269504088896341f);
  const int32_t n = int32_t(fn);
  float r = xc - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  float p = 1.9875691500E-4f;
  p = p * r + 1.3981999507E-3f;
  p = p * r + 8.3334519073E-3f;
  p = p * r + 4.1665795894E-2f;
  p = p * r + 1.6666665459E-1f;
  p = p * r + 5.0000001201E-1f;
  const float y = p * (r * r) + r + 1.f;
  // 2^n in two factors so that n in [-150, 128] needs no special exponent
  const int32_t n1 = n >> 1, n2 = n - n1;
  return y * from_bits((n1 + 127) << 23) * from_bits((n2 + 127) << 23);
}

/// Natural log; log(0) = -inf, log(x < 0) = NaN, log(inf) = inf.
OPFORGE_VMATH float log(float x) {
  const bool sub = x < 1.17549435e-38f;
  const int32_t bits = to_bits(select(sub, x * 8388608.f, x));
  int32_t e = ((bits >> 23) & 0xff) - 126 - select(sub, 23, 0);
  float m = from_bits((bits & 0x007fffff) | 0x3f000000);  // x = m * 2^e, m in [0.5, 1)
  const bool low = m < 0.707106781186547524f;
  e = select(low, e - 1, e);
  m = select(low, m + m - 1.f, m - 1.f);
  const float fe = float(e), z = m * m;
  float p = 7.0376836292E-2f;
  p = p * m - 1.1514610310E-1f;
  p = p * m + 1.1676998740E-1f;
  p = p * m - 1.2420140846E-1f;
  p = p * m + 1.4249322787E-1f;
  p = p * m - 1.6668057665E-1f;
  p = p * m + 2.0000714765E-1f;
  p = p * m - 2.4999993993E-1f;
  p = p * m + 3.3333331174E-1f;
  float y = p * m * z + fe * -2.12194440e-4f - 0.5f * z;
  float r = m + y + fe * 0.693359375f;
  const float inf = std::numeric_limits<float>::infinity();
  r = select(x == inf, inf, r);
  r = select(x == 0.f, -inf, r);
  r = select(x < 0.f, std::numeric_limits<float>::quiet_NaN(), r);
  return select(x != x, x, r);
}

/// log(1 + u) for u > -1, accurate for tiny u.
OPFORGE_VMATH float log1p(float u) {
  const float w = 1.f + u, d = w - 1.f;
  const float r = log(w) * (u / select(d == 0.f, 1.f, d));
  return select(d == 0.f, u, r);
}

/// Hyperbolic tangent: a rational fit on [-7.9, 7.9] (Eigen's, as onnxruntime's MLAS uses),
/// within 4e-7 relative; +-1 exactly from |x| = 9, where float tanh rounds to it.
OPFORGE_VMATH float tanh(float x) {
  float c = select(x > 7.90531110763549805f, 7.90531110763549805f, x);
  c = select(c < -7.90531110763549805f, -7.90531110763549805f, c);
  const float z = c * c;
  float p = -2.76076847742355e-16f;
  p = p * z + 2.00018790482477e-13f;
  p = p * z - 8.60467152213735e-11f;
  p = p * z + 5.12229709037114e-08f;
  p = p * z + 1.48572235717979e-05f;
  p = p * z + 6.37261928875436e-04f;
  p = p * z + 4.89352455891786e-03f;
  float q = 1.19825839466702e-06f;
  q = q * z + 1.18534705686654e-04f;
  q = q * z + 2.26843463243900e-03f;
  q = q * z + 4.89352518554385e-03f;
  const float a = std::fabs(x);
  return select(a < 0.0004f, x, select(a >= 9.f, std::copysign(1.f, x), c * p / q));
}

/// Error function: Cephes's series below |x| = 1, Abramowitz-Stegun 7.1.26 above (<= 1.5e-7).
OPFORGE_VMATH float erf(float x) {
  const float a = std::fabs(x), z = x * x;
  float p = 7.853861353153693E-5f;
  p = p * z - 8.010193625184903E-4f;
  p = p * z + 5.188327685732524E-3f;
  p = p * z - 2.685381193529856E-2f;
  p = p * z + 1.128358514861418E-1f;
  p = p * z - 3.761262582423300E-1f;
  p = p * z + 1.128379165726710E+0f;
  const float t = 1.f / (1.f + 0.3275911f * a);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  const float big = std::copysign(1.f - q * t * exp(-z), x);
  return select(a < 1.f, p * x, big);
}

/// 1 / (1 + e^-x).
OPFORGE_VMATH float sigmoid(float x) { return 1.f / (1.f + exp(-x)); }

/// log(1 + e^x) without overflow.
OPFORGE_VMATH float softplus(float x) {
  const float pos = select(x > 0.f, x, 0.f);
  return pos + log1p(exp(-std::fabs(x)));
}

/// The double versions: libm's, for kernels written once for float and double.
inline double exp(double x) { return std::exp(x); }
inline double log(double x) { return std::log(x); }
inline double log1p(double x) { return std::log1p(x); }
inline double tanh(double x) { return std::tanh(x); }
inline double erf(double x) { return std::erf(x); }
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double softplus(double x) { return (x > 0.0 ? x : 0.0) + std::log1p(std::exp(-std::fabs(x))); }

#undef OPFORGE_VMATH

}  // namespace vmath
}  // namespace opforge_cpu::ew
