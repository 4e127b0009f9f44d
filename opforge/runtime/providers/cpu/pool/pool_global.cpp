// pool_global.cpp: GlobalAveragePool, GlobalMaxPool and GlobalLpPool: one reduction per (N, C)
// plane over all spatial positions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/common.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

/// Independent partial results per lane, so the compiler vectorises the reductions.
constexpr int64_t kLanes = 16;

void global_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() >= 2, "input X must have rank >= 2 (N, C, spatial...), got ", x.ndim());
  std::vector<int64_t> out = x.sizes();
  std::fill(out.begin() + 2, out.end(), 1);
  ctx.set_output(0, x.dtype(), out);
}

template <class T>
T plane_sum(const T* x, int64_t n, int64_t p) {
  T lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) {
      const T v = x[i + j];
      lanes[j] += p == 0 ? v : p == 2 ? v * v : std::abs(v);
    }
  T sum = T(0);
  for (int64_t j = 0; j < kLanes; ++j) sum += lanes[j];
  for (; i < n; ++i) sum += p == 0 ? x[i] : p == 2 ? x[i] * x[i] : std::abs(x[i]);
  return sum;
}

template <class T>
T plane_max(const T* x, int64_t n) {
  T lanes[kLanes];
  std::fill(lanes, lanes + kLanes, x[0]);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  T best = *std::max_element(lanes, lanes + kLanes);
  for (; i < n; ++i) best = std::max(best, x[i]);
  return best;
}

/// y[plane] = reduce(x[plane]), the plane size being the product of the spatial dims.
template <class T, class F>
void per_plane(KernelContext& ctx, F&& reduce) {
  const Tensor x = ctx.input(0);
  const int64_t planes = x.size(0) * x.size(1), n = planes == 0 ? 0 : x.numel() / planes;
  const T* xp = x.data<T>();
  T* y = ctx.output(0).data<T>();
  ctx.parallel_for(planes, std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n)), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) y[c] = reduce(xp + c * n, n);
  });
}

template <class F>
void dispatch_floats(KernelContext& ctx, const char* op, F&& fn) {
  const bool ok = opforge::dispatch<float, double>(ctx.input(0).dtype(), fn);
  OPFORGE_CHECK(ok, op, " supports float32 and float64, got ", opforge::dtype_name(ctx.input(0).dtype()));
}

void global_average(KernelContext& ctx) {
  dispatch_floats(ctx, "GlobalAveragePool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    per_plane<T>(ctx, [](const T* x, int64_t n) { return n > 0 ? plane_sum(x, n, 0) / T(n) : T(NAN); });
  });
}

void global_max(KernelContext& ctx) {
  dispatch_floats(ctx, "GlobalMaxPool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    per_plane<T>(ctx, [](const T* x, int64_t n) { return n > 0 ? plane_max(x, n) : std::numeric_limits<T>::lowest(); });
  });
}

void global_lp(KernelContext& ctx) {
  const int64_t p = ctx.attr<int64_t>("p");
  OPFORGE_CHECK(p >= 1, "attribute 'p' must be >= 1, got ", p);
  dispatch_floats(ctx, "GlobalLpPool", [&](auto tag) {
    using T = typename decltype(tag)::type;
    per_plane<T>(ctx, [p](const T* x, int64_t n) {
      if (p == 1 || p == 2) return p == 1 ? plane_sum(x, n, 1) : std::sqrt(plane_sum(x, n, 2));
      T sum = T(0);
      for (int64_t i = 0; i < n; ++i) sum += std::pow(std::abs(x[i]), T(p));
      return std::pow(sum, T(1) / T(p));
    });
  });
}

}  // namespace

OPFORGE_OP(GlobalAveragePool)
    .since(1)
    .doc("Mean over all spatial positions of each (N, C) plane.")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .infer(global_infer)
    .compute(global_average);

OPFORGE_OP(GlobalMaxPool)
    .since(1)
    .doc("Max over all spatial positions of each (N, C) plane.")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .infer(global_infer)
    .compute(global_max);

OPFORGE_OP(GlobalLpPool)
    .since(2)
    .doc("p-norm over all spatial positions of each (N, C) plane.")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("p", int64_t(2))
    .infer(global_infer)
    .compute(global_lp);
