// softmax.cpp: Softmax, LogSoftmax and Hardmax: opsets 1/11 flatten to 2-D at `axis`, opset 13
// works along `axis`; rows are stabilised by their max and spread over threads.
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using namespace opforge_cpu::reduction;

enum class Kind { Softmax, LogSoftmax, Hardmax };

/// Largest element of a contiguous row (NaN ignored), lane-split so it vectorises.
template <class T> T row_max(const T* x, int64_t n) {
  return Stepped<MaxPolicy<T>>().run(Stepped<MaxPolicy<T>>().init(), x, n, 0);
}

/// The sum of exp(x - m) over a row, also stored in y when kStore (x may be y).
template <bool kStore, class T> T exp_row(const T* x, T* y, int64_t n, T m) {
  T lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 1  // see Stepped::run
    for (int j = 0; j < kLanes; ++j) {
      const T e = exp_fast(x[i + j] - m);
      lane[j] += e;
      if (kStore) y[i + j] = e;
    }
  }
  T sum = 0;
  for (; i < n; ++i) {
    const T e = exp_fast(x[i] - m);
    sum += e;
    if (kStore) y[i] = e;
  }
  for (int j = 0; j < kLanes; ++j) sum += lane[j];
  return sum;
}

/// One contiguous row of n elements.
template <Kind K, class T> void softmax_row(const T* x, T* y, int64_t n) {
  const T m = row_max(x, n);
  if constexpr (K == Kind::Hardmax) {
    int64_t at = 0;
    while (at < n && !(x[at] == m)) ++at;  // first max; a row of NaN marks element 0
    for (int64_t i = 0; i < n; ++i) y[i] = T(0);
    y[at < n ? at : 0] = T(1);
  } else {
    const T sum = exp_row<K == Kind::Softmax>(x, y, n, m);
    if constexpr (K == Kind::Softmax) {
      const T inv = T(1) / sum;
      for (int64_t i = 0; i < n; ++i) y[i] *= inv;
    } else {
      const T shift = m + std::log(sum);
      for (int64_t i = 0; i < n; ++i) y[i] = x[i] - shift;
    }
  }
}

/// n rows of `w` contiguous lanes (stride `inner` between rows), reduced across rows; m and s are scratch.
template <Kind K, class T>
void softmax_columns(const T* x, T* y, int64_t n, int64_t inner, int64_t w, T* m, T* s) {
  for (int64_t i = 0; i < w; ++i) m[i] = x[i], s[i] = T(0);
  for (int64_t j = 1; j < n; ++j)
    for (int64_t i = 0; i < w; ++i) m[i] = x[j * inner + i] > m[i] ? x[j * inner + i] : m[i];
  if constexpr (K == Kind::Hardmax) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < w; ++i) {
        const bool hit = s[i] == T(0) && x[j * inner + i] == m[i];
        y[j * inner + i] = hit ? T(1) : T(0);
        s[i] = hit ? T(1) : s[i];
      }
  } else if constexpr (K == Kind::Softmax) {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < w; ++i) s[i] += y[j * inner + i] = exp_fast(x[j * inner + i] - m[i]);
    for (int64_t i = 0; i < w; ++i) s[i] = T(1) / s[i];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < w; ++i) y[j * inner + i] *= s[i];
  } else {
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < w; ++i) s[i] += exp_fast(x[j * inner + i] - m[i]);
    for (int64_t i = 0; i < w; ++i) s[i] = m[i] + std::log(s[i]);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < w; ++i) y[j * inner + i] = x[j * inner + i] - s[i];
  }
}

/// Rows shorter than the lane-split loops want: blocks of rows are transposed into scratch so that
/// the column kernel runs across rows, in place (many-class detection heads have such rows).
template <Kind K, class T>
void softmax_short_rows(const KernelContext& ctx, const T* x, T* y, int64_t rows, int64_t n) {
  constexpr int64_t kBlock = 64;
  ctx.parallel_for((rows + kBlock - 1) / kBlock, grain_for(kBlock * n), [&](int64_t b, int64_t e) {
    std::vector<T> t(static_cast<size_t>((n + 2) * kBlock));
    T* m = t.data() + n * kBlock;
    for (int64_t blk = b; blk < e; ++blk) {
      const int64_t r0 = blk * kBlock, w = std::min(kBlock, rows - r0);
      for (int64_t r = 0; r < w; ++r)
        for (int64_t j = 0; j < n; ++j) t[size_t(j * kBlock + r)] = x[(r0 + r) * n + j];
      softmax_columns<K>(t.data(), t.data(), n, kBlock, w, m, m + kBlock);
      for (int64_t r = 0; r < w; ++r)
        for (int64_t j = 0; j < n; ++j) y[(r0 + r) * n + j] = t[size_t(j * kBlock + r)];
    }
  });
}

/// A narrow inner axis (the softmax axis in the middle, few lanes after it): each (n, inner) block
/// is transposed into scratch so that the row kernel runs along the softmax axis.
template <Kind K, class T> void softmax_narrow(const KernelContext& ctx, const T* x, T* y, AxisSplit s) {
  const int64_t size = s.n * s.inner;
  ctx.parallel_for(s.outer, grain_for(size), [&](int64_t b, int64_t e) {
    std::vector<T> t(static_cast<size_t>(size));
    for (int64_t o = b; o < e; ++o) {
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t i = 0; i < s.inner; ++i) t[size_t(i * s.n + j)] = x[o * size + j * s.inner + i];
      for (int64_t i = 0; i < s.inner; ++i) softmax_row<K>(t.data() + i * s.n, t.data() + i * s.n, s.n);
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t i = 0; i < s.inner; ++i) y[o * size + j * s.inner + i] = t[size_t(i * s.n + j)];
    }
  });
}

/// Softmax over the middle axis of (outer, n, inner).
template <Kind K, class T> void softmax(const KernelContext& ctx, const T* x, T* y, AxisSplit s) {
  if (s.outer * s.n * s.inner == 0) return;
  if (s.inner == 1 && s.n < 2 * kLanes) return softmax_short_rows<K>(ctx, x, y, s.outer, s.n);
  if (s.inner > 1 && s.inner < 16 && s.n >= 2 * kLanes && s.n * s.inner <= (1 << 16))
    return softmax_narrow<K>(ctx, x, y, s);
  if (s.inner == 1) {
    ctx.parallel_for(s.outer, grain_for(s.n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) softmax_row<K>(x + r * s.n, y + r * s.n, s.n);
    });
    return;
  }
  const int64_t width = std::min<int64_t>(s.inner, 1024), segs = (s.inner + width - 1) / width;
  ctx.parallel_for(s.outer * segs, grain_for(s.n * width), [&](int64_t b, int64_t e) {
    std::vector<T> scratch(static_cast<size_t>(2 * width));
    for (int64_t u = b; u < e; ++u) {
      const int64_t off = (u / segs) * s.n * s.inner + (u % segs) * width;
      const int64_t w = std::min(width, s.inner - (u % segs) * width);
      softmax_columns<K>(x + off, y + off, s.n, s.inner, w, scratch.data(), scratch.data() + width);
    }
  });
}

/// float16/bfloat16 as onnx's reference computes them (and its test data hold): each step
/// rounded to the half type, x - max, exp, the sum (added in float), the quotient (and the log).
/// Hardmax marks the first largest element, a NaN row its first element.
template <Kind K, class H> void softmax_half(const KernelContext& ctx, const H* x, H* y, AxisSplit s) {
  const auto round = [](float v) { return opforge::to_float(opforge::from_float(v, H{})); };
  ctx.parallel_for(s.outer * s.inner, grain_for(4 * s.n), [&](int64_t b, int64_t e) {
    std::vector<float> t(static_cast<size_t>(s.n));
    for (int64_t u = b; u < e; ++u) {
      const int64_t base = (u / s.inner) * s.n * s.inner + u % s.inner;
      float m = -INFINITY;
      int64_t at = -1;
      for (int64_t j = 0; j < s.n; ++j) {
        t[size_t(j)] = opforge::to_float(x[base + j * s.inner]);
        if (at < 0 || t[size_t(j)] > m || (t[size_t(j)] != t[size_t(j)] && m == m)) m = t[size_t(j)], at = j;
      }
      if constexpr (K == Kind::Hardmax) {
        for (int64_t j = 0; j < s.n; ++j) y[base + j * s.inner] = opforge::from_float(j == at ? 1.f : 0.f, H{});
        continue;
      }
      float sum = 0.f;
      for (float& v : t) sum += v = round(std::exp(round(v - m)));
      sum = round(sum);
      for (int64_t j = 0; j < s.n; ++j) {
        const float q = round(t[size_t(j)] / sum);
        y[base + j * s.inner] = opforge::from_float(K == Kind::LogSoftmax ? std::log(q) : q, H{});
      }
    }
  });
}

/// Opsets 1 and 11 treat the input as 2-D (prod(shape[:axis]), prod(shape[axis:])).
template <Kind K, bool kFlatten> void compute(KernelContext& ctx) {
  Tensor x = ctx.input(0), y = ctx.output(0);
  const Shape shape = x.sizes();
  OPFORGE_CHECK(x.ndim() > 0, "input must have rank >= 1, got a scalar");
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  AxisSplit s = split_at(shape, axis);
  if (kFlatten) s = AxisSplit{s.outer, s.n * s.inner, 1};
  const bool ok = opforge::dispatch<float, double>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax<K>(ctx, x.data<T>(), y.data<T>(), s);
  }) || opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(x.dtype(), [&](auto tag) {
    using H = typename decltype(tag)::type;
    if (x.numel() > 0) softmax_half<K>(ctx, x.data<H>(), y.data<H>(), s);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

void infer(InferContext& ctx) {
  Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() > 0, "input must have rank >= 1, got a scalar");
  normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  ctx.set_output_like(0, 0);
}

}  // namespace

// Opsets 1 and 11 flatten at axis (default 1); opset 13 works along axis (default -1).
#define SOFTMAX_OP(NAME, KIND)                                                      \
  OPFORGE_OP(NAME)                                                                  \
      .since(1)                                                                     \
      .input("input", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})    \
      .output("output")                                                             \
      .attr("axis", int64_t(1))                                                     \
      .inplace(0, 0)                                                                \
      .infer(infer)                                                                 \
      .compute(compute<KIND, true>);                                                \
  OPFORGE_OP(NAME)                                                                  \
      .since(13)                                                                    \
      .input("input", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})    \
      .output("output")                                                             \
      .attr("axis", int64_t(-1))                                                    \
      .inplace(0, 0)                                                                \
      .infer(infer)                                                                 \
      .compute(compute<KIND, false>)

SOFTMAX_OP(Softmax, Kind::Softmax);
SOFTMAX_OP(LogSoftmax, Kind::LogSoftmax);
SOFTMAX_OP(Hardmax, Kind::Hardmax);
