// qlinear_lookup.cpp: com.microsoft's 8-bit activations and reductions: QLinearSigmoid and
// QLinearLeakyRelu (a 256-entry table), QLinearSoftmax (a table of exponentials) and
// QLinearGlobalAveragePool, each computed as onnxruntime computes it so integers match exactly.
#include "quantization/quant.h"

namespace {

using namespace opforge_quant;

// Inputs of the table ops: X, X_scale, X_zero_point, Y_scale, Y_zero_point.
void unary_infer(InferContext& ctx) {
  expect_single(ctx, 1, "X_scale");
  expect_single(ctx, 2, "X_zero_point");
  expect_single(ctx, 3, "Y_scale");
  expect_single(ctx, 4, "Y_zero_point");
  for (int i : {2, 4})
    if (ctx.has_input(i)) OPFORGE_CHECK(ctx.input(i).dtype() == ctx.input(0).dtype(), "zero point #", i,
                                        "'s dtype differs from X's");
  ctx.set_output_like(0, 0);
}

enum class Fn { Sigmoid, LeakyRelu };

/// table[v] = quantize(f(dequantize(v))) for the 256 values v of Q, indexed by v's bits.
template <Fn F, class Q> void build_table(const KernelContext& ctx, Q* table) {
  const float xs = scales(ctx.input(1))[0], ys = scales(ctx.input(3))[0];
  const int32_t xz = zero_points(ctx, 2, 1)[0], yz = zero_points(ctx, 4, 1)[0];
  const float alpha = F == Fn::LeakyRelu ? ctx.attr<float>("alpha") : 0.f;
  for (int i = 0; i < 256; ++i) {
    const float x = xs * float(int32_t(Q(i)) - xz);
    const float y = F == Fn::Sigmoid ? 1.0f / (1.0f + std::exp(-x)) : x >= 0 ? x : x * alpha;
    table[i] = quantize<Q>(y, ys, yz);
  }
}

template <Fn F> void unary_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const bool ok = opforge::dispatch<uint8_t, int8_t>(x.dtype(), [&](auto tag) {
    using Q = typename decltype(tag)::type;
    Q table[256];
    build_table<F>(ctx, table);
    lookup_bytes(reinterpret_cast<const uint8_t*>(table), reinterpret_cast<const uint8_t*>(x.data<Q>()),
                 reinterpret_cast<uint8_t*>(y.data<Q>()), x.numel());
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

/// exp(x_scale * (v - 255 + shift)) for the 256 byte values, the shift keeping a row's sum of up
/// to `d` terms in range (onnxruntime's table; int8 values are indexed by their bits).
void softmax_table(float x_scale, int64_t d, bool is_signed, float* table) {
  double shift = std::log(double(std::numeric_limits<float>::max() / float(d)));
  shift = std::max(0.0, shift - 5.0) / double(x_scale);
  for (int i = 0; i < 256; ++i)
    table[uint8_t(is_signed ? i - 128 : i)] = float(std::exp((double(i) - 255 + shift) * double(x_scale)));
}

/// One row of d values (stride 1): exponentials from the table shifted so the row's max reads
/// the top entry, divided by their sum, times floor(1 / y_scale), rounded, plus y's zero point.
template <class Q> void softmax_row(const Q* x, Q* y, int64_t d, const float* table, float y_scale, int32_t yz) {
  const Q xmax = *std::max_element(x, x + d);
  auto entry = [&](Q v) {
    if constexpr (std::is_same_v<Q, uint8_t>) return table[255 - xmax + v];
    else return table[uint8_t(int32_t(127) - xmax + v)];
  };
  float sum = 0.f;
  for (int64_t i = 0; i < d; ++i) sum += entry(x[i]);
  if (sum == 0.f) return;
  for (int64_t i = 0; i < d; ++i) {
    const int32_t q = int32_t(std::nearbyint((entry(x[i]) * y_scale) / sum)) + yz;
    y[i] = q > 255 ? Q(255) : Q(q);  // onnxruntime's clamp, for int8 too
  }
}

void softmax_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() > 0, "input X must have rank >= 1, got a scalar");
  opforge_cpu::normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  expect_single(ctx, 1, "X_scale");
  expect_single(ctx, 3, "y_scale");
  expect_single(ctx, 4, "y_zero_point");
  ctx.set_output_like(0, 0);
}

/// Rows along `axis` (opset 13) or the flattened tail from `axis` (the attribute opset < 13).
void softmax_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const int64_t axis = opforge_cpu::normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  const bool flat = ctx.attr<int64_t>("opset") < 13;
  int64_t outer = 1, n = 1, inner = 1;
  for (int d = 0; d < x.ndim(); ++d) (d < axis ? outer : d == axis || flat ? n : inner) *= x.size(d);
  if (x.numel() == 0) return;
  float table[256];
  softmax_table(scales(ctx.input(1))[0], n, x.dtype() == OPF_INT8, table);
  const float y_scale = std::floor(1.0f / scales(ctx.input(3))[0]);
  const int32_t yz = zero_points(ctx, 4, 1)[0];
  const bool ok = opforge::dispatch<uint8_t, int8_t>(x.dtype(), [&](auto tag) {
    using Q = typename decltype(tag)::type;
    const Q* xp = x.data<Q>();
    Q* yp = y.data<Q>();
    ctx.parallel_for(outer * inner, std::max<int64_t>(1, 4096 / n), [&](int64_t b, int64_t e) {
      std::vector<Q> xr(static_cast<size_t>(n)), yr(static_cast<size_t>(n));
      for (int64_t r = b; r < e; ++r) {
        const int64_t base = (r / inner) * n * inner + r % inner;
        for (int64_t j = 0; j < n; ++j) xr[size_t(j)] = xp[base + j * inner], yr[size_t(j)] = Q(0);
        softmax_row(xr.data(), yr.data(), n, table, y_scale, yz);
        for (int64_t j = 0; j < n; ++j) yp[base + j * inner] = yr[size_t(j)];
      }
    });
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

void gap_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() >= 3, "input X must have rank >= 3 (N, C, spatial...), got ", x.ndim());
  for (int i : {1, 2, 3, 4}) expect_single(ctx, i, "scales and zero points");
  Shape out = x.sizes();
  const bool last = ctx.attr<int64_t>("channels_last") != 0;
  for (int d = last ? 1 : 2; d < x.ndim() - (last ? 1 : 0); ++d) out[size_t(d)] = 1;
  ctx.set_output(0, x.dtype(), out);
}

/// Each channel's int32 sum less size * x_zero_point, times x_scale / (y_scale * size), requantized.
void gap_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const bool last = ctx.attr<int64_t>("channels_last") != 0;
  const int64_t n = x.size(0), c = x.size(last ? -1 : 1), size = c == 0 || n == 0 ? 0 : x.numel() / (n * c);
  const float scale = scales(ctx.input(1))[0] / (scales(ctx.input(3))[0] * float(size));
  const int32_t xz = zero_points(ctx, 2, 1)[0], yz = zero_points(ctx, 4, 1)[0];
  const bool ok = opforge::dispatch<uint8_t, int8_t>(x.dtype(), [&](auto tag) {
    using Q = typename decltype(tag)::type;
    const Q* xp = x.data<Q>();
    Q* yp = y.data<Q>();
    ctx.parallel_for(n * c, std::max<int64_t>(1, 16384 / std::max<int64_t>(size, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t img = r / c, ch = r % c;
        int32_t sum = -xz * int32_t(size);
        for (int64_t i = 0; i < size; ++i)
          sum += last ? xp[(img * size + i) * c + ch] : xp[r * size + i];
        yp[r] = requantize<Q>(sum, scale, yz);
      }
    });
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

}  // namespace

#define QLINEAR_UNARY(NAME, FN)                                 \
  OPFORGE_OP(NAME)                                              \
      .domain("com.microsoft")                                  \
      .since(1)                                                 \
      .input("X", OPFORGE_Q8_DTYPES)                            \
      .input("X_scale", {opforge::f32})                         \
      .optional_input("X_zero_point", OPFORGE_Q8_DTYPES)        \
      .input("Y_scale", {opforge::f32})                         \
      .optional_input("Y_zero_point", OPFORGE_Q8_DTYPES)        \
      .output("Y", OPFORGE_Q8_DTYPES)                           \
      .infer(unary_infer)                                       \
      .compute(unary_compute<FN>)

QLINEAR_UNARY(QLinearSigmoid, Fn::Sigmoid);
QLINEAR_UNARY(QLinearLeakyRelu, Fn::LeakyRelu).attr("alpha", 0.01f);

OPFORGE_OP(QLinearSoftmax)
    .domain("com.microsoft")
    .since(1)
    .input("X", OPFORGE_Q8_DTYPES)
    .input("X_scale", {opforge::f32})
    .optional_input("x_zero_point", OPFORGE_Q8_DTYPES, "unused: softmax ignores a shift")
    .input("y_scale", {opforge::f32})
    .optional_input("y_zero_point", OPFORGE_Q8_DTYPES)
    .output("Y", OPFORGE_Q8_DTYPES)
    .attr("axis", int64_t(-1))
    .required_attr("opset", opforge::AttrType::Int, "the Softmax opset it stands for: < 13 flattens from axis")
    .infer(softmax_infer)
    .compute(softmax_compute);

OPFORGE_OP(QLinearGlobalAveragePool)
    .domain("com.microsoft")
    .since(1)
    .input("X", OPFORGE_Q8_DTYPES)
    .input("x_scale", {opforge::f32})
    .input("x_zero_point", OPFORGE_Q8_DTYPES)
    .input("y_scale", {opforge::f32})
    .input("y_zero_point", OPFORGE_Q8_DTYPES)
    .output("Y", OPFORGE_Q8_DTYPES)
    .attr("channels_last", int64_t(0))
    .infer(gap_infer)
    .compute(gap_compute);
