// conv_gemm_f32.cpp: float32 convolution as a GEMM on opforge's own register tiles.
//
// Y[m, p] = sum_k W[m, k] * B[k, p] per image and group, k = (input channel, tap). The weights
// are read where they lie (row m of W is already the k-contiguous stream a tile broadcasts
// from), so nothing about them is packed, per run or ever. B is never built whole: per block of
// K, one tile of kNR positions is packed at a time from the input (copied once, when the conv
// pads or strides, into planes with the padding written out and each stride phase apart, so no
// tap needs a bounds check and every tap reads consecutive floats: conv_source.h), and runs against the
// row blocks of W while it is in L1. Bias, the residual Z and the activation are applied in
// registers as the last K block is stored. Work is cut into near-equal slices of (tile, row
// block) pairs, a few per thread.
#include <algorithm>
#include <cstring>
#include <vector>

#include "conv/conv_pack.h"
#include "conv/conv_run.h"
#include "common/kernel_paths.h"
#include "conv/conv_source.h"
#include "conv/conv_tiles.h"
#include "elementwise/elementwise_math.h"

namespace opforge_conv {

void activate_rows(const Epilogue& e, float* y, int64_t ld, int64_t rows, int64_t p0, int64_t p1) {
  namespace vm = opforge_cpu::ew::vmath;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y + r * ld;
    switch (e.act) {
      case Activation::Sigmoid:
        for (int64_t i = p0; i < p1; ++i) row[i] = vm::sigmoid(row[i]);
        break;
      case Activation::Tanh:
        for (int64_t i = p0; i < p1; ++i) row[i] = vm::tanh(row[i]);
        break;
      default:
        for (int64_t i = p0; i < p1; ++i) row[i] = e.apply(row[i]);
    }
  }
}

#if !defined(__AVX512F__)

int64_t conv_gemm_f32_workspace(const ConvShape&) { return 0; }

bool conv_gemm_f32(KernelContext&, const ConvShape&, const float*, const float*, const float*, const float*, float*,
                   const Epilogue&) {
  return false;
}

#else

namespace tiles {

template <int V, bool Direct>
void run_rows(int rows, const TileArgs& t) {
  switch (rows) {
    case 1: return tile<1, V, Direct>(t);
    case 2: return tile<2, V, Direct>(t);
    case 3: return tile<3, V, Direct>(t);
    case 4: return tile<4, V, Direct>(t);
    case 5: return tile<5, V, Direct>(t);
    case 6: return tile<6, V, Direct>(t);
    case 7: return tile<7, V, Direct>(t);
    case 8: return tile<8, V, Direct>(t);
    case 9: return tile<9, V, Direct>(t);
    case 10: return tile<10, V, Direct>(t);
    case 11: return tile<11, V, Direct>(t);
    default: return tile<12, V, Direct>(t);
  }
}

void run_tile(int rows, int vectors, bool direct, const TileArgs& t) {
  if (direct)
    run_rows<2, true>(rows, t);
  else if (vectors == 1)
    run_rows<1, false>(rows, t);
  else
    run_rows<2, false>(rows, t);
}

}  // namespace tiles

namespace {

using tiles::Grid;
using tiles::kMR;
using tiles::kNR;
using tiles::TileMap;

constexpr int64_t kKcTarget = 512;        ///< K rows per block: a row block of W (12 x 512 floats, 24 KB) stays in L1
constexpr int64_t kSlicesPerThread = 4;   ///< the host pool hands out single slices up to 4 per thread
constexpr int64_t kL2Bytes = 512 * 1024;  ///< packed tiles of one run, kept in L2
/// Multiply-adds per slice at least: handing a smaller conv to the pool's other threads costs
/// more than it saves.
constexpr int64_t kMinSliceMacs = 512 * 1024;
constexpr int64_t kDirectRows = 64;               ///< see reads_in_place
constexpr int64_t kDirectBytes = 4 * 1024 * 1024;
constexpr int64_t kPointwiseDirectRows = 32;      ///< see reads_in_place
constexpr int64_t kDirectChannels = 4;            ///< see reads_in_place

/// Whether tiles run over the grid of the source (conv_source.h) rather than over the output:
/// unless the kernel is 1x1, or that grid wastes over 15% more lanes (its padding columns)
/// than tiles over the output would. A grid tile packs with one copy per row, an output tile
/// with one per output row it crosses, strided, and bounds checks when the conv pads. A 1x1
/// conv of stride 2 packs each strided row once per tile either way (copying a quarter of its
/// input first was slower).
bool grid_tiles(const Window& w, const Source& src) {
  if (w.k_size() == 1) return false;
  const int64_t pitch = src.dims[2], plane = src.dims[1] * pitch;
  const int64_t grid_count = (w.out[0] - 1) * plane + (w.out[1] - 1) * pitch + w.out[2];
  const int64_t lanes_out = (w.out_size() + kNR / 2 - 1) / (kNR / 2) * (kNR / 2);
  const int64_t lanes_grid = (grid_count + kNR - 1) / kNR * kNR;
  return lanes_grid * 20 <= lanes_out * 23;
}

/// Whether B reads a copy of the input (conv_source.h): grid tiles of a conv that pads or strides.
bool reads_copy(const Window& w, const Source& src) { return grid_tiles(w, src) && src.copied; }

/// The positions tiles run over (see Grid).
Grid grid_for(const Window& w, const Source& src) {
  Grid g;
  g.out_h = w.out[1], g.out_w = w.out[2];
  g.src_pitch = w.in[2], g.src_plane = w.in[1] * w.in[2];
  for (int a = 0; a < 3; ++a) g.stride[a] = w.stride[a];
  g.pitch = g.out_w, g.plane = g.out_h * g.out_w, g.count = w.out_size();
  if (!grid_tiles(w, src)) return g;
  g.is_virtual = true;
  g.src_pitch = src.dims[2], g.src_plane = src.dims[1] * src.dims[2];
  g.pitch = g.src_pitch, g.plane = g.src_plane;
  g.count = (w.out[0] - 1) * g.plane + (w.out[1] - 1) * g.pitch + w.out[2];
  return g;
}

/// How one convolution is cut: K blocks of whole channels, tiles, row blocks, slices.
struct Cut {
  Grid grid;
  std::vector<TileMap> maps;    ///< per tile
  std::vector<int64_t> tapoff;  ///< offset of each tap in the input B reads
  int64_t tiles, k, taps, chans_per_block, mb, mg, images, slices;
  int64_t max_run;  ///< tiles per run, so that a run's packed tiles fit in L2
  bool direct;      ///< whole grid tiles read B in place (see reads_in_place)
  int64_t items() const { return images * tiles * mb; }
  /// First output channel (of a group) of row block b: blocks of near-equal rows, at most kMR,
  /// so 32 channels run as 11 + 11 + 10 rather than 12 + 12 + 8.
  int64_t row_begin(int64_t b) const { return mb > 0 ? b * mg / mb : 0; }
};

Cut cut_for(const ConvShape& s, const Source& src, int threads) {
  Cut c;
  const Window& w = s.w;
  c.grid = grid_for(w, src);
  c.tiles = (c.grid.count + kNR - 1) / kNR;
  c.maps.reserve(size_t(c.tiles));  // growing would copy every map's segments
  c.tapoff.reserve(size_t(w.k_size()));
  for (int64_t t = 0; t < c.tiles; ++t)
    c.maps.push_back(c.grid.is_virtual ? tiles::map_grid_tile(c.grid, t * kNR) : tiles::map_output_tile(c.grid, t * kNR, window_pads(w)));
  for (int64_t kd = 0; kd < w.k[0]; ++kd)
    for (int64_t kh = 0; kh < w.k[1]; ++kh)
      for (int64_t kw = 0; kw < w.k[2]; ++kw) {
        const int64_t k[3] = {kd, kh, kw};
        c.tapoff.push_back(c.grid.is_virtual ? src.tap_offset(w, k)
                                             : kd * w.dil[0] * c.grid.src_plane + kh * w.dil[1] * c.grid.src_pitch + kw * w.dil[2]);
      }
  c.taps = w.k_size();
  c.k = s.cg * c.taps;
  const int64_t blocks = (c.k + kKcTarget - 1) / kKcTarget;
  c.chans_per_block = std::max<int64_t>(1, (s.cg + blocks - 1) / blocks);
  c.mb = (s.mg + kMR - 1) / kMR;
  c.mg = s.mg;
  c.images = s.n * s.group;
  const int64_t macs = c.images * s.mg * c.k * c.grid.count;
  c.slices = threads <= 1 ? 1 : std::clamp<int64_t>(macs / kMinSliceMacs, 1, std::min<int64_t>(threads * kSlicesPerThread, c.items()));
  // A whole number of slices per thread: 5 slices on 2 threads end when the thread with 3 does
  if (c.slices > threads) c.slices -= c.slices % threads;
  c.max_run = std::max<int64_t>(1, kL2Bytes / (c.chans_per_block * c.taps * kNR * int64_t(sizeof(float))));
  const bool pointwise = w.k_size() == 1 && !window_strides(w) && !window_pads(w);
  c.direct = (pointwise && s.mg <= kPointwiseDirectRows) ||
             (c.grid.is_virtual && s.mg <= kDirectRows &&
              (s.cg <= kDirectChannels || src.channel() * s.cg * int64_t(sizeof(float)) > kDirectBytes));
  return c;
}

/// Floats of the input's copy (all images and channels), or 0 when B reads the input as it is.
int64_t copy_floats(const ConvShape& s, const Source& src) { return reads_copy(s.w, src) ? s.n * s.c * src.channel() : 0; }

/// The operands and cut of one convolution call; src is the input B is read from (a copy or
/// not), cstride its channel stride.
struct Job {
  const ConvShape& s;
  const Cut& cut;
  const float *src, *w, *bias, *z;
  int64_t cstride;
  float* y;
  const Epilogue& e;
};

/// Whether tile t reads B in place instead of packed: a whole tile of the source's grid, in a conv
/// with few output channels (a packed tile would serve few row blocks of W) over an input too
/// large for the caches (packing would wait on memory; with smaller inputs packing wins). Or a
/// whole tile of a 1x1 conv of stride 1 without pads (each B row is a run of its input channel)
/// with at most 32 output channels, whose one to three row blocks leave packing's cost
/// unshared (squeezenet's squeeze convs; with more outputs in place is no faster). And grid
/// tiles of an input of at most 4 channels (a network's first conv), whose taps all read a few
/// planes. The thresholds were measured; the commits that set them give the figures.
bool reads_in_place(const Cut& c, int64_t t) {
  return c.direct && c.maps[size_t(t)].covered == kNR;
}

/// Tiles [t0, t1) of one image-group, row blocks [mb0, mb1), for one K block of channels
/// [c0, c0 + cb): packs the tiles (they stay in L2), then runs each row block of W (in L1)
/// over every tile in turn, so W is read once per K block.
void run_kblock(const Job& job, int64_t image, int64_t t0, int64_t t1, int64_t mb0, int64_t mb1, int64_t c0,
                std::vector<float>& pack) {
  const ConvShape& s = job.s;
  const Cut& c = job.cut;
  const int64_t n = image / s.group, g = image % s.group, p = s.w.out_size();
  const float* src = job.src + (n * s.c + g * s.cg + c0) * job.cstride;
  const int64_t y0 = (n * s.m + g * s.mg) * p;
  const int64_t cb = std::min(c.chans_per_block, s.cg - c0), kc = cb * c.taps;
  const int64_t step = c.grid.is_virtual ? 1 : s.w.stride[2];
  // grown, never shrunk: resizing up again would zero what every tile writes anyway
  if (pack.size() < size_t((t1 - t0) * kc * kNR)) pack.resize(size_t((t1 - t0) * kc * kNR));
  const bool bounded = window_pads(s.w) && !c.grid.is_virtual;
  for (int64_t t = t0; t < t1; ++t) {
    float* out = pack.data() + (t - t0) * kc * kNR;
    if (reads_in_place(c, t)) continue;
    if (bounded)
      tiles::pack_tile_padded(c.maps[size_t(t)], s.w, src, cb, out);
    else
      tiles::pack_tile(c.maps[size_t(t)], src, job.cstride, c.tapoff, cb, step, out);
  }
  for (int64_t mb = mb0; mb < mb1; ++mb) {
    const int64_t m = c.row_begin(mb), rows = c.row_begin(mb + 1) - m, at = y0 + m * p;
    tiles::TileArgs args{kc, job.w + (g * s.mg + m) * c.k + c0 * c.taps, c.k, nullptr, job.y + at, p, nullptr,
                         job.bias ? job.bias + g * s.mg + m : nullptr, job.z ? job.z + at : nullptr, c0 == 0,
                         c0 + cb >= s.cg, &job.e, c.tapoff.data(), c.taps, job.cstride};
    for (int64_t t = t0; t < t1; ++t) {
      const TileMap& map = c.maps[size_t(t)];
      const bool direct = reads_in_place(c, t);
      args.b = direct ? src + t * kNR : pack.data() + (t - t0) * kc * kNR;
      args.lanes = map.lanes;
      tiles::run_tile(int(rows), map.vectors, direct, args);
    }
  }
}

/// Tiles [t0, t1) of one image-group, row blocks [mb0, mb1): every K block, then the
/// activations that are not applied in registers.
void run_block(const Job& job, int64_t image, int64_t t0, int64_t t1, int64_t mb0, int64_t mb1,
               std::vector<float>& pack) {
  const ConvShape& s = job.s;
  for (int64_t c0 = 0; c0 < s.cg; c0 += job.cut.chans_per_block) run_kblock(job, image, t0, t1, mb0, mb1, c0, pack);
  if (tiles::in_register(job.e.act)) return;
  const int64_t p = s.w.out_size(), n = image / s.group, g = image % s.group;
  const int64_t m0 = job.cut.row_begin(mb0), m1 = job.cut.row_begin(mb1);
  activate_rows(job.e, job.y + (n * s.m + g * s.mg + m0) * p, p, m1 - m0, job.cut.maps[size_t(t0)].y_begin,
                job.cut.maps[size_t(t1 - 1)].y_end);
}

/// Items [lo, hi) of the (image, tile, row block) space, in runs of whole tiles where it can.
void run_slice(const Job& job, int64_t lo, int64_t hi) {
  thread_local std::vector<float> pack;
  const Cut& c = job.cut;
  for (int64_t i = lo; i < hi;) {
    const int64_t unit = i / c.mb, mb0 = i % c.mb, image = unit / c.tiles, t = unit % c.tiles;
    if (mb0 == 0 && hi - i >= c.mb) {
      const int64_t t1 = std::min({c.tiles, t + (hi - i) / c.mb, t + c.max_run});
      run_block(job, image, t, t1, 0, c.mb, pack);
      i += (t1 - t) * c.mb;
    } else {
      const int64_t mb1 = std::min(c.mb, mb0 + (hi - i));
      run_block(job, image, t, t + 1, mb0, mb1, pack);
      i += mb1 - mb0;
    }
  }
}

}  // namespace

int64_t conv_gemm_f32_workspace(const ConvShape& s) { return copy_floats(s, source_for(s.w)) * int64_t(sizeof(float)); }

bool conv_gemm_f32(KernelContext& ctx, const ConvShape& s, const float* x, const float* w, const float* bias,
                   const float* z, float* y, const Epilogue& e) {
  OPFORGE_KERNEL_PATH("conv.gemm_tiles");
  const Source source = source_for(s.w);
  const Cut cut = cut_for(s, source, ctx.num_threads());
  const float* src = x;
  int64_t cstride = s.w.in_size();
  if (const int64_t copied = copy_floats(s, source)) {
    OPFORGE_CHECK(ctx.workspace_bytes() >= copied * int64_t(sizeof(float)),
                  "the workspace is smaller than the input's copy");
    copy_source(ctx, s.w, source, s.n * s.c, x, ctx.workspace<float>());
    src = ctx.workspace<float>();
    cstride = copied / (s.n * s.c);
  }
  const Job job{s, cut, src, w, bias, z, cstride, y, e};
  const int64_t items = cut.items(), slices = cut.slices;
  ctx.parallel_for(slices, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t t = s0; t < s1; ++t) run_slice(job, t * items / slices, (t + 1) * items / slices);
  });
  return true;
}

#endif  // __AVX512F__

}  // namespace opforge_conv
