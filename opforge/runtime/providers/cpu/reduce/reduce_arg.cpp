// reduce_arg.cpp: ArgMax and ArgMin (first or last extreme along an axis), CumSum and CumProd
// (inclusive or exclusive, forward or reverse), over (outer, n, inner) views.
#include "common/elements.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using namespace opforge_cpu::reduction;

/// Index of the first (or last) extreme of a contiguous row: the extreme value in one vectorised
/// pass, then a scan for its position. NaN is skipped; a row of NaN gives 0.
template <bool kMax, bool kLast, class T> int64_t arg_row(const T* x, int64_t n) {
  using Policy = std::conditional_t<kMax, Stepped<MaxPolicy<T>>, Stepped<MinPolicy<T>>>;
  const Policy op;
  const T m = op.run(op.init(), x, n, 0);
  if (kLast) {
    for (int64_t i = n - 1; i >= 0; --i)
      if (x[i] == m) return i;
  } else {
    for (int64_t i = 0; i < n; ++i)
      if (x[i] == m) return i;
  }
  return 0;
}

/// The same over n rows of `w` lanes (row stride `inner`), tracking the best value per lane.
template <bool kMax, bool kLast, class T>
void arg_columns(const T* x, int64_t n, int64_t inner, int64_t w, T* best, int64_t* idx) {
  for (int64_t i = 0; i < w; ++i) best[i] = x[i], idx[i] = 0;
  for (int64_t j = 1; j < n; ++j)
    for (int64_t i = 0; i < w; ++i) {
      const T v = x[j * inner + i];
      const bool take = kMax ? (kLast ? v >= best[i] : v > best[i]) : (kLast ? v <= best[i] : v < best[i]);
      best[i] = take ? v : best[i];
      idx[i] = take ? j : idx[i];
    }
}

template <bool kMax, bool kLast, class T>
void arg_extreme(const KernelContext& ctx, const T* x, int64_t* y, AxisSplit s) {
  if (s.inner == 1) {
    ctx.parallel_for(s.outer, grain_for(s.n), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) y[r] = arg_row<kMax, kLast>(x + r * s.n, s.n);
    });
    return;
  }
  const int64_t width = std::min<int64_t>(s.inner, 1024), segs = (s.inner + width - 1) / width;
  ctx.parallel_for(s.outer * segs, grain_for(s.n * width), [&](int64_t b, int64_t e) {
    std::vector<T> best(static_cast<size_t>(width));
    for (int64_t u = b; u < e; ++u) {
      const int64_t o = u / segs, i0 = (u % segs) * width, w = std::min(width, s.inner - i0);
      arg_columns<kMax, kLast>(x + o * s.n * s.inner + i0, s.n, s.inner, w, best.data(), y + o * s.inner + i0);
    }
  });
}

void infer_arg(InferContext& ctx) {
  Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() >= 1, "input 'data' must have rank >= 1, got a scalar");
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  Shape out = x.sizes();
  if (ctx.attr<int64_t>("keepdims") != 0) out[size_t(axis)] = 1;
  else out.erase(out.begin() + axis);
  ctx.set_output(0, opforge::i64, out);
}

template <bool kMax> void compute_arg(KernelContext& ctx) {
  Tensor x = ctx.input(0);
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  const AxisSplit s = split_at(x.sizes(), axis);
  const bool last = ctx.has_attr("select_last_index") && ctx.attr<int64_t>("select_last_index") != 0;
  if (s.outer * s.inner == 0) return;
  OPFORGE_CHECK(s.n > 0, "axis ", axis, " of input 'data' is empty: there is no extreme to index");
  int64_t* y = ctx.output(0).data<int64_t>();
  const bool ok = opforge::dispatch<float, double, int32_t, int64_t, int8_t, uint8_t>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (last) arg_extreme<kMax, true>(ctx, x.data<T>(), y, s);
    else arg_extreme<kMax, false>(ctx, x.data<T>(), y, s);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

/// The running operation of CumSum (Add) and CumProd (Mul): its identity and one step. The 16-bit
/// floats step in float and round each partial result back, as numpy and onnxruntime do.
struct Add {
  template <class T> static T identity() { return store_as<T>(0.f); }
  template <class T> static T apply(T a, T b) { return store_as<T>(load_as<compute_t<T>>(a) + load_as<compute_t<T>>(b)); }
};
struct Mul {
  template <class T> static T identity() { return store_as<T>(1.f); }
  template <class T> static T apply(T a, T b) { return store_as<T>(load_as<compute_t<T>>(a) * load_as<compute_t<T>>(b)); }
};

/// Running sum or product of one contiguous row, the accumulator kept in a register.
template <class Op, bool kExclusive, bool kReverse, class T> void cumulative_row(const T* x, T* y, int64_t n) {
  T acc = Op::template identity<T>();
  for (int64_t j = 0; j < n; ++j) {
    const int64_t at = kReverse ? n - 1 - j : j;
    const T v = x[at];
    if (kExclusive) y[at] = acc;
    acc = Op::apply(acc, v);
    if (!kExclusive) y[at] = acc;
  }
}

template <class Op, bool kExclusive, bool kReverse, class T>
void cumulative_rows(const KernelContext& ctx, const T* x, T* y, int64_t rows, int64_t n) {
  ctx.parallel_for(rows, grain_for(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) cumulative_row<Op, kExclusive, kReverse>(x + r * n, y + r * n, n);
  });
}

/// Running sums or products along the middle axis of (outer, n, inner), each step a row of
/// `inner` elements.
template <class Op, class T>
void cumulative(const KernelContext& ctx, const T* x, T* y, AxisSplit s, bool exclusive, bool reverse) {
  if (s.inner == 1) {
    using Rows = void (*)(const KernelContext&, const T*, T*, int64_t, int64_t);
    const Rows rows[2][2] = {{cumulative_rows<Op, false, false, T>, cumulative_rows<Op, false, true, T>},
                             {cumulative_rows<Op, true, false, T>, cumulative_rows<Op, true, true, T>}};
    return rows[exclusive][reverse](ctx, x, y, s.outer, s.n);
  }
  const int64_t step = reverse ? -s.inner : s.inner, first = reverse ? (s.n - 1) * s.inner : 0;
  const int64_t width = std::min<int64_t>(s.inner, 1024);
  const int64_t segs = (s.inner + width - 1) / width;
  ctx.parallel_for(s.outer * segs, grain_for(s.n * width), [&](int64_t b, int64_t e) {
    for (int64_t u = b; u < e; ++u) {
      const int64_t i0 = (u % segs) * width, w = std::min(width, s.inner - i0);
      const T* xs = x + (u / segs) * s.n * s.inner + i0 + first;
      T* ys = y + (u / segs) * s.n * s.inner + i0 + first;
      for (int64_t i = 0; i < w; ++i) ys[i] = exclusive ? Op::template identity<T>() : xs[i];
      for (int64_t j = 1; j < s.n; ++j) {
        const T* xp = xs + (exclusive ? (j - 1) : j) * step;
        const T* yp = ys + (j - 1) * step;
        T* yj = ys + j * step;
        for (int64_t i = 0; i < w; ++i) yj[i] = Op::apply(yp[i], xp[i]);
      }
    }
  });
}

/// CumSum (Op = Add) and CumProd (Op = Mul).
template <class Op> void compute_cumulative(KernelContext& ctx) {
  Tensor x = ctx.input(0), axis_t = ctx.input(1);
  OPFORGE_CHECK(x.ndim() >= 1, "input 'x' must have rank >= 1, got a scalar");
  const std::vector<int64_t> axis = read_ints(axis_t);
  OPFORGE_CHECK(axis.size() == 1, "input 'axis' must hold one value, got ", axis.size());
  const AxisSplit s = split_at(x.sizes(), normalize_axis(axis[0], x.ndim()));
  const bool exclusive = ctx.attr<int64_t>("exclusive") != 0, reverse = ctx.attr<int64_t>("reverse") != 0;
  if (x.numel() == 0) return;
  const bool ok = opforge::dispatch<float, double, int32_t, int64_t, uint32_t, uint64_t, opforge::float16_t,
                                    opforge::bfloat16_t>(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cumulative<Op>(ctx, x.data<T>(), ctx.output(0).data<T>(), s, exclusive, reverse);
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

}  // namespace

#define ARG_DTYPES {opforge::f32, opforge::f64, opforge::i32, opforge::i64, opforge::i8, opforge::u8}

// Opset 11 allows negative axes (both read them); opset 12 adds select_last_index.
#define ARG_OP(NAME, IS_MAX)                                                                   \
  OPFORGE_OP(NAME)                                                                             \
      .since(1)                                                                                \
      .input("data", ARG_DTYPES)                                                               \
      .output("reduced", {opforge::i64})                                                       \
      .attr("axis", int64_t(0))                                                                \
      .attr("keepdims", int64_t(1))                                                            \
      .attr("select_last_index", int64_t(0)).attr_versions(12)                                 \
      .infer(infer_arg)                                                                        \
      .compute(compute_arg<IS_MAX>)

ARG_OP(ArgMax, true);
ARG_OP(ArgMin, false);

#define CUMULATIVE_DTYPES \
  {opforge::f32, opforge::f64, opforge::i32, opforge::i64, opforge::u32, opforge::u64, opforge::f16, opforge::bf16}

OPFORGE_OP(CumSum)
    .since(11)
    .input("x", CUMULATIVE_DTYPES)
    .input("axis", {opforge::i32, opforge::i64})
    .output("y")
    .attr("exclusive", int64_t(0))
    .attr("reverse", int64_t(0))
    .infer(opforge::same_as_input0)
    .compute(compute_cumulative<Add>);

OPFORGE_OP(CumProd)
    .since(26)
    .input("x", CUMULATIVE_DTYPES)
    .input("axis", {opforge::i32, opforge::i64})
    .output("y")
    .attr("exclusive", int64_t(0))
    .attr("reverse", int64_t(0))
    .infer(opforge::same_as_input0)
    .compute(compute_cumulative<Mul>);
