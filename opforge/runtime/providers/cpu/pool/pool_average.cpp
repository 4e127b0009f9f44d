// pool_average.cpp: the AveragePool (count_include_pad, ceil_mode, dilations) and LpPool kernels
// over 1-D, 2-D and 3-D inputs, one (N, C) plane per task.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/kernel_paths.h"
#include "pool/pool_f32.h"
#include "pool/pool_simd.h"
#include "pool/pool_window.h"

namespace {

using opforge::KernelContext;
using opforge_nn::AxisTaps;
using opforge_nn::PoolPlan;

/// One plane of AveragePool (p == 0) or LpPool (p >= 1), for opforge_nn::pool_rows: a running
/// sum of x (or |x|^p) per output, then the mean (or the p-th root).
template <class T>
struct SumRows {
  const PoolPlan& plan;
  const T* x;
  T* y;
  int64_t p;
  bool include_pad;
  const T* col_count;  ///< column_counts(), for the mean
  opforge_nn::Range inner(int64_t o, const std::vector<int64_t>& rows) {
    using opforge_nn::stationary;
    if (p == 0) return stationary(x, rows, plan, T(0), [](auto a, auto b) { return a + b; }, y + o);
    if (p == 1) return stationary(x, rows, plan, T(0), [](auto a, auto b) { return a + (b < 0 ? -b : b); }, y + o);
    if (p == 2) return stationary(x, rows, plan, T(0), [](auto a, auto b) { return a + b * b; }, y + o);
    return {0, 0};
  }
  void one(int64_t o, int64_t j, const std::vector<int64_t>& rows) {
    T sum = T(0);
    opforge_nn::for_each_tap(plan, rows, j, [&](int64_t i) {
      const T v = x[i];
      sum += p == 0 ? v : p == 1 ? std::abs(v) : p == 2 ? v * v : std::pow(std::abs(v), T(p));
    });
    y[o] = sum;
  }
  void end(int64_t o, int64_t od, int64_t oh) {
    T* yo = y + o;
    const AxisTaps* t = plan.taps;
    const int64_t n = plan.w.out[2];
    if (p == 0) {
      const T outer = T(include_pad ? t[0].padded[od] * t[1].padded[oh]
                                    : (t[0].hi[od] - t[0].lo[od]) * (t[1].hi[oh] - t[1].lo[oh]));
      for (int64_t j = 0; j < n; ++j) yo[j] = yo[j] / (outer * col_count[j]);
    } else if (p == 2) {
      for (int64_t j = 0; j < n; ++j) yo[j] = std::sqrt(yo[j]);
    } else if (p > 2) {
      for (int64_t j = 0; j < n; ++j) yo[j] = std::pow(yo[j], T(1) / T(p));
    }
  }
};

/// The taps each output column counts along W (all in the padded row, or only the real ones).
template <class T>
std::vector<T> column_counts(const PoolPlan& plan, bool include_pad) {
  const AxisTaps& t = plan.taps[2];
  std::vector<T> counts(t.lo.size());
  for (size_t j = 0; j < counts.size(); ++j) counts[j] = T(include_pad ? t.padded[j] : t.hi[j] - t.lo[j]);
  return counts;
}

template <class T>
void sumpool_typed(KernelContext& ctx, int64_t p) {
  const PoolPlan plan = opforge_nn::pool_plan(ctx);
  const T* x = ctx.input(0).data<T>();
  T* y = ctx.output(0).data<T>();
  const bool include_pad = ctx.has_attr("count_include_pad") && ctx.attr<int64_t>("count_include_pad") != 0;
  if constexpr (std::is_same_v<T, float>)
    if (p == 0 && opforge_nn::pool_f32(ctx, plan, false, include_pad)) return;
  const int64_t in_size = plan.w.in_size(), out_size = plan.w.out_size();
  OPFORGE_KERNEL_PATH("pool.average.generic");
  const std::vector<T> col_count = column_counts<T>(plan, include_pad);
  opforge_nn::for_each_plane(ctx, plan, [&](int64_t c) {
    SumRows<T> rows{plan, x + c * in_size, y + c * out_size, p, include_pad, col_count.data()};
    opforge_nn::pool_rows(plan, rows);
  });
}

void avgpool_compute(KernelContext& ctx) {
  const bool ok = opforge::dispatch<float, double>(ctx.input(0).dtype(), [&](auto tag) {
    sumpool_typed<typename decltype(tag)::type>(ctx, 0);
  });
  OPFORGE_CHECK(ok, "AveragePool supports float32 and float64, got ", opforge::dtype_name(ctx.input(0).dtype()));
}

void lppool_compute(KernelContext& ctx) {
  const int64_t p = ctx.attr<int64_t>("p");
  OPFORGE_CHECK(p >= 1, "attribute 'p' must be >= 1, got ", p);
  const bool ok = opforge::dispatch<float, double>(ctx.input(0).dtype(), [&](auto tag) {
    sumpool_typed<typename decltype(tag)::type>(ctx, p);
  });
  OPFORGE_CHECK(ok, "LpPool supports float32 and float64, got ", opforge::dtype_name(ctx.input(0).dtype()));
}

}  // namespace
// Opset 7 adds count_include_pad, 10 ceil_mode, 19 dilations.
OPFORGE_OP(AveragePool)
    .since(1)
    .doc("Mean over each window; count_include_pad counts padded positions too.")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("auto_pad", "NOTSET")
    .attr("ceil_mode", int64_t(0)).attr_versions(10)
    .attr("count_include_pad", int64_t(0)).attr_versions(7)
    .optional_attr("dilations", opforge::AttrType::Ints).attr_versions(19)
    .required_attr("kernel_shape", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(opforge_nn::pool_infer)
    .compute(avgpool_compute);
// Opset 18 adds ceil_mode and dilations.
OPFORGE_OP(LpPool)
    .since(2)
    .doc("p-norm over each window (padding counts as zeros).")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("auto_pad", "NOTSET")
    .attr("ceil_mode", int64_t(0)).attr_versions(18)
    .optional_attr("dilations", opforge::AttrType::Ints).attr_versions(18)
    .required_attr("kernel_shape", opforge::AttrType::Ints)
    .attr("p", int64_t(2))
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(opforge_nn::pool_infer)
    .compute(lppool_compute);
