/// opforge/dtype.h: element types, their C++ counterparts, and dispatch over a list of them.
#ifndef OPFORGE_DTYPE_H_
#define OPFORGE_DTYPE_H_

#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "opforge/abi.h"

namespace opforge __attribute__((visibility("hidden"))) {

/// An element type; the values are ONNX's TensorProto.DataType numbers.
enum class DType : int32_t {
  Undefined = OPF_UNDEFINED,
  Float32 = OPF_FLOAT32,
  UInt8 = OPF_UINT8,
  Int8 = OPF_INT8,
  UInt16 = OPF_UINT16,
  Int16 = OPF_INT16,
  Int32 = OPF_INT32,
  Int64 = OPF_INT64,
  String = OPF_STRING,
  Bool = OPF_BOOL,
  Float16 = OPF_FLOAT16,
  Float64 = OPF_FLOAT64,
  UInt32 = OPF_UINT32,
  UInt64 = OPF_UINT64,
  BFloat16 = OPF_BFLOAT16,
  Float8E4M3FN = OPF_FLOAT8E4M3FN,
  Float8E4M3FNUZ = OPF_FLOAT8E4M3FNUZ,
  Float8E5M2 = OPF_FLOAT8E5M2,
  Float8E5M2FNUZ = OPF_FLOAT8E5M2FNUZ,
  UInt4 = OPF_UINT4,
  Int4 = OPF_INT4,
  Float4E2M1 = OPF_FLOAT4E2M1,
  Float8E8M0 = OPF_FLOAT8E8M0,
  UInt2 = OPF_UINT2,
  Int2 = OPF_INT2,
};

/// Short names for schemas: `.input("X", {opforge::f32, opforge::f64})`.
constexpr DType f16 = DType::Float16, bf16 = DType::BFloat16, f32 = DType::Float32,
                f64 = DType::Float64, i8 = DType::Int8, i16 = DType::Int16, i32 = DType::Int32,
                i64 = DType::Int64, u8 = DType::UInt8, u16 = DType::UInt16, u32 = DType::UInt32,
                u64 = DType::UInt64, boolean = DType::Bool;
/// The narrow types (one element per byte, see abi.h).
constexpr DType f8e4m3fn = DType::Float8E4M3FN, f8e4m3fnuz = DType::Float8E4M3FNUZ,
                f8e5m2 = DType::Float8E5M2, f8e5m2fnuz = DType::Float8E5M2FNUZ, u4 = DType::UInt4,
                i4 = DType::Int4, f4e2m1 = DType::Float4E2M1, f8e8m0 = DType::Float8E8M0,
                u2 = DType::UInt2, i2 = DType::Int2;

/// Tensor::dtype() is the ABI's int32_t; these compare it with a DType directly:
/// `if (x.dtype() == opforge::f64)`.
constexpr bool operator==(int32_t a, DType b) { return a == int32_t(b); }
constexpr bool operator!=(int32_t a, DType b) { return a != int32_t(b); }
constexpr bool operator==(DType a, int32_t b) { return int32_t(a) == b; }
constexpr bool operator!=(DType a, int32_t b) { return int32_t(a) != b; }

/// IEEE half and bfloat16 storage types (bits only; convert with to_float / from_float).
struct float16_t { uint16_t bits; };
struct bfloat16_t { uint16_t bits; };

/// Storage types of the narrow dtypes: one element per byte, the value in the low bits.
struct float8e4m3fn_t { uint8_t bits; };
struct float8e4m3fnuz_t { uint8_t bits; };
struct float8e5m2_t { uint8_t bits; };
struct float8e5m2fnuz_t { uint8_t bits; };
struct uint4_t { uint8_t bits; };
struct int4_t { uint8_t bits; };
struct float4e2m1_t { uint8_t bits; };
struct float8e8m0_t { uint8_t bits; };
struct uint2_t { uint8_t bits; };
struct int2_t { uint8_t bits; };

/// The DType of a C++ element type.
template <class T> struct dtype_of;
#define OPFORGE_DTYPE_OF(T, D) \
  template <> struct dtype_of<T> { static constexpr DType value = DType::D; }
OPFORGE_DTYPE_OF(float, Float32);
OPFORGE_DTYPE_OF(double, Float64);
OPFORGE_DTYPE_OF(int8_t, Int8);
OPFORGE_DTYPE_OF(int16_t, Int16);
OPFORGE_DTYPE_OF(int32_t, Int32);
OPFORGE_DTYPE_OF(int64_t, Int64);
OPFORGE_DTYPE_OF(uint8_t, UInt8);
OPFORGE_DTYPE_OF(uint16_t, UInt16);
OPFORGE_DTYPE_OF(uint32_t, UInt32);
OPFORGE_DTYPE_OF(uint64_t, UInt64);
OPFORGE_DTYPE_OF(bool, Bool);
OPFORGE_DTYPE_OF(float16_t, Float16);
OPFORGE_DTYPE_OF(bfloat16_t, BFloat16);
OPFORGE_DTYPE_OF(float8e4m3fn_t, Float8E4M3FN);
OPFORGE_DTYPE_OF(float8e4m3fnuz_t, Float8E4M3FNUZ);
OPFORGE_DTYPE_OF(float8e5m2_t, Float8E5M2);
OPFORGE_DTYPE_OF(float8e5m2fnuz_t, Float8E5M2FNUZ);
OPFORGE_DTYPE_OF(uint4_t, UInt4);
OPFORGE_DTYPE_OF(int4_t, Int4);
OPFORGE_DTYPE_OF(float4e2m1_t, Float4E2M1);
OPFORGE_DTYPE_OF(float8e8m0_t, Float8E8M0);
OPFORGE_DTYPE_OF(uint2_t, UInt2);
OPFORGE_DTYPE_OF(int2_t, Int2);
#undef OPFORGE_DTYPE_OF

/// Whether `dtype` is one of the float8, float4, 4-bit or 2-bit types (held one per byte).
inline bool is_narrow_dtype(int32_t dtype) {
  return dtype >= OPF_FLOAT8E4M3FN && dtype <= OPF_INT2;
}

/// Bytes per element in memory (0 for strings and unknown types); 4- and 2-bit types take a
/// byte each.
inline int64_t dtype_size(int32_t dtype) {
  if (is_narrow_dtype(dtype)) return 1;
  switch (dtype) {
    case OPF_BOOL: case OPF_INT8: case OPF_UINT8: return 1;
    case OPF_INT16: case OPF_UINT16: case OPF_FLOAT16: case OPF_BFLOAT16: return 2;
    case OPF_INT32: case OPF_UINT32: case OPF_FLOAT32: return 4;
    case OPF_INT64: case OPF_UINT64: case OPF_FLOAT64: return 8;
    default: return 0;
  }
}

/// The numpy-style name of a dtype ("float32"; ml_dtypes' names for the narrow types).
inline const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case OPF_FLOAT8E4M3FN: return "float8_e4m3fn";
    case OPF_FLOAT8E4M3FNUZ: return "float8_e4m3fnuz";
    case OPF_FLOAT8E5M2: return "float8_e5m2";
    case OPF_FLOAT8E5M2FNUZ: return "float8_e5m2fnuz";
    case OPF_UINT4: return "uint4";
    case OPF_INT4: return "int4";
    case OPF_FLOAT4E2M1: return "float4_e2m1fn";
    case OPF_FLOAT8E8M0: return "float8_e8m0fnu";
    case OPF_UINT2: return "uint2";
    case OPF_INT2: return "int2";
    case OPF_FLOAT32: return "float32";
    case OPF_FLOAT64: return "float64";
    case OPF_FLOAT16: return "float16";
    case OPF_BFLOAT16: return "bfloat16";
    case OPF_INT8: return "int8";
    case OPF_INT16: return "int16";
    case OPF_INT32: return "int32";
    case OPF_INT64: return "int64";
    case OPF_UINT8: return "uint8";
    case OPF_UINT16: return "uint16";
    case OPF_UINT32: return "uint32";
    case OPF_UINT64: return "uint64";
    case OPF_BOOL: return "bool";
    case OPF_STRING: return "string";
    default: return "undefined";
  }
}

/// float16 / bfloat16 conversions, for kernels that compute in float.
inline float to_float(float16_t h) {
  uint32_t sign = (h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 0x1f, man = h.bits & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) { man <<= 1; --exp; }
      bits = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline float16_t from_float(float f, float16_t) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = int32_t((x >> 23) & 0xff) - 127 + 15;
  uint32_t man = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff) return {uint16_t(sign | 0x7c00u | (man ? 0x200u : 0))};
  if (exp >= 31) return {uint16_t(sign | 0x7c00u)};
  if (exp <= 0) {
    if (exp < -10) return {uint16_t(sign)};
    man |= 0x800000u;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return {uint16_t(sign | half)};
  }
  uint32_t half = sign | (uint32_t(exp) << 10) | (man >> 13), rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) ++half;
  return {uint16_t(half)};
}
inline float to_float(bfloat16_t b) {
  uint32_t bits = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline bfloat16_t from_float(float f, bfloat16_t) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {uint16_t((x >> 16) | 0x40u)};
  x += 0x7fffu + ((x >> 16) & 1);
  return {uint16_t(x >> 16)};
}

/// Carries a type through a generic lambda: `[&](auto tag) { using T = typename decltype(tag)::type; }`.
template <class T> struct type_tag { using type = T; };

namespace detail {
template <class F> bool dispatch_one(int32_t, F&&) { return false; }
template <class T, class... Rest, class F> bool dispatch_one(int32_t dtype, F&& f) {
  if (dtype == int32_t(dtype_of<T>::value)) {
    f(type_tag<T>{});
    return true;
  }
  return dispatch_one<Rest...>(dtype, static_cast<F&&>(f));
}
}  // namespace detail

/// Calls f(type_tag<T>{}) for the T among Ts whose dtype is `dtype`; returns false if none is.
template <class... Ts, class F> bool dispatch(int32_t dtype, F&& f) {
  return detail::dispatch_one<Ts...>(dtype, static_cast<F&&>(f));
}

}  // namespace opforge

#endif  // OPFORGE_DTYPE_H_
