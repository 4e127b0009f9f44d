// conv_pack.h: where the kNR positions of one tile of opforge's float32 convolution come from in
// the (zero-padded) input and where they land in the output, and the packing of a tile's
// B block (one row of kNR floats per input channel and kernel tap).
#pragma once

#if defined(__AVX512F__)

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "conv/conv_source.h"
#include "conv/conv_tiles.h"

namespace opforge_conv::tiles {

/// The positions tiles run over. Over the output itself, or, for stride-1 convs, over the
/// padded input's grid ("virtual"), where tap t of position v is element v + tapoff[t] and a
/// tile is kNR consecutive floats of each input row; positions of that grid that fall in the
/// padding columns (or rows) are computed and discarded.
struct Grid {
  bool is_virtual = false;
  int64_t plane, pitch;        ///< position -> (od, oh, ow): v = od * plane + oh * pitch + ow
  int64_t count;               ///< positions, up to the last output one
  int64_t out_h, out_w;
  int64_t src_plane, src_pitch;  ///< strides of depth and rows in the input B reads
  int64_t stride[3];
};

/// A run of a tile's lanes [lane0, lane0 + len) reading source elements base + i * stride (plus
/// the channel's and the tap's offsets).
struct Segment {
  int lane0, len;
  int64_t base;
  int64_t od, oh, ow;  ///< the output position of lane0 (output tiles)
};

/// One tile: where its lanes go in an output row (per vector), the output range it covers,
/// and the runs it packs from.
struct TileMap {
  Lanes lanes[2];
  int vectors = 1;
  int64_t y_begin = -1, y_end = 0;
  int covered = 0;  ///< lanes the segments fill; the rest of each packed row is zero
  std::vector<Segment> segs;
};

/// Adds tile lanes [l0, l1), which hold output elements y, y + 1, ...
inline void add_lanes(TileMap& t, int64_t l0, int64_t l1, int64_t y) {
  if (t.y_begin < 0) t.y_begin = y;
  t.y_end = y + (l1 - l0);
  for (int h = 0; h < 2; ++h) {
    const int64_t a = std::max<int64_t>(l0 - h * kLanes, 0), b = std::min<int64_t>(l1 - h * kLanes, kLanes);
    if (a >= b) continue;
    Lanes& l = t.lanes[h];
    l.mask[l.count] = __mmask16(((1u << b) - 1) & ~((1u << a) - 1));
    l.off[l.count] = y - (l0 - h * kLanes);
    ++l.count;
    if (h == 1) t.vectors = 2;
  }
}

/// The tile of output positions [p, p + kNR) (fewer at the end): one run of lanes, and a
/// segment per output row it crosses; rows that follow each other in the input too (1x1 convs)
/// share one segment unless the conv pads (each row then checks its own bounds).
inline TileMap map_output_tile(const Grid& g, int64_t p, bool pads) {
  TileMap t;
  const int64_t end = std::min(p + kNR, g.count);
  add_lanes(t, 0, end - p, p);
  for (int64_t q = p; q < end;) {
    const int64_t od = q / g.plane, oh = (q % g.plane) / g.pitch, ow = q % g.pitch;
    const int64_t run = std::min(end - q, g.out_w - ow);
    const int64_t base = od * g.stride[0] * g.src_plane + oh * g.stride[1] * g.src_pitch + ow * g.stride[2];
    if (!pads && !t.segs.empty() && t.segs.back().base + t.segs.back().len * g.stride[2] == base)
      t.segs.back().len += int(run);
    else
      t.segs.push_back({int(q - p), int(run), base, od, oh, ow});
    q += run;
  }
  t.covered = int(end - p);
  return t;
}

/// The tile of grid positions [v0, v0 + kNR) of a stride-1 conv: one segment, and lanes for
/// the positions that are outputs.
inline TileMap map_grid_tile(const Grid& g, int64_t v0) {
  TileMap t;
  const int64_t end = std::min(v0 + kNR, g.count);
  t.segs.push_back({0, int(end - v0), v0, 0, 0, 0});
  t.covered = int(end - v0);
  for (int64_t v = v0; v < end;) {
    const int64_t od = v / g.plane, oh = (v % g.plane) / g.pitch, ow = v % g.pitch;
    if (oh >= g.out_h) {
      v = (od + 1) * g.plane;
    } else if (ow >= g.out_w) {
      v += g.pitch - ow;
    } else {
      const int64_t stop = std::min(end, v + g.out_w - ow);
      add_lanes(t, v - v0, stop - v0, (od * g.out_h + oh) * g.out_w + ow);
      v = stop;
    }
  }
  if (t.y_begin < 0) t.y_begin = 0;
  return t;
}

using opforge_conv::first_lanes;

/// dst[0, n) = src[0, n * step) taken every `step` elements, n <= kNR; the loads are masked,
/// so nothing past the last element read is touched.
inline void copy_strided(float* dst, const float* src, int n, int64_t step) {
  if (step != 1) return copy_every(dst, src, n, step);
  for (int h = 0; h < 2 && h * kLanes < n; ++h) {
    const __mmask16 m = first_lanes(n - h * kLanes);
    _mm512_mask_storeu_ps(dst + h * kLanes, m, _mm512_maskz_loadu_ps(m, src + h * kLanes));
  }
}

/// Packs channels [0, channels) of `src` (channel stride cstride) for one tile: row (c, t) is
/// the tile's kNR positions at tap t (offset tapoff[t]), zero past the covered lanes.
inline void pack_tile(const TileMap& map, const float* src, int64_t cstride, const std::vector<int64_t>& tapoff,
                      int64_t channels, int64_t step, float* out) {
  const bool whole = map.covered == kNR && map.segs.size() == 1 && step == 1;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t off : tapoff) {
      const float* base = src + c * cstride + off;
      if (whole) {
        const float* s = base + map.segs[0].base;
        _mm512_storeu_ps(out, _mm512_loadu_ps(s));
        _mm512_storeu_ps(out + kLanes, _mm512_loadu_ps(s + kLanes));
      } else {
        if (map.covered < kNR) {
          _mm512_storeu_ps(out, _mm512_setzero_ps());
          _mm512_storeu_ps(out + kLanes, _mm512_setzero_ps());
        }
        for (const Segment& seg : map.segs) copy_strided(out + seg.lane0, base + seg.base, seg.len, step);
      }
      out += kNR;
    }
}

/// pack_tile for an output tile of a conv that pads, reading the unpadded input x: each tap of
/// each segment copies the part of its input row that lies inside x; the rest stays zero.
inline void pack_tile_padded(const TileMap& map, const Window& w, const float* x, int64_t channels, float* out) {
  const int64_t hw = w.in[1] * w.in[2];
  for (int64_t c = 0; c < channels; ++c) {
    const float* xc = x + c * w.in_size();
    for (int64_t kd = 0; kd < w.k[0]; ++kd)
      for (int64_t kh = 0; kh < w.k[1]; ++kh)
        for (int64_t kw = 0; kw < w.k[2]; ++kw, out += kNR) {
          _mm512_storeu_ps(out, _mm512_setzero_ps());
          _mm512_storeu_ps(out + kLanes, _mm512_setzero_ps());
          for (const Segment& seg : map.segs) {
            const int64_t id = seg.od * w.stride[0] + kd * w.dil[0] - w.pad[0];
            const int64_t ih = seg.oh * w.stride[1] + kh * w.dil[1] - w.pad[1];
            if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1]) continue;
            const int64_t iw0 = seg.ow * w.stride[2] + kw * w.dil[2] - w.pad[2], s = w.stride[2];
            const int64_t lo = iw0 >= 0 ? 0 : (-iw0 + s - 1) / s;
            const int64_t hi = iw0 >= w.in[2] ? 0 : std::min<int64_t>(seg.len, (w.in[2] - 1 - iw0) / s + 1);
            if (hi > lo)
              copy_strided(out + seg.lane0 + lo, xc + id * hw + ih * w.in[2] + iw0 + lo * s, int(hi - lo), s);
          }
        }
  }
}

}  // namespace opforge_conv::tiles

#endif  // __AVX512F__
