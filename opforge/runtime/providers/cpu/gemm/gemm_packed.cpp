// gemm_packed.cpp: com.opforge's PackedMatMul, Y = act(A @ W + bias) with W packed once at
// session creation (runtime/passes/pack_matmul_weights.py), on opforge's own register tiles.
//
// Packed W is (panels, K, 32): panel p holds columns [32p, 32p + 32) of W, each of its K rows
// 32 contiguous floats, zero past N, so a tile streams its B operand with no stride and no
// per-run packing. A is read where it lies: a tile's rows each broadcast their k-th value. The
// tile code is picked by the CPU's flags at run time: AVX-512F (rows x 32 columns), else
// AVX2 + FMA (rows x 16 columns, twice per panel), else plain loops; on aarch64 NEON (rows x 16
// columns, twice per panel); the `isa` attribute can force one (tests run every path the CPU
// has). Per block of K, a panel's rows stay in L1 while every row tile of the task runs over
// them; the bias and a Relu are applied in registers as the last K block is stored, a Gelu on
// the tile's rows right after. Threads split the output into tiles of (row block, panel
// group), so a one-image, 128-token product still fills both cores.
#include <algorithm>
#include <cmath>
#include <string>

#include "common/common.h"
#include "elementwise/elementwise_math.h"
#include "gemm/gemm_packed.h"
#include "gemm/gemm_packed_tiles.h"
#include "common/kernel_paths.h"
#if defined(__aarch64__)
#include "gemm/gemm_packed_tiles_neon.h"
#endif

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

using opforge_gemm::kPanel;
using opforge_gemm::kRowsPortable;
using opforge_gemm::Tile;
constexpr int64_t kBlockK = 256;  ///< K per block: a panel's block is 32 KB, held in L1

enum class Isa { Portable, Avx2, Avx512, Neon };
enum class Act { None, Relu, Gelu };

// ---- The product -------------------------------------------------------------------------------

/// Y (m x n, leading dimension n) = act(A (m x k, rows lda apart) @ W + bias), W packed.
struct Product {
  const float* a;
  int64_t lda;
  const float* w;
  const float* bias;
  float* y;
  int64_t m, n, k;
  Act act;
  Isa isa;

  int64_t panels() const { return (n + kPanel - 1) / kPanel; }
  int rows_per_tile() const {
    switch (isa) {
#if defined(OPFORGE_GEMM_X86_TILES)
      case Isa::Avx512: return opforge_gemm::kRowsAvx512;
      case Isa::Avx2: return opforge_gemm::kRowsAvx2;
#endif
#if defined(__aarch64__)
      case Isa::Neon: return opforge_gemm::kRowsNeon;
#endif
      default: return kRowsPortable;
    }
  }
};

/// One register tile of `rows` rows in the tile code `isa`.
inline void run_tile(Isa isa, int rows, const Tile& t) {
  switch (isa) {
#if defined(OPFORGE_GEMM_X86_TILES)
    case Isa::Avx512: return opforge_gemm::run_avx512(rows, t);
    case Isa::Avx2: return opforge_gemm::run_avx2(rows, t);
#endif
#if defined(__aarch64__)
    case Isa::Neon: return opforge_gemm::run_neon(rows, t);
#endif
    default: return opforge_gemm::run_portable(rows, t);
  }
}

/// 0.5 x (1 + erf(x / sqrt 2)) over `rows` rows of `cols` floats (vectorised by the compiler).
void gelu_rows(float* y, int64_t ld, int64_t rows, int64_t cols) {
  namespace vm = opforge_cpu::ew::vmath;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ld;
    for (int64_t j = 0; j < cols; ++j) row[j] = 0.5f * row[j] * (1.f + vm::erf(row[j] * float(M_SQRT1_2)));
  }
}

/// Rows [m0, m1) by panels [p0, p1) of the product, K block by K block: a block of a panel
/// stays in L1 while every row tile runs over it.
void run_chunk(const Product& p, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int mr = p.rows_per_tile();
  for (int64_t k0 = 0; k0 < p.k; k0 += kBlockK) {
    const int64_t kc = std::min(kBlockK, p.k - k0);
    const bool last = k0 + kc == p.k;
    for (int64_t panel = p0; panel < p1; ++panel) {
      const int64_t col0 = panel * kPanel;
      Tile t{nullptr, p.lda, p.w + (panel * p.k + k0) * kPanel, nullptr, p.n, kc,
             int(std::min(kPanel, p.n - col0)), k0 == 0, last,
             p.bias != nullptr ? p.bias + col0 : nullptr, p.act == Act::Relu, nullptr};
      // the next block: the next panel's, else the first panel's next K block (same kc or less,
      // so prefetching kc rows of it stays inside W)
      const float* next = panel + 1 < p1 ? t.b + p.k * kPanel
                          : !last && k0 + 2 * kc <= p.k ? p.w + (p0 * p.k + k0 + kc) * kPanel : nullptr;
      for (int64_t i = m0; i < m1; i += mr) {
        const int rows = int(std::min<int64_t>(mr, m1 - i));
        t.a = p.a + i * p.lda + k0;
        t.c = p.y + i * p.n + col0;
        t.next = i == m0 ? next : nullptr;
        run_tile(p.isa, rows, t);
      }
      if (last && p.act == Act::Gelu) gelu_rows(p.y + m0 * p.n + col0, p.n, m1 - m0, t.cols);
    }
  }
}

constexpr int64_t kChunkRows = 256;        ///< rows of A per chunk at most: a K block of them is <= 256 KB
constexpr int64_t kChunkBytes = 512 << 10;  ///< of C per chunk, kept in L2 across the K blocks

/// Rows [m0, m1) by panels [p0, p1), in chunks whose C stays in L2 while K is swept.
void run_block(const Product& p, int64_t m0, int64_t m1, int64_t p0, int64_t p1) {
  const int64_t chunks = (m1 - m0 + kChunkRows - 1) / kChunkRows;
  const int64_t mr = p.rows_per_tile(), rows = ((m1 - m0 + chunks - 1) / chunks + mr - 1) / mr * mr;
  for (int64_t i = m0; i < m1; i += rows) {
    const int64_t i1 = std::min(m1, i + rows);
    const int64_t step = std::max<int64_t>(1, kChunkBytes / ((i1 - i) * kPanel * int64_t(sizeof(float))));
    for (int64_t j = p0; j < p1; j += step) run_chunk(p, i, i1, j, std::min(p1, j + step));
  }
}

/// Y = act(bias) (or act(0)) when K is 0.
void run_empty_k(const Product& p) {
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      const float v = p.bias != nullptr ? p.bias[j] : 0.f;
      p.y[i * p.n + j] = p.act == Act::Relu && v < 0.f ? 0.f : v;
    }
  if (p.act == Act::Gelu) gelu_rows(p.y, p.n, p.m, p.n);
}

/// Splits the output into (row block, panel group) tasks, a few per thread, and runs them.
void run_product(const KernelContext& ctx, const Product& p) {
  if (p.isa == Isa::Avx512)   // the tile code is chosen at run time, whatever the build's -march
    OPFORGE_KERNEL_PATH_NAMED("gemm.packed.avx512");
  else if (p.isa == Isa::Avx2)
    OPFORGE_KERNEL_PATH_NAMED("gemm.packed.avx2");
  else if (p.isa == Isa::Neon)
    OPFORGE_KERNEL_PATH_NAMED("gemm.packed.neon");
  else
    OPFORGE_KERNEL_PATH_NAMED("gemm.packed.portable");
  if (p.k == 0) return run_empty_k(p);
  const int64_t threads = ctx.num_threads(), panels = p.panels(), mr = p.rows_per_tile();
  const int64_t row_tiles = (p.m + mr - 1) / mr;
  // No split below ~0.5 MFLOP per thread: waking a worker costs more.
  const int64_t wanted = std::min<int64_t>(4 * threads, std::max<int64_t>(1, p.m * p.n * p.k / (1 << 18)));
  if (threads <= 1 || wanted <= 1) return run_block(p, 0, p.m, 0, panels);
  const int64_t groups = std::min(panels, wanted);
  const int64_t row_blocks = std::min(row_tiles, (wanted + groups - 1) / groups);
  const int64_t per_group = (panels + groups - 1) / groups;
  const int64_t per_block = (row_tiles + row_blocks - 1) / row_blocks * mr;
  ctx.parallel_for(row_blocks * groups, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t rb = task / groups, g = task % groups;
      const int64_t m0 = rb * per_block, p0 = g * per_group;
      if (m0 < p.m && p0 < panels)
        run_block(p, m0, std::min(p.m, m0 + per_block), p0, std::min(panels, p0 + per_group));
    }
  });
}

// ---- The op --------------------------------------------------------------------------------------

bool cpu_has(Isa isa) {
#if defined(OPFORGE_GEMM_X86_TILES)
  __builtin_cpu_init();
  switch (isa) {
    case Isa::Avx512: return __builtin_cpu_supports("avx512f");
    case Isa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::Neon: return false;
    default: return true;
  }
#elif defined(__aarch64__)
  return isa == Isa::Neon || isa == Isa::Portable;  // every aarch64 CPU has NEON (Advanced SIMD)
#else
  return isa == Isa::Portable;
#endif
}

/// The tile code named by the `isa` attribute: "auto" is the best this CPU runs.
Isa chosen_isa(const std::string& name) {
  if (name == "auto") {
    for (Isa best : {Isa::Avx512, Isa::Avx2, Isa::Neon})
      if (cpu_has(best)) return best;
    return Isa::Portable;
  }
  const Isa isa = name == "avx512" ? Isa::Avx512 : name == "avx2" ? Isa::Avx2 : name == "neon" ? Isa::Neon : Isa::Portable;
  OPFORGE_CHECK(name == "avx512" || name == "avx2" || name == "neon" || name == "portable",
                "attribute isa must be auto, avx512, avx2, neon or portable, got '", name, "'");
  OPFORGE_CHECK(cpu_has(isa), "attribute isa asks for ", name, ", which this CPU does not have");
  return isa;
}

Act chosen_act(const std::string& name) {
  OPFORGE_CHECK(name.empty() || name == "Relu" || name == "Gelu",
                "attribute activation must be '', 'Relu' or 'Gelu', got '", name, "'");
  return name == "Relu" ? Act::Relu : name == "Gelu" ? Act::Gelu : Act::None;
}

/// Checks A, packed W and the bias against each other and N; returns K (-1 if unknown).
template <class Ctx> int64_t check_inputs(const Ctx& ctx) {
  const Tensor a = ctx.input(0), w = ctx.input(1);
  const int64_t n = ctx.template attr<int64_t>("N");
  OPFORGE_CHECK(n >= 0, "attribute N must be >= 0, got ", n);
  OPFORGE_CHECK(a.ndim() >= 1, "input A must have rank >= 1, got a scalar");
  OPFORGE_CHECK(w.ndim() == 3 && w.size(2) == kPanel, "input W must be packed as (panels, K, ", kPanel,
                "), got rank ", w.ndim(), w.ndim() == 3 ? " with last dim " + std::to_string(w.size(2)) : "");
  const int64_t panels = (n + kPanel - 1) / kPanel;
  OPFORGE_CHECK(w.size(0) < 0 || w.size(0) == panels, "input W has ", w.size(0), " panels; N=", n, " needs ",
                panels);
  const int64_t k = a.size(-1);
  OPFORGE_CHECK(k < 0 || w.size(1) < 0 || k == w.size(1), "inner dimensions differ: A has K=", k,
                " but packed W has K=", w.size(1));
  if (ctx.has_input(2)) {
    const Tensor bias = ctx.input(2);
    OPFORGE_CHECK(bias.ndim() == 1 && (bias.size(0) < 0 || bias.size(0) == n), "input bias must have shape (",
                  n, "), got rank ", bias.ndim(), bias.ndim() == 1 ? " of " + std::to_string(bias.size(0)) : "");
  }
  return k;
}

void packed_matmul_infer(InferContext& ctx) {
  check_inputs(ctx);
  opforge_cpu::Shape out = ctx.input(0).sizes();
  out.back() = ctx.attr<int64_t>("N");
  ctx.set_output(0, opforge::f32, out);
}

void packed_matmul_compute(KernelContext& ctx) {
  const int64_t k = check_inputs(ctx);
  const Tensor a = ctx.input(0), y = ctx.output(0);
  Product p{a.data<float>(), k, ctx.input(1).data<float>(), ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr,
            y.data<float>(), 0, ctx.attr<int64_t>("N"), k, chosen_act(ctx.attr<std::string>("activation")),
            chosen_isa(ctx.attr<std::string>("isa"))};
  if (y.numel() == 0) return;
  p.m = y.numel() / p.n;
  run_product(ctx, p);
}

}  // namespace

namespace opforge_gemm {

int64_t packed_floats(int64_t n, int64_t k) { return (n + kPanel - 1) / kPanel * k * kPanel; }

void pack_rows(const float* w, int64_t n, int64_t k, int64_t ldw, float* out) {
  for (int64_t p = 0; p * kPanel < n; ++p) {
    const int64_t cols = std::min(kPanel, n - p * kPanel);
    const float* rows = w + p * kPanel * ldw;
    for (int64_t kk = 0; kk < k; ++kk, out += kPanel) {
      for (int64_t j = 0; j < cols; ++j) out[j] = rows[j * ldw + kk];
      for (int64_t j = cols; j < kPanel; ++j) out[j] = 0.f;
    }
  }
}

void packed_product(const KernelContext& ctx, const float* a, int64_t lda, const float* b, float* y, int64_t m,
                    int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
  run_product(ctx, Product{a, lda, b, nullptr, y, m, n, k, Act::None, chosen_isa("auto")});
}

}  // namespace opforge_gemm

OPFORGE_OP(PackedMatMul)
    .domain("com.opforge")
    .since(1)
    .doc("Y = act(A @ W + bias), W packed by the session as (ceil(N / 32), K, 32) column panels; act is '', "
         "'Relu' or 'Gelu'. A (..., K) gives Y (..., N).")
    .input("A", {opforge::f32})
    .input("W", {opforge::f32})
    .optional_input("bias", {opforge::f32})
    .output("Y")
    .required_attr("N", opforge::AttrType::Int, "columns of W (the packed panels are padded to 32)")
    .attr("activation", "", "'', 'Relu' or 'Gelu' (erf form), applied after the bias")
    .attr("isa", "auto", "tile code: auto (the best this CPU has), avx512, avx2, neon or portable")
    .infer(packed_matmul_infer)
    .compute(packed_matmul_compute);
