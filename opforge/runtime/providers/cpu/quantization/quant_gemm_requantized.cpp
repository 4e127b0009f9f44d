// quant_gemm_requantized.cpp: quant_gemm.h's qgemm_streamed_requantized, the GEMM under
// QLinearConv: each tile requantized to 8 bits from its registers and stored straight into the
// output, through the runs of kept columns of a conv's virtual grid.
#include "quantization/quant_gemm_tiles.h"

namespace opforge_quant {
namespace {

using namespace tiles;

/// Where one panel's columns go in a Q8Output: runs of lanes [first, last), each with the output
/// column its lane 0 would have (so lane j of the run goes to base + j).
struct PanelRuns {
  int count = 0;
  int64_t base[kPanel], first[kPanel], last[kPanel];
  uint32_t lanes[kPanel];  ///< bits [first, last)
  PanelRuns(const Q8Output& out, int64_t c0, int64_t cols) {
    for (int64_t v = c0; v < c0 + cols;) {
      const int64_t row = v / out.width, col = v % out.width, end = std::min(c0 + cols, (row + 1) * out.width);
      if (col < out.kept) {
        base[count] = row * out.kept + col - (v - c0);
        first[count] = v - c0;
        last[count] = std::min(end, row * out.width + out.kept) - c0;
        lanes[count] = uint32_t(((uint64_t(1) << last[count]) - 1) & ~((uint64_t(1) << first[count]) - 1));
        ++count;
      }
      v = end;
    }
  }
};

/// What qgemm_streamed_requantized's panels share.
struct RequantizedGemm {
  const PackedA& pa;
  int64_t m, k;
  int32_t off_a;
  const std::vector<int32_t>& za;
  bool uniform;  ///< one zero point for A and one for B
  const QRequant& rq;
  const Q8Output& out;
};

/// One panel's tiles requantized and written through `runs`. With one zero point for A and one for
/// B the correction of a sum is a column term, - ra * sb[j], subtracted from the tile's registers,
/// and a row term, - rb * (sa - K ra), that goes in with the bias as requantize's add; otherwise
/// each tile is fixed in memory (fix_tile) first. With AVX-512 each row's 32 bytes are masked
/// stores, one per run.
template <class Q>
void requantized_panel(const RequantizedGemm& g, const int8_t* panel, const PanelTerms& terms, const PanelRuns& runs) {
  const uint32_t ra0 = uint32_t(g.off_a + g.za[0]);
  alignas(64) uint32_t sub[kPanel] = {};
  if (g.uniform)
    for (int64_t j = 0; j < kPanel; ++j) sub[j] = ra0 * terms.sb[j];
  alignas(64) int32_t tile[kRows * kPanel];
  for (int64_t r0 = 0; r0 < g.m; r0 += kRows) {
    const int64_t rows = std::min(kRows, g.m - r0);
    int32_t add[kRows] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const uint32_t sa = uint32_t(g.pa.row_sums[size_t(r0 + r)]);
      const uint32_t bias = g.rq.bias != nullptr ? uint32_t(g.rq.bias[r0 + r]) : 0u;
      add[r] = int32_t(g.uniform ? bias - terms.rb[0] * (sa - uint32_t(g.k) * ra0) : bias);
    }
#if OPFORGE_QGEMM_VNNI
    const Requantize16<Q> requantize16(g.rq.zp);
    const auto write = [&](int64_t r, __m512i low, __m512i high) {
      if (r >= rows) return;
      const __m512 scale = _mm512_set1_ps(g.rq.scale[r0 + r]);
      const __m512i plus = _mm512_set1_epi32(add[r]);
      const __m256i bytes = _mm256_inserti128_si256(_mm256_castsi128_si256(requantize16(low, plus, scale)),
                                                    requantize16(high, plus, scale), 1);
      // Lane 0's address may lie before the row (a run that starts mid-panel): only lanes
      // [first, last) are stored, so the arithmetic is done on the integer address.
      const uintptr_t dst = reinterpret_cast<uintptr_t>(g.out.data + (r0 + r) * g.out.ld);
      for (int i = 0; i < runs.count; ++i)
        _mm256_mask_storeu_epi8(reinterpret_cast<void*>(dst + uintptr_t(runs.base[i])), runs.lanes[i], bytes);
    };
    if (g.uniform) {
      const __m512i sub0 = _mm512_load_si512(sub), sub1 = _mm512_load_si512(sub + 16);
      const auto fixed = [&](int64_t r, __m512i low, __m512i high) {
        write(r, _mm512_sub_epi32(low, sub0), _mm512_sub_epi32(high, sub1));
      };
      if (runs.count > 0 && runs.last[runs.count - 1] <= 16)
        tile_rows<1>(g.pa.row(r0), g.pa.k4, panel, fixed);
      else
        tile_rows(g.pa.row(r0), g.pa.k4, panel, fixed);
    } else {
      tile_dot(g.pa.row(r0), g.pa.k4, panel, tile);
      fix_tile(g.pa, g.k, g.off_a, g.za, terms, r0, rows, tile);
      for (int64_t r = 0; r < rows; ++r)
        write(r, _mm512_load_si512(tile + r * kPanel), _mm512_load_si512(tile + r * kPanel + 16));
    }
#else
    tile_dot(g.pa.row(r0), g.pa.k4, panel, tile);
    if (!g.uniform) fix_tile(g.pa, g.k, g.off_a, g.za, terms, r0, rows, tile);
    int32_t sums[kPanel];
    Q bytes[kPanel];
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < kPanel; ++j) sums[j] = int32_t(uint32_t(tile[r * kPanel + j]) - sub[j]);
      requantize_row(sums, kPanel, add[r], g.rq.scale[r0 + r], g.rq.zp, bytes);
      for (int i = 0; i < runs.count; ++i)
        std::memcpy(g.out.data + (r0 + r) * g.out.ld + runs.base[i] + runs.first[i], bytes + runs.first[i],
                    size_t(runs.last[i] - runs.first[i]));
    }
#endif
  }
}

}  // namespace

void qgemm_streamed_requantized(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za,
                                int64_t k, int64_t n, bool b_signed, const QPanelSource& source,
                                const std::vector<int32_t>& zb, const QRequant& rq, const Q8Output& out) {
  if (m == 0 || n == 0) return;
  count_tiles_path();
  static thread_local PackedA kept;
  PackedA& pa = kept;
  pack_a(ctx, a, m, k, pa);
  const int32_t off_a = a.is_signed ? 128 : 0, offset = b_signed ? 0 : 128;
  const RequantizedGemm g{pa, m, k, off_a, za, za.size() == 1 && zb.size() == 1, rq, out};
  streamed_panels(ctx, k, n, b_signed, source, [&](int64_t c0, int64_t cols, const int8_t* panel, const int32_t* sums) {
    const PanelTerms terms(zb, offset, sums, c0, n);
    const PanelRuns runs(out, c0, cols);
    if (rq.is_signed)
      requantized_panel<int8_t>(g, panel, terms, runs);
    else
      requantized_panel<uint8_t>(g, panel, terms, runs);
  });
}

}  // namespace opforge_quant
