// narrow_types.h: values of the float8, float4, 4-bit and 2-bit types, decoded and encoded as
// ml_dtypes (and so onnx's reference and its test data) does.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "opforge/dtype.h"

namespace opforge_cpu::narrow {

/// A small float format: mantissa bits, exponent bias, the largest finite encoding (no sign),
/// the NaN encoding (with no sign) and whether it has infinities (e5m2) or is "fnuz" (one NaN
/// at -0's place, no -0).
struct MiniFloat {
  int mantissa;
  int bias;
  uint8_t max_finite;
  uint8_t nan;
  uint8_t sign;
  bool has_inf;
  bool uz;
};

template <class T> struct format_of;
template <> struct format_of<opforge::float8e4m3fn_t> {
  static constexpr MiniFloat value{3, 7, 0x7E, 0x7F, 0x80, false, false};
};
template <> struct format_of<opforge::float8e4m3fnuz_t> {
  static constexpr MiniFloat value{3, 8, 0x7F, 0x80, 0x80, false, true};
};
template <> struct format_of<opforge::float8e5m2_t> {
  static constexpr MiniFloat value{2, 15, 0x7B, 0x7E, 0x80, true, false};
};
template <> struct format_of<opforge::float8e5m2fnuz_t> {
  static constexpr MiniFloat value{2, 16, 0x7F, 0x80, 0x80, false, true};
};
template <> struct format_of<opforge::float4e2m1_t> {
  static constexpr MiniFloat value{1, 1, 0x7, 0x0, 0x8, false, false};
};

template <class T> constexpr bool is_minifloat_v =
    std::is_same_v<T, opforge::float8e4m3fn_t> || std::is_same_v<T, opforge::float8e4m3fnuz_t> ||
    std::is_same_v<T, opforge::float8e5m2_t> || std::is_same_v<T, opforge::float8e5m2fnuz_t> ||
    std::is_same_v<T, opforge::float4e2m1_t>;
template <class T> constexpr bool is_narrow_int_v =
    std::is_same_v<T, opforge::uint4_t> || std::is_same_v<T, opforge::int4_t> ||
    std::is_same_v<T, opforge::uint2_t> || std::is_same_v<T, opforge::int2_t>;
template <class T> constexpr bool is_e8m0_v = std::is_same_v<T, opforge::float8e8m0_t>;
template <class T> constexpr bool is_narrow_v = is_minifloat_v<T> || is_narrow_int_v<T> || is_e8m0_v<T>;

/// The value of a small float encoding.
inline float decode(const MiniFloat& f, uint8_t bits) {
  const int width = f.sign == 0x80 ? 8 : 4;
  bits = uint8_t(bits & ((1u << width) - 1));
  const bool neg = bits & f.sign;
  const uint8_t mag = uint8_t(bits & (f.sign - 1));
  const float nan = neg ? -std::nanf("") : std::nanf("");  // the sign stays, as ml_dtypes keeps it
  if (f.uz ? bits == f.nan : (f.nan && mag == f.nan && !f.has_inf)) return nan;
  const int exp_bits = (mag >> f.mantissa), man = mag & ((1 << f.mantissa) - 1);
  if (f.has_inf && exp_bits == (f.sign - 1) >> f.mantissa) return man ? nan : (neg ? -INFINITY : INFINITY);
  const float v = exp_bits == 0 ? std::ldexp(float(man), 1 - f.bias - f.mantissa)
                                 : std::ldexp(float(man + (1 << f.mantissa)), exp_bits - f.bias - f.mantissa);
  return neg ? -v : v;
}

/// The encoding nearest `v` (ties to even). Values past the largest finite one saturate to it
/// when `saturate`, else become inf (e5m2) or NaN. float4e2m1 always saturates and, as
/// ml_dtypes, turns NaN into a zero of the opposite sign.
inline uint8_t encode(const MiniFloat& f, double v, bool saturate) {
  const bool four = f.sign == 0x08;
  const bool neg = std::signbit(v);
  const uint8_t sign = neg ? f.sign : 0;
  if (std::isnan(v)) return four ? uint8_t(neg ? 0 : f.sign) : f.uz ? f.nan : uint8_t(sign | f.nan);
  const uint8_t overflow = saturate || four ? uint8_t(sign | f.max_finite)
                           : f.has_inf    ? uint8_t(sign | (f.max_finite + 1))
                           : f.uz         ? f.nan
                                          : uint8_t(sign | f.nan);
  const double a = std::fabs(v);
  if (std::isinf(a)) return overflow;
  if (a >= 1e6) return overflow;  // beyond every format here; keeps the shifts below small
  const int min_exp = 1 - f.bias;
  int e2 = 0;
  std::frexp(a, &e2);
  const int exp = a == 0 ? min_exp : std::max(e2 - 1, min_exp);
  const double m = std::nearbyint(std::ldexp(a, f.mantissa - exp));  // ties to even
  const int64_t mag = (int64_t(exp - min_exp) << f.mantissa) + int64_t(m);
  if (mag > f.max_finite) return overflow;
  if (mag == 0) return f.uz ? 0 : sign;
  return uint8_t(sign | mag);
}

/// float8e8m0 (a power of two, 2^(bits - 127); 0xFF is NaN) from a float32's bits, as onnx's
/// numpy_helper.to_float8e8m0 computes it for each round_mode.
enum class RoundMode { Up, Down, Nearest };
inline uint8_t encode_e8m0(float v, bool saturate, RoundMode mode) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  uint32_t exp = (bits >> 23) & 0xFF;
  if (exp == 0xFF) return 0xFF;
  bool up = false;
  if (mode == RoundMode::Up) {
    up = (bits & 0x7FFFFF) != 0;
  } else if (mode == RoundMode::Nearest) {
    const bool g = bits & 0x400000, r = bits & 0x200000, s = (bits & 0x1FFFFF) != 0;
    up = g && (r || s || exp > 0);
  }
  if (up && !(saturate && exp == 0xFE)) ++exp;
  return uint8_t(exp);
}
inline float decode_e8m0(uint8_t bits) {
  return bits == 0xFF ? std::nanf("") : std::ldexp(1.0f, int(bits) - 127);
}

/// The integer of a 4- or 2-bit encoding (the low bits, sign-extended for the signed types).
template <class T> int32_t decode_int(uint8_t bits) {
  constexpr int width = std::is_same_v<T, opforge::uint4_t> || std::is_same_v<T, opforge::int4_t> ? 4 : 2;
  constexpr bool is_signed = std::is_same_v<T, opforge::int4_t> || std::is_same_v<T, opforge::int2_t>;
  const int32_t v = bits & ((1 << width) - 1);
  return is_signed && (v & (1 << (width - 1))) ? v - (1 << width) : v;
}

/// The low bits of an integer: 4- and 2-bit types wrap around, as ml_dtypes' astype does.
template <class T> uint8_t encode_int(int64_t v) {
  constexpr int width = std::is_same_v<T, opforge::uint4_t> || std::is_same_v<T, opforge::int4_t> ? 4 : 2;
  return uint8_t(uint64_t(v) & ((1u << width) - 1));
}

/// A float truncated toward zero to an integer, NaN and infinities giving 0 (as ml_dtypes).
inline int64_t truncate(double v) {
  if (!std::isfinite(v) || std::fabs(v) >= 9.2e18) return 0;
  return int64_t(v);
}

/// A round_mode attribute's value.
inline RoundMode round_mode(const std::string& mode) {
  return mode == "down" ? RoundMode::Down : mode == "nearest" ? RoundMode::Nearest : RoundMode::Up;
}

}  // namespace opforge_cpu::narrow
