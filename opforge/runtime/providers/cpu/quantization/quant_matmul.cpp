// quant_matmul.cpp: MatMulInteger (int32 sums) and QLinearMatMul (requantized to 8 bits), on the
// int8 GEMM; zero points per tensor, per row of A or per column of B.
#include "quantization/quant_matmul.h"

namespace {

using namespace opforge_quant;

void matmul_integer_infer(InferContext& ctx) {
  const QMatMulShape s = qmatmul_shape(ctx.input(0), ctx.input(1));
  expect_scalar_or(ctx, 2, "a_zero_point", s.m, "row of A");
  expect_scalar_or(ctx, 3, "b_zero_point", s.n, "column of B");
  if (ctx.has_input(2))
    OPFORGE_CHECK(ctx.input(2).dtype() == ctx.input(0).dtype(), "a_zero_point's dtype differs from A's");
  if (ctx.has_input(3))
    OPFORGE_CHECK(ctx.input(3).dtype() == ctx.input(1).dtype(), "b_zero_point's dtype differs from B's");
  ctx.set_output(0, OPF_INT32, s.output());
}

void matmul_integer_compute(KernelContext& ctx) {
  const Tensor a = ctx.input(0), b = ctx.input(1);
  const QMatMulShape s = qmatmul_shape(a, b);
  const int64_t za_n = ctx.has_input(2) ? ctx.input(2).numel() : 1, zb_n = ctx.has_input(3) ? ctx.input(3).numel() : 1;
  qmatmul(ctx, s, a, b, zero_points(ctx, 2, za_n), zero_points(ctx, 3, zb_n), ctx.output(0).data<int32_t>());
}

// QLinearMatMul's inputs: a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
void qlinear_matmul_infer(InferContext& ctx) {
  const QMatMulShape s = qmatmul_shape(ctx.input(0), ctx.input(3));
  expect_single(ctx, 1, "a_scale");
  expect_single(ctx, 2, "a_zero_point");
  expect_scalar_or(ctx, 4, "b_scale", s.n, "column of B");
  expect_scalar_or(ctx, 5, "b_zero_point", s.n, "column of B");
  expect_single(ctx, 6, "y_scale");
  expect_single(ctx, 7, "y_zero_point");
  OPFORGE_CHECK(ctx.input(2).dtype() == ctx.input(0).dtype(), "a_zero_point's dtype differs from a's");
  OPFORGE_CHECK(ctx.input(5).dtype() == ctx.input(3).dtype(), "b_zero_point's dtype differs from b's");
  ctx.set_output(0, ctx.input(7).dtype(), s.output());
}

/// onnxruntime's output scales: a_scale * b_scale[n] / y_scale, in float.
std::vector<float> output_scales(const std::vector<float>& a, const std::vector<float>& b, float y) {
  std::vector<float> out(b.size());
  for (size_t i = 0; i < b.size(); ++i) out[i] = a[0] * b[i] / y;
  return out;
}

void qlinear_matmul_compute(KernelContext& ctx) {
  const Tensor a = ctx.input(0), b = ctx.input(3), y = ctx.output(0);
  const QMatMulShape s = qmatmul_shape(a, b);
  const std::vector<float> scale = output_scales(scales(ctx.input(1)), scales(ctx.input(4)), scales(ctx.input(6))[0]);
  const std::vector<int32_t> zb = zero_points(ctx, 5, ctx.input(5).numel());
  const int32_t zy = zero_points(ctx, 7, 1)[0];
  std::vector<int32_t>& acc = scratch<int32_t, 2>(size_t(y.numel()));
  qmatmul(ctx, s, a, b, zero_points(ctx, 2, 1), zb, acc.data());
  const bool ok = opforge::dispatch<uint8_t, int8_t>(y.dtype(), [&](auto tag) {
    using Q = typename decltype(tag)::type;
    Q* out = y.data<Q>();
    const int64_t n = s.n, rows = n == 0 ? 0 : y.numel() / n;
    ctx.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(n, 1)), [&](int64_t b0, int64_t e) {
      for (int64_t r = b0; r < e; ++r) {
        if (scale.size() == 1) {
          requantize_row(acc.data() + r * n, n, 0, scale[0], zy, out + r * n);
          continue;
        }
        for (int64_t j = 0; j < n; ++j) out[r * n + j] = requantize<Q>(acc[size_t(r * n + j)], scale[size_t(j)], zy);
      }
    });
  });
  OPFORGE_CHECK(ok, "unsupported output dtype ", opforge::dtype_name(y.dtype()));
}

}  // namespace

OPFORGE_OP(MatMulInteger)
    .since(10)
    .input("A", OPFORGE_Q8_DTYPES)
    .input("B", OPFORGE_Q8_DTYPES)
    .optional_input("a_zero_point", OPFORGE_Q8_DTYPES)
    .optional_input("b_zero_point", OPFORGE_Q8_DTYPES)
    .output("Y", {opforge::i32})
    .infer(matmul_integer_infer)
    .compute(matmul_integer_compute);

// Opset 21 adds float16 and bfloat16 scales.
#define QLINEAR_SCALE21_ADDED {opforge::f16, opforge::bf16}
OPFORGE_OP(QLinearMatMul)
    .since(10)
    .input("a", OPFORGE_Q8_DTYPES)
    .input("a_scale", {opforge::f32}).dtypes_since(21, QLINEAR_SCALE21_ADDED)
    .input("a_zero_point", OPFORGE_Q8_DTYPES)
    .input("b", OPFORGE_Q8_DTYPES)
    .input("b_scale", {opforge::f32}).dtypes_since(21, QLINEAR_SCALE21_ADDED)
    .input("b_zero_point", OPFORGE_Q8_DTYPES)
    .input("y_scale", {opforge::f32}).dtypes_since(21, QLINEAR_SCALE21_ADDED)
    .input("y_zero_point", OPFORGE_Q8_DTYPES)
    .output("y", OPFORGE_Q8_DTYPES)
    .infer(qlinear_matmul_infer)
    .compute(qlinear_matmul_compute);
