// gemm_packed.cpp: com.opforge's PackedMatMul, Y = act(A @ W + bias) with W packed once at
// session creation (runtime/passes/pack_matmul_weights.py), on opforge's own register tiles.
//
// Packed W is (panels, K, 32): panel p holds columns [32p, 32p + 32) of W, each of its K rows
// 32 contiguous floats, zero past N, so a tile streams its B operand with no stride and no
// per-run packing. A is read where it lies: a tile's rows each broadcast their k-th value. The
// tile code is picked by the CPU's flags at run time: AVX-512F (rows x 32 columns), else
// AVX2 + FMA (rows x 16 columns, twice per panel), else plain loops; the `isa` attribute can
// force one (tests run every path the CPU has). Per block of K, a panel's rows stay in L1 while
// every row tile of the task runs over them; the bias and a Relu are applied in registers as
// the last K block is stored, a Gelu on the tile's rows right after. Threads split the output
// into tiles of (row block, panel group), so a one-image, 128-token product still fills both
// cores.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "common.h"
#include "elementwise_math.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

constexpr int64_t kPanel = 32;  ///< columns per packed panel
constexpr int64_t kBlockK = 256;  ///< K per block: a panel's block is 32 KB, held in L1

enum class Isa { Portable, Avx2, Avx512 };
enum class Act { None, Relu, Gelu };

/// One register tile's operands: rows of A (row r, element k at a[r * lda + k]), a panel's
/// block of packed rows, and the C rows it accumulates into.
struct Tile {
  const float* a;
  int64_t lda;
  const float* b;
  float* c;
  int64_t ldc;
  int64_t kc;
  int cols;            ///< valid columns of the panel, <= 32
  bool first, last;    ///< first K block starts from zero; the last applies bias and Relu
  const float* bias;   ///< the panel's bias (cols values), or null
  bool relu;
  /// The packed block the next panel runs over (kc rows), fetched into L2 by the first row tile
  /// of this one so that its own first tile does not wait on memory; or null.
  const float* next;
};

// ---- AVX-512F: up to 12 rows x 32 columns (24 accumulators) -----------------------------------

#define OPFORGE_AVX512 __attribute__((target("avx512f"), always_inline)) inline

OPFORGE_AVX512 __mmask16 lanes16(int n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

template <int R, bool Prefetch>
__attribute__((target("avx512f"))) void tile_avx512(const Tile& t) {
  const __mmask16 m0 = lanes16(t.cols), m1 = lanes16(t.cols - 16);
  __m512 lo[R], hi[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    lo[r] = t.first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, t.c + r * t.ldc);
    hi[r] = t.first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, t.c + r * t.ldc + 16);
  }
  const float* b = t.b;
  for (int64_t k = 0; k < t.kc; ++k, b += kPanel) {
    if (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(t.next + k * kPanel), _MM_HINT_T1);
    if (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(t.next + k * kPanel + 16), _MM_HINT_T1);
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(t.a[r * t.lda + k]);
      lo[r] = _mm512_fmadd_ps(av, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(av, b1, hi[r]);
    }
  }
  if (t.last && t.bias != nullptr) {
    const __m512 bias0 = _mm512_maskz_loadu_ps(m0, t.bias), bias1 = _mm512_maskz_loadu_ps(m1, t.bias + 16);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) lo[r] = _mm512_add_ps(lo[r], bias0), hi[r] = _mm512_add_ps(hi[r], bias1);
  }
  if (t.last && t.relu) {
    // max returns its second operand where either is NaN: NaN stays NaN, as in the Relu kernel
    // (the masked form: GCC 12 warns of an uninitialised operand in the unmasked one)
    const __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r)
      lo[r] = _mm512_mask_max_ps(zero, 0xFFFF, zero, lo[r]), hi[r] = _mm512_mask_max_ps(zero, 0xFFFF, zero, hi[r]);
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(t.c + r * t.ldc, m0, lo[r]);
    _mm512_mask_storeu_ps(t.c + r * t.ldc + 16, m1, hi[r]);
  }
}

constexpr int kRowsAvx512 = 12;

template <bool Prefetch>
void run_avx512_rows(int rows, const Tile& t) {
  switch (rows) {
    case 1: return tile_avx512<1, Prefetch>(t);
    case 2: return tile_avx512<2, Prefetch>(t);
    case 3: return tile_avx512<3, Prefetch>(t);
    case 4: return tile_avx512<4, Prefetch>(t);
    case 5: return tile_avx512<5, Prefetch>(t);
    case 6: return tile_avx512<6, Prefetch>(t);
    case 7: return tile_avx512<7, Prefetch>(t);
    case 8: return tile_avx512<8, Prefetch>(t);
    case 9: return tile_avx512<9, Prefetch>(t);
    case 10: return tile_avx512<10, Prefetch>(t);
    case 11: return tile_avx512<11, Prefetch>(t);
    default: return tile_avx512<12, Prefetch>(t);
  }
}

void run_avx512(int rows, const Tile& t) {
  if (t.next != nullptr)
    run_avx512_rows<true>(rows, t);
  else
    run_avx512_rows<false>(rows, t);
}

// ---- AVX2 + FMA: up to 6 rows x 16 columns (12 accumulators), two halves per panel ---------------

#define OPFORGE_AVX2 __attribute__((target("avx2,fma"), always_inline)) inline

/// Lanes [0, n) of 8 set, as maskload/maskstore want them.
OPFORGE_AVX2 __m256i lanes8(int n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <int R, bool Prefetch>
__attribute__((target("avx2,fma"))) void tile_avx2(const Tile& t, int half) {
  const int cols = t.cols - 16 * half;
  const __m256i m0 = lanes8(cols), m1 = lanes8(cols - 8);
  float* c = t.c + 16 * half;
  __m256 lo[R], hi[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    lo[r] = t.first ? _mm256_setzero_ps() : _mm256_maskload_ps(c + r * t.ldc, m0);
    hi[r] = t.first ? _mm256_setzero_ps() : _mm256_maskload_ps(c + r * t.ldc + 8, m1);
  }
  const float* b = t.b + 16 * half;
  for (int64_t k = 0; k < t.kc; ++k, b += kPanel) {
    if (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(t.next + k * kPanel), _MM_HINT_T1);
    if (Prefetch) _mm_prefetch(reinterpret_cast<const char*>(t.next + k * kPanel + 16), _MM_HINT_T1);
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m256 av = _mm256_broadcast_ss(t.a + r * t.lda + k);
      lo[r] = _mm256_fmadd_ps(av, b0, lo[r]);
      hi[r] = _mm256_fmadd_ps(av, b1, hi[r]);
    }
  }
  if (t.last && t.bias != nullptr) {
    const __m256 bias0 = _mm256_maskload_ps(t.bias + 16 * half, m0);
    const __m256 bias1 = _mm256_maskload_ps(t.bias + 16 * half + 8, m1);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) lo[r] = _mm256_add_ps(lo[r], bias0), hi[r] = _mm256_add_ps(hi[r], bias1);
  }
  if (t.last && t.relu) {
    const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) lo[r] = _mm256_max_ps(zero, lo[r]), hi[r] = _mm256_max_ps(zero, hi[r]);
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    _mm256_maskstore_ps(c + r * t.ldc, m0, lo[r]);
    _mm256_maskstore_ps(c + r * t.ldc + 8, m1, hi[r]);
  }
}

constexpr int kRowsAvx2 = 6;

template <int R>
void tile_avx2_panel(const Tile& t) {
  if (t.next != nullptr)
    tile_avx2<R, true>(t, 0);
  else
    tile_avx2<R, false>(t, 0);
  if (t.cols > 16) tile_avx2<R, false>(t, 1);
}

void run_avx2(int rows, const Tile& t) {
  switch (rows) {
    case 1: return tile_avx2_panel<1>(t);
    case 2: return tile_avx2_panel<2>(t);
    case 3: return tile_avx2_panel<3>(t);
    case 4: return tile_avx2_panel<4>(t);
    case 5: return tile_avx2_panel<5>(t);
    default: return tile_avx2_panel<6>(t);
  }
}

// ---- Plain loops: any CPU ------------------------------------------------------------------------

constexpr int kRowsPortable = 4;

void run_portable(int rows, const Tile& t) {
  for (int r = 0; r < rows; ++r) {
    float acc[kPanel];
    float* c = t.c + r * t.ldc;
    for (int j = 0; j < kPanel; ++j) acc[j] = t.first || j >= t.cols ? 0.f : c[j];
    for (int64_t k = 0; k < t.kc; ++k) {
      const float av = t.a[r * t.lda + k];
      const float* b = t.b + k * kPanel;
      for (int j = 0; j < kPanel; ++j) acc[j] += av * b[j];
    }
    for (int j = 0; j < t.cols; ++j) {
      float v = acc[j];
      if (t.last && t.bias != nullptr) v += t.bias[j];
      if (t.last && t.relu) v = v < 0.f ? 0.f : v;
      c[j] = v;
    }
  }
}

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
    return isa == Isa::Avx512 ? kRowsAvx512 : isa == Isa::Avx2 ? kRowsAvx2 : kRowsPortable;
  }
};

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
        if (p.isa == Isa::Avx512)
          run_avx512(rows, t);
        else if (p.isa == Isa::Avx2)
          run_avx2(rows, t);
        else
          run_portable(rows, t);
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
  __builtin_cpu_init();
  switch (isa) {
    case Isa::Avx512: return __builtin_cpu_supports("avx512f");
    case Isa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    default: return true;
  }
}

/// The tile code named by the `isa` attribute: "auto" is the best this CPU runs.
Isa chosen_isa(const std::string& name) {
  if (name == "auto") return cpu_has(Isa::Avx512) ? Isa::Avx512 : cpu_has(Isa::Avx2) ? Isa::Avx2 : Isa::Portable;
  const Isa isa = name == "avx512" ? Isa::Avx512 : name == "avx2" ? Isa::Avx2 : Isa::Portable;
  OPFORGE_CHECK(name == "avx512" || name == "avx2" || name == "portable",
                "attribute isa must be auto, avx512, avx2 or portable, got '", name, "'");
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
    .attr("isa", "auto", "tile code: auto (the best this CPU has), avx512, avx2 or portable")
    .infer(packed_matmul_infer)
    .compute(packed_matmul_compute);
