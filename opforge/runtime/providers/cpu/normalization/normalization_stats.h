// normalization_stats.h: what the normalization kernels share: row statistics, per-channel
// parameters read as doubles, and float-type dispatch.
#pragma once

#include "reduce/reduce.h"

namespace opforge_cpu::normalization {

/// Mean and population variance.
template <class T> struct Moments {
  T mean, var;
};

/// Moments of a contiguous row in two lane-split passes (no E[x^2] - E[x]^2 cancellation).
template <class T> Moments<T> row_moments(const T* x, int64_t n) {
  using namespace reduction;
  if (n == 0) return {T(0), T(0)};
  const T mean = Stepped<SumPolicy<T>>().run(T(0), x, n, 0) / T(n);
  Stepped<SquaredDeviationPolicy<T>> dev;
  dev.shift = &mean;
  return {mean, dev.run(T(0), x, n, 0) / T(n)};
}

/// A float32 or float64 parameter of `count` elements, as doubles; throws naming it otherwise.
inline std::vector<double> channel_values(const Tensor& t, int64_t count, const char* name) {
  OPFORGE_CHECK(t.numel() == count, "input '", name, "' must have ", count, " elements, got ", t.numel());
  std::vector<double> out(static_cast<size_t>(count));
  const bool ok = opforge::dispatch<float, double>(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* p = t.data<T>();
    for (int64_t i = 0; i < count; ++i) out[size_t(i)] = double(p[i]);
  });
  OPFORGE_CHECK(ok, "input '", name, "' must be float32 or float64, got ", opforge::dtype_name(t.dtype()));
  return out;
}

/// Calls f(type_tag<T>) for a float32 or float64 tensor; throws naming the dtype otherwise.
template <class F> void dispatch_float(const Tensor& x, F&& f) {
  const bool ok = opforge::dispatch<float, double>(x.dtype(), static_cast<F&&>(f));
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

}  // namespace opforge_cpu::normalization
