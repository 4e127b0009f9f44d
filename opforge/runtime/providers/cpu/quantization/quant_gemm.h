// quant_gemm.h: the 8-bit integer GEMM under MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv and their com.microsoft kin: exact int32 sums of (a - za) * (b - zb).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "quantization/quant.h"

namespace opforge_quant {

/// A row-major 8-bit matrix: element (r, c) at data[r * ld + c].
struct Q8Matrix {
  const void* data;
  int64_t ld;
  bool is_signed;  ///< int8, else uint8
};

/// B (K x N) in the layout the kernel reads: panels of kPanel columns, each K/4 groups of
/// kPanel x 4 bytes, stored as int8 (a uint8 B is shifted by -128), with its column sums.
struct PackedB {
  static constexpr int64_t kPanel = 32;
  int64_t k = 0, n = 0, k4 = 0;
  int32_t offset = 0;  ///< what the packed values lack: b = packed + ... (128 for uint8 B)
  std::vector<int8_t> data;
  std::vector<int32_t> col_sums;
  int64_t panels() const { return (n + kPanel - 1) / kPanel; }
  const int8_t* panel(int64_t p) const { return data.data() + p * k4 * kPanel * 4; }
};

/// Packs B (K x N) into `out` (its buffers are reused: a caller may keep one across calls), panels
/// spread over the host's threads.
void pack_b(const KernelContext& ctx, Q8Matrix b, int64_t k, int64_t n, PackedB& out);

/// C (M x N, leading dimension ldc) = sum over k of (A[m][k] - za[m]) * (B[k][n] - zb[n]) in
/// int32, wrapping as onnxruntime's sums do. za holds M values (one per row) or one, zb N values
/// or one; `a` is M x K.
void qgemm(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za, const PackedB& b,
           const std::vector<int32_t>& zb, int32_t* c, int64_t ldc);

/// Takes finished blocks of C from qgemm_blocks: C[r0 + r][c0 + j] = block[r * ld + j] for r < rows,
/// j < cols. Called on the pool's threads, each block once, blocks disjoint.
using QBlockSink = std::function<void(int64_t r0, int64_t c0, int64_t rows, int64_t cols, const int32_t* block,
                                      int64_t ld)>;

/// The product of qgemm, handed to `sink` block by block while it is still in cache (so a caller
/// can requantize it without an int32 matrix in memory).
void qgemm_blocks(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za, const PackedB& b,
                  const std::vector<int32_t>& zb, const QBlockSink& sink);

/// Gives rows [0, K) x columns [c0, c0 + cols) of B: a pointer to row 0's column c0, with the
/// leading dimension in `ld`; it may fill `scratch` (K x kPanel bytes, ld = kPanel) and return it.
using QPanelSource = std::function<const uint8_t*(int64_t c0, int64_t cols, uint8_t* scratch, int64_t* ld)>;

/// qgemm_blocks with B made panel by panel on the threads that use it (im2col fused into the
/// GEMM: no K x N copy of B in memory, and its packing spread over the threads).
void qgemm_streamed(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za, int64_t k,
                    int64_t n, bool b_signed, const QPanelSource& source, const std::vector<int32_t>& zb,
                    const QBlockSink& sink);

/// How qgemm_streamed_requantized makes 8-bit outputs of C's int32 sums: row r's
/// out = requantize(C[r][c] + bias[r], scale[r], zp), saturated to uint8 or int8.
struct QRequant {
  const float* scale;    ///< one per row of C
  const int32_t* bias;   ///< one per row of C, or null
  int32_t zp;
  bool is_signed;        ///< int8 output, else uint8
};

/// Where qgemm_streamed_requantized writes its 8-bit output: C's columns taken as rows of `width`
/// of which the first `kept` are outputs and the rest dropped (a conv's virtual grid), so that
/// C[r][c] lands at data[r * ld + (c / width) * kept + c % width]. width = kept = N is plain C.
struct Q8Output {
  uint8_t* data;
  int64_t ld, width, kept;
};

/// qgemm_streamed with each tile requantized as `rq` says while its sums are in cache and
/// written straight to `out` (no int32 block, no call per block).
void qgemm_streamed_requantized(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za,
                                int64_t k, int64_t n, bool b_signed, const QPanelSource& source,
                                const std::vector<int32_t>& zb, const QRequant& rq, const Q8Output& out);

/// A std::vector of this thread's, kept between calls so that big scratch buffers are not mapped
/// (and page-faulted) afresh for every node; `slot` tells a caller's buffers apart.
template <class T, int slot> std::vector<T>& scratch(size_t size) {
  static thread_local std::vector<T> buffer;
  buffer.resize(size);
  return buffer;
}

/// Whether this build multiplies with AVX-512 VNNI (else the portable loop).
bool qgemm_uses_vnni();

}  // namespace opforge_quant
