// conv.cpp: the Conv kernel (1-D/2-D/3-D, groups, dilations, strides, pads, auto_pad). float32
// runs on opforge's own GEMM tiles (conv_gemm_f32.cpp) where the CPU has them; otherwise it is
// lowered onto OpenBLAS: 1x1 stride-1 convs multiply the input directly, others go through
// im2col tiles in the workspace. Depthwise convs run a direct loop. FusedConv's epilogue (bias,
// residual Z, activation) is applied to each tile as it is finished.
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/common.h"
#include "conv/conv.h"
#include "conv/conv_run.h"
#include "common/kernel_paths.h"
#include "gemm/gemm_blas.h"

namespace opforge_conv {

namespace {

/// im2col bytes per GEMM tile (the tile's slice of im2col stays in L2), and the fewest output
/// positions per tile (measured).
constexpr int64_t kTileBytes = 768 * 1024, kMinTile = 64;

}  // namespace

void conv_infer(InferContext& ctx) {
  const ConvShape s = conv_shape(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), conv_output_dims(s));
}

/// One group's im2col matrix, for the convs that need one (float32 GEMM tiles pack their own).
int64_t conv_workspace(InferContext& ctx) {
  const ConvShape s = conv_shape(ctx);
  if (s.depthwise() || s.w.is_pointwise() || s.w.out_size() < 0 || s.cg < 0 || s.n < 0) return 0;
  if (kHasGemmF32 && ctx.input(0).dtype() == OPF_FLOAT32) return conv_gemm_f32_workspace(s);
  return s.col_rows() * s.w.out_size() * opforge::dtype_size(ctx.input(0).dtype());
}

namespace {

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

/// Rows [0, rows) x columns [p0, p1) of y (leading dimension ld), which already hold the sum
/// and Z: + bias per row, then the activation.
template <class T>
void finish(const Epilogue& e, const T* bias, int64_t rows, int64_t p0, int64_t p1, int64_t ld, T* y) {
  if (bias != nullptr)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = p0; i < p1; ++i) y[r * ld + i] += bias[r];
  if (e.act == Activation::None) return;
  if constexpr (std::is_same_v<T, float>) {
    activate_rows(e, y, ld, rows, p0, p1);
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = p0; i < p1; ++i) y[r * ld + i] = e.apply(y[r * ld + i]);
  }
}

/// Copies z[:, p0:p1] into y (same layout) unless they are the same memory.
template <class T>
void copy_z(const T* z, int64_t rows, int64_t p0, int64_t p1, int64_t ld, T* y) {
  if (z == y) return;
  for (int64_t r = 0; r < rows; ++r) std::memcpy(y + r * ld + p0, z + r * ld + p0, size_t(p1 - p0) * sizeof(T));
}

/// The operands of one group of one image: input, weights, bias, Z and output.
template <class T>
struct GroupArgs {
  const T *x, *w, *bias, *z;
  T* y;
};

/// Output positions [p0, p1) of one group: im2col into the tile's own slice of `col` (none for a
/// pointwise conv, whose input is the GEMM's operand as it is), then a single-threaded GEMM on
/// top of Z (when given), then the epilogue.
template <class T>
void conv_tile(const ConvShape& s, const GroupArgs<T>& g, const Epilogue& e, T* col, int64_t p0, int64_t p1) {
  const int64_t p = s.w.out_size(), rows = s.col_rows();
  const T* b = g.x + p0;
  int64_t ldb = p;
  if (col != nullptr) {
    T* tile_col = col + rows * p0;
    opforge_nn::im2col(s.w, g.x, s.cg, p0, p1, tile_col);
    b = tile_col;
    ldb = p1 - p0;
  }
  if (g.z != nullptr) copy_z(g.z, s.mg, p0, p1, p, g.y);
  opforge_nn::matmul(false, false, s.mg, p1 - p0, rows, T(1), g.w, rows, b, ldb, T(g.z != nullptr), g.y + p0, p);
  finish(e, g.bias, s.mg, p0, p1, p, g.y);
}

/// y[n, group g] = W_g * im2col(x[n, group g]) (+ bias, Z, activation). Tiles of output
/// positions run in parallel; with too few positions for that, the one GEMM is split across
/// threads instead.
template <class T>
void conv_group(KernelContext& ctx, const ConvShape& s, const GroupArgs<T>& g, const Epilogue& e, T* col) {
  const int64_t p = s.w.out_size(), rows = s.col_rows();
  const int64_t tile = tile_columns(rows, p, ctx.num_threads(), int64_t(sizeof(T)));
  if (tile > 0) {
    opforge_nn::blas_threads(1);
    ctx.parallel_for((p + tile - 1) / tile, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) conv_tile(s, g, e, col, t * tile, std::min(p, (t + 1) * tile));
    });
    return;
  }
  if (col != nullptr) opforge_nn::im2col(s.w, g.x, s.cg, 0, p, col);
  if (g.z != nullptr) copy_z(g.z, s.mg, 0, p, p, g.y);
  opforge_nn::parallel_matmul(ctx, false, false, s.mg, p, rows, T(1), g.w, rows, col != nullptr ? col : g.x, p,
                              T(g.z != nullptr), g.y, p);
  finish(e, g.bias, s.mg, 0, p, p, g.y);
}

/// One output plane of a depthwise conv: y = bias + z + sum over taps of tap weight * shifted
/// x, then the activation. Each tap's loop runs along an output row, so it vectorises.
template <class T>
void depthwise_plane(const Window& w, const T* x, const T* wp, T bias, const T* z, const Epilogue& e, T* y) {
  const int64_t n = w.out_size();
  if (z != nullptr)
    for (int64_t i = 0; i < n; ++i) y[i] = z[i] + bias;  // z may be y itself: read before written
  else
    std::fill(y, y + n, bias);
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
  finish<T>(e, nullptr, 1, 0, n, n, y);
}

/// Depthwise conv (one input channel per group): a direct loop per output plane.
template <class T>
void conv_depthwise(KernelContext& ctx, const ConvShape& s, const GroupArgs<T>& a, const Epilogue& e) {
  const int64_t p = s.w.out_size(), taps = s.w.k_size();
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, p * taps));
  ctx.parallel_for(s.n * s.m, grain, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const int64_t mm = plane % s.m, ci = mm / s.mg;  // group mm / mg reads input channel ci
      depthwise_plane(s.w, a.x + ((plane / s.m) * s.c + ci) * s.w.in_size(), a.w + mm * taps,
                      a.bias != nullptr ? a.bias[mm] : T(0), a.z != nullptr ? a.z + plane * p : nullptr, e,
                      a.y + plane * p);
    }
  });
}

/// The OpenBLAS path: per image and group, GEMM tiles over im2col (or the input itself).
template <class T>
void conv_blas(KernelContext& ctx, const ConvShape& s, const GroupArgs<T>& a, const Epilogue& e) {
  T* col = nullptr;
  if (!s.w.is_pointwise()) {
    col = ctx.workspace<T>();
    OPFORGE_CHECK(col != nullptr && ctx.workspace_bytes() >= s.col_rows() * s.w.out_size() * int64_t(sizeof(T)),
                  "the workspace is smaller than the im2col buffer");
  }
  opforge_nn::check_blas_dims(s.mg, s.w.out_size(), s.col_rows());
  const int64_t in = s.w.in_size(), out = s.w.out_size();
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t g = 0; g < s.group; ++g) {
      const int64_t yo = (n * s.m + g * s.mg) * out;
      const GroupArgs<T> ga{a.x + (n * s.c + g * s.cg) * in, a.w + g * s.mg * s.col_rows(),
                            a.bias != nullptr ? a.bias + g * s.mg : nullptr, a.z != nullptr ? a.z + yo : nullptr,
                            a.y + yo};
      conv_group(ctx, s, ga, e, col);
    }
}

template <class T>
void conv_into(KernelContext& ctx, const ConvShape& s, const GroupArgs<T>& a, const Epilogue& e) {
  if constexpr (std::is_same_v<T, float>) {
    if (s.depthwise() && conv_depthwise_f32(ctx, s, a.x, a.w, a.bias, a.z, a.y, e)) return;
    if (!s.depthwise() && conv_gemm_f32(ctx, s, a.x, a.w, a.bias, a.z, a.y, e)) return;
  }
  if (s.depthwise()) {
    OPFORGE_KERNEL_PATH("conv.depthwise.generic");
    return conv_depthwise(ctx, s, a, e);
  }
  OPFORGE_KERNEL_PATH("conv.blas");
  conv_blas(ctx, s, a, e);
}

template <class T>
void conv_typed(KernelContext& ctx, const Tensor* z, const Epilogue& e) {
  const ConvShape s = conv_shape(ctx);
  const Tensor y = ctx.output(0);
  if (y.numel() == 0) return;
  const Tensor x = ctx.input(0);
  GroupArgs<T> a{x.data<T>(), ctx.input(1).data<T>(), ctx.has_input(2) ? ctx.input(2).data<T>() : nullptr,
                 z != nullptr ? z->data<T>() : nullptr, y.data<T>()};
  if (overlap(x.raw(), x.nbytes(), y.raw(), y.nbytes())) {  // Y planned over X: compute aside
    std::vector<T> aside(size_t(y.numel()));
    T* target = a.y;
    a.y = aside.data();
    conv_into(ctx, s, a, e);
    std::memcpy(target, aside.data(), size_t(y.nbytes()));
    return;
  }
  conv_into(ctx, s, a, e);
}

void conv_compute(KernelContext& ctx) { conv_run(ctx, nullptr, Epilogue{}); }

}  // namespace

void conv_run(KernelContext& ctx, const Tensor* z, const Epilogue& e) {
  const bool ok = opforge::dispatch<float, double>(ctx.input(0).dtype(), [&](auto tag) {
    conv_typed<typename decltype(tag)::type>(ctx, z, e);
  });
  OPFORGE_CHECK(ok, "Conv supports float32 and float64, got ", opforge::dtype_name(ctx.input(0).dtype()));
}

}  // namespace opforge_conv

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
    .infer(opforge_conv::conv_infer)
    .workspace(opforge_conv::conv_workspace)
    .compute(opforge_conv::conv_compute);
