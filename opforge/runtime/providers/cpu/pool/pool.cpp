// pool.cpp: the MaxPool kernel (1-D/2-D/3-D, pads, auto_pad, ceil_mode, dilations, optional
// Indices in either storage order), one (N, C) plane per task.
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/kernel_paths.h"
#include "pool/pool_f32.h"
#include "pool/pool_separable.h"
#include "pool/pool_simd.h"
#include "pool/pool_window.h"

namespace {

using opforge::KernelContext;
using opforge_nn::PoolPlan;
using opforge_nn::Window;

/// Column-major (storage_order 1) position of row-major offset `i` in a D x H x W plane.
inline int64_t column_major(const Window& w, int64_t i) {
  const int64_t iw = i % w.in[2], ih = (i / w.in[2]) % w.in[1], id = i / (w.in[1] * w.in[2]);
  return (iw * w.in[1] + ih) * w.in[0] + id;
}

/// One plane of MaxPool, for opforge_nn::pool_rows: the max of each window and, when `idx` is
/// set, its plane-relative row-major position (ties keep the first in the window's order).
template <class T>
struct MaxRows {
  const PoolPlan& plan;
  const T* x;
  T* y;
  int64_t* idx;
  opforge_nn::Range inner(int64_t o, const std::vector<int64_t>& rows) {
    if (idx != nullptr) return with_indices(o, rows);
    auto max = [](auto a, auto b) { return b > a ? b : a; };
    return opforge_nn::stationary(x, rows, plan, std::numeric_limits<T>::lowest(), max, y + o);
  }
  /// The whole row with positions: tap by tap, each tap's loop running along the row.
  opforge_nn::Range with_indices(int64_t o, const std::vector<int64_t>& rows) {
    const int64_t n = plan.w.out[2], s = plan.w.stride[2];
    T* yo = y + o;
    int64_t* io = idx + o;
    std::fill(yo, yo + n, std::numeric_limits<T>::lowest());
    std::fill(io, io + n, int64_t(-1));
    for (int64_t row : rows)
      for (size_t kw = 0; kw < plan.col_offset.size(); ++kw) {
        const int64_t first = row + plan.col_offset[kw];
        for (int64_t j = plan.col_lo[kw]; j < plan.col_hi[kw]; ++j) {
          // Unconditional loads and selects, which vectorise where the stride allows.
          const T v = x[first + j * s], cur = yo[j];
          const int64_t at = io[j];
          const bool take = (v > cur) | (at < 0);
          yo[j] = take ? v : cur;
          io[j] = take ? first + j * s : at;
        }
      }
    return {0, n};
  }
  void one(int64_t o, int64_t j, const std::vector<int64_t>& rows) {
    T best = std::numeric_limits<T>::lowest();
    int64_t arg = -1;
    opforge_nn::for_each_tap(plan, rows, j, [&](int64_t i) {
      if (x[i] > best || arg < 0) best = x[i], arg = i;
    });
    y[o] = best;
    if (idx != nullptr) idx[o] = arg;
  }
  void end(int64_t, int64_t, int64_t) {}
};

template <class T>
void maxpool_typed(KernelContext& ctx) {
  const PoolPlan plan = opforge_nn::pool_plan(ctx);
  const T* x = ctx.input(0).data<T>();
  T* y = ctx.output(0).data<T>();
  const bool want_idx = ctx.num_outputs() > 1 && ctx.output(1).has_data();
  int64_t* idx = want_idx ? ctx.output(1).data<int64_t>() : nullptr;
  const int64_t order = ctx.has_attr("storage_order") ? ctx.attr<int64_t>("storage_order") : 0;
  OPFORGE_CHECK(order == 0 || order == 1, "attribute 'storage_order' must be 0 or 1, got ", order);
  if constexpr (std::is_same_v<T, float>)
    if (idx == nullptr && opforge_nn::pool_f32(ctx, plan, true, false)) return;
  const int64_t in_size = plan.w.in_size(), out_size = plan.w.out_size();
  if constexpr (sizeof(T) == 1)
    if (idx == nullptr && opforge_nn::separable_max_fits(plan.w)) {
#if defined(__AVX2__)
      OPFORGE_KERNEL_PATH("pool.max8.separable");
#endif
      const opforge_nn::RegisterRows registers(plan.w);
      const bool in_registers = opforge_nn::RegisterRows::fits(plan.w);
      opforge_nn::for_each_plane(ctx, plan, [&](int64_t c) {
        static thread_local std::vector<T> row;
        opforge_nn::separable_max_plane(plan, x + c * in_size, y + c * out_size, row,
                                        in_registers ? &registers : nullptr);
      });
      return;
    }
  OPFORGE_KERNEL_PATH("pool.max.generic");
  opforge_nn::for_each_plane(ctx, plan, [&](int64_t c) {
    int64_t* plane_idx = idx != nullptr ? idx + c * out_size : nullptr;
    MaxRows<T> rows{plan, x + c * in_size, y + c * out_size, plane_idx};
    opforge_nn::pool_rows(plan, rows);
    if (plane_idx == nullptr) return;
    // Indices count from the start of X, in the asked storage order.
    for (int64_t o = 0; o < out_size; ++o) {
      const int64_t at = plane_idx[o];
      if (at >= 0) plane_idx[o] = c * in_size + (order == 0 ? at : column_major(plan.w, at));
    }
  });
}

void maxpool_compute(KernelContext& ctx) {
  const bool ok = opforge::dispatch<float, double, int8_t, uint8_t>(ctx.input(0).dtype(), [&](auto tag) {
    maxpool_typed<typename decltype(tag)::type>(ctx);
  });
  OPFORGE_CHECK(ok, "MaxPool does not support dtype ", opforge::dtype_name(ctx.input(0).dtype()));
}

}  // namespace
OPFORGE_OP(MaxPool)
    .since(1)
    .doc("Max over each window.")
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("auto_pad", "NOTSET")
    .required_attr("kernel_shape", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(opforge_nn::pool_infer)
    .compute(maxpool_compute);

// Opset 8 adds the Indices output (a new signature) and storage_order; 10 adds ceil_mode and
// dilations, 12 int8 and uint8.
OPFORGE_OP(MaxPool)
    .since(8)
    .doc("Max over each window, and optionally where it was (flat indices into X).")
    .input("X", {opforge::f32, opforge::f64}).dtypes_since(12, {opforge::i8, opforge::u8})
    .output("Y")
    .optional_output("Indices", {opforge::i64})
    .attr("auto_pad", "NOTSET")
    .attr("ceil_mode", int64_t(0)).attr_versions(10)
    .optional_attr("dilations", opforge::AttrType::Ints).attr_versions(10)
    .required_attr("kernel_shape", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .attr("storage_order", int64_t(0))
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(opforge_nn::pool_infer)
    .compute(maxpool_compute);
