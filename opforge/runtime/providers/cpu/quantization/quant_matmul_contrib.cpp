// quant_matmul_contrib.cpp: com.microsoft's MatMulIntegerToFloat and DynamicQuantizeMatMul (what
// onnxruntime fuses quantize_dynamic's MatMulInteger chains into): the int8 GEMM's sums scaled
// back to float, plus an optional bias per column.
#include <algorithm>

#include "quantization/quant_matmul.h"

namespace {

using namespace opforge_quant;

/// Where each operand sits among the op's inputs (-1: the op has none).
struct Inputs {
  int a, b, a_scale, b_scale, a_zp, b_zp, bias;
};
constexpr Inputs kIntegerToFloat{0, 1, 2, 3, 4, 5, 6};
constexpr Inputs kDynamicQuantize{0, 1, -1, 2, -1, 3, 4};

template <class Ctx> QMatMulShape checked_shape(const Ctx& ctx, Inputs in) {
  const QMatMulShape s = qmatmul_shape(ctx.input(in.a), ctx.input(in.b));
  if (in.a_scale >= 0) expect_single(ctx, in.a_scale, "a_scale");
  if (in.a_zp >= 0) expect_single(ctx, in.a_zp, "a_zero_point");
  expect_scalar_or(ctx, in.b_scale, "b_scale", s.n, "column of B");
  expect_scalar_or(ctx, in.b_zp, "b_zero_point", s.n, "column of B");
  if (ctx.has_input(in.bias)) {
    const Tensor bias = ctx.input(in.bias);
    OPFORGE_CHECK(bias.ndim() == 1 && (bias.size(0) == s.n || bias.size(0) < 0 || s.n < 0),
                  "bias must be 1-D with one value per column of B (", s.n, ")");
  }
  if (ctx.has_input(in.b_zp))
    OPFORGE_CHECK(ctx.input(in.b_zp).dtype() == ctx.input(in.b).dtype(), "b_zero_point's dtype differs from B's");
  return s;
}

template <bool kDynamic> void infer(InferContext& ctx) {
  const QMatMulShape s = checked_shape(ctx, kDynamic ? kDynamicQuantize : kIntegerToFloat);
  ctx.set_output(0, OPF_FLOAT32, s.output());
}

/// y = acc * (a_scale * b_scale[n]) + bias[n].
void scale_out(const KernelContext& ctx, Inputs in, const int32_t* acc, float a_scale, int64_t n, float* y,
               int64_t count) {
  const std::vector<float> bs = scales(ctx.input(in.b_scale));
  std::vector<float> mult(bs.size());
  for (size_t i = 0; i < bs.size(); ++i) mult[i] = a_scale * bs[i];
  if (mult.size() == 1) mult.assign(size_t(n), mult[0]);
  const std::vector<float> zeros(ctx.has_input(in.bias) ? 0 : size_t(n), 0.f);
  const float* bias = ctx.has_input(in.bias) ? ctx.input(in.bias).data<float>() : zeros.data();
  // Row by row, so that the loop over columns vectorises (was a division per element).
  const int64_t rows = n == 0 ? 0 : count / n;
  ctx.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int32_t* ar = acc + r * n;
      float* yr = y + r * n;
      for (int64_t j = 0; j < n; ++j) yr[j] = float(ar[j]) * mult[size_t(j)] + bias[j];
    }
  });
}

void integer_to_float_compute(KernelContext& ctx) {
  const Inputs in = kIntegerToFloat;
  const QMatMulShape s = checked_shape(ctx, in);
  const Tensor y = ctx.output(0);
  std::vector<int32_t>& acc = scratch<int32_t, 2>(size_t(y.numel()));
  const int64_t zb_n = ctx.has_input(in.b_zp) ? ctx.input(in.b_zp).numel() : 1;
  qmatmul(ctx, s, ctx.input(in.a), ctx.input(in.b), zero_points(ctx, in.a_zp, 1), zero_points(ctx, in.b_zp, zb_n),
          acc.data());
  scale_out(ctx, in, acc.data(), scales(ctx.input(in.a_scale))[0], s.n, y.data<float>(), y.numel());
}

/// A is quantized to uint8 as DynamicQuantizeLinear would, then multiplied as above.
void dynamic_quantize_compute(KernelContext& ctx) {
  const Inputs in = kDynamicQuantize;
  const QMatMulShape s = checked_shape(ctx, in);
  const Tensor a = ctx.input(in.a), y = ctx.output(0);
  const float* ap = a.data<float>();
  float a_scale;
  int32_t a_zp;
  dynamic_qparams(ap, a.numel(), &a_scale, &a_zp);
  std::vector<uint8_t> aq(size_t(a.numel()));
  quantize_row(ap, a.numel(), a_scale, a_zp, aq.data());
  opf_tensor view = *a.get();
  view.dtype = OPF_UINT8;
  view.data = aq.data();
  std::vector<int32_t>& acc = scratch<int32_t, 2>(size_t(y.numel()));
  const int64_t zb_n = ctx.has_input(in.b_zp) ? ctx.input(in.b_zp).numel() : 1;
  qmatmul(ctx, s, Tensor(&view), ctx.input(in.b), {a_zp}, zero_points(ctx, in.b_zp, zb_n), acc.data());
  scale_out(ctx, in, acc.data(), a_scale, s.n, y.data<float>(), y.numel());
}

}  // namespace

OPFORGE_OP(MatMulIntegerToFloat)
    .domain("com.microsoft")
    .since(1)
    .input("A", OPFORGE_Q8_DTYPES)
    .input("B", OPFORGE_Q8_DTYPES)
    .input("a_scale", {opforge::f32})
    .input("b_scale", {opforge::f32})
    .optional_input("a_zero_point", OPFORGE_Q8_DTYPES)
    .optional_input("b_zero_point", OPFORGE_Q8_DTYPES)
    .optional_input("bias", {opforge::f32})
    .output("Y", {opforge::f32})
    .infer(infer<false>)
    .compute(integer_to_float_compute);

OPFORGE_OP(DynamicQuantizeMatMul)
    .domain("com.microsoft")
    .since(1)
    .input("A", {opforge::f32})
    .input("B", OPFORGE_Q8_DTYPES)
    .input("b_scale", {opforge::f32})
    .optional_input("b_zero_point", OPFORGE_Q8_DTYPES)
    .optional_input("bias", {opforge::f32})
    .output("Y", {opforge::f32})
    .infer(infer<true>)
    .compute(dynamic_quantize_compute);
