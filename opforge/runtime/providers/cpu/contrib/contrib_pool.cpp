// contrib_pool.cpp: com.microsoft's NhwcMaxPool (what onnxruntime's NHWC transformer writes for
// 8-bit MaxPool): max pooling over channels-last 8-bit tensors, channels innermost.
#include <limits>

#include "conv/conv.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

/// The window of x (N, spatial..., C) read as (N, C, spatial...), as forward_window expects it.
template <class Ctx> opforge_nn::Window nhwc_window(const Ctx& ctx, const Tensor& x) {
  OPFORGE_CHECK(x.ndim() >= 3 && x.ndim() <= 5, "input X must be (N, spatial..., C) with 1 to 3 spatial axes, got rank ",
                x.ndim());
  opf_tensor view = *x.get();
  view.shape[1] = x.size(-1);
  for (int d = 2; d < x.ndim(); ++d) view.shape[d] = x.size(d - 1);
  OPFORGE_CHECK(ctx.has_attr("kernel_shape"), "attribute 'kernel_shape' is required");
  const auto kernel = ctx.template attr<std::vector<int64_t>>("kernel_shape");
  OPFORGE_CHECK(int(kernel.size()) == x.ndim() - 2, "attribute 'kernel_shape' has ", int64_t(kernel.size()),
                " values for ", x.ndim() - 2, " spatial axes");
  return opforge_nn::forward_window(ctx, Tensor(&view), kernel);
}

void nhwc_max_pool_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  const opforge_nn::Window w = nhwc_window(ctx, x);
  std::vector<int64_t> out{x.size(0)};
  for (int64_t d : w.out_dims()) out.push_back(d);
  out.push_back(x.size(-1));
  ctx.set_output(0, x.dtype(), out);
}

template <class T> void nhwc_max_pool(const KernelContext& ctx, const opforge_nn::Window& w, const T* x, T* y,
                                      int64_t n, int64_t c) {
  const int64_t positions = w.out_size();
  ctx.parallel_for(n * positions, std::max<int64_t>(1, 4096 / std::max<int64_t>(c * w.k_size(), 1)),
                   [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t img = r / positions, p = r % positions;
      const int64_t od = p / (w.out[1] * w.out[2]), oh = (p / w.out[2]) % w.out[1], ow = p % w.out[2];
      T* out = y + r * c;
      std::fill(out, out + c, std::numeric_limits<T>::lowest());
      for (int64_t kd = 0; kd < w.k[0]; ++kd)
        for (int64_t kh = 0; kh < w.k[1]; ++kh)
          for (int64_t kw = 0; kw < w.k[2]; ++kw) {
            const int64_t id = od * w.stride[0] - w.pad[0] + kd * w.dil[0];
            const int64_t ih = oh * w.stride[1] - w.pad[1] + kh * w.dil[1];
            const int64_t iw = ow * w.stride[2] - w.pad[2] + kw * w.dil[2];
            if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1] || iw < 0 || iw >= w.in[2]) continue;
            const T* in = x + ((img * w.in[0] + id) * w.in[1] * w.in[2] + ih * w.in[2] + iw) * c;
            for (int64_t ch = 0; ch < c; ++ch) out[ch] = in[ch] > out[ch] ? in[ch] : out[ch];
          }
    }
  });
}

void nhwc_max_pool_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const opforge_nn::Window w = nhwc_window(ctx, x);
  const bool ok = opforge::dispatch<uint8_t, int8_t>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    nhwc_max_pool(ctx, w, x.data<T>(), y.data<T>(), x.size(0), x.size(-1));
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

}  // namespace

OPFORGE_OP(NhwcMaxPool)
    .domain("com.microsoft")
    .since(1)
    .input("x", {opforge::u8, opforge::i8})
    .output("y")
    .attr("auto_pad", "NOTSET")
    .attr("ceil_mode", int64_t(0))
    .optional_attr("dilations", opforge::AttrType::Ints)
    .optional_attr("kernel_shape", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .attr("storage_order", int64_t(0))
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(nhwc_max_pool_infer)
    .compute(nhwc_max_pool_compute);
