// quant_gemm.cpp: the 8-bit GEMM of quant_gemm.h. A is made uint8 and B int8 (flipping the sign
// bit, which shifts by 128), so that AVX-512 VNNI's vpdpbusd multiplies four u8 x s8 pairs per
// lane; the zero points and shifts are taken out afterwards with A's row sums and B's column sums:
//   sum (A' - ra)(B' - rb) = sum A'B' - rb sum A' - ra sum B' + K ra rb.
// Without VNNI (another CPU, another compiler) a portable loop reads the same packed layout.
#include "quant_gemm.h"

#include <cstring>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>
#define OPFORGE_QGEMM_VNNI 1
#else
#define OPFORGE_QGEMM_VNNI 0
#endif

namespace opforge_quant {
namespace {

constexpr int64_t kRows = 6;                   // rows of A per tile: 12 accumulators of 16 lanes
constexpr int64_t kPanel = PackedB::kPanel;    // columns per tile

/// A as uint8 rows of K padded to groups of 4 (int8 A shifted by +128), in whole tiles of
/// kRows rows (zero rows pad the last), with each row's sum.
struct PackedA {
  int64_t k4 = 0;
  std::vector<uint8_t> data;
  std::vector<int32_t> row_sums;
  const uint8_t* row(int64_t r) const { return data.data() + r * k4 * 4; }
};

void pack_a(Q8Matrix a, int64_t m, int64_t k, PackedA& p) {
  p.k4 = (k + 3) / 4;
  const int64_t rows = (m + kRows - 1) / kRows * kRows;
  p.data.assign(size_t(rows * p.k4 * 4), 0);
  p.row_sums.assign(size_t(rows), 0);
  const uint8_t flip = a.is_signed ? 0x80 : 0;
  for (int64_t r = 0; r < m; ++r) {
    const uint8_t* src = static_cast<const uint8_t*>(a.data) + r * a.ld;
    uint8_t* dst = p.data.data() + r * p.k4 * 4;
    int32_t sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += dst[i] = uint8_t(src[i] ^ flip);
    p.row_sums[size_t(r)] = sum;
  }
}

#if OPFORGE_QGEMM_VNNI
/// tile[r][c] = sum over k of A'[r][k] * B'[k][c] for one kRows x kPanel tile.
void tile_dot(const uint8_t* a, int64_t k4, const int8_t* b, int32_t* tile) {
  __m512i acc[kRows][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_si512();
  for (int64_t q = 0; q < k4; ++q) {
    const __m512i b0 = _mm512_loadu_si512(b + q * kPanel * 4), b1 = _mm512_loadu_si512(b + q * kPanel * 4 + 64);
    for (int64_t r = 0; r < kRows; ++r) {
      int32_t four;
      std::memcpy(&four, a + r * k4 * 4 + q * 4, 4);
      const __m512i av = _mm512_set1_epi32(four);
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], av, b0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], av, b1);
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    _mm512_storeu_si512(tile + r * kPanel, acc[r][0]);
    _mm512_storeu_si512(tile + r * kPanel + 16, acc[r][1]);
  }
}
#else
void tile_dot(const uint8_t* a, int64_t k4, const int8_t* b, int32_t* tile) {
  std::fill(tile, tile + kRows * kPanel, 0);
  for (int64_t q = 0; q < k4; ++q)
    for (int64_t r = 0; r < kRows; ++r) {
      const uint8_t* ar = a + r * k4 * 4 + q * 4;
      const int8_t* bq = b + q * kPanel * 4;
      for (int64_t c = 0; c < kPanel; ++c)
        tile[r * kPanel + c] += int32_t(ar[0]) * bq[c * 4] + int32_t(ar[1]) * bq[c * 4 + 1] +
                                int32_t(ar[2]) * bq[c * 4 + 2] + int32_t(ar[3]) * bq[c * 4 + 3];
    }
}
#endif

inline int32_t pick(const std::vector<int32_t>& v, int64_t i) { return v.size() == 1 ? v[0] : v[size_t(i)]; }

}  // namespace

bool qgemm_uses_vnni() { return OPFORGE_QGEMM_VNNI; }

void pack_b(const KernelContext& ctx, Q8Matrix b, int64_t k, int64_t n, PackedB& p) {
  p.k = k, p.n = n, p.k4 = (k + 3) / 4;
  p.offset = b.is_signed ? 0 : 128;
  p.data.resize(size_t(p.panels() * p.k4 * kPanel * 4));
  p.col_sums.resize(size_t(p.panels() * kPanel));
  const uint32_t flip = b.is_signed ? 0u : 0x80808080u;
  static const uint8_t zeros[kPanel] = {};
  ctx.parallel_for(p.panels(), 1, [&](int64_t pb, int64_t pe) {
    for (int64_t pi = pb; pi < pe; ++pi) {
      const int64_t c0 = pi * kPanel, w = std::min(kPanel, n - c0);
      uint32_t* dst = reinterpret_cast<uint32_t*>(p.data.data() + pi * p.k4 * kPanel * 4);
      int32_t* sums = p.col_sums.data() + c0;
      std::fill(sums, sums + kPanel, 0);
      // Four rows of B at a time become one 4-byte group per column; rows past K read zeros,
      // which stay zero (their lanes are not flipped).
      for (int64_t q = 0; q < p.k4; ++q, dst += kPanel) {
        const uint8_t* r[4];
        uint32_t lanes = 0;
        for (int t = 0; t < 4; ++t) {
          const bool real = 4 * q + t < k;
          r[t] = real ? static_cast<const uint8_t*>(b.data) + (4 * q + t) * b.ld + c0 : zeros;
          lanes |= real ? (0xffu << (8 * t)) : 0u;
        }
        const uint32_t f = flip & lanes;
        for (int64_t c = 0; c < w; ++c) {
          const uint32_t v = (uint32_t(r[0][c]) | uint32_t(r[1][c]) << 8 | uint32_t(r[2][c]) << 16 |
                              uint32_t(r[3][c]) << 24) ^ f;
          dst[c] = v;
          sums[c] += int8_t(v) + int8_t(v >> 8) + int8_t(v >> 16) + int8_t(v >> 24);
        }
        for (int64_t c = w; c < kPanel; ++c) dst[c] = 0;
      }
    }
  });
}

void qgemm(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za, const PackedB& b,
           const std::vector<int32_t>& zb, int32_t* c, int64_t ldc) {
  if (m == 0 || b.n == 0) return;
  static thread_local PackedA kept;  // so its buffer is not mapped afresh per call
  PackedA& pa = kept;                 // the workers below must read this thread's, by reference
  pack_a(a, m, b.k, pa);
  const int64_t row_blocks = (m + kRows - 1) / kRows, tasks = row_blocks * b.panels();
  const int32_t off_a = a.is_signed ? 128 : 0;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, kRows * kPanel * pa.k4));
  ctx.parallel_for(tasks, grain, [&](int64_t tb, int64_t te) {
    int32_t tile[kRows * kPanel];
    for (int64_t t = tb; t < te; ++t) {
      const int64_t pi = t / row_blocks, r0 = (t % row_blocks) * kRows, c0 = pi * kPanel;
      tile_dot(pa.row(r0), pa.k4, b.panel(pi), tile);
      const int64_t rows = std::min(kRows, m - r0), cols = std::min(kPanel, b.n - c0);
      // Unsigned arithmetic: the sums wrap as onnxruntime's int32 sums do, without overflow's UB.
      uint32_t rb[kPanel], sb[kPanel];
      for (int64_t j = 0; j < cols; ++j)
        rb[j] = uint32_t(pick(zb, c0 + j) - b.offset), sb[j] = uint32_t(b.col_sums[size_t(c0 + j)]);
      for (int64_t r = 0; r < rows; ++r) {
        const uint32_t ra = uint32_t(off_a + pick(za, r0 + r)), sa = uint32_t(pa.row_sums[size_t(r0 + r)]);
        const uint32_t kra = uint32_t(b.k) * ra;
        const int32_t* t = tile + r * kPanel;
        int32_t* out = c + (r0 + r) * ldc + c0;
        for (int64_t j = 0; j < cols; ++j) out[j] = int32_t(uint32_t(t[j]) - rb[j] * sa - ra * sb[j] + kra * rb[j]);
      }
    }
  });
}

}  // namespace opforge_quant
