// float_io.h: floating tensors of any width (float16, bfloat16, float, double) read into a compute
// type and written back, for kernels that compute low-precision inputs in float.
#pragma once

#include <cstring>
#include <type_traits>
#include <vector>

#include "common/common.h"

namespace opforge_cpu {

/// True for the four floating dtypes.
inline bool is_float_dtype(int32_t dtype) {
  return dtype == OPF_FLOAT32 || dtype == OPF_FLOAT64 || dtype == OPF_FLOAT16 || dtype == OPF_BFLOAT16;
}

/// One element of storage type S as C.
template <class C, class S> C load_as(S v) {
  if constexpr (std::is_same_v<S, opforge::float16_t> || std::is_same_v<S, opforge::bfloat16_t>)
    return C(opforge::to_float(v));
  else
    return C(v);
}

/// One C value stored as S (round to nearest even for the 16-bit floats).
template <class S, class C> S store_as(C v) {
  if constexpr (std::is_same_v<S, opforge::float16_t> || std::is_same_v<S, opforge::bfloat16_t>)
    return opforge::from_float(float(v), S{});
  else
    return S(v);
}

/// Calls f(type_tag<S>) for the storage type of a floating tensor; throws naming `what` otherwise.
template <class F> void dispatch_storage(const Tensor& t, const char* what, F&& f) {
  const bool ok = opforge::dispatch<float, double, opforge::float16_t, opforge::bfloat16_t>(t.dtype(), f);
  OPFORGE_CHECK(ok, what, " must be float16, bfloat16, float or double, got ", opforge::dtype_name(t.dtype()));
}

/// All elements of a floating tensor as C, in its own (contiguous) order.
template <class C> std::vector<C> read_floats(const Tensor& t, const char* what) {
  std::vector<C> out(static_cast<size_t>(t.numel()));
  dispatch_storage(t, what, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = static_cast<const S*>(t.raw());
    for (size_t i = 0; i < out.size(); ++i) out[i] = load_as<C>(p[i]);
  });
  return out;
}

/// Writes `n` C values into a floating tensor.
template <class C> void write_floats(const C* src, const Tensor& t) {
  const int64_t n = t.numel();
  dispatch_storage(t, "output", [&](auto tag) {
    using S = typename decltype(tag)::type;
    S* p = static_cast<S*>(t.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = store_as<S>(src[i]);
  });
}

/// Calls f(type_tag<C>) with C = double for double tensors and float for the other floating ones.
template <class F> void dispatch_compute(const Tensor& t, const char* what, F&& f) {
  OPFORGE_CHECK(is_float_dtype(t.dtype()), what, " must be float16, bfloat16, float or double, got ",
                opforge::dtype_name(t.dtype()));
  if (t.dtype() == OPF_FLOAT64)
    f(opforge::type_tag<double>{});
  else
    f(opforge::type_tag<float>{});
}

/// A tensor's data as const C*: the tensor itself when it already holds C, else a converted copy
/// kept in `keep`.
template <class C> const C* floats_of(const Tensor& t, std::vector<C>& keep, const char* what) {
  if (t.dtype() == int32_t(opforge::dtype_of<C>::value)) return t.data<C>();
  keep = read_floats<C>(t, what);
  return keep.data();
}

}  // namespace opforge_cpu
