// elements.h: typed access to tensors of any numeric dtype, for kernels that compare, combine or
// read values whatever their type (the 16-bit floats are computed in float).
#pragma once

#include <type_traits>
#include <vector>

#include "common/float_io.h"

namespace opforge_cpu {

/// The type an element of storage type S is computed in: float for the 16-bit floats.
template <class S> using compute_t =
    std::conditional_t<std::is_same_v<S, opforge::float16_t> || std::is_same_v<S, opforge::bfloat16_t>, float, S>;

/// Calls f(type_tag<S>) with S the storage type of t (any dtype but string); throws otherwise.
template <class F> void dispatch_elements(const Tensor& t, F&& f) {
  const bool ok = opforge::dispatch<float, double, opforge::float16_t, opforge::bfloat16_t, int8_t, int16_t, int32_t,
                                    int64_t, uint8_t, uint16_t, uint32_t, uint64_t, bool>(t.dtype(), f);
  OPFORGE_CHECK(ok, "dtype ", opforge::dtype_name(t.dtype()), " is not one this kernel reads");
}

/// Every element of a numeric tensor as double.
inline std::vector<double> read_doubles(const Tensor& t) {
  std::vector<double> out(size_t(t.numel()));
  dispatch_elements(t, [&](auto tag) {
    using S = typename decltype(tag)::type;
    const S* p = static_cast<const S*>(t.raw());
    for (size_t i = 0; i < out.size(); ++i) out[i] = double(load_as<compute_t<S>>(p[i]));
  });
  return out;
}

/// The one value of a scalar (or one-element) numeric input, as double; throws naming it.
inline double read_scalar(const Tensor& t, const char* name) {
  OPFORGE_CHECK(t.numel() == 1, "input '", name, "' must hold one value, got ", t.numel());
  return read_doubles(t)[0];
}

}  // namespace opforge_cpu
