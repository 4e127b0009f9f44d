// quant_gemm_tiles.h: what quant_gemm.cpp and quant_gemm_requantized.cpp share. A is packed as
// uint8 rows and B as int8 panels (flipping the sign bit shifts by 128), so that AVX-512 VNNI's
// vpdpbusd multiplies four u8 x s8 pairs per lane; the zero points and shifts are taken out
// afterwards with A's row sums and B's column sums:
//   sum (A' - ra)(B' - rb) = sum A'B' - rb sum A' - ra sum B' + K ra rb.
// With AVX2 (no VNNI) the same layout is read exactly: each group's bytes widened to 16 bits and
// multiplied in pairs by vpmaddwd (vpmaddubsw's 16-bit sums would saturate on full-range u8 x s8,
// as onnxruntime's do on such CPUs). Elsewhere a portable loop reads it.
#pragma once

#include <algorithm>
#include <cstring>

#include "common/kernel_paths.h"
#include "quantization/quant_gemm.h"

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define OPFORGE_QGEMM_VNNI 1
#define OPFORGE_QGEMM_AVX2 0
#elif defined(__AVX2__)
#include <immintrin.h>
#define OPFORGE_QGEMM_VNNI 0
#define OPFORGE_QGEMM_AVX2 1
#else
#define OPFORGE_QGEMM_VNNI 0
#define OPFORGE_QGEMM_AVX2 0
#endif

namespace opforge_quant::tiles {

constexpr int64_t kRows = 6;                   // rows of A per tile: 12 accumulators of 16 lanes
constexpr int64_t kPanel = PackedB::kPanel;    // columns per tile

#if OPFORGE_QGEMM_AVX2
using AValue = uint16_t;  ///< A's values widened once, so a tile broadcasts a group's four with one load
#else
using AValue = uint8_t;
#endif

/// A as rows of K uint8 values (int8 A shifted by +128; 16 bits each with AVX2) padded to
/// groups of 4, in whole tiles of kRows rows (zero rows pad the last), with each row's sum.
struct PackedA {
  int64_t k4 = 0;
  std::vector<AValue> data;
  std::vector<int32_t> row_sums;
  const AValue* row(int64_t r) const { return data.data() + r * k4 * 4; }
};

/// One row of PackedA: k bytes of src xor `flip`, zeros up to `width`; returns their sum. (Its own
/// function taking values: inside a lambda capturing by reference, the byte stores may alias k
/// and the loop ran unvectorised, at twice the time of a 1000 x 512 conv.)
inline uint32_t pack_a_row(const uint8_t* src, int64_t k, int64_t width, uint8_t flip, AValue* dst) {
  uint32_t sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    dst[i] = AValue(uint8_t(src[i] ^ flip));
    sum += dst[i];
  }
  std::fill(dst + k, dst + width, AValue(0));
  return sum;
}

/// Packs A on the host's threads (rows of at least 64 KiB per task: a 1000 x 512 conv weight
/// is half a megabyte, per call, and would otherwise be the serial part of a 2-thread conv).
inline void pack_a(const KernelContext& ctx, Q8Matrix a, int64_t m, int64_t k, PackedA& p) {
  p.k4 = (k + 3) / 4;
  const int64_t rows = (m + kRows - 1) / kRows * kRows;
  p.data.resize(size_t(rows * p.k4 * 4));
  p.row_sums.assign(size_t(rows), 0);
  const uint8_t flip = a.is_signed ? 0x80 : 0;
  const int64_t width = p.k4 * 4;
  ctx.parallel_for(m, std::max<int64_t>(1, 65536 / width), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      p.row_sums[size_t(r)] = int32_t(pack_a_row(static_cast<const uint8_t*>(a.data) + r * a.ld, k, width, flip,
                                                 p.data.data() + r * width));
  });
  std::fill(p.data.begin() + m * width, p.data.end(), AValue(0));  // the last tile's padding rows
}

#if OPFORGE_QGEMM_VNNI
/// acc + the dot products of a's and b's 4-byte groups (vpdpbusd). Written as asm because GCC 12
/// copies each accumulator to another register around _mm512_dpbusd_epi32 in tile_dot's loop
/// (24 moves per 12 products): a 6x32 tile at K = 144 ran 368 GMAC/s so, 536 with the asm.
inline __m512i dot4(__m512i acc, __m512i a, __m512i b) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

/// The sums over k of A'[r][k] * B'[k][c] of one kRows x kPanel tile, each row's 32 handed to
/// row(r, columns 0-15, columns 16-31) in registers. With Halves = 1 only columns 0-15 are
/// summed (the high half passed is zero): a panel's last columns when they are 16 or fewer.
template <int Halves = 2, class Row>
inline void tile_rows(const uint8_t* a, int64_t k4, const int8_t* b, Row&& row) {
  __m512i acc[kRows][2];
  for (auto& r : acc) r[0] = r[1] = _mm512_setzero_si512();
  for (int64_t q = 0; q < k4; ++q) {
    const __m512i b0 = _mm512_loadu_si512(b + q * kPanel * 4);
    const __m512i b1 = Halves == 2 ? _mm512_loadu_si512(b + q * kPanel * 4 + 64) : b0;
    for (int64_t r = 0; r < kRows; ++r) {
      int32_t four;
      std::memcpy(&four, a + r * k4 * 4 + q * 4, 4);
      const __m512i av = _mm512_set1_epi32(four);
      acc[r][0] = dot4(acc[r][0], av, b0);
      if (Halves == 2) acc[r][1] = dot4(acc[r][1], av, b1);
    }
  }
  for (int64_t r = 0; r < kRows; ++r) row(r, acc[r][0], acc[r][1]);
}

/// tile[r][c] = sum over k of A'[r][k] * B'[k][c] for one kRows x kPanel tile.
inline void tile_dot(const AValue* a, int64_t k4, const int8_t* b, int32_t* tile) {
  tile_rows(a, k4, b, [&](int64_t r, __m512i low, __m512i high) {
    _mm512_storeu_si512(tile + r * kPanel, low);
    _mm512_storeu_si512(tile + r * kPanel + 16, high);
  });
}
#elif OPFORGE_QGEMM_AVX2
/// acc0 / acc1 + the pairwise products of the group of a row of A at `a` (four 16-bit values,
/// broadcast to every 64 bits) with b0 / b1. As asm because GCC hoisted the six rows'
/// broadcasts above the products, ran out of the 16 ymm registers and kept 9 of the 12
/// accumulators on the stack.
__attribute__((always_inline)) inline void row_products(const AValue* a, __m256i b0, __m256i b1, __m256i& acc0,
                                                        __m256i& acc1) {
  __m256i av, t;
  asm("vpbroadcastq %[a], %[av]\n\t"
      "vpmaddwd %[b0], %[av], %[t]\n\t"
      "vpaddd %[t], %[acc0], %[acc0]\n\t"
      "vpmaddwd %[b1], %[av], %[av]\n\t"
      "vpaddd %[av], %[acc1], %[acc1]"
      : [acc0] "+x"(acc0), [acc1] "+x"(acc1), [av] "=&x"(av), [t] "=&x"(t)
      : [a] "m"(*reinterpret_cast<const int64_t*>(a)), [b0] "x"(b0), [b1] "x"(b1));
}

/// Four columns' group of B (16 bytes: each column's four k) as 16-bit values.
__attribute__((always_inline)) inline __m256i b_words(const int8_t* b) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
}

/// The sums of two 4-column groups' lanes (k0 k1, k2 k3 of each column) in column order: hadd
/// gives (c0 c1 c4 c5 | c2 c3 c6 c7), 64-bit pairs 0 2 1 3 put them in order.
__attribute__((always_inline)) inline void store_columns(int32_t* at, __m256i low, __m256i high) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), _mm256_permute4x64_epi64(_mm256_hadd_epi32(low, high), 0xD8));
}

/// tile[r][c] = sum over k of A'[r][k] * B'[k][c] for one kRows x kPanel tile, 8 columns at a
/// time over the 6 rows (12 accumulators, named: held in an array, GCC kept them on the stack).
/// vpmaddwd of a column's four 16-bit values with the row's gives two sums a lane, (k0, k1) and
/// (k2, k3).
inline void tile_dot(const AValue* a, int64_t k4, const int8_t* b, int32_t* tile) {
  static_assert(kRows == 6, "tile_dot's AVX2 loop is written for 6 rows");
  const int64_t ld = k4 * 4;
  for (int64_t c = 0; c < kPanel; c += 8) {
    __m256i s00 = _mm256_setzero_si256(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00, s30 = s00,
            s31 = s00, s40 = s00, s41 = s00, s50 = s00, s51 = s00;
    const int8_t* bq = b + c * 4;
    const AValue* aq = a;
    for (int64_t q = 0; q < k4; ++q, bq += kPanel * 4, aq += 4) {
      const __m256i b0 = b_words(bq), b1 = b_words(bq + 16);
      row_products(aq, b0, b1, s00, s01);
      row_products(aq + ld, b0, b1, s10, s11);
      row_products(aq + 2 * ld, b0, b1, s20, s21);
      row_products(aq + 3 * ld, b0, b1, s30, s31);
      row_products(aq + 4 * ld, b0, b1, s40, s41);
      row_products(aq + 5 * ld, b0, b1, s50, s51);
    }
    store_columns(tile + c, s00, s01);
    store_columns(tile + kPanel + c, s10, s11);
    store_columns(tile + 2 * kPanel + c, s20, s21);
    store_columns(tile + 3 * kPanel + c, s30, s31);
    store_columns(tile + 4 * kPanel + c, s40, s41);
    store_columns(tile + 5 * kPanel + c, s50, s51);
  }
}
#else
inline void tile_dot(const AValue* a, int64_t k4, const int8_t* b, int32_t* tile) {
  std::fill(tile, tile + kRows * kPanel, 0);
  for (int64_t q = 0; q < k4; ++q)
    for (int64_t r = 0; r < kRows; ++r) {
      const AValue* ar = a + r * k4 * 4 + q * 4;
      const int8_t* bq = b + q * kPanel * 4;
      for (int64_t c = 0; c < kPanel; ++c)
        tile[r * kPanel + c] += int32_t(ar[0]) * bq[c * 4] + int32_t(ar[1]) * bq[c * 4 + 1] +
                                int32_t(ar[2]) * bq[c * 4 + 2] + int32_t(ar[3]) * bq[c * 4 + 3];
    }
}
#endif

/// Counts a GEMM call on the hand-written tiles (`qgemm.tiles`), once per call: a count per tile
/// would be an atomic add per few hundred products.
inline void count_tiles_path() {
#if OPFORGE_QGEMM_VNNI || OPFORGE_QGEMM_AVX2
  OPFORGE_KERNEL_PATH("qgemm.tiles");
#endif
}

inline int32_t pick(const std::vector<int32_t>& v, int64_t i) { return v.size() == 1 ? v[0] : v[size_t(i)]; }

/// One row of a tile from sum A'B' to sum (A' - ra)(B' - rb), in place and wrapping:
/// t - rb * (sa - K ra) - ra * sb, with sa the row's sum of A' and sb the columns' sums of B'.
inline void fix_row(int32_t* t, const uint32_t* rb, const uint32_t* sb, uint32_t sa_less_kra, uint32_t ra) {
#if OPFORGE_QGEMM_VNNI
  const __m512i vs = _mm512_set1_epi32(int32_t(sa_less_kra)), va = _mm512_set1_epi32(int32_t(ra));
  for (int64_t j = 0; j < kPanel; j += 16) {
    const __m512i sub = _mm512_add_epi32(_mm512_mullo_epi32(_mm512_load_si512(rb + j), vs),
                                         _mm512_mullo_epi32(_mm512_load_si512(sb + j), va));
    _mm512_store_si512(t + j, _mm512_sub_epi32(_mm512_load_si512(t + j), sub));
  }
#elif OPFORGE_QGEMM_AVX2
  const __m256i vs = _mm256_set1_epi32(int32_t(sa_less_kra)), va = _mm256_set1_epi32(int32_t(ra));
  for (int64_t j = 0; j < kPanel; j += 8) {
    const __m256i sub = _mm256_add_epi32(
        _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(rb + j)), vs),
        _mm256_mullo_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(sb + j)), va));
    __m256i* at = reinterpret_cast<__m256i*>(t + j);
    _mm256_storeu_si256(at, _mm256_sub_epi32(_mm256_loadu_si256(at), sub));
  }
#else
  for (int64_t j = 0; j < kPanel; ++j) t[j] = int32_t(uint32_t(t[j]) - rb[j] * sa_less_kra - ra * sb[j]);
#endif
}

/// Packs columns [0, w) of the K rows at `src` (leading dimension ld) as one panel of PackedB:
/// four rows at a time become one 4-byte group per column, flipped to int8 when B is uint8;
/// rows past K and columns past w are zero. `sums` gets each column's sum of packed values.
inline void pack_panel(const uint8_t* src, int64_t ld, int64_t k, int64_t w, bool is_signed, uint32_t* dst,
                       int32_t* sums) {
  static const uint8_t zeros[kPanel] = {};
  const uint32_t flip = is_signed ? 0u : 0x80808080u;
  std::fill(sums, sums + kPanel, 0);
  for (int64_t q = 0; q < (k + 3) / 4; ++q, dst += kPanel) {
    const uint8_t* r[4];
    uint32_t lanes = 0;
    for (int t = 0; t < 4; ++t) {
      const bool real = 4 * q + t < k;
      r[t] = real ? src + (4 * q + t) * ld : zeros;
      lanes |= real ? (0xffu << (8 * t)) : 0u;
    }
    const uint32_t f = flip & lanes;  // padding rows stay zero
    int64_t c = 0;
#if OPFORGE_QGEMM_VNNI
    // 16 columns at a time: each row's bytes widened to 32 bits and shifted into place; a
    // vpdpbusd with ones sums each column's four int8 values.
    const __m512i vf = _mm512_set1_epi32(int32_t(f)), ones = _mm512_set1_epi8(1);
    for (; c + 16 <= w; c += 16) {
      __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r[0] + c)));
      for (int t = 1; t < 4; ++t)
        v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_cvtepu8_epi32(
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(r[t] + c))), 8 * t));
      v = _mm512_xor_si512(v, vf);
      _mm512_storeu_si512(dst + c, v);
      _mm512_storeu_si512(sums + c, _mm512_dpbusd_epi32(_mm512_loadu_si512(sums + c), ones, v));
    }
#endif
    for (; c < w; ++c) {
      const uint32_t v = (uint32_t(r[0][c]) | uint32_t(r[1][c]) << 8 | uint32_t(r[2][c]) << 16 |
                          uint32_t(r[3][c]) << 24) ^ f;
      dst[c] = v;
      sums[c] += int8_t(v) + int8_t(v >> 8) + int8_t(v >> 16) + int8_t(v >> 24);
    }
    for (int64_t c = w; c < kPanel; ++c) dst[c] = 0;
  }
}

/// What the tiles of one panel share: B's zero point less its packing offset and B's column sums,
/// per lane, as unsigned (the sums wrap as onnxruntime's int32 sums do, without overflow's UB).
struct PanelTerms {
  alignas(64) uint32_t rb[kPanel];
  alignas(64) uint32_t sb[kPanel];
  PanelTerms(const std::vector<int32_t>& zb, int32_t offset, const int32_t* col_sums, int64_t c0, int64_t n) {
    for (int64_t j = 0; j < kPanel; ++j) {
      rb[j] = uint32_t(pick(zb, std::min(c0 + j, n - 1)) - offset);
      sb[j] = uint32_t(col_sums[j]);
    }
  }
};

/// The tiles of one packed panel, rows [r_begin, r_end) of A a row block at a time, each handed
/// to emit(r0, rows, tile) when done (tile: kRows x kPanel sums of A'B', ld kPanel).
template <class Emit>
void panel_tiles(const PackedA& pa, int64_t m, const int8_t* panel, int64_t r_begin, int64_t r_end, Emit&& emit) {
  alignas(64) int32_t tile[kRows * kPanel];
  for (int64_t r0 = r_begin; r0 < r_end; r0 += kRows) {
    tile_dot(pa.row(r0), pa.k4, panel, tile);
    emit(r0, std::min(kRows, m - r0), static_cast<int32_t*>(tile));
  }
}

/// A tile's sums of A'B' made sums of (A' - ra)(B' - rb), row by row (fix_row).
inline void fix_tile(const PackedA& pa, int64_t k, int32_t off_a, const std::vector<int32_t>& za,
                     const PanelTerms& terms, int64_t r0, int64_t rows, int32_t* tile) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t ra = uint32_t(off_a + pick(za, r0 + r)), sa = uint32_t(pa.row_sums[size_t(r0 + r)]);
    fix_row(tile + r * kPanel, terms.rb, terms.sb, sa - uint32_t(k) * ra, ra);
  }
}

/// Runs panel(pi, packed, sums) for each panel of B on the host's threads, B's columns
/// [pi * kPanel, +kPanel) made by `source` and packed on the thread that uses them.
template <class Panel>
void streamed_panels(const KernelContext& ctx, int64_t k, int64_t n, bool b_signed, const QPanelSource& source,
                     Panel&& panel) {
  const int64_t k4 = (k + 3) / 4, panels = (n + kPanel - 1) / kPanel;
  ctx.parallel_for(panels, 1, [&](int64_t pb, int64_t pe) {
    static thread_local std::vector<uint8_t> raw;
    static thread_local std::vector<int8_t> packed;
    raw.resize(size_t(k * kPanel));
    packed.resize(size_t(k4 * kPanel * 4));
    alignas(64) int32_t sums[kPanel];
    for (int64_t pi = pb; pi < pe; ++pi) {
      const int64_t c0 = pi * kPanel, cols = std::min(kPanel, n - c0);
      int64_t ld = kPanel;
      const uint8_t* src = source(c0, cols, raw.data(), &ld);
      pack_panel(src, ld, k, cols, b_signed, reinterpret_cast<uint32_t*>(packed.data()), sums);
      panel(c0, cols, packed.data(), sums);
    }
  });
}

}  // namespace opforge_quant::tiles
