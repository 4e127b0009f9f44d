// contrib_matmul_nbits.cpp: com.microsoft's MatMulNBits (weights of 2, 4 or 8 bits in blocks along
// K, each block with a float scale and an optional zero point, as LLM exporters write them):
// the weights are dequantized to float and multiplied on OpenBLAS.
#include <vector>

#include "gemm/gemm_blas.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

/// The attributes and the shapes they imply.
struct NBits {
  int64_t k, n, bits, block, blocks, blob;  ///< blocks per column, bytes per block
};

template <class Ctx> NBits nbits(const Ctx& ctx) {
  NBits p;
  p.k = ctx.template attr<int64_t>("K"), p.n = ctx.template attr<int64_t>("N");
  p.bits = ctx.template attr<int64_t>("bits"), p.block = ctx.template attr<int64_t>("block_size");
  OPFORGE_CHECK(p.bits == 2 || p.bits == 4 || p.bits == 8, "attribute 'bits' must be 2, 4 or 8, got ", p.bits);
  OPFORGE_CHECK(p.block >= 16 && (p.block & (p.block - 1)) == 0, "attribute 'block_size' must be a power of 2 "
                "and at least 16, got ", p.block);
  OPFORGE_CHECK(p.k > 0 && p.n > 0, "attributes 'K' and 'N' must be positive, got ", p.k, " and ", p.n);
  p.blocks = (p.k + p.block - 1) / p.block, p.blob = p.block * p.bits / 8;
  const Tensor a = ctx.input(0), b = ctx.input(1), scales = ctx.input(2);
  OPFORGE_CHECK(a.ndim() >= 1 && (a.size(-1) == p.k || a.size(-1) < 0), "input A's last dim ", a.size(-1),
                " differs from attribute K = ", p.k);
  OPFORGE_CHECK(b.numel() == p.n * p.blocks * p.blob || b.numel() < 0, "input B holds ", b.numel(),
                " bytes; N x ceil(K / block_size) x block_size * bits / 8 = ", p.n * p.blocks * p.blob);
  OPFORGE_CHECK(scales.numel() == p.n * p.blocks || scales.numel() < 0, "input scales holds ", scales.numel(),
                " values; expected N x blocks = ", p.n * p.blocks);
  OPFORGE_CHECK(!ctx.has_input(4) || ctx.input(4).numel() == 0, "input g_idx is not supported");
  if (ctx.has_input(5))
    OPFORGE_CHECK(ctx.input(5).ndim() == 1 && (ctx.input(5).size(0) == p.n || ctx.input(5).size(0) < 0),
                  "input bias must be 1-D with N = ", p.n, " values");
  return p;
}

void nbits_infer(InferContext& ctx) {
  const NBits p = nbits(ctx);
  std::vector<int64_t> out = ctx.input(0).sizes();
  out.back() = p.n;
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

/// W^T (N x K, row-major) = (q - zero point) * scale, block by block.
std::vector<float> dequantize(const KernelContext& ctx, const NBits& p) {
  const uint8_t* b = ctx.input(1).data<uint8_t>();
  const float* scales = ctx.input(2).data<float>();
  const bool has_zp = ctx.has_input(3) && ctx.input(3).numel() > 0;
  const bool float_zp = has_zp && ctx.input(3).dtype() == OPF_FLOAT32;
  const uint8_t* zp_bytes = has_zp && !float_zp ? ctx.input(3).data<uint8_t>() : nullptr;
  const float* zp_floats = float_zp ? ctx.input(3).data<float>() : nullptr;
  const int64_t per_byte = 8 / p.bits, mask = (1 << p.bits) - 1, zp_stride = (p.blocks + per_byte - 1) / per_byte;
  std::vector<float> w(static_cast<size_t>(p.n * p.k));
  ctx.parallel_for(p.n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t col = begin; col < end; ++col)
      for (int64_t blk = 0; blk < p.blocks; ++blk) {
        const float scale = scales[col * p.blocks + blk];
        float zero = float(1 << (p.bits - 1));  // the default: the middle of the range
        if (zp_floats) zero = zp_floats[col * p.blocks + blk];
        if (zp_bytes) zero = float((zp_bytes[col * zp_stride + blk / per_byte] >> (p.bits * (blk % per_byte))) & mask);
        const uint8_t* blob = b + (col * p.blocks + blk) * p.blob;
        for (int64_t i = 0; i < p.block && blk * p.block + i < p.k; ++i) {
          const int64_t q = (blob[i / per_byte] >> (p.bits * (i % per_byte))) & mask;
          w[size_t(col * p.k + blk * p.block + i)] = (float(q) - zero) * scale;
        }
      }
  });
  return w;
}

void nbits_compute(KernelContext& ctx) {
  const NBits p = nbits(ctx);
  const Tensor a = ctx.input(0), y = ctx.output(0);
  const int64_t m = a.numel() / p.k;
  float* out = y.data<float>();
  if (m == 0) return;
  const std::vector<float> w = dequantize(ctx, p);
  opforge_nn::check_blas_dims(m, p.n, p.k);
  opforge_nn::parallel_matmul(ctx, false, true, m, p.n, p.k, 1.0f, a.data<float>(), p.k, w.data(), p.k, 0.0f, out,
                              p.n);
  if (ctx.has_input(5)) {
    const float* bias = ctx.input(5).data<float>();
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < p.n; ++j) out[r * p.n + j] += bias[j];
  }
}

}  // namespace

OPFORGE_OP(MatMulNBits)
    .domain("com.microsoft")
    .since(1)
    .input("A", {opforge::f32})
    .input("B", {opforge::u8})
    .input("scales", {opforge::f32})
    .optional_input("zero_points", {opforge::u8, opforge::f32})
    .optional_input("g_idx", {opforge::i32})
    .optional_input("bias", {opforge::f32})
    .output("Y")
    .required_attr("K", opforge::AttrType::Int)
    .required_attr("N", opforge::AttrType::Int)
    .attr("bits", int64_t(4))
    .required_attr("block_size", opforge::AttrType::Int)
    .attr("accuracy_level", int64_t(0), "ignored: float32 throughout")
    .infer(nbits_infer)
    .compute(nbits_compute);
