// conv.cpp: the Conv kernel (1-D/2-D/3-D, groups, dilations, strides, pads, auto_pad) lowered onto
// GEMM: 1x1 stride-1 convs multiply the input directly, others go through im2col tiles in the
// workspace, depthwise convs run a direct loop.
#include <algorithm>
#include <vector>

#include "common.h"
#include "conv.h"
#include "gemm_blas.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;
using opforge_nn::Window;

/// im2col bytes per GEMM tile, and the fewest output positions per tile (measured on Zen 3).
constexpr int64_t kTileBytes = 768 * 1024, kMinTile = 64;

struct ConvShape {
  Window w;
  int64_t n, c, m, group, cg, mg;  ///< cg / mg: input / output channels per group
  bool depthwise() const { return cg == 1; }
  /// Rows of one group's im2col matrix: cg * kernel taps.
  int64_t col_rows() const { return cg * w.k_size(); }
};

/// Checks X, W, B and the attributes, and works out the window and channel counts.
template <class Ctx>
ConvShape conv_shape(const Ctx& ctx) {
  const Tensor x = ctx.input(0), wt = ctx.input(1);
  OPFORGE_CHECK(x.dtype() == wt.dtype(), "inputs X and W differ in dtype: ", opforge::dtype_name(x.dtype()),
                " and ", opforge::dtype_name(wt.dtype()));
  OPFORGE_CHECK(wt.ndim() == x.ndim(), "weight W has rank ", wt.ndim(), " but input X has rank ", x.ndim());
  std::vector<int64_t> kernel(wt.shape() + 2, wt.shape() + wt.ndim());
  if (ctx.has_attr("kernel_shape")) {
    const auto ks = ctx.template attr<std::vector<int64_t>>("kernel_shape");
    OPFORGE_CHECK(ks.size() == kernel.size(), "attribute 'kernel_shape' has ", int64_t(ks.size()),
                  " values; expected ", int64_t(kernel.size()));
    for (size_t i = 0; i < ks.size(); ++i)
      OPFORGE_CHECK(kernel[i] < 0 || ks[i] == kernel[i], "attribute 'kernel_shape' ", ks[i],
                    " differs from W's spatial dim ", kernel[i]);
    kernel = ks;
  }
  ConvShape s;
  s.w = opforge_nn::forward_window(ctx, x, kernel);
  s.n = x.size(0), s.c = x.size(1), s.m = wt.size(0);
  s.group = ctx.template attr<int64_t>("group");
  OPFORGE_CHECK(s.group > 0, "attribute 'group' must be positive, got ", s.group);
  OPFORGE_CHECK(s.c < 0 || s.c % s.group == 0, "input channels ", s.c, " are not divisible by group ", s.group);
  OPFORGE_CHECK(s.m < 0 || s.m % s.group == 0, "output channels ", s.m, " are not divisible by group ", s.group);
  s.cg = s.c < 0 ? -1 : s.c / s.group;
  s.mg = s.m < 0 ? -1 : s.m / s.group;
  OPFORGE_CHECK(s.cg < 0 || wt.size(1) < 0 || wt.size(1) == s.cg, "weight W has ", wt.size(1),
                " input channels per group; expected C / group = ", s.cg);
  if (ctx.has_input(2)) {
    const Tensor b = ctx.input(2);
    OPFORGE_CHECK(b.ndim() == 1 && (b.size(0) == s.m || b.size(0) < 0 || s.m < 0), "bias B must have shape (",
                  s.m, "), got rank ", b.ndim());
  }
  return s;
}

void conv_infer(InferContext& ctx) {
  const ConvShape s = conv_shape(ctx);
  std::vector<int64_t> out{s.n, s.m};
  for (int64_t d : s.w.out_dims()) out.push_back(d);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

/// One group's im2col matrix, for the convs that need one.
int64_t conv_workspace(InferContext& ctx) {
  const ConvShape s = conv_shape(ctx);
  if (s.depthwise() || s.w.is_pointwise() || s.w.out_size() < 0 || s.cg < 0) return 0;
  return s.col_rows() * s.w.out_size() * opforge::dtype_size(ctx.input(0).dtype());
}

/// Output positions per GEMM tile: at most about kTileBytes of im2col, so a tile stays in L2
/// from im2col to GEMM, in a multiple of `threads` tiles of near-equal width; 0 when that
/// leaves fewer than kMinTile positions per tile (the GEMM would repack W for too few columns).
int64_t tile_columns(int64_t rows, int64_t positions, int64_t threads, int64_t elem) {
  const int64_t widest = std::max<int64_t>(kMinTile, kTileBytes / std::max<int64_t>(1, rows * elem));
  int64_t tiles = (positions + widest - 1) / widest;
  tiles = (tiles + threads - 1) / threads * threads;
  const int64_t tile = ((positions + tiles - 1) / tiles + 15) / 16 * 16;
  return tile >= kMinTile || threads == 1 ? std::min(tile, positions) : 0;
}

/// y[:, p0:p1] += bias, row by row.
template <class T>
void add_bias(const T* bias, int64_t rows, int64_t p0, int64_t p1, int64_t ld, T* y) {
  if (bias == nullptr) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = p0; i < p1; ++i) y[r * ld + i] += bias[r];
}

/// Output positions [p0, p1) of one group: im2col into the tile's own slice of `col` (none for a
/// pointwise conv, whose input is the GEMM's operand as it is), then a single-threaded GEMM.
template <class T>
void conv_tile(const ConvShape& s, const T* x, const T* wg, const T* bias, T* col, T* y, int64_t p0, int64_t p1) {
  const int64_t p = s.w.out_size(), rows = s.col_rows();
  const T* b = x + p0;
  int64_t ldb = p;
  if (col != nullptr) {
    T* tile_col = col + rows * p0;
    opforge_nn::im2col(s.w, x, s.cg, p0, p1, tile_col);
    b = tile_col;
    ldb = p1 - p0;
  }
  opforge_nn::matmul(false, false, s.mg, p1 - p0, rows, T(1), wg, rows, b, ldb, T(0), y + p0, p);
  add_bias(bias, s.mg, p0, p1, p, y);
}

/// y[n, group g] = W_g * im2col(x[n, group g]) (+ bias). Tiles of output positions run in
/// parallel; with too few positions for that, the one GEMM is split across threads instead.
template <class T>
void conv_group(KernelContext& ctx, const ConvShape& s, const T* x, const T* wg, const T* bias, T* col, T* y) {
  const int64_t p = s.w.out_size(), rows = s.col_rows();
  const int64_t tile = tile_columns(rows, p, ctx.num_threads(), int64_t(sizeof(T)));
  if (tile > 0) {
    opforge_nn::blas_threads(1);
    ctx.parallel_for((p + tile - 1) / tile, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) conv_tile(s, x, wg, bias, col, y, t * tile, std::min(p, (t + 1) * tile));
    });
    return;
  }
  if (col != nullptr) opforge_nn::im2col(s.w, x, s.cg, 0, p, col);
  opforge_nn::parallel_matmul(ctx, false, false, s.mg, p, rows, T(1), wg, rows, col != nullptr ? col : x, p, T(0),
                              y, p);
  add_bias(bias, s.mg, 0, p, p, y);
}

/// One output plane of a depthwise conv: y = bias + sum over taps of tap weight * shifted x.
/// Each tap's loop runs along an output row, so it vectorises.
template <class T>
void depthwise_plane(const Window& w, const T* x, const T* wp, T bias, T* y) {
  std::fill(y, y + w.out_size(), bias);
  const int64_t hw = w.in[1] * w.in[2], sw = w.stride[2];
  for (int64_t kd = 0; kd < w.k[0]; ++kd)
    for (int64_t kh = 0; kh < w.k[1]; ++kh)
      for (int64_t kw = 0; kw < w.k[2]; ++kw) {
        const T v = wp[(kd * w.k[1] + kh) * w.k[2] + kw];
        const int64_t off = kw * w.dil[2] - w.pad[2];
        int64_t lo, hi;
        opforge_nn::valid_outputs(w.out[2], w.in[2], sw, off, &lo, &hi);
        for (int64_t od = 0; od < w.out[0]; ++od) {
          const int64_t id = od * w.stride[0] - w.pad[0] + kd * w.dil[0];
          if (id < 0 || id >= w.in[0]) continue;
          for (int64_t oh = 0; oh < w.out[1]; ++oh) {
            const int64_t ih = oh * w.stride[1] - w.pad[1] + kh * w.dil[1];
            if (ih < 0 || ih >= w.in[1]) continue;
            const T* xr = x + id * hw + ih * w.in[2];
            T* yr = y + (od * w.out[1] + oh) * w.out[2];
            if (sw == 1)
              for (int64_t o = lo; o < hi; ++o) yr[o] += v * xr[o + off];
            else
              for (int64_t o = lo; o < hi; ++o) yr[o] += v * xr[o * sw + off];
          }
        }
      }
}

/// Depthwise conv (one input channel per group): a direct loop per output plane.
template <class T>
void conv_depthwise(KernelContext& ctx, const ConvShape& s, const T* x, const T* wt, const T* bias, T* y) {
  const int64_t p = s.w.out_size(), taps = s.w.k_size();
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, p * taps));
  ctx.parallel_for(s.n * s.m, grain, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t mm = plane % s.m, ci = mm / s.mg;  // group mm / mg reads input channel ci
      depthwise_plane(s.w, x + ((plane / s.m) * s.c + ci) * s.w.in_size(), wt + mm * taps,
                      bias != nullptr ? bias[mm] : T(0), y + plane * p);
    }
  });
}

template <class T>
void conv_typed(KernelContext& ctx) {
  const ConvShape s = conv_shape(ctx);
  const Tensor y = ctx.output(0);
  if (y.numel() == 0) return;
  const T *x = ctx.input(0).data<T>(), *wt = ctx.input(1).data<T>();
  const T* bias = ctx.has_input(2) ? ctx.input(2).data<T>() : nullptr;
  T* out = y.data<T>();
  if (s.depthwise()) return conv_depthwise(ctx, s, x, wt, bias, out);
  T* col = nullptr;
  if (!s.w.is_pointwise()) {
    col = ctx.workspace<T>();
    OPFORGE_CHECK(col != nullptr && ctx.workspace_bytes() >= s.col_rows() * s.w.out_size() * int64_t(sizeof(T)),
                  "the workspace is smaller than the im2col buffer");
  }
  opforge_nn::check_blas_dims(s.mg, s.w.out_size(), s.col_rows());
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t g = 0; g < s.group; ++g)
      conv_group(ctx, s, x + (n * s.c + g * s.cg) * s.w.in_size(), wt + g * s.mg * s.col_rows(),
                 bias != nullptr ? bias + g * s.mg : nullptr, col, out + (n * s.m + g * s.mg) * s.w.out_size());
}

void conv_compute(KernelContext& ctx) {
  const bool ok = opforge::dispatch<float, double>(ctx.input(0).dtype(), [&](auto tag) {
    conv_typed<typename decltype(tag)::type>(ctx);
  });
  OPFORGE_CHECK(ok, "Conv supports float32 and float64, got ", opforge::dtype_name(ctx.input(0).dtype()));
}

}  // namespace

OPFORGE_OP(Conv)
    .since(1)
    .doc("N-D convolution (1-D, 2-D, 3-D) with groups, dilations, strides, pads and auto_pad.")
    .input("X", {opforge::f32, opforge::f64})
    .input("W", {opforge::f32, opforge::f64})
    .optional_input("B", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("auto_pad", "NOTSET")
    .optional_attr("dilations", opforge::AttrType::Ints)
    .attr("group", int64_t(1))
    .optional_attr("kernel_shape", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(conv_infer)
    .workspace(conv_workspace)
    .compute(conv_compute);
