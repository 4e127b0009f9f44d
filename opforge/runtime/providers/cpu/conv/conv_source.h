// conv_source.h: the input as the grid tiles of opforge's float32 convolution read it: the input
// itself, or a copy with the padding written out and each stride's phases in planes of their own,
// so that consecutive outputs read consecutive floats at every tap, whatever the stride.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "conv/conv.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#elif defined(__AVX2__)
#include "common/lanes_avx2.h"
#endif

namespace opforge_conv {

using opforge_nn::Window;

/// Where B is read from. A copy holds, per channel, one plane per phase: phase (r0, r1, r2) is
/// the padded input sampled every stride elements from offset r, and tap k of output o reads
/// phase (k * dil) % stride at o + (k * dil) / stride. Only the phases some tap reads are kept
/// (a 1x1 conv of stride 2 keeps one in four). Stride 1 has the one phase: the padded input.
struct Source {
  bool copied = false;      ///< a copy, else the input as it is
  int64_t dims[3];          ///< one phase plane
  std::vector<int64_t> residues[3];  ///< per axis, the phases kept (offsets mod stride)
  std::vector<int64_t> phase_of[3];  ///< per axis and offset mod stride, its index in residues (or -1)
  int64_t plane() const { return dims[0] * dims[1] * dims[2]; }
  int64_t phases() const { return int64_t(residues[0].size() * residues[1].size() * residues[2].size()); }
  /// Floats per channel.
  int64_t channel() const { return plane() * phases(); }
  /// Offset of tap (kd, kh, kw) from the position it serves.
  int64_t tap_offset(const Window& w, const int64_t k[3]) const {
    int64_t phase = 0, off = 0;
    for (int a = 0; a < 3; ++a) {
      const int64_t t = k[a] * w.dil[a];
      phase = phase * int64_t(residues[a].size()) + phase_of[a][size_t(t % w.stride[a])];
      off = off * dims[a] + t / w.stride[a];
    }
    return phase * plane() + off;
  }
};

inline bool window_pads(const Window& w) {
  for (int a = 0; a < 3; ++a)
    if (w.pad[a] != 0 || w.pad_end[a] != 0) return true;
  return false;
}

inline bool window_strides(const Window& w) { return w.stride[0] != 1 || w.stride[1] != 1 || w.stride[2] != 1; }

/// The source of a conv's grid tiles: the input itself for stride 1 without pads, else a copy.
/// Linear in the taps (a 64-tap stride-32 conv over 512 samples made it in a fifth of its run
/// when each tap searched the phases found so far).
inline Source source_for(const Window& w) {
  Source s;
  s.copied = window_pads(w) || window_strides(w);
  for (int a = 0; a < 3; ++a) {
    s.phase_of[a].assign(size_t(w.stride[a]), -1);
    if (!s.copied) {
      s.dims[a] = w.in[a];
      s.residues[a] = {0};
      s.phase_of[a][0] = 0;
      continue;
    }
    s.dims[a] = w.out[a] + (w.k[a] - 1) * w.dil[a] / w.stride[a];
    for (int64_t k = 0; k < w.k[a]; ++k) {
      const int64_t r = k * w.dil[a] % w.stride[a];
      if (s.phase_of[a][size_t(r)] >= 0) continue;
      s.phase_of[a][size_t(r)] = int64_t(s.residues[a].size());
      s.residues[a].push_back(r);
    }
  }
  return s;
}

#if defined(__AVX512F__)
/// The first n lanes (none for n <= 0, all 16 from 16 on).
inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}
#endif

/// out[i] = x[i * step] for i in [0, n); step 2 (a stride-2 conv's phase, a tile's row of a
/// stride-2 conv) runs a vector of outputs at a time from two masked loads, so nothing past
/// x[(n - 1) * 2] is read.
inline void copy_every(float* out, const float* x, int64_t n, int64_t step) {
  int64_t i = 0;
#if defined(__AVX2__) && !defined(__AVX512F__)
  if (step == 2) {
    using opforge_nn::avx2::even_lanes;
    using opforge_nn::avx2::first_lanes;
    for (; i + 8 <= n; i += 8) {  // whole vectors: x[2i + 15] is read only where i + 8 < n
      const __m256 hi = i + 8 < n ? _mm256_loadu_ps(x + 2 * i + 8) : _mm256_maskload_ps(x + 2 * i + 8, first_lanes(7));
      _mm256_storeu_ps(out + i, even_lanes(_mm256_loadu_ps(x + 2 * i), hi));
    }
    if (i < n) {  // fewer than 8 left: elements read x[2i + (0 .. 2m - 2)]
      const int64_t m = n - i;
      const __m256 lo = _mm256_maskload_ps(x + 2 * i, first_lanes(2 * m - 1));
      const __m256 hi = _mm256_maskload_ps(x + 2 * i + 8, first_lanes(2 * m - 9));
      _mm256_maskstore_ps(out + i, first_lanes(m), even_lanes(lo, hi));
    }
    return;
  }
#endif
#if defined(__AVX512F__)
  if (step == 2) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (; i < n; i += 16) {
      const int64_t m = std::min<int64_t>(16, n - i), last = 2 * m - 2;  // elements read: x[2i + (0 .. last)]
      const __m512 lo = _mm512_maskz_loadu_ps(first_lanes(last + 1), x + 2 * i);
      const __m512 hi = _mm512_maskz_loadu_ps(first_lanes(last + 1 - 16), x + 2 * i + 16);
      _mm512_mask_storeu_ps(out + i, first_lanes(m), _mm512_permutex2var_ps(lo, even, hi));
    }
    return;
  }
#endif
  for (; i < n; ++i) out[i] = x[i * step];
}

/// Rows [q0, q1) of every phase plane (rows run over depth and height: dims[0] * dims[1] of
/// them) of the copy of one channel x (dims w.in) into out (src.channel() floats), zero in the
/// padding.
inline void copy_channel_rows(const Window& w, const Source& src, const float* x, float* out, int64_t q0, int64_t q1) {
  const int64_t hw = w.in[1] * w.in[2];
  float* phase = out;
  for (int64_t r0 : src.residues[0])
    for (int64_t r1 : src.residues[1])
      for (int64_t r2 : src.residues[2]) {
        const int64_t off_w = r2 - w.pad[2], s = w.stride[2];
        int64_t lo, hi;
        opforge_nn::valid_outputs(src.dims[2], w.in[2], s, off_w, &lo, &hi);
        for (int64_t q = q0; q < q1; ++q) {
          const int64_t d = q / src.dims[1], h = q % src.dims[1];
          float* row_out = phase + q * src.dims[2];
          const int64_t id = d * w.stride[0] + r0 - w.pad[0], ih = h * w.stride[1] + r1 - w.pad[1];
          if (id < 0 || id >= w.in[0] || ih < 0 || ih >= w.in[1] || lo >= hi) {
            std::fill(row_out, row_out + src.dims[2], 0.f);
            continue;
          }
          const float* row = x + id * hw + ih * w.in[2];
          std::fill(row_out, row_out + lo, 0.f);
          if (s == 1)
            std::memcpy(row_out + lo, row + lo + off_w, size_t(hi - lo) * sizeof(float));
          else
            copy_every(row_out + lo, row + lo * s + off_w, hi - lo, s);
          std::fill(row_out + hi, row_out + src.dims[2], 0.f);
        }
        phase += src.plane();
      }
}

/// `channels` channels of x (each of dims w.in) copied into out as the source's planes, split
/// between the host's threads in pieces of rows of about 4096 floats: a network's first conv
/// has 3 channels, which split by channel left one thread copying.
template <class Ctx>
void copy_source(Ctx& ctx, const Window& w, const Source& src, int64_t channels, const float* x, float* out) {
  const int64_t rows = src.dims[0] * src.dims[1];
  const int64_t per = std::clamp<int64_t>(4096 / std::max<int64_t>(1, src.dims[2] * src.phases()), 1, rows);
  const int64_t pieces = (rows + per - 1) / per;
  ctx.parallel_for(channels * pieces, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t c = i / pieces, q0 = i % pieces * per;
      copy_channel_rows(w, src, x + c * w.in_size(), out + c * src.channel(), q0, std::min(rows, q0 + per));
    }
  });
}

}  // namespace opforge_conv
