// pool_window.h: what the windowed pooling kernels share: per-axis tap ranges, the row loop that
// feeds each output row its valid input rows, and the output shape.
#pragma once

#include <algorithm>
#include <vector>

#include "common/common.h"
#include "conv/conv.h"

namespace opforge_nn {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

/// For each output index along one axis: its first input position (start) and the kernel taps
/// [lo, hi) that land inside the input; `padded` counts the taps inside the padded input.
struct AxisTaps {
  std::vector<int64_t> start, lo, hi, padded;
};

inline AxisTaps axis_taps(const Window& w, int a) {
  AxisTaps t;
  const int64_t in = w.in[a], k = w.k[a], d = w.dil[a];
  for (int64_t o = 0; o < w.out[a]; ++o) {
    const int64_t start = o * w.stride[a] - w.pad[a];
    const int64_t lo = start >= 0 ? 0 : std::min(k, (-start + d - 1) / d);
    const int64_t hi = start >= in ? 0 : std::min(k, (in - 1 - start) / d + 1);
    const int64_t room = in + w.pad_end[a] - start;
    t.start.push_back(start);
    t.lo.push_back(lo);
    t.hi.push_back(std::max(lo, hi));
    t.padded.push_back(room <= 0 ? 0 : std::min(k, (room + d - 1) / d));
  }
  return t;
}

struct PoolPlan {
  Window w;
  AxisTaps taps[3];
  /// Per kernel column kw: input offset kw * dilation - pad, and the outputs [lo, hi) it reaches.
  std::vector<int64_t> col_offset, col_lo, col_hi;
  int64_t inner_lo = 0, inner_hi = 0;  ///< outputs every kernel column reaches
  int64_t planes;                      ///< N * C
};

template <class Ctx>
Window pool_window(const Ctx& ctx) {
  const Tensor x = ctx.input(0);
  const auto kernel = ctx.template attr<std::vector<int64_t>>("kernel_shape");
  OPFORGE_CHECK(x.ndim() >= 3, "input X must have rank >= 3 (N, C, spatial...), got ", x.ndim());
  OPFORGE_CHECK(kernel.size() == size_t(x.ndim() - 2), "attribute 'kernel_shape' has ", int64_t(kernel.size()),
                " values; expected ", x.ndim() - 2, " for an input of rank ", x.ndim());
  return opforge_nn::forward_window(ctx, x, kernel);
}

inline PoolPlan pool_plan(KernelContext& ctx) {
  PoolPlan plan;
  plan.w = pool_window(ctx);
  const Window& w = plan.w;
  for (int a = 0; a < 3; ++a) plan.taps[a] = axis_taps(w, a);
  for (int64_t kw = 0; kw < w.k[2]; ++kw) {
    int64_t lo, hi;
    const int64_t offset = kw * w.dil[2] - w.pad[2];
    valid_outputs(w.out[2], w.in[2], w.stride[2], offset, &lo, &hi);
    plan.col_offset.push_back(offset);
    plan.col_lo.push_back(lo);
    plan.col_hi.push_back(hi);
  }
  plan.inner_lo = *std::max_element(plan.col_lo.begin(), plan.col_lo.end());
  plan.inner_hi = std::max(plan.inner_lo, *std::min_element(plan.col_hi.begin(), plan.col_hi.end()));
  plan.planes = ctx.input(0).size(0) * ctx.input(0).size(1);
  return plan;
}

inline void pool_infer(InferContext& ctx) {
  const Window w = pool_window(ctx);
  const Tensor x = ctx.input(0);
  std::vector<int64_t> out{x.size(0), x.size(1)};
  for (int64_t d : w.out_dims()) out.push_back(d);
  ctx.set_output(0, x.dtype(), out);
  if (ctx.num_outputs() > 1) ctx.set_output(1, opforge::i64, out);
}

/// Runs fn(plane) for each (N, C) plane on the host's threads, about 32k taps per task.
template <class F>
void for_each_plane(KernelContext& ctx, const PoolPlan& plan, F&& fn) {
  const int64_t work = std::max<int64_t>(1, plan.w.out_size() * plan.w.k_size());
  ctx.parallel_for(plan.planes, std::max<int64_t>(1, 32768 / work), [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) fn(c);
  });
}

/// A half-open range of output columns.
struct Range {
  int64_t begin, end;
};

/// Calls fn(offset into the plane) for each tap of output column j of a row whose window covers
/// input rows `rows` (offsets into the plane). Always inlined, so fn's accumulators stay in
/// registers.
template <class F>
__attribute__((always_inline)) inline void for_each_tap(const PoolPlan& plan, const std::vector<int64_t>& rows,
                                                        int64_t j, F&& fn) {
  const int64_t s = plan.w.stride[2];
  for (int64_t row : rows)
    for (size_t kw = 0; kw < plan.col_offset.size(); ++kw)
      if (j >= plan.col_lo[kw] && j < plan.col_hi[kw]) fn(row + j * s + plan.col_offset[kw]);
}

/// Visits one plane an output row (fixed od, oh) at a time, handing the policy the input rows
/// its window covers (offsets into the plane): pool.inner(o, rows) may compute outputs o + j for
/// j in a range [begin, end) at once (SIMD) and returns that range; pool.one(o + j, j, rows)
/// computes each other output; then pool.end(o, od, oh) finishes the row, o being its first.
template <class Pool>
void pool_rows(const PoolPlan& plan, Pool& pool) {
  const Window& w = plan.w;
  const AxisTaps &td = plan.taps[0], &th = plan.taps[1];
  std::vector<int64_t> rows;
  for (int64_t od = 0; od < w.out[0]; ++od)
    for (int64_t oh = 0; oh < w.out[1]; ++oh) {
      const int64_t o = (od * w.out[1] + oh) * w.out[2];
      rows.clear();
      for (int64_t jd = td.lo[od]; jd < td.hi[od]; ++jd)
        for (int64_t jh = th.lo[oh]; jh < th.hi[oh]; ++jh)
          rows.push_back(((td.start[od] + jd * w.dil[0]) * w.in[1] + th.start[oh] + jh * w.dil[1]) * w.in[2]);
      const auto done = rows.empty() ? Range{0, 0} : pool.inner(o, rows);
      for (int64_t j = 0; j < done.begin; ++j) pool.one(o + j, j, rows);
      for (int64_t j = std::max(done.begin, done.end); j < w.out[2]; ++j) pool.one(o + j, j, rows);
      pool.end(o, od, oh);
    }
}

}  // namespace opforge_nn
