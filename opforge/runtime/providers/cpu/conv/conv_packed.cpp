// conv_packed.cpp: com.opforge's PackedConv, a float32 convolution whose weights the session
// packed once (runtime/passes/pack_conv_weights.py) as (ceil(M / 32), K, 32) panels of output
// channels per group, K = a group's input channels x taps, zero past the group's M.
//
// The register tile runs the other way round from conv_gemm_f32's: its vectors hold 32 output
// channels (a panel's row), its rows up to 12 (AVX-512) or 3 (AVX2) output positions of one
// output row, each broadcasting its input value at every k. No lane is wasted on a small map (a
// 7x7 map fills 49 of the 64 lanes of position tiles), and the input is read where it lies, or
// from conv_source.h's copy when the conv pads or strides, at a per-k offset (on AVX2, a 1x1
// conv of 4 panels or more a group reads it packed position-major: PositionRows; and a conv of
// one K block and at most 3 panels a group runs row tiles instead, GEMM's way round). The rows of
// a tile start from the bias and go to a scratch block (positions x 32) kept across K blocks;
// with AVX-512 the last K block transposes them in registers into Y's channel rows, with Z and
// the activation; with AVX2 the scratch block goes there after the last one.
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "conv/conv_avx2.h"
#include "conv/conv_pack.h"
#include "conv/conv_run.h"
#include "conv/conv_source.h"
#include "conv/conv_tiles.h"
#include "common/kernel_paths.h"

namespace opforge_conv {
namespace {

constexpr int64_t kPanel = 32;   ///< output channels per packed panel (two vectors, four on AVX2)
#if defined(__AVX512F__)
constexpr int64_t kRows = 12;    ///< output positions per tile at most
#else
constexpr int64_t kRows = 3;     ///< output positions per tile at most: 12 accumulators of 16 ymm
#endif
constexpr int64_t kBlockK = 128; ///< K rows per block: a panel's block is 16 KB, kept in L1 beside the input lines
constexpr int64_t kTasksPerThread = 4;
constexpr int64_t kTaskPositions = 1024;  ///< positions per task at most: its scratch (128 KB) stays in L2
/// Input bytes a task reads at most (its channels at its positions), so that they stay in a
/// 512 KB L2 beside its scratch while the next panels' tasks read them again: with 1024
/// positions of 96 channels or more the input outgrew L2 and each panel's task read it again
/// from L3 (a 1x1 conv of 96 x 56x56 ran 1.1-1.8 ms from one session to the next).
constexpr int64_t kTaskInputBytes = 256 << 10;
/// How far ahead of its k an AVX-512 tile asks for the panel's rows (8 KB): in a model whose
/// weights outgrow L3 the panels come from memory, and the hardware prefetcher alone left the
/// tiles waiting on them.
constexpr int64_t kPrefetchRows = 64;

/// The window and channel counts of a PackedConv, from X, the attributes and M.
template <class Ctx>
ConvShape packed_shape(const Ctx& ctx) {
  const Tensor x = ctx.input(0), w = ctx.input(1);
  const auto kernel = ctx.template attr<std::vector<int64_t>>("kernel_shape");
  ConvShape s;
  s.w = opforge_nn::forward_window(ctx, x, kernel);
  s.n = x.size(0), s.c = x.size(1), s.m = ctx.template attr<int64_t>("M");
  s.group = ctx.template attr<int64_t>("group");
  OPFORGE_CHECK(s.m > 0, "attribute M must be positive, got ", s.m);
  OPFORGE_CHECK(s.group > 0 && s.m % s.group == 0 && (s.c < 0 || s.c % s.group == 0), "attribute group ", s.group,
                " must divide M=", s.m, " and X's channels ", s.c);
  s.cg = s.c < 0 ? -1 : s.c / s.group, s.mg = s.m / s.group;
  const int64_t panels = s.group * ((s.mg + kPanel - 1) / kPanel);
  OPFORGE_CHECK(w.ndim() == 3 && w.size(2) == kPanel, "input W must be packed as (panels, K, ", kPanel, ")");
  OPFORGE_CHECK(w.size(0) < 0 || w.size(0) == panels, "input W has ", w.size(0), " panels; M=", s.m, " in ",
                s.group, " group(s) needs ", panels);
  OPFORGE_CHECK(s.cg < 0 || w.size(1) < 0 || w.size(1) == s.cg * s.w.k_size(), "packed W has K=", w.size(1),
                " but a group's channels times the kernel's taps are ", s.cg * s.w.k_size());
  if (ctx.has_input(2)) {
    const Tensor b = ctx.input(2);
    OPFORGE_CHECK(b.ndim() == 1 && (b.size(0) < 0 || b.size(0) == s.m), "bias B must have shape (", s.m, ")");
  }
  return s;
}

void packed_conv_infer(InferContext& ctx) {
  epilogue_attrs(ctx, true);
  const ConvShape s = packed_shape(ctx);
  const std::vector<int64_t> out = conv_output_dims(s);
  if (ctx.has_input(3)) {
    const Tensor z = ctx.input(3);
    bool same = z.ndim() == int(out.size());
    for (int d = 0; same && d < z.ndim(); ++d) same = z.size(d) < 0 || out[size_t(d)] < 0 || z.size(d) == out[size_t(d)];
    OPFORGE_CHECK(same, "input Z must have the output's shape");
  }
  ctx.set_output(0, opforge::f32, out);
}

int64_t packed_conv_workspace(InferContext& ctx) {
  const ConvShape s = packed_shape(ctx);
  const Source src = source_for(s.w);
  return src.copied && s.n >= 0 && s.c >= 0 ? s.n * s.c * src.channel() * int64_t(sizeof(float)) : 0;
}

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))

/// Up to kRows positions (rows) of one output row, where row r reads a[r] at each k's offset.
struct RowBlock {
  int64_t src, y;  ///< offset of its first position in the source plane, and in Y's plane
  int rows;
};

#if defined(__AVX512F__)

/// v[0, 16) transposed in place: lane j of v[i] becomes lane i of v[j] (four rounds of shuffles,
/// 64 in all). The all-lanes masked forms spare GCC 12 an undefined source operand it warns of.
__attribute__((always_inline)) inline void transpose16(__m512 v[16]) {
  constexpr __mmask16 all = 0xFFFF;
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {  // lane L of t[i] / t[i + 1]: rows i, i + 1 at columns 4L, 4L + 1 / 4L + 2, 4L + 3
    t[i] = _mm512_mask_unpacklo_ps(v[i], all, v[i], v[i + 1]);
    t[i + 1] = _mm512_mask_unpackhi_ps(v[i], all, v[i], v[i + 1]);
  }
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {  // lane L of v[g + j]: rows g .. g + 3 at column 4L + j
    v[g] = _mm512_mask_shuffle_ps(t[g], all, t[g], t[g + 2], 0x44);
    v[g + 1] = _mm512_mask_shuffle_ps(t[g], all, t[g], t[g + 2], 0xEE);
    v[g + 2] = _mm512_mask_shuffle_ps(t[g + 1], all, t[g + 1], t[g + 3], 0x44);
    v[g + 3] = _mm512_mask_shuffle_ps(t[g + 1], all, t[g + 1], t[g + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j)  // t[h + j] / t[h + 4 + j]: columns j, j + 8 / j + 4, j + 12 of rows h .. h + 7
    for (int h = 0; h < 16; h += 8) {
      t[h + j] = _mm512_mask_shuffle_f32x4(v[h + j], all, v[h + j], v[h + 4 + j], 0x88);
      t[h + 4 + j] = _mm512_mask_shuffle_f32x4(v[h + j], all, v[h + j], v[h + 4 + j], 0xDD);
    }
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {  // whole columns j and j + 8
    v[j] = _mm512_mask_shuffle_f32x4(t[j], all, t[j], t[j + 8], 0x88);
    v[j + 8] = _mm512_mask_shuffle_f32x4(t[j], all, t[j], t[j + 8], 0xDD);
  }
}

/// Where a tile's last K block goes: output channels [0, count) of its panel, each a row of Y
/// (and of Z) `pitch` floats apart, its R positions at y / z; the register activation applied.
struct Finish {
  float* y;
  const float* z;
  int64_t pitch;
  int count;
  const Epilogue* e;
  bool act;
};

/// T rows [0, R) (32 floats each) (+)= the block's positions x the panel's kc rows; the first
/// block starts from the panel's bias (as conv_gemm_f32's tiles do, so that both round alike).
/// With `f`, the last block transposes its sums in registers and stores them as Y's channel
/// rows, with Z and the activation (nothing goes through T).
template <int R>
void tile(const float* a, const int64_t* koff, const float* b, int64_t kc, float* t, const float* bias,
          const Finish* f) {
  __m512 lo[R], hi[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    lo[r] = bias ? _mm512_loadu_ps(bias) : _mm512_loadu_ps(t + r * kPanel);
    hi[r] = bias ? _mm512_loadu_ps(bias + 16) : _mm512_loadu_ps(t + r * kPanel + 16);
  }
  for (int64_t k = 0; k < kc; ++k, b += kPanel) {
    // past the panel's end: the next panel's rows (or no memory of ours, which a prefetch may name)
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchRows * kPanel), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchRows * kPanel + 16), _MM_HINT_T0);
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
    const float* ak = a + koff[k];
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const __m512 av = _mm512_set1_ps(ak[r]);
      lo[r] = _mm512_fmadd_ps(av, b0, lo[r]);
      hi[r] = _mm512_fmadd_ps(av, b1, hi[r]);
    }
  }
  if (!f) {
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      _mm512_storeu_ps(t + r * kPanel, lo[r]);
      _mm512_storeu_ps(t + r * kPanel + 16, hi[r]);
    }
    return;
  }
  const __mmask16 mask = tiles::first_lanes(R);
  for (int h = 0; h < 2 && h * 16 < f->count; ++h) {
    __m512 v[16];
#pragma GCC unroll 16
    for (int r = 0; r < 16; ++r) v[r] = r < R ? (h == 0 ? lo[r] : hi[r]) : _mm512_setzero_ps();
    transpose16(v);
    const int channels = std::min(16, f->count - h * 16);
    for (int c = 0; c < channels; ++c) {
      const int64_t at = (h * 16 + c) * f->pitch;
      __m512 out = v[c];
      if (f->z) out = _mm512_add_ps(out, _mm512_maskz_loadu_ps(mask, f->z + at));
      if (f->act) out = tiles::activate(out, *f->e);
      _mm512_mask_storeu_ps(f->y + at, mask, out);
    }
  }
}

void run_tile(int rows, const float* a, const int64_t* koff, const float* b, int64_t kc, float* t, const float* bias,
              const Finish* f) {
  switch (rows) {
    case 1: return tile<1>(a, koff, b, kc, t, bias, f);
    case 2: return tile<2>(a, koff, b, kc, t, bias, f);
    case 3: return tile<3>(a, koff, b, kc, t, bias, f);
    case 4: return tile<4>(a, koff, b, kc, t, bias, f);
    case 5: return tile<5>(a, koff, b, kc, t, bias, f);
    case 6: return tile<6>(a, koff, b, kc, t, bias, f);
    case 7: return tile<7>(a, koff, b, kc, t, bias, f);
    case 8: return tile<8>(a, koff, b, kc, t, bias, f);
    case 9: return tile<9>(a, koff, b, kc, t, bias, f);
    case 10: return tile<10>(a, koff, b, kc, t, bias, f);
    case 11: return tile<11>(a, koff, b, kc, t, bias, f);
    default: return tile<12>(a, koff, b, kc, t, bias, f);
  }
}

#else

/// T rows [0, R) (32 floats each) (+)= R positions x the panel's kc rows, the first H vectors of
/// its channels (R x H <= 12 accumulators). Row r reads a + pos[r] at each k's offset, so a tile's
/// positions may come from different output rows (a 13-wide row is then not cut into tiles of
/// 3, 3, 3, 2, 2). The first block starts from the panel's bias. The sums stay in T;
/// store_panel moves them into Y after the last block.
///
/// How the tile reads: at koff[k] from each position (Reads::Offsets) or at k itself
/// (Reads::Rows: position rows). It does not prefetch the panel's rows, which sit in L1 across
/// the chunk's tiles: prefetches only took issue slots (resnet50 and vgg19 5-9% faster without);
/// tiles_of asks for the next block between tiles.
enum class Reads { Offsets, Rows };

template <int R, int H, Reads M>
void tile(const float* a, const int64_t* pos, const int64_t* koff, const float* b, int64_t kc, float* t,
          const float* bias) {
  __m256 acc[R][H];
  const float* ar[R];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
    // Each row's own pointer in a register, so that a broadcast is one load at (ar[r], off, 4):
    // GCC otherwise kept a and the rows' byte offsets apart and added them anew at each k
    // (3 LEAs a k beside 12 FMAs).
    ar[r] = a + pos[r];
    __asm__("" : "+r"(ar[r]));
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) acc[r][h] = _mm256_loadu_ps(bias ? bias + 8 * h : t + r * kPanel + 8 * h);
  }
  // Two ks an iteration: one counter step and branch for 24 FMAs. On a shared host (Zen 3 VMs)
  // a tile runs at FMA peak (98 of 100 GFLOP/s) while the core is its own, and at 2/3 of that
  // while something else shares the core's issue slots; then every uop besides the FMAs costs
  // time. With both changes, 1 thread: 3x3 conv chains in 0.82-0.85 of their time before
  // (in-process alternation), the light zoo in 0.928 (bench_ab: resnet50 0.888, inception_v2
  // 0.889, squeezenet 0.899); while the host was quiet both ran at peak.
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k, b += kPanel) {
    const int64_t off = M == Reads::Rows ? k : koff[k];
    // 16 registers: 12 sums, then either R broadcasts and one vector of weights at a time (H = 4,
    // R = 3) or the H vectors of weights and one broadcast at a time (otherwise; R broadcasts
    // beside the sums would spill). Each is loaded once into a register: GCC would fold a load
    // into each FMA, and three loads per FMA pair left the tile waiting on the load ports.
    if constexpr (H == 4) {
      __m256 av[R];
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) av[r] = _mm256_broadcast_ss(ar[r] + off);
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        __m256 bv = _mm256_loadu_ps(b + 8 * h);
        __asm__("" : "+x"(bv));
#pragma GCC unroll 12
        for (int r = 0; r < R; ++r) acc[r][h] = _mm256_fmadd_ps(av[r], bv, acc[r][h]);
      }
    } else {
      __m256 bv[H];
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        bv[h] = _mm256_loadu_ps(b + 8 * h);
        __asm__("" : "+x"(bv[h]));
      }
#pragma GCC unroll 12
      for (int r = 0; r < R; ++r) {
        const __m256 av = _mm256_broadcast_ss(ar[r] + off);
#pragma GCC unroll 4
        for (int h = 0; h < H; ++h) acc[r][h] = _mm256_fmadd_ps(av, bv[h], acc[r][h]);
      }
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(t + r * kPanel + 8 * h, acc[r][h]);
}

/// One tile of `rows` positions (at most 12 / H), over the first H vectors of channels.
template <int H, Reads M, int R = 12 / H>
void tile_of(int64_t rows, const float* a, const int64_t* pos, const int64_t* koff, const float* b, int64_t kc,
             float* t, const float* bias) {
  if constexpr (R > 1)
    if (rows < R) return tile_of<H, M, R - 1>(rows, a, pos, koff, b, kc, t, bias);
  tile<R, H, M>(a, pos, koff, b, kc, t, bias);
}

/// The tiles of `positions` consecutive positions of Y (pos: their offsets in the source) over
/// the first H x 8 channels of the panel: 3 x 32, 4 x 24, 6 x 16 or 12 x 8 (a panel of 24, 16
/// or 8 channels or fewer: M = 24, or a grouped conv's last panel, which often holds a few).
/// Before each tile, its share of the next K block's 16 KB of weights (`next`: the panel's next
/// block, or the next panel's first) is asked for, so the first tile of that block does not
/// wait on lines from memory: in a model every conv's weights come from DRAM, and the hardware
/// prefetcher left the first tile of each block waiting (resnet50 0.977, squeezenet 0.968 in
/// in-process alternation, 1 thread).
template <int H, Reads M>
void tiles_of(int64_t positions, const float* a, const int64_t* pos, const int64_t* koff, const float* b,
              int64_t kc, float* t, const float* bias, const char* next) {
  constexpr int rows = 12 / H;
  constexpr int64_t kLines = kBlockK * kPanel * int64_t(sizeof(float)) / 64;
  const int64_t tiles = (positions + rows - 1) / rows, share = (kLines + tiles - 1) / tiles;
  const char* const end = next + kLines * 64;
  for (int64_t p = 0; p < positions; p += rows, pos += rows, t += rows * kPanel) {
    for (int64_t j = 0; j < share && next < end; ++j, next += 64) _mm_prefetch(next, _MM_HINT_T0);
    tile_of<H, M>(std::min<int64_t>(rows, positions - p), a, pos, koff, b, kc, t, bias);
  }
}

template <Reads M>
void run_tiles(int vectors, int64_t positions, const float* a, const int64_t* pos, const int64_t* koff,
               const float* b, int64_t kc, float* t, const float* bias, const char* next) {
  switch (vectors) {
    case 1: return tiles_of<1, M>(positions, a, pos, koff, b, kc, t, bias, next);
    case 2: return tiles_of<2, M>(positions, a, pos, koff, b, kc, t, bias, next);
    case 3: return tiles_of<3, M>(positions, a, pos, koff, b, kc, t, bias, next);
    default: return tiles_of<4, M>(positions, a, pos, koff, b, kc, t, bias, next);
  }
}

/// Output channels [0, count) of a panel's sums T (positions rows of 32 floats) into Y's channel
/// rows (`pitch` floats apart, the positions consecutive from y), 8 x 8 blocks transposed in
/// registers, with Z (laid out as Y, possibly Y itself) and the register activation (Act:
/// register_act's kind). Whole blocks go a way of their own, unrolled with Z and the activation
/// known: with them read at run time, GCC kept the transposed block on the stack and tested the
/// activation at every row (store_panel took 18% of a 64->256 1x1 conv).
template <bool HasZ, int Act>
void store_panel_as(const float* t, int64_t positions, int count, float* y, const float* z, int64_t pitch,
                    const Epilogue& e) {
  auto finish = [&](__m256 v) __attribute__((always_inline)) {
    if constexpr (Act == 1) return _mm256_max_ps(_mm256_setzero_ps(), v);
    if constexpr (Act == 2) return avx2::activate(v, e);
    return v;
  };
  for (int c0 = 0; c0 < count; c0 += avx2::kLanes) {
    int64_t p0 = 0;
    if (count - c0 >= avx2::kLanes)
      for (; p0 + avx2::kLanes <= positions; p0 += avx2::kLanes) {
        __m256 v[8];
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(t + (p0 + i) * kPanel + c0);
        avx2::transpose8(v);
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
          const int64_t at = (c0 + j) * pitch + p0;
          __m256 out = v[j];
          if constexpr (HasZ) out = _mm256_add_ps(out, _mm256_loadu_ps(z + at));
          _mm256_storeu_ps(y + at, finish(out));
        }
      }
    for (; p0 < positions; p0 += avx2::kLanes) {  // the last positions, or a panel's last channels
      const int64_t n = std::min<int64_t>(avx2::kLanes, positions - p0);
      const __m256i mask = avx2::first_lanes(n);
      __m256 v[8];
      for (int i = 0; i < 8; ++i) v[i] = i < n ? _mm256_loadu_ps(t + (p0 + i) * kPanel + c0) : _mm256_setzero_ps();
      avx2::transpose8(v);
      for (int j = 0; j < std::min(avx2::kLanes, count - c0); ++j) {
        const int64_t at = (c0 + j) * pitch + p0;
        __m256 out = v[j];
        if constexpr (HasZ) out = _mm256_add_ps(out, _mm256_maskload_ps(z + at, mask));
        _mm256_maskstore_ps(y + at, mask, finish(out));
      }
    }
  }
}

/// store_panel_as for this Z and the epilogue's register activation.
void store_panel(const float* t, int64_t positions, int count, float* y, const float* z, int64_t pitch,
                 const Epilogue& e) {
  switch (register_act(e.act) + (z ? 3 : 0)) {
    case 0: return store_panel_as<false, 0>(t, positions, count, y, z, pitch, e);
    case 1: return store_panel_as<false, 1>(t, positions, count, y, z, pitch, e);
    case 2: return store_panel_as<false, 2>(t, positions, count, y, z, pitch, e);
    case 3: return store_panel_as<true, 0>(t, positions, count, y, z, pitch, e);
    case 4: return store_panel_as<true, 1>(t, positions, count, y, z, pitch, e);
    default: return store_panel_as<true, 2>(t, positions, count, y, z, pitch, e);
  }
}

#endif  // __AVX512F__

/// Each output row cut into near-equal blocks of at most kRows positions, into `out`: the calling
/// thread's, kept from call to call. A 112x112 map has 4256 blocks of 3 (AVX2); grown anew at
/// every call, the vector's copies and fresh pages took 11% of a network's first conv (3 -> 16).
void row_blocks(const Window& w, const Source& src, std::vector<RowBlock>& out) {
  out.clear();
  const int64_t width = w.out[2], pieces = (width + kRows - 1) / kRows;
  out.reserve(size_t(w.out[0] * w.out[1] * pieces));
  for (int64_t d = 0; d < w.out[0]; ++d)
    for (int64_t h = 0; h < w.out[1]; ++h)
      for (int64_t i = 0; i < pieces; ++i) {
        const int64_t c0 = i * width / pieces, c1 = (i + 1) * width / pieces;
        out.push_back({(d * src.dims[1] + h) * src.dims[2] + c0, (d * w.out[1] + h) * width + c0, int(c1 - c0)});
      }
}

/// The operands of one run.
struct Job {
  const ConvShape& s;
  const float *src, *w, *z;
  std::vector<float> bias;    ///< per panel row, zero past each group's M (and where B is absent)
  int64_t cstride, k;
  std::vector<int64_t> koff;  ///< per k = (channel of the group, tap): its offset from a position
  const std::vector<RowBlock>& blocks;
  float* y;
  const Epilogue& e;
  uint64_t call = 0;           ///< this call's number (keys a thread's PositionRows)
  bool position_rows = false;  ///< AVX2: tiles read a 1x1 conv's input packed position-major
  bool row_tiles = false;      ///< AVX2: row tiles (one K block, output rows of 8 or more)
  int64_t panels_per_group() const { return (s.mg + kPanel - 1) / kPanel; }
};

/// What panel `panel` (of every group's panels, group by group) of image `image` reads and
/// writes: its group's input channels, its weights and bias, its first output row, its rows.
struct PanelRef {
  const float *src, *w, *bias;
  int64_t first_row;
  int count;
};

PanelRef panel_ref(const Job& job, int64_t image, int64_t panel) {
  const int64_t g = panel / job.panels_per_group(), m = (panel % job.panels_per_group()) * kPanel;
  return {job.src + (image * job.s.c + g * job.s.cg) * job.cstride, job.w + panel * job.k * kPanel,
          job.bias.data() + panel * kPanel, (image * job.s.m + g * job.s.mg + m) * job.s.w.out_size(),
          int(std::min(kPanel, job.s.mg - m))};
}

#if defined(__AVX512F__)

/// Panel `panel` of image `image` at row blocks [b0, b1): every K block, the last one stored
/// into Y by the tiles themselves, then the activations not applied in registers.
void run_task(const Job& job, int64_t image, int64_t panel, int64_t b0, int64_t b1) {
  thread_local std::vector<float> scratch;
  int64_t positions = 0;
  for (int64_t b = b0; b < b1; ++b) positions += job.blocks[size_t(b)].rows;
  // the sums between K blocks; grown, never shrunk (growing zeroes what the first block writes)
  if (scratch.size() < size_t(positions * kPanel)) scratch.resize(size_t(positions * kPanel));
  const PanelRef ref = panel_ref(job, image, panel);
  const float *src = ref.src, *wp = ref.w;
  const int64_t p = job.s.w.out_size(), first_row = ref.first_row;
  const bool act = in_register(job.e.act);
  Finish f{nullptr, nullptr, p, ref.count, &job.e, act && job.e.act != Activation::None};
  for (int64_t k0 = 0; k0 < job.k; k0 += kBlockK) {
    const int64_t kc = std::min(kBlockK, job.k - k0);
    const bool last = k0 + kc >= job.k;
    float* t = scratch.data();
    for (int64_t b = b0; b < b1; ++b) {
      const RowBlock& rb = job.blocks[size_t(b)];
      f.y = job.y + first_row + rb.y;
      f.z = job.z ? job.z + first_row + rb.y : nullptr;
      run_tile(rb.rows, src + rb.src, job.koff.data() + k0, wp + k0 * kPanel, kc, t, k0 == 0 ? ref.bias : nullptr,
               last ? &f : nullptr);
      t += rb.rows * kPanel;
    }
  }
  if (!act)
    for (const RowBlock* rb = &job.blocks[size_t(b0)]; rb != job.blocks.data() + b1; ++rb)
      activate_rows(job.e, job.y + first_row, p, f.count, rb->y, rb->y + rb->rows);
}

#else

/// A 1x1 conv's input at a task's positions, position-major: row i holds position i's K values
/// (packed[i * K + k] = src[koff[k] + pos[i]]), so a tile's broadcasts read a few sequential
/// rows. Read where it lies, each k is a line of its own channel plane; with 56x56 planes (a
/// multiple of 256 bytes apart) 96 channels fell in 16 of L1's 64 sets, beside the panel's
/// weights, and a tile's lines were gone before the next tile read them. A thread packs a chunk
/// once for all the panels it runs on it (tasks go chunk by chunk).
struct PositionRows {
  uint64_t call = 0;            ///< the packed_conv_compute call (Job::call) these rows belong to
  const float* src = nullptr;   ///< the image and group they were packed from
  int64_t b0 = -1, b1 = -1;
  std::vector<float> rows;
};

void pack_positions(const float* src, const int64_t* koff, int64_t k, const std::vector<int64_t>& pos, float* out) {
  const int64_t n = int64_t(pos.size());
  int64_t i = 0;
  for (; i + avx2::kLanes <= n; i += avx2::kLanes) {
    if (pos[size_t(i) + avx2::kLanes - 1] - pos[size_t(i)] != avx2::kLanes - 1) break;  // not 8 in a row
    const float* at = src + pos[size_t(i)];
    int64_t c = 0;
    for (; c + avx2::kLanes <= k; c += avx2::kLanes) {
      __m256 v[8];
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) v[j] = _mm256_loadu_ps(at + koff[c + j]);
      avx2::transpose8(v);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) _mm256_storeu_ps(out + (i + j) * k + c, v[j]);
    }
    for (; c < k; ++c)
      for (int j = 0; j < avx2::kLanes; ++j) out[(i + j) * k + c] = at[koff[c] + j];
  }
  for (; i < n; ++i)
    for (int64_t c = 0; c < k; ++c) out[i * k + c] = src[koff[c] + pos[size_t(i)]];
}

/// What a thread's tasks reuse from task to task.
struct Buffers {
  std::vector<float> scratch;  ///< the sums between K blocks
  std::vector<int64_t> pos;    ///< each position's offset in the source (with position rows: in them)
  PositionRows packed;
};

/// This thread's buffers, from a call GCC cannot repeat: it re-derived a thread_local's address
/// (a call to __tls_get_addr in this shared library) at each use, twice per position pushed in
/// run_task (3.5% of a grouped 1x1 conv's time).
__attribute__((noinline)) Buffers& thread_buffers() {
  static thread_local Buffers buffers;
  return buffers;
}

/// Row tiles, for convs of one K block (K <= 128: first convs of 3 channels, 1x1s of up to 128):
/// the GEMM's way round, vectors of 8 consecutive output positions of one output row and rows of
/// C <= 4 output channels, each k's weights broadcast and the inputs loaded where they lie (the
/// source's rows are the output rows, strides and pads having gone into its copy). The sums are
/// Y's own rows: no scratch block between K blocks, no transpose into Y. `lanes` < 8 only in a
/// segment narrower than a vector, whose loads and stores are masked.
template <int C, int V, bool Masked>
void row_tile(const float* a, const int64_t* koff, const float* w, int64_t kc, const float* bias, float* y,
              const float* z, int64_t pitch, const Epilogue& e, int act, int lanes) {
  __m256 acc[C][V];
  const __m256i mask = avx2::first_lanes(Masked ? lanes : avx2::kLanes);
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) acc[c][v] = _mm256_broadcast_ss(bias + c);
  // two ks an iteration, as tile's
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k, w += kPanel) {
    const float* at = a + koff[k];
    __m256 xv[V];
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) {
      xv[v] = Masked ? _mm256_maskload_ps(at + 8 * v, mask) : _mm256_loadu_ps(at + 8 * v);
      __asm__("" : "+x"(xv[v]));
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      const __m256 wv = _mm256_broadcast_ss(w + c);
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) acc[c][v] = _mm256_fmadd_ps(xv[v], wv, acc[c][v]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c)
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) {
      __m256 out = acc[c][v];
      float* at = y + c * pitch + 8 * v;
      if (z) out = _mm256_add_ps(out, Masked ? _mm256_maskload_ps(z + c * pitch + 8 * v, mask)
                                             : _mm256_loadu_ps(z + c * pitch + 8 * v));
      if (act == 1) out = _mm256_max_ps(_mm256_setzero_ps(), out);
      else if (act == 2) out = avx2::activate(out, e);
      if (Masked) _mm256_maskstore_ps(at, mask, out);
      else _mm256_storeu_ps(at, out);
    }
}

/// Positions [p0, p1) of one output row segment of n positions (a: its first position in the
/// source, y / z: in Y's / Z's plane of `pitch` floats a channel) over C channels: 24 positions
/// a tile, then 16 or 8, and the last vector shifted back over the one before (the segment's
/// positions before it, whose values it repeats), or masked where the segment is narrower than a
/// vector or Z is Y's own floats (`shift` false: a repeated lane would read Z already added).
template <int C>
void row_run(int64_t n, int64_t p0, int64_t p1, const float* a, const int64_t* koff, const float* w, int64_t kc,
             const float* bias, float* y, const float* z, int64_t pitch, const Epilogue& e, int act, bool shift) {
  auto zp = [&](int64_t p) { return z ? z + p : nullptr; };
  if (n < avx2::kLanes) return row_tile<C, 1, true>(a, koff, w, kc, bias, y, z, pitch, e, act, int(n));
  int64_t p = p0;
  for (; p + 24 <= p1; p += 24) row_tile<C, 3, false>(a + p, koff, w, kc, bias, y + p, zp(p), pitch, e, act, 8);
  if (p + 16 <= p1) row_tile<C, 2, false>(a + p, koff, w, kc, bias, y + p, zp(p), pitch, e, act, 8), p += 16;
  if (p + 8 <= p1) row_tile<C, 1, false>(a + p, koff, w, kc, bias, y + p, zp(p), pitch, e, act, 8), p += 8;
  if (p < p1 && !shift)
    row_tile<C, 1, true>(a + p, koff, w, kc, bias, y + p, zp(p), pitch, e, act, int(p1 - p));
  else if (p < p1)
    row_tile<C, 1, false>(a + p1 - 8, koff, w, kc, bias, y + p1 - 8, zp(p1 - 8), pitch, e, act, 8);
}

/// One output row segment of n positions over the panel's `count` channels: blocks of
/// positions, each over the channels four at a time, so four of Y's rows are written along at a
/// time (32 rows interleaved were slower), the block's inputs (kRowInputs floats at most, 32 KB)
/// read again for each four (blocks of a quarter of that measured the same).
constexpr int64_t kRowInputs = 8192;

void row_segment(int64_t n, int count, const float* a, const int64_t* koff, const float* w, int64_t kc,
                 const float* bias, float* y, const float* z, int64_t pitch, const Epilogue& e, int act, bool shift) {
  const int64_t block = std::max<int64_t>(24, kRowInputs / kc / 24 * 24);
  for (int64_t p0 = 0; p0 < n; p0 += block) {
    const int64_t p1 = std::min(n, p0 + block);
    for (int c = 0; c < count; c += 4) {
      const float* zc = z ? z + c * pitch : nullptr;
      float* yc = y + c * pitch;
      switch (std::min(4, count - c)) {
        case 4: row_run<4>(n, p0, p1, a, koff, w + c, kc, bias + c, yc, zc, pitch, e, act, shift); break;
        case 3: row_run<3>(n, p0, p1, a, koff, w + c, kc, bias + c, yc, zc, pitch, e, act, shift); break;
        case 2: row_run<2>(n, p0, p1, a, koff, w + c, kc, bias + c, yc, zc, pitch, e, act, shift); break;
        default: row_run<1>(n, p0, p1, a, koff, w + c, kc, bias + c, yc, zc, pitch, e, act, shift);
      }
    }
  }
}

/// A task of row tiles: the row blocks [b0, b1) merged into segments of output rows.
void run_row_task(const Job& job, const PanelRef& ref, int64_t b0, int64_t b1) {
  OPFORGE_KERNEL_PATH("conv.packed.row_tiles");
  const int64_t p = job.s.w.out_size();
  const int act = register_act(job.e.act);
  const int64_t bytes = job.s.n * job.s.m * p * int64_t(sizeof(float));
  const bool shift = job.z == nullptr || !overlap(job.z, bytes, job.y, bytes);
  for (int64_t b = b0; b < b1;) {
    const RowBlock& first = job.blocks[size_t(b)];
    int64_t n = first.rows;
    for (++b; b < b1 && job.blocks[size_t(b)].y == first.y + n && job.blocks[size_t(b)].src == first.src + n; ++b)
      n += job.blocks[size_t(b)].rows;
    const int64_t at = ref.first_row + first.y;
    row_segment(n, ref.count, ref.src + first.src, job.koff.data(), ref.w, job.k, ref.bias, job.y + at,
                job.z ? job.z + at : nullptr, p, job.e, act, shift);
  }
  if (!in_register(job.e.act)) {
    const int64_t y0 = job.blocks[size_t(b0)].y, y1 = job.blocks[size_t(b1 - 1)].y + job.blocks[size_t(b1 - 1)].rows;
    activate_rows(job.e, job.y + ref.first_row, p, ref.count, y0, y1);
  }
}

/// Panel `panel` of image `image` at row blocks [b0, b1) (consecutive positions of Y): every K
/// block into the scratch sums, tiles running on across the blocks' rows, then the sums into Y,
/// then the activations not applied in registers.
void run_task(const Job& job, int64_t image, int64_t panel, int64_t b0, int64_t b1) {
  if (job.row_tiles) return run_row_task(job, panel_ref(job, image, panel), b0, b1);
  Buffers& mine = thread_buffers();
  std::vector<float>& scratch = mine.scratch;
  std::vector<int64_t>& pos = mine.pos;
  PositionRows& packed = mine.packed;
  pos.clear();
  for (int64_t b = b0; b < b1; ++b)
    for (int r = 0; r < job.blocks[size_t(b)].rows; ++r) pos.push_back(job.blocks[size_t(b)].src + r);
  const int64_t positions = int64_t(pos.size());
  if (scratch.size() < size_t(positions * kPanel)) scratch.resize(size_t(positions * kPanel));
  PanelRef ref = panel_ref(job, image, panel);
  const int64_t* koff = job.koff.data();
  if (job.position_rows) {
    OPFORGE_KERNEL_PATH("conv.packed.position_rows");
    if (packed.call != job.call || packed.src != ref.src || packed.b0 != b0 || packed.b1 != b1) {
      packed.rows.resize(size_t(positions * job.k));
      pack_positions(ref.src, koff, job.k, pos, packed.rows.data());
      packed.call = job.call, packed.src = ref.src, packed.b0 = b0, packed.b1 = b1;
    }
    ref.src = packed.rows.data();
    for (int64_t i = 0; i < positions; ++i) pos[size_t(i)] = i * job.k;  // now each position's row
  }
  const int64_t p = job.s.w.out_size(), first_row = ref.first_row;
  const int vectors = int((ref.count + avx2::kLanes - 1) / avx2::kLanes);
  if (vectors == 3) OPFORGE_KERNEL_PATH("conv.packed.panel_of_24");
  if (vectors == 2) OPFORGE_KERNEL_PATH("conv.packed.panel_of_16");
  if (vectors == 1) OPFORGE_KERNEL_PATH("conv.packed.panel_of_8");
  const int count = ref.count;
  const int64_t y0 = first_row + job.blocks[size_t(b0)].y;
  const bool act = in_register(job.e.act);
  for (int64_t k0 = 0; k0 < job.k; k0 += kBlockK) {
    const int64_t kc = std::min(kBlockK, job.k - k0);
    const float* w = ref.w + k0 * kPanel;
    float* const t = scratch.data();
    const float* bias = k0 == 0 ? ref.bias : nullptr;
    const char* next = reinterpret_cast<const char*>(w + kc * kPanel);  // past the last panel: prefetches do not fault
    if (job.position_rows)
      run_tiles<Reads::Rows>(vectors, positions, ref.src + k0, pos.data(), nullptr, w, kc, t, bias, next);
    else
      run_tiles<Reads::Offsets>(vectors, positions, ref.src, pos.data(), koff + k0, w, kc, t, bias, next);
  }
  store_panel(scratch.data(), positions, count, job.y + y0, job.z ? job.z + y0 : nullptr, p, job.e);
  if (!act) activate_rows(job.e, job.y + first_row, p, count, y0 - first_row, y0 - first_row + positions);
}

#endif  // __AVX512F__

void packed_conv_compute(KernelContext& ctx) {
  OPFORGE_KERNEL_PATH("conv.packed");
  const Epilogue e = epilogue_attrs(ctx, true);
  const ConvShape s = packed_shape(ctx);
  const Tensor x = ctx.input(0), y = ctx.output(0);
  if (y.numel() == 0) return;
  std::vector<float> aside;  // Y planned over X, which the tiles read to the end: computed aside
  if (overlap(x.raw(), x.nbytes(), y.raw(), y.nbytes())) aside.resize(size_t(y.numel()));
  const Source src = source_for(s.w);
  const int64_t per_group = (s.mg + kPanel - 1) / kPanel, panels = s.group * per_group;
  static thread_local std::vector<RowBlock> blocks;
  row_blocks(s.w, src, blocks);
  Job job{s, x.data<float>(), ctx.input(1).data<float>(), ctx.has_input(3) ? ctx.input(3).data<float>() : nullptr,
          std::vector<float>(size_t(panels * kPanel), 0.f), src.channel(), s.cg * s.w.k_size(), {}, blocks,
          aside.empty() ? y.data<float>() : aside.data(), e};
  job.koff.reserve(size_t(job.k));
  if (src.copied) {
    OPFORGE_CHECK(ctx.workspace_bytes() >= s.n * s.c * src.channel() * int64_t(sizeof(float)),
                  "the workspace is smaller than the input's copy");
    float* copy = ctx.workspace<float>();
    copy_source(ctx, s.w, src, s.n * s.c, job.src, copy);
    job.src = copy;
  }
  for (int64_t c = 0; c < s.cg; ++c)
    for (int64_t kd = 0; kd < s.w.k[0]; ++kd)
      for (int64_t kh = 0; kh < s.w.k[1]; ++kh)
        for (int64_t kw = 0; kw < s.w.k[2]; ++kw) {
          const int64_t k[3] = {kd, kh, kw};
          job.koff.push_back(c * job.cstride + src.tap_offset(s.w, k));
        }
  if (ctx.has_input(2))
    for (int64_t g = 0; g < s.group; ++g)
      std::copy_n(ctx.input(2).data<float>() + g * s.mg, s.mg, job.bias.begin() + g * per_group * kPanel);
  const int64_t nb = int64_t(job.blocks.size());
  const int64_t units = s.n * panels, want = ctx.num_threads() > 1 ? ctx.num_threads() * kTasksPerThread : 1;
#if defined(__AVX512F__)
  // Where the packed weights outweigh the maps, tasks go panel by panel, so each thread streams
  // its own panels (from memory, in a model whose weights outgrow the caches): inception_v2's
  // 3x3 convs on 14x14 maps. Elsewhere at least a chunk of the map per thread, and tasks go
  // chunk by chunk, so each thread takes a run of positions over every panel: the parts of X
  // and Y it touches are those the convs before and after it (cut by positions too) touched on
  // the same thread. Cutting every conv one way or the other was slower than choosing per conv.
  const bool by_panel = panels * job.k * kPanel > s.n * (s.c * job.cstride + s.m * s.w.out_size());
  const int64_t task_positions = kTaskPositions;
#else
  // With AVX2 (Zen 3), packing a chunk's rows paid off from 4 panels a group (1.0-1.15x faster
  // alone, by the input's size); with 1 or 2 it cost more than the reads it saved. Row tiles take
  // convs of one K block and at most 3 panels a group (each alone, 1 thread, against position
  // tiles: shufflenet's grouped 1x1s 0.65-0.92, 16->64 and 64->16 1x1s on 55x55 0.85-0.91, its
  // first conv 3->24 0.77-0.90; 3->64 and 64->64 even); with more panels they lost to position
  // rows (64->256 on 56x56 1.26, 128->512 on 28x28 1.23, 48->192 on 13x13 1.10). Tasks go panel
  // by panel where the weights outweigh the maps, as with AVX-512, but not over position rows,
  // which each thread would then pack for every position (resnet50 1.035, squeezenet 1.064 with
  // them). 2 threads, in-process alternation: 3x3 convs of 512 -> 512 on 7x7 0.86-0.92, 256 ->
  // 256 on 4x32 0.94-0.96, 128 -> 256 on 8x32 0.97-0.99; crnn 0.97-0.98, resnet50 0.97-0.99.
  static std::atomic<uint64_t> calls{0};
  job.call = ++calls;
  job.row_tiles = job.k <= kBlockK && s.w.out[2] >= avx2::kLanes && per_group <= 3;
  job.position_rows = s.w.k_size() == 1 && per_group >= 4;
  const bool by_panel =
      !job.position_rows && panels * job.k * kPanel > s.n * (s.c * job.cstride + s.m * s.w.out_size());
  const int64_t task_positions =
      std::clamp<int64_t>(kTaskInputBytes / (std::max<int64_t>(1, s.cg) * int64_t(sizeof(float))), 48, kTaskPositions);
#endif
  int64_t chunks = std::max((want + units - 1) / units, (s.w.out_size() + task_positions - 1) / task_positions);
  if (by_panel) OPFORGE_KERNEL_PATH("conv.packed.by_panel");
  else chunks = std::max<int64_t>(chunks, ctx.num_threads());
  chunks = std::clamp<int64_t>(chunks, 1, nb);
  ctx.parallel_for(units * chunks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t unit = by_panel ? t / chunks : t % units, chunk = by_panel ? t % chunks : t / units;
      run_task(job, unit / panels, unit % panels, chunk * nb / chunks, (chunk + 1) * nb / chunks);
    }
  });
  if (!aside.empty()) std::copy(aside.begin(), aside.end(), y.data<float>());
}

#else

void packed_conv_compute(KernelContext&) {
  throw opforge::Error("PackedConv needs a kernel build with AVX-512F or AVX2 + FMA (the session packs conv "
                       "weights only there)");
}

#endif  // __AVX512F__ or __AVX2__ with __FMA__

}  // namespace
}  // namespace opforge_conv

OPFORGE_OP(PackedConv)
    .domain("com.opforge")
    .since(1)
    .doc("A float32 convolution, Y = activation(Conv(X, W) + B + Z), with W packed by the session as "
         "(group x ceil(M / group / 32), C / group x taps, 32) panels of each group's output channels; "
         "attributes as FusedConv's.")
    .input("X", {opforge::f32})
    .input("W", {opforge::f32})
    .optional_input("B", {opforge::f32})
    .optional_input("Z", {opforge::f32})
    .output("Y")
    .required_attr("M", opforge::AttrType::Int, "output channels (the packed panels are padded to 32)")
    .required_attr("kernel_shape", opforge::AttrType::Ints, "the kernel's spatial dims")
    .attr("group", int64_t(1), "groups of input and output channels, each packed into panels of its own")
    .attr("activation", "", "Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid, HardSwish, or empty for none")
    .optional_attr("activation_params", opforge::AttrType::Floats,
                   "LeakyRelu: alpha; Clip: min, max; HardSigmoid: alpha, beta")
    .attr("auto_pad", "NOTSET")
    .optional_attr("dilations", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .inplace(0, 3)
    .infer(opforge_conv::packed_conv_infer)
    .workspace(opforge_conv::packed_conv_workspace)
    .compute(opforge_conv::packed_conv_compute);
