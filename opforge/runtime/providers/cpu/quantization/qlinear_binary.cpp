// qlinear_binary.cpp: com.microsoft's QLinearAdd, QLinearMul (broadcasting) and QLinearConcat on
// 8-bit values, with onnxruntime's float formulas so that every integer output equals its.
#include <cstring>

#include "quantization/quant.h"

namespace {

using namespace opforge_quant;

/// Keeps the compiler from fusing a product into the next sum (an FMA rounds once, onnxruntime's
/// kernels twice), which would move values that sit on a rounding boundary.
inline float rounded(float v) {
#if defined(__x86_64__)
  asm("" : "+x"(v));
#endif
  return v;
}

/// The scale and zero point of an operand: inputs `scale` and `zp` (absent zero point: 0).
struct QParams {
  float scale;
  int32_t zp;
};
QParams qparams(const KernelContext& ctx, int scale, int zp) {
  return {scales(ctx.input(scale))[0], zero_points(ctx, zp, 1)[0]};
}

enum class Binary { Add, Mul };

// Inputs: A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale, C_zero_point.
void binary_infer(InferContext& ctx) {
  const Tensor a = ctx.input(0), b = ctx.input(3);
  OPFORGE_CHECK(a.dtype() == b.dtype(), "inputs A and B differ in dtype: ", opforge::dtype_name(a.dtype()), " and ",
                opforge::dtype_name(b.dtype()));
  const char* names[] = {"", "A_scale", "A_zero_point", "", "B_scale", "B_zero_point", "C_scale", "C_zero_point"};
  for (int i : {1, 2, 4, 5, 6, 7}) expect_single(ctx, i, names[i]);
  for (int i : {2, 5, 7})
    if (ctx.has_input(i)) OPFORGE_CHECK(ctx.input(i).dtype() == a.dtype(), "input ", names[i], "'s dtype differs from A's");
  ctx.set_output(0, a.dtype(), opforge_cpu::broadcast_shapes(a.sizes(), b.sizes()));
}

template <Binary K, class Q>
void binary_run(const KernelContext& ctx, const Q* a, const Q* b, Q* c, const Shape& out, const Shape (&strides)[2]) {
  const QParams pa = qparams(ctx, 1, 2), pb = qparams(ctx, 4, 5), pc = qparams(ctx, 6, 7);
  const float lo = float(std::numeric_limits<Q>::min()), hi = float(std::numeric_limits<Q>::max());
  if constexpr (K == Binary::Add) {
    // MLAS's AVX2 kernel: fma(a, ra, fma(b, rb, zc - fma(ra, za, rb * zb))), rounded half to even and
    // saturated; an operand constant along the innermost axis takes b's place (the kernel's scalar).
    const bool swap = !out.empty() && strides[0].back() == 0 && strides[1].back() != 0;
    const QParams p0 = swap ? pb : pa, p1 = swap ? pa : pb;
    const float r0 = p0.scale / pc.scale, r1 = p1.scale / pc.scale;
    const float fixed = float(pc.zp) - std::fma(r0, float(p0.zp), rounded(r1 * float(p1.zp)));
    opforge_cpu::for_each_broadcast(out, strides, [&](int64_t i, const int64_t* o) {
      const float v0 = float(swap ? b[o[1]] : a[o[0]]), v1 = float(swap ? a[o[0]] : b[o[1]]);
      const float v = std::fma(v0, r0, std::fma(v1, r1, fixed));
      c[i] = Q(std::min(hi, std::max(lo, std::nearbyint(v))));
    });
  } else {
    // MLAS: (a - za) * (b - zb) as an integer, times sa * sb / sc, plus zc, rounded half to even, saturated.
    const float ratio = pa.scale * pb.scale / pc.scale;
    opforge_cpu::for_each_broadcast(out, strides, [&](int64_t i, const int64_t* o) {
      const int32_t p = (int32_t(a[o[0]]) - pa.zp) * (int32_t(b[o[1]]) - pb.zp);
      const float v = std::nearbyint(rounded(float(p) * ratio) + float(pc.zp));
      c[i] = Q(std::min(hi, std::max(lo, v)));
    });
  }
}

template <Binary K> void binary_compute(KernelContext& ctx) {
  const Tensor a = ctx.input(0), b = ctx.input(3), c = ctx.output(0);
  const Shape out = c.sizes();
  const Shape strides[2] = {opforge_cpu::broadcast_strides(a.sizes(), out),
                            opforge_cpu::broadcast_strides(b.sizes(), out)};
  const bool ok = opforge::dispatch<uint8_t, int8_t>(a.dtype(), [&](auto tag) {
    using Q = typename decltype(tag)::type;
    binary_run<K>(ctx, a.data<Q>(), b.data<Q>(), c.data<Q>(), out, strides);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(a.dtype()));
}

// QLinearConcat's inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per input.
void concat_infer(InferContext& ctx) {
  OPFORGE_CHECK(ctx.num_inputs() >= 5 && (ctx.num_inputs() - 2) % 3 == 0, "QLinearConcat takes Y_scale, "
                "Y_zero_point and (X, X_scale, X_zero_point) per input; got ", ctx.num_inputs(), " inputs");
  const Tensor first = ctx.input(2);
  const int64_t axis = opforge_cpu::normalize_axis(ctx.attr<int64_t>("axis"), first.ndim());
  Shape out = first.sizes();
  for (int i = 5; i < ctx.num_inputs(); i += 3) {
    const Tensor x = ctx.input(i);
    OPFORGE_CHECK(x.dtype() == first.dtype() && x.ndim() == first.ndim(), "input #", i,
                  " differs from the first in dtype or rank");
    for (int d = 0; d < x.ndim(); ++d)
      if (d != axis)
        OPFORGE_CHECK(x.size(d) == out[size_t(d)] || x.size(d) < 0 || out[size_t(d)] < 0, "input #", i,
                      " has dim ", d, " of ", x.size(d), "; expected ", out[size_t(d)]);
    out[size_t(axis)] = out[size_t(axis)] < 0 || x.size(int(axis)) < 0 ? -1 : out[size_t(axis)] + x.size(int(axis));
  }
  for (int i = 0; i < ctx.num_inputs(); ++i)
    if (i % 3 != 2) expect_single(ctx, i, i == 0 ? "Y_scale" : i == 1 ? "Y_zero_point" : "X_scale/X_zero_point");
  ctx.set_output(0, first.dtype(), out);
}

/// Each input is copied when it shares Y's scale and zero point, else mapped through a table of
/// its 256 values dequantized and quantized again (as onnxruntime builds it).
template <class Q> void concat_run(const KernelContext& ctx, int64_t axis) {
  const Tensor y = ctx.output(0);
  const QParams py = qparams(ctx, 0, 1);
  int64_t outer = 1, y_inner = 1;
  for (int d = 0; d < y.ndim(); ++d) (d < axis ? outer : y_inner) *= y.size(d);
  Q* out = y.data<Q>();
  int64_t at = 0;
  for (int i = 2; i < ctx.num_inputs(); i += 3) {
    const Tensor x = ctx.input(i);
    const QParams px = qparams(ctx, i + 1, i + 2);
    const int64_t inner = outer == 0 ? 0 : x.numel() / std::max<int64_t>(outer, 1);
    Q table[256];
    const bool copy = px.scale == py.scale && px.zp == py.zp;
    for (int v = 0; v < 256; ++v)
      table[v] = quantize<Q>(px.scale * float(int32_t(Q(v)) - px.zp), py.scale, py.zp);
    const Q* src = x.data<Q>();
    // Runs of `inner` values, split over the threads in pieces of at least 16 KiB.
    const int64_t pieces = std::max<int64_t>(1, inner / 16384);
    ctx.parallel_for(outer * pieces, 1, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / pieces, k0 = inner * (t % pieces) / pieces, k1 = inner * (t % pieces + 1) / pieces;
        const Q* from = src + o * inner;
        Q* to = out + o * y_inner + at;
        if (copy)
          std::memcpy(to + k0, from + k0, size_t(k1 - k0) * sizeof(Q));
        else
          lookup_bytes(reinterpret_cast<const uint8_t*>(table), reinterpret_cast<const uint8_t*>(from + k0),
                       reinterpret_cast<uint8_t*>(to + k0), k1 - k0);
      }
    });
    at += inner;
  }
}

void concat_compute(KernelContext& ctx) {
  const Tensor y = ctx.output(0);
  const int64_t axis = opforge_cpu::normalize_axis(ctx.attr<int64_t>("axis"), y.ndim());
  const bool ok = opforge::dispatch<uint8_t, int8_t>(y.dtype(), [&](auto tag) {
    concat_run<typename decltype(tag)::type>(ctx, axis);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(y.dtype()));
}

}  // namespace

#define QLINEAR_BINARY(NAME, KIND)                                  \
  OPFORGE_OP(NAME)                                                  \
      .domain("com.microsoft")                                      \
      .since(1)                                                     \
      .input("A", OPFORGE_Q8_DTYPES)                                \
      .input("A_scale", {opforge::f32})                             \
      .optional_input("A_zero_point", OPFORGE_Q8_DTYPES)            \
      .input("B", OPFORGE_Q8_DTYPES)                                \
      .input("B_scale", {opforge::f32})                             \
      .optional_input("B_zero_point", OPFORGE_Q8_DTYPES)            \
      .input("C_scale", {opforge::f32})                             \
      .optional_input("C_zero_point", OPFORGE_Q8_DTYPES)            \
      .output("C", OPFORGE_Q8_DTYPES)                               \
      .infer(binary_infer)                                          \
      .compute(binary_compute<KIND>)

QLINEAR_BINARY(QLinearAdd, Binary::Add);
QLINEAR_BINARY(QLinearMul, Binary::Mul);

OPFORGE_OP(QLinearConcat)
    .domain("com.microsoft")
    .since(1)
    .input("Y_scale", {opforge::f32})
    .input("Y_zero_point", OPFORGE_Q8_DTYPES)
    .variadic_input("inputs", {opforge::u8, opforge::i8, opforge::f32}, "(X, X_scale, X_zero_point) per input")
    .output("Y", OPFORGE_Q8_DTYPES)
    .required_attr("axis", opforge::AttrType::Int)
    .infer(concat_infer)
    .compute(concat_compute);
