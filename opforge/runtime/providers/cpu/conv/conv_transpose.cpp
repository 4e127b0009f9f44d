// conv_transpose.cpp: the ConvTranspose kernel (1-D/2-D/3-D, groups, dilations, output_padding,
// output_shape, auto_pad): a GEMM into a column buffer in the workspace, then col2im.
#include <algorithm>
#include <string>
#include <vector>

#include "common/common.h"
#include "conv/conv.h"
#include "gemm/gemm_blas.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;
using opforge_nn::Window;
using opforge_cpu::size_add;
using opforge_cpu::size_mul;

/// Geometry of a transposed convolution: w.in is X's spatial dims, w.out is Y's, w.pad the head
/// pads of Y; tap k of input position i lands on output position i * stride - pad + k * dilation.
struct TransposeShape {
  Window w;
  int64_t n, c, m, group, cg, mg;  ///< cg / mg: input / output channels per group
  int64_t col_rows() const { return mg * w.k_size(); }
  /// True when the transposed conv is a plain channel mix (1x1 kernel, stride 1, same size).
  bool is_pointwise() const {
    for (int a = 0; a < 3; ++a)
      if (w.k[a] != 1 || w.stride[a] != 1 || w.pad[a] != 0 || w.in[a] != w.out[a]) return false;
    return true;
  }
};

/// The output_shape attribute's spatial dims (it may also list N and C), or empty.
template <class Ctx>
std::vector<int64_t> output_shape_of(const Ctx& ctx, int rank) {
  if (!ctx.has_attr("output_shape")) return {};
  std::vector<int64_t> os = ctx.template attr<std::vector<int64_t>>("output_shape");
  if (os.size() == size_t(rank + 2)) os.erase(os.begin(), os.begin() + 2);
  OPFORGE_CHECK(os.empty() || os.size() == size_t(rank), "attribute 'output_shape' has ", int64_t(os.size()),
                " values; expected ", rank);
  return os;
}

/// Output size and head pad of one axis, by ONNX's rules (as onnxruntime applies them).
void resolve_transpose_axis(Window& w, int a, int64_t adj, int64_t pad_begin, int64_t pad_end, int64_t out_shape,
                            const std::string& auto_pad) {
  if (w.in[a] < 0) {
    w.out[a] = out_shape > 0 ? out_shape : -1;
    return;
  }
  const int64_t full = size_add(size_add(size_mul(w.stride[a], w.in[a] - 1), adj),
                                size_add(size_mul(w.k[a] - 1, w.dil[a]), 1));
  const bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  if (out_shape > 0 || same) {
    w.out[a] = out_shape > 0 ? out_shape : size_mul(w.in[a], w.stride[a]);
    const int64_t total = std::max<int64_t>(0, full - w.out[a]);
    w.pad[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
  } else {
    w.pad[a] = auto_pad == "VALID" ? 0 : pad_begin;
    w.out[a] = full - w.pad[a] - (auto_pad == "VALID" ? 0 : pad_end);
  }
  OPFORGE_CHECK(w.out[a] > 0, "output size ", w.out[a], " along spatial axis ", a - (3 - w.rank),
                " is not positive (check pads and output_shape)");
}

template <class Ctx>
Window transpose_window(const Ctx& ctx, const Tensor& x, const std::vector<int64_t>& kernel) {
  const int r = int(kernel.size());
  OPFORGE_CHECK(r >= 1 && r <= 3, "only 1, 2 or 3 spatial axes are supported, got ", r);
  using opforge_nn::axis_ints;
  const auto strides = axis_ints(ctx, "strides", r, 1), dils = axis_ints(ctx, "dilations", r, 1);
  const auto pads = axis_ints(ctx, "pads", r, 0, 2), adj = axis_ints(ctx, "output_padding", r, 0);
  const auto out_shape = output_shape_of(ctx, r);
  const std::string auto_pad = opforge_nn::auto_pad_of(ctx);
  Window w;
  w.rank = r;
  for (int i = 0; i < r; ++i) {
    const int a = 3 - r + i;
    OPFORGE_CHECK(kernel[i] > 0 && strides[i] > 0 && dils[i] > 0, "kernel_shape, strides and dilations must be "
                  "positive, got ", kernel[i], ", ", strides[i], " and ", dils[i]);
    OPFORGE_CHECK(adj[i] >= 0, "attribute 'output_padding' must be non-negative, got ", adj[i]);
    w.in[a] = x.size(2 + i);
    w.k[a] = kernel[i];
    w.stride[a] = strides[i];
    w.dil[a] = dils[i];
    resolve_transpose_axis(w, a, adj[i], pads[i], pads[i + r], out_shape.empty() ? 0 : out_shape[i], auto_pad);
  }
  return w;
}

template <class Ctx>
TransposeShape transpose_shape(const Ctx& ctx) {
  const Tensor x = ctx.input(0), wt = ctx.input(1);
  OPFORGE_CHECK(x.dtype() == wt.dtype(), "inputs X and W differ in dtype: ", opforge::dtype_name(x.dtype()),
                " and ", opforge::dtype_name(wt.dtype()));
  OPFORGE_CHECK(x.ndim() >= 3 && wt.ndim() == x.ndim(), "X and W must have the same rank >= 3, got ranks ",
                x.ndim(), " and ", wt.ndim());
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
  TransposeShape s;
  s.w = transpose_window(ctx, x, kernel);
  s.n = x.size(0), s.c = x.size(1), s.group = ctx.template attr<int64_t>("group");
  OPFORGE_CHECK(s.group > 0, "attribute 'group' must be positive, got ", s.group);
  OPFORGE_CHECK(s.c < 0 || wt.size(0) < 0 || wt.size(0) == s.c, "weight W has ", wt.size(0),
                " input channels; expected ", s.c);
  OPFORGE_CHECK(s.c < 0 || s.c % s.group == 0, "input channels ", s.c, " are not divisible by group ", s.group);
  s.cg = s.c < 0 ? -1 : s.c / s.group;
  s.mg = wt.size(1);
  s.m = s.mg < 0 ? -1 : s.mg * s.group;
  if (ctx.has_input(2)) {
    const Tensor b = ctx.input(2);
    OPFORGE_CHECK(b.ndim() == 1 && (b.size(0) == s.m || b.size(0) < 0 || s.m < 0), "bias B must have shape (",
                  s.m, "), got rank ", b.ndim());
  }
  return s;
}

void transpose_infer(InferContext& ctx) {
  const TransposeShape s = transpose_shape(ctx);
  std::vector<int64_t> out{s.n, s.m};
  for (int64_t d : s.w.out_dims()) out.push_back(d);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

/// One group's column buffer: every tap of every input position.
int64_t transpose_workspace(InferContext& ctx) {
  const TransposeShape s = transpose_shape(ctx);
  if (s.is_pointwise() || s.mg < 0 || s.w.in_size() < 0) return 0;
  return s.col_rows() * s.w.in_size() * opforge::dtype_size(ctx.input(0).dtype());
}

/// y[n, group g] from x[n, group g]: col = W_g^T * x_g, then col2im over the group's channels.
template <class T>
void transpose_group(KernelContext& ctx, const TransposeShape& s, const T* x, const T* wg, const T* bias, T* col,
                     T* y) {
  const int64_t pin = s.w.in_size(), pout = s.w.out_size(), rows = s.col_rows();
  if (col == nullptr) {  // pointwise: the GEMM writes y directly
    opforge_nn::parallel_matmul(ctx, true, false, s.mg, pin, s.cg, T(1), wg, s.mg, x, pin, T(0), y, pin);
    if (bias != nullptr)
      for (int64_t mm = 0; mm < s.mg; ++mm)
        for (int64_t i = 0; i < pout; ++i) y[mm * pout + i] += bias[mm];
    return;
  }
  opforge_nn::parallel_matmul(ctx, true, false, rows, pin, s.cg, T(1), wg, rows, x, pin, T(0), col, pin);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, rows / s.mg * pin));
  ctx.parallel_for(s.mg, grain, [&](int64_t begin, int64_t end) {
    for (int64_t mm = begin; mm < end; ++mm) {
      T* yc = y + mm * pout;
      std::fill(yc, yc + pout, bias != nullptr ? bias[mm] : T(0));
      opforge_nn::col2im(s.w, col + mm * (rows / s.mg) * pin, 1, yc);
    }
  });
}

template <class T>
void transpose_typed(KernelContext& ctx) {
  const TransposeShape s = transpose_shape(ctx);
  const Tensor y = ctx.output(0);
  if (y.numel() == 0) return;
  const T *x = ctx.input(0).data<T>(), *wt = ctx.input(1).data<T>();
  const T* bias = ctx.has_input(2) ? ctx.input(2).data<T>() : nullptr;
  T* out = y.data<T>();
  if (s.cg == 0) {  // no input channels: the output is the bias
    for (int64_t i = 0; i < y.numel(); ++i) out[i] = bias != nullptr ? bias[(i / s.w.out_size()) % s.m] : T(0);
    return;
  }
  T* col = nullptr;
  if (!s.is_pointwise()) {
    col = ctx.workspace<T>();
    OPFORGE_CHECK(col != nullptr && ctx.workspace_bytes() >= s.col_rows() * s.w.in_size() * int64_t(sizeof(T)),
                  "the workspace is smaller than the column buffer");
  }
  opforge_nn::check_blas_dims(s.col_rows(), s.w.in_size(), s.cg);
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t g = 0; g < s.group; ++g)
      transpose_group(ctx, s, x + (n * s.c + g * s.cg) * s.w.in_size(), wt + g * s.cg * s.col_rows(),
                      bias != nullptr ? bias + g * s.mg : nullptr, col, out + (n * s.m + g * s.mg) * s.w.out_size());
}

void transpose_compute(KernelContext& ctx) {
  const bool ok = opforge::dispatch<float, double>(ctx.input(0).dtype(), [&](auto tag) {
    transpose_typed<typename decltype(tag)::type>(ctx);
  });
  OPFORGE_CHECK(ok, "ConvTranspose supports float32 and float64, got ", opforge::dtype_name(ctx.input(0).dtype()));
}

}  // namespace

OPFORGE_OP(ConvTranspose)
    .since(1)
    .doc("N-D transposed convolution with groups, dilations, output_padding, output_shape and auto_pad.")
    .input("X", {opforge::f32, opforge::f64})
    .input("W", {opforge::f32, opforge::f64})
    .optional_input("B", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("auto_pad", "NOTSET")
    .optional_attr("dilations", opforge::AttrType::Ints)
    .attr("group", int64_t(1))
    .optional_attr("kernel_shape", opforge::AttrType::Ints)
    .optional_attr("output_padding", opforge::AttrType::Ints)
    .optional_attr("output_shape", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(transpose_infer)
    .workspace(transpose_workspace)
    .compute(transpose_compute);
