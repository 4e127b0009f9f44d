// reduce.h: what the reduction, softmax and normalization kernels share: axis geometry, reduction
// plans over groups of kept and reduced axes, lane-split accumulation and a vectorisable exp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/common.h"

namespace opforge_cpu::reduction {

/// Elements one parallel chunk should cover: enough to amortise the hand-off, small enough to balance.
constexpr int64_t kChunkElems = 32768;
/// Independent accumulators over a contiguous run, so float sums vectorise without -ffast-math.
constexpr int kLanes = 16;

/// Items per parallel chunk when each item costs `work` elements.
inline int64_t grain_for(int64_t work) {
  return std::max<int64_t>(1, kChunkElems / std::max<int64_t>(1, work));
}

/// A contiguous shape seen as (outer, n, inner) around one axis.
struct AxisSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

inline AxisSplit split_at(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    if (d < axis) s.outer *= shape[size_t(d)];
    else if (d == axis) s.n = shape[size_t(d)];
    else s.inner *= shape[size_t(d)];
  }
  return s;
}

/// `c ? a : b` through bit masks. GCC (under its default -ftrapping-math) turns a plain select
/// that feeds arithmetic into a branch, which stops vectorisation; masks stay branch-free.
inline float select_bits(bool c, float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, sizeof ia);
  std::memcpy(&ib, &b, sizeof ib);
  const int32_t m = -int32_t(c), r = (ia & m) | (ib & ~m);
  float out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

/// a * b + c, fused where the target has FMA (ISO C++ mode does not contract a * b + c itself).
inline float madd(float a, float b, float c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

/// e^x in float, vectorisable (Cephes polynomial, ~1 ulp), for x <= 88 (callers pass x - max <= 0);
/// 0 below -87.3, NaN stays NaN. The exponent comes from the rounding constant's bits, so no
/// float-to-int conversion can overflow, and only one select is needed.
inline float exp_fast(float x) {
  const float t = madd(x, 1.44269504088896341f, 12582912.f);  // 1.5 * 2^23: rounds x * log2(e)
  const float n = t - 12582912.f;
  float r = madd(n, -0.693359375f, x);
  r = madd(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = madd(p, r, 1.3981999507e-3f);
  p = madd(p, r, 8.3334519073e-3f);
  p = madd(p, r, 4.1665795894e-2f);
  p = madd(p, r, 1.6666665459e-1f);
  p = madd(p, r, 5.0000001201e-1f);
  p = madd(p * r, r, r + 1.f);
  uint32_t bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits - 0x4B400000u + 127u) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return select_bits(x < -87.33654f, 0.f, p * scale);
}
inline double exp_fast(double x) { return std::exp(x); }

/// A real result stored as T; integer outputs truncate, and NaN or infinities become T's minimum
/// (what onnxruntime's integer kernels produce).
template <class T> T from_real(double v) {
  if constexpr (std::is_integral_v<T>) {
    if (!std::isfinite(v)) return std::numeric_limits<T>::min();
  }
  return T(v);
}

/// Offsets of every combination of some axis groups, in C order: affine for one group, else a table.
struct OffsetList {
  int64_t count = 1, stride = 0;
  std::vector<int64_t> table;
  int64_t operator[](int64_t i) const { return table.empty() ? i * stride : table[size_t(i)]; }
};

/// How to reduce a contiguous tensor: each output combines the runs at kept[o] + reduced[r].
/// With the innermost axes reduced, output o folds `reduced.count` runs of `run` elements; with them
/// kept, outputs come in blocks of `run` and block b adds whole rows at kept[b] + reduced[r].
struct ReducePlan {
  bool inner_reduced = true;
  int64_t run = 1;
  OffsetList kept, reduced;
  int64_t count = 1;    // elements folded into each output
  int64_t outputs = 1;  // number of outputs
};

/// A run of adjacent axes of one kind (all kept or all reduced), merged into one.
struct AxisGroup {
  int64_t size, stride;
  bool reduced;
};

/// Offsets of every combination of `groups` (innermost first), outermost varying slowest.
inline OffsetList offsets_of(const std::vector<AxisGroup>& groups) {
  OffsetList list;
  if (groups.size() == 1) {
    list.count = groups[0].size;
    list.stride = groups[0].stride;
    return list;
  }
  for (const AxisGroup& g : groups) list.count *= g.size;
  if (groups.empty() || list.count == 0) return list;
  list.table.assign(size_t(list.count), 0);
  int64_t filled = 1;  // the table is built up from the innermost group outwards
  for (const AxisGroup& g : groups) {
    for (int64_t k = g.size - 1; k >= 0; --k)
      for (int64_t i = 0; i < filled; ++i) list.table[size_t(k * filled + i)] = list.table[size_t(i)] + k * g.stride;
    filled *= g.size;
  }
  return list;
}

/// The plan for reducing the axes marked in `mask` of a contiguous tensor of `shape`.
inline ReducePlan plan_reduce(const Shape& shape, const std::vector<bool>& mask) {
  std::vector<AxisGroup> groups;  // innermost first; size-1 axes dropped, like neighbours merged
  ReducePlan p;
  int64_t stride = 1;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    const int64_t size = shape[size_t(d)];
    const bool red = mask[size_t(d)];
    (red ? p.count : p.outputs) *= size;
    if (size != 1) {
      if (!groups.empty() && groups.back().reduced == red) groups.back().size *= size;
      else groups.push_back({size, stride, red});
    }
    stride *= size;
  }
  if (groups.empty()) groups.push_back({1, 1, true});
  p.inner_reduced = groups[0].reduced;
  p.run = groups[0].size;
  std::vector<AxisGroup> kept, reduced;
  for (size_t g = 1; g < groups.size(); ++g) (groups[g].reduced ? reduced : kept).push_back(groups[g]);
  p.kept = offsets_of(kept);
  p.reduced = offsets_of(reduced);
  return p;
}

/// Output element o: fold all its runs.
template <class Op>
typename Op::Acc fold_output(const ReducePlan& p, const typename Op::In* x, int64_t o, const Op& op) {
  typename Op::Acc acc = op.init();
  const typename Op::In* base = x + p.kept[o];
  for (int64_t r = 0; r < p.reduced.count; ++r) acc = op.run(acc, base + p.reduced[r], p.run, o);
  return acc;
}

/// One output folded by all threads: pieces over the runs (or over the single run), merged in order.
template <class Op>
typename Op::Acc fold_output_parallel(const KernelContext& ctx, const ReducePlan& p,
                                      const typename Op::In* x, int64_t o, const Op& op) {
  const int64_t total = p.reduced.count * p.run;
  const int64_t pieces = std::min<int64_t>(4 * ctx.num_threads(), (total + kChunkElems - 1) / kChunkElems);
  const bool split_runs = p.reduced.count >= pieces;
  const int64_t span = split_runs ? p.reduced.count : p.run;
  std::vector<typename Op::Acc> partial(static_cast<size_t>(pieces), op.init());
  const typename Op::In* base = x + p.kept[o];
  ctx.parallel_for(pieces, 1, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const int64_t lo = span * k / pieces, hi = span * (k + 1) / pieces;
      typename Op::Acc acc = op.init();
      if (split_runs) {
        for (int64_t r = lo; r < hi; ++r) acc = op.run(acc, base + p.reduced[r], p.run, o);
      } else {
        for (int64_t r = 0; r < p.reduced.count; ++r) acc = op.run(acc, base + p.reduced[r] + lo, hi - lo, o);
      }
      partial[size_t(k)] = acc;
    }
  });
  typename Op::Acc acc = op.init();
  for (const auto& a : partial) acc = op.merge(acc, a);
  return acc;
}

/// Innermost axes kept: blocks of outputs, split into segments of at most `width` for parallelism.
template <class Op>
void reduce_blocks(const KernelContext& ctx, const ReducePlan& p, const typename Op::In* x,
                   typename Op::Out* y, const Op& op) {
  const int64_t blocks = p.kept.count, I = p.run;
  int64_t width = std::min<int64_t>(I, 4096);
  if (blocks < 2 * ctx.num_threads())
    width = std::min(width, std::max<int64_t>(256, (I + 4 * ctx.num_threads() - 1) / (4 * ctx.num_threads())));
  const int64_t segs = (I + width - 1) / width;
  ctx.parallel_for(blocks * segs, grain_for(width * p.reduced.count), [&](int64_t b, int64_t e) {
    std::vector<typename Op::Acc> acc(static_cast<size_t>(width));
    for (int64_t u = b; u < e; ++u) {
      const int64_t blk = u / segs, i0 = (u % segs) * width, w = std::min(width, I - i0);
      const int64_t o0 = blk * I + i0;
      std::fill(acc.begin(), acc.begin() + w, op.init());
      const typename Op::In* base = x + p.kept[blk] + i0;
      int64_t r = 0;
      for (; r + 4 <= p.reduced.count; r += 4) {
        const typename Op::In* rows[4] = {base + p.reduced[r], base + p.reduced[r + 1], base + p.reduced[r + 2],
                                          base + p.reduced[r + 3]};
        op.block4(acc.data(), rows, w, o0);
      }
      for (; r < p.reduced.count; ++r) op.block(acc.data(), base + p.reduced[r], w, o0);
      for (int64_t i = 0; i < w; ++i) y[o0 + i] = op.finish(acc[size_t(i)], p.count, o0 + i);
    }
  });
}

/// Runs an op over a plan; the op supplies init, run (fold a contiguous run into one accumulator),
/// block and block4 (fold one or four rows into a row of accumulators), merge and finish.
template <class Op>
void run_reduce(const KernelContext& ctx, const ReducePlan& p, const typename Op::In* x,
                typename Op::Out* y, const Op& op) {
  if (p.outputs == 0) return;
  if (p.count == 0) {
    for (int64_t o = 0; o < p.outputs; ++o) y[o] = op.finish(op.init(), 0, o);
    return;
  }
  if (!p.inner_reduced) return reduce_blocks(ctx, p, x, y, op);
  if (p.outputs < ctx.num_threads() && p.count >= 2 * kChunkElems) {
    for (int64_t o = 0; o < p.outputs; ++o) y[o] = op.finish(fold_output_parallel(ctx, p, x, o, op), p.count, o);
    return;
  }
  ctx.parallel_for(p.outputs, grain_for(p.count), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) y[o] = op.finish(fold_output(p, x, o, op), p.count, o);
  });
}

/// An op from a policy P (In, Acc, Out; init, step(acc, x, o), merge, finish(acc, count, o)):
/// adds run (a contiguous run folded into lane-split accumulators) and block (rows into a row).
template <class P>
struct Stepped : P {
  using Acc = typename P::Acc;
  using In = typename P::In;
  Acc run(Acc acc, const In* x, int64_t n, int64_t o) const {
    int64_t i = 0;
    if (n >= 2 * kLanes) {
      Acc lane[kLanes];
      for (int j = 0; j < kLanes; ++j) lane[j] = this->init();
      for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 1  // left rolled for the loop vectoriser; unrolled, GCC leaves selects scalar
        for (int j = 0; j < kLanes; ++j) lane[j] = this->step(lane[j], x[i + j], o);
      }
      for (int j = 0; j < kLanes; ++j) acc = this->merge(acc, lane[j]);
    }
    for (; i < n; ++i) acc = this->step(acc, x[i], o);
    return acc;
  }
  void block(Acc* acc, const In* x, int64_t n, int64_t o0) const {
    for (int64_t i = 0; i < n; ++i) acc[i] = this->step(acc[i], x[i], o0 + i);
  }
  /// Four rows at once, so each accumulator is loaded and stored once per four rows.
  void block4(Acc* acc, const In* const* rows, int64_t n, int64_t o0) const {
    const In *a = rows[0], *b = rows[1], *c = rows[2], *d = rows[3];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t o = o0 + i;
      acc[i] = this->step(this->step(this->step(this->step(acc[i], a[i], o), b[i], o), c[i], o), d[i], o);
    }
  }
};

/// Policy: largest element, ignoring NaN (as onnxruntime does).
template <class T>
struct MaxPolicy {
  using In = T;
  using Acc = T;
  using Out = T;
  T init() const { return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                : std::numeric_limits<T>::lowest(); }
  T step(T a, T x, int64_t) const { return x > a ? x : a; }
  T merge(T a, T b) const { return b > a ? b : a; }
  T finish(T a, int64_t, int64_t) const { return a; }
};

/// Policy: smallest element, ignoring NaN.
template <class T>
struct MinPolicy : MaxPolicy<T> {
  T init() const { return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                                : std::numeric_limits<T>::max(); }
  T step(T a, T x, int64_t) const { return x < a ? x : a; }
  T merge(T a, T b) const { return b < a ? b : a; }
};

/// Policy: sum of elements, accumulated in T.
template <class T>
struct SumPolicy {
  using In = T;
  using Acc = T;
  using Out = T;
  T init() const { return T(0); }
  T step(T a, T x, int64_t) const { return a + x; }
  T merge(T a, T b) const { return a + b; }
  T finish(T a, int64_t, int64_t) const { return a; }
};

/// Policy: sum of absolute values.
template <class T>
struct L1Policy : SumPolicy<T> {
  T step(T a, T x, int64_t) const { return a + (x < T(0) ? T(-x) : x); }
};

/// Policy: sum of squares.
template <class T>
struct SumSquarePolicy : SumPolicy<T> {
  T step(T a, T x, int64_t) const { return a + x * x; }
};

/// Policy: sum of (x - shift[o])^2, the second pass of a variance.
template <class T>
struct SquaredDeviationPolicy : SumPolicy<T> {
  const T* shift = nullptr;
  T step(T a, T x, int64_t o) const { return a + (x - shift[o]) * (x - shift[o]); }
};

/// Axes in [-rank, rank) marked in a mask of length rank.
inline std::vector<bool> axes_mask(int64_t rank, const std::vector<int64_t>& axes) {
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t a : axes) {
    if (rank == 0 && a == 0) continue;  // onnxruntime's reductions take axis 0 of a scalar: a no-op
    mask[size_t(normalize_axis(a, rank))] = true;
  }
  return mask;
}

}  // namespace opforge_cpu::reduction
