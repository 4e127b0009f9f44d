// conv.h: sliding-window geometry (kernel, strides, dilations, pads, auto_pad, ceil_mode) and
// the im2col / col2im loops shared by Conv, ConvTranspose and the pooling kernels.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "common/common.h"

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#endif

namespace opforge_nn {

using opforge::Tensor;
using opforge_cpu::size_add;
using opforge_cpu::size_mul;

/// A window over up to 3 spatial axes. Ops with fewer axes are padded in front with size-1
/// axes (kernel 1, stride 1, no pads), so one 3-D loop nest serves 1-D, 2-D and 3-D ops.
struct Window {
  int rank = 0;  ///< the op's own number of spatial axes
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, pad_end[3] = {0, 0, 0};

  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
  /// True when every axis has kernel 1, stride 1 and no pads: the window is the identity.
  bool is_pointwise() const {
    for (int a = 0; a < 3; ++a)
      if (k[a] != 1 || stride[a] != 1 || pad[a] != 0 || pad_end[a] != 0) return false;
    return true;
  }
  /// The output's spatial dims, in the op's own rank.
  std::vector<int64_t> out_dims() const { return std::vector<int64_t>(out + 3 - rank, out + 3); }
};

/// An ints attribute with one value per spatial axis (times `per_axis`), or `fill` when absent.
template <class Ctx>
std::vector<int64_t> axis_ints(const Ctx& ctx, const char* name, int rank, int64_t fill, int per_axis = 1) {
  std::vector<int64_t> v;
  if (ctx.has_attr(name)) v = ctx.template attr<std::vector<int64_t>>(name);
  if (v.empty()) return std::vector<int64_t>(size_t(rank * per_axis), fill);
  OPFORGE_CHECK(v.size() == size_t(rank * per_axis), "attribute '", name, "' has ", int64_t(v.size()),
                " values; expected ", rank * per_axis, " for ", rank, " spatial axes");
  return v;
}

/// The auto_pad attribute, checked against ONNX's four values.
template <class Ctx>
std::string auto_pad_of(const Ctx& ctx) {
  std::string p = ctx.has_attr("auto_pad") ? ctx.template attr<std::string>("auto_pad") : "NOTSET";
  if (p.empty()) p = "NOTSET";
  OPFORGE_CHECK(p == "NOTSET" || p == "VALID" || p == "SAME_UPPER" || p == "SAME_LOWER",
                "attribute 'auto_pad' must be NOTSET, VALID, SAME_UPPER or SAME_LOWER, got '", p, "'");
  return p;
}

/// Output size and pads of one forward axis (Conv and the pools), by ONNX's rules.
inline void resolve_axis(const std::string& auto_pad, bool ceil_mode, Window& w, int a) {
  const int64_t in = w.in[a], s = w.stride[a], dk = size_add(size_mul(w.k[a] - 1, w.dil[a]), 1);
  if (in < 0) {  // unknown during static shape inference
    w.out[a] = -1;
    return;
  }
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    w.out[a] = size_add(in, s - 1) / s;
    const int64_t total = std::max<int64_t>(0, (w.out[a] - 1) * s + dk - in);
    w.pad[a] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    w.pad_end[a] = total - w.pad[a];
    return;
  }
  if (auto_pad == "VALID") w.pad[a] = w.pad_end[a] = 0;
  const int64_t padded = size_add(size_add(in, w.pad[a]), w.pad_end[a]), span = size_add(padded, -dk);
  OPFORGE_CHECK(span >= 0, "the (dilated) kernel ", dk, " is larger than the padded input ", padded,
                " along spatial axis ", a - (3 - w.rank));
  w.out[a] = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  // A last window that would start inside the end padding is dropped (ONNX and onnxruntime).
  if (ceil_mode && (w.out[a] - 1) * s >= size_add(in, w.pad[a])) --w.out[a];
}

/// The forward window of an op over input `x` (N, C, spatial...) with kernel dims `kernel`.
/// Reads strides, dilations, pads, auto_pad and ceil_mode when the op declares them.
template <class Ctx>
Window forward_window(const Ctx& ctx, const Tensor& x, const std::vector<int64_t>& kernel) {
  const int r = int(kernel.size());
  OPFORGE_CHECK(r >= 1 && r <= 3, "only 1, 2 or 3 spatial axes are supported, got ", r);
  OPFORGE_CHECK(x.ndim() == r + 2, "input X has rank ", x.ndim(), "; expected ", r + 2,
                " (N, C and ", r, " spatial axes)");
  const auto strides = axis_ints(ctx, "strides", r, 1), dils = axis_ints(ctx, "dilations", r, 1);
  const auto pads = axis_ints(ctx, "pads", r, 0, 2);
  const std::string auto_pad = auto_pad_of(ctx);
  const bool ceil_mode = ctx.has_attr("ceil_mode") && ctx.template attr<int64_t>("ceil_mode") != 0;
  Window w;
  w.rank = r;
  for (int i = 0; i < r; ++i) {
    const int a = 3 - r + i;
    OPFORGE_CHECK(kernel[i] > 0, "kernel_shape must be positive, got ", kernel[i]);
    OPFORGE_CHECK(strides[i] > 0, "attribute 'strides' must be positive, got ", strides[i]);
    OPFORGE_CHECK(dils[i] > 0, "attribute 'dilations' must be positive, got ", dils[i]);
    OPFORGE_CHECK(pads[i] >= 0 && pads[i + r] >= 0, "attribute 'pads' must be non-negative, got ",
                  pads[i], " and ", pads[i + r]);
    w.in[a] = x.size(2 + i);
    w.k[a] = kernel[i];
    w.stride[a] = strides[i];
    w.dil[a] = dils[i];
    w.pad[a] = pads[i];
    w.pad_end[a] = pads[i + r];
    resolve_axis(auto_pad, ceil_mode, w, a);
  }
  return w;
}

/// Output indices [lo, hi) along one axis whose tap o*stride + offset lands inside [0, in).
inline void valid_outputs(int64_t n_out, int64_t in, int64_t stride, int64_t offset, int64_t* lo, int64_t* hi) {
  *lo = offset >= 0 ? 0 : std::min(n_out, (-offset + stride - 1) / stride);
  *hi = offset >= in ? 0 : std::min(n_out, (in - 1 - offset) / stride + 1);
  if (*hi < *lo) *hi = *lo;
}

/// One im2col row segment: col[o - ow0] = x_row[o * s + offset] for o in [ow0, ow1), where only
/// o in [lo, hi) land inside the row; the rest are padding, `fill` (a quantized input's zero point).
template <class T>
inline void gather_row(const T* x_row, int64_t s, int64_t offset, int64_t lo, int64_t hi, int64_t ow0, int64_t ow1,
                       T* col, T fill = T(0)) {
  lo = std::min(std::max(lo, ow0), ow1);
  hi = std::max(std::min(hi, ow1), lo);
  std::fill(col, col + (lo - ow0), fill);
  T* mid = col + (lo - ow0);
  if (s == 1) {
    const T* src = x_row + lo + offset;
    for (int64_t i = 0; i < hi - lo; ++i) mid[i] = src[i];
  } else {
    const T* src = x_row + lo * s + offset;
    int64_t i = 0;
#if defined(__AVX512BW__) && defined(__AVX512VL__)
    // 8-bit stride 2 (a quantized stem conv): the low bytes of 16-bit pairs, 32 outputs a block.
    if constexpr (sizeof(T) == 1)
      if (s == 2)
        for (; i < hi - lo; i += 32) {
          const int64_t count = std::min<int64_t>(32, hi - lo - i);
          const __mmask64 taps = count == 32 ? ~__mmask64(0) >> 1 : (__mmask64(1) << (2 * count - 1)) - 1;
          _mm256_mask_storeu_epi8(mid + i, __mmask32((uint64_t(1) << count) - 1),
                                  _mm512_cvtepi16_epi8(_mm512_maskz_loadu_epi8(taps, src + 2 * i)));
        }
#endif
    for (; i < hi - lo; ++i) mid[i] = src[i * s];
  }
  std::fill(mid + (hi - lo), col + (ow1 - ow0), fill);
}

/// im2col of `channels` input planes for output positions [p0, p1): row r = (c, kd, kh, kw) of
/// `col` (leading dimension p1 - p0) holds the tap r of every output position in the range.
/// The range is walked in runs along the output's last axis, with no divisions per run.
/// Taps in the padding read `fill`.
template <class T>
void im2col(const Window& w, const T* x, int64_t channels, int64_t p0, int64_t p1, T* col, T fill = T(0)) {
  const int64_t ld = p1 - p0, hw = w.in[1] * w.in[2];
  const int64_t od0 = p0 / (w.out[1] * w.out[2]), oh0 = (p0 / w.out[2]) % w.out[1], ow0 = p0 % w.out[2];
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * w.in_size();
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw, col += ld) {
          const int64_t off_w = kw * w.dil[2] - w.pad[2];
          int64_t lo, hi;
          valid_outputs(w.out[2], w.in[2], w.stride[2], off_w, &lo, &hi);
          int64_t od = od0, oh = oh0, ow = ow0;
          for (T* dst = col; dst < col + ld;) {
            const int64_t n = std::min<int64_t>(col + ld - dst, w.out[2] - ow);
            const int64_t id = od * w.stride[0] - w.pad[0] + kd * w.dil[0];
            const int64_t ih = oh * w.stride[1] - w.pad[1] + kh * w.dil[1];
            if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1])
              std::fill(dst, dst + n, fill);
            else
              gather_row(xc + id * hw + ih * w.in[2], w.stride[2], off_w, lo, hi, ow, ow + n, dst, fill);
            dst += n;
            ow = 0;
            if (++oh == w.out[1]) oh = 0, ++od;
          }
        }
  }
}

/// col2im of `channels` planes of y (a transposed convolution's output, dims w.out): y[c] += every
/// tap of col, whose rows are (c, kd, kh, kw) and whose columns are the positions of w.in (the
/// transposed convolution's input); tap k of input i lands on output i * stride - pad + k * dil.
template <class T>
void col2im(const Window& w, const T* col, int64_t channels, T* y) {
  const int64_t n_in = w.in_size();
  for (int64_t c = 0; c < channels; ++c) {
    T* yc = y + c * w.out_size();
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw, col += n_in) {
          int64_t w_lo, w_hi;
          const int64_t off_w = kw * w.dil[2] - w.pad[2];
          valid_outputs(w.in[2], w.out[2], w.stride[2], off_w, &w_lo, &w_hi);
          for (int64_t id = 0; id < w.in[0]; ++id) {
            const int64_t od = id * w.stride[0] - w.pad[0] + kd * w.dil[0];
            if (od < 0 || od >= w.out[0]) continue;
            for (int64_t ih = 0; ih < w.in[1]; ++ih) {
              const int64_t oh = ih * w.stride[1] - w.pad[1] + kh * w.dil[1];
              if (oh < 0 || oh >= w.out[1]) continue;
              const T* src = col + (id * w.in[1] + ih) * w.in[2];
              T* dst = yc + (od * w.out[1] + oh) * w.out[2];
              const int64_t s = w.stride[2];
              for (int64_t i = w_lo; i < w_hi; ++i) dst[i * s + off_w] += src[i];
            }
          }
        }
  }
}

}  // namespace opforge_nn
