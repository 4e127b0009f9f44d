// quant_gemm.cpp: the 8-bit GEMMs of quant_gemm.h with int32 results, on the tiles of
// quant_gemm_tiles.h.
#include "quantization/quant_gemm_tiles.h"

namespace opforge_quant {

using namespace tiles;

bool qgemm_uses_vnni() { return OPFORGE_QGEMM_VNNI; }

void pack_b(const KernelContext& ctx, Q8Matrix b, int64_t k, int64_t n, PackedB& p) {
  p.k = k, p.n = n, p.k4 = (k + 3) / 4;
  p.offset = b.is_signed ? 0 : 128;
  p.data.resize(size_t(p.panels() * p.k4 * kPanel * 4));
  p.col_sums.resize(size_t(p.panels() * kPanel));
  ctx.parallel_for(p.panels(), 1, [&](int64_t pb, int64_t pe) {
    for (int64_t pi = pb; pi < pe; ++pi) {
      const int64_t c0 = pi * kPanel;
      pack_panel(static_cast<const uint8_t*>(b.data) + c0, b.ld, k, std::min(kPanel, n - c0), b.is_signed,
                 reinterpret_cast<uint32_t*>(p.data.data() + pi * p.k4 * kPanel * 4), p.col_sums.data() + c0);
    }
  });
}

void qgemm_blocks(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za, const PackedB& b,
                  const std::vector<int32_t>& zb, const QBlockSink& sink) {
  if (m == 0 || b.n == 0) return;
  count_tiles_path();
  static thread_local PackedA kept;  // so its buffer is not mapped afresh per call
  PackedA& pa = kept;                 // the workers below must read this thread's, by reference
  pack_a(ctx, a, m, b.k, pa);
  const int64_t row_blocks = (m + kRows - 1) / kRows, tasks = row_blocks * b.panels();
  const int32_t off_a = a.is_signed ? 128 : 0;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, kRows * kPanel * pa.k4));
  ctx.parallel_for(tasks, grain, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int64_t pi = t / row_blocks, r0 = (t % row_blocks) * kRows, c0 = pi * kPanel;
      const int64_t cols = std::min(kPanel, b.n - c0);
      const PanelTerms terms(zb, b.offset, b.col_sums.data() + c0, c0, b.n);
      panel_tiles(pa, m, b.panel(pi), r0, r0 + kRows, [&](int64_t r, int64_t rows, int32_t* tile) {
        fix_tile(pa, b.k, off_a, za, terms, r, rows, tile);
        sink(r, c0, rows, cols, tile, kPanel);
      });
    }
  });
}

void qgemm_streamed(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za, int64_t k,
                    int64_t n, bool b_signed, const QPanelSource& source, const std::vector<int32_t>& zb,
                    const QBlockSink& sink) {
  if (m == 0 || n == 0) return;
  count_tiles_path();
  static thread_local PackedA kept;
  PackedA& pa = kept;
  pack_a(ctx, a, m, k, pa);
  const int32_t off_a = a.is_signed ? 128 : 0, offset = b_signed ? 0 : 128;
  streamed_panels(ctx, k, n, b_signed, source, [&](int64_t c0, int64_t cols, const int8_t* panel, const int32_t* sums) {
    const PanelTerms terms(zb, offset, sums, c0, n);
    panel_tiles(pa, m, panel, 0, m, [&](int64_t r0, int64_t rows, int32_t* tile) {
      fix_tile(pa, k, off_a, za, terms, r0, rows, tile);
      sink(r0, c0, rows, cols, tile, kPanel);
    });
  });
}

void qgemm(const KernelContext& ctx, int64_t m, Q8Matrix a, const std::vector<int32_t>& za, const PackedB& b,
           const std::vector<int32_t>& zb, int32_t* c, int64_t ldc) {
  qgemm_blocks(ctx, m, a, za, b, zb,
               [&](int64_t r0, int64_t c0, int64_t rows, int64_t cols, const int32_t* block, int64_t ld) {
                 for (int64_t r = 0; r < rows; ++r)
                   std::memcpy(c + (r0 + r) * ldc + c0, block + r * ld, size_t(cols) * sizeof(int32_t));
               });
}

}  // namespace opforge_quant
