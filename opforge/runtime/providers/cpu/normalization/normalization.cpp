// normalization.cpp: BatchNormalization (inference, and training mode from opset 14),
// InstanceNormalization, LRN and LpNormalization over (N, C, spatial) layouts.
#include "normalization/normalization_stats.h"

namespace {

using namespace opforge_cpu;
using namespace opforge_cpu::reduction;
using namespace opforge_cpu::normalization;

/// N, C and the spatial size of an (N, C, D1, ...) tensor.
struct Planes {
  int64_t n, c, spatial;
};

Planes planes_of(const Tensor& x, int min_rank, const char* layout) {
  OPFORGE_CHECK(x.ndim() >= min_rank, "input X must be ", layout, ", got rank ", x.ndim());
  Planes p{x.size(0), x.size(1), 1};
  for (int d = 2; d < x.ndim(); ++d) p.spatial *= x.size(d);
  return p;
}

/// y = x * a[c] + b[c] over every (n, c) plane of `spatial` elements.
template <class T>
void scale_planes(const KernelContext& ctx, const T* x, T* y, Planes p, const std::vector<double>& a,
                  const std::vector<double>& b) {
  ctx.parallel_for(p.n * p.c, grain_for(p.spatial), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T ar = T(a[size_t(r % p.c)]), br = T(b[size_t(r % p.c)]);
      const T* xr = x + r * p.spatial;
      T* yr = y + r * p.spatial;
      for (int64_t i = 0; i < p.spatial; ++i) yr[i] = xr[i] * ar + br;
    }
  });
}

/// Whether an opset-14+ BatchNormalization runs in training mode.
template <class Ctx> bool training(const Ctx& ctx) {
  return ctx.has_attr("training_mode") && ctx.template attr<int64_t>("training_mode") != 0;
}

void infer_batch_norm(InferContext& ctx) {
  Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() >= 2, "input X must be (N, C, ...), got rank ", x.ndim());
  ctx.set_output_like(0, 0);
  for (int i = 1; training(ctx) && i < 3 && i < ctx.num_outputs(); ++i)
    ctx.set_output(i, ctx.input(i + 2).dtype(), {x.size(1)});
}

/// Per-channel mean and population variance of an (N, C, ...) tensor, over N and the spatial axes.
template <class T>
void channel_moments(const KernelContext& ctx, const Tensor& x, std::vector<double>& mean,
                     std::vector<double>& var) {
  std::vector<bool> mask(size_t(x.ndim()), true);
  mask[1] = false;
  const ReducePlan plan = plan_reduce(x.sizes(), mask);
  const T count = T(std::max<int64_t>(plan.count, 1));
  std::vector<T> m(size_t(x.size(1))), v(m.size());
  run_reduce(ctx, plan, x.data<T>(), m.data(), Stepped<SumPolicy<T>>());
  for (T& e : m) e /= count;
  Stepped<SquaredDeviationPolicy<T>> dev;
  dev.shift = m.data();
  run_reduce(ctx, plan, x.data<T>(), v.data(), dev);
  mean.assign(m.begin(), m.end());
  var.resize(v.size());
  for (size_t c = 0; c < v.size(); ++c) var[c] = double(v[c] / count);
}

/// Training mode: this batch's statistics replace `mean` and `var`, and the running ones, updated
/// with momentum, go to the optional outputs running_mean and running_var.
void batch_statistics(KernelContext& ctx, std::vector<double>& mean, std::vector<double>& var) {
  std::vector<double> batch[2];
  dispatch_float(ctx.input(0), [&](auto tag) {
    channel_moments<typename decltype(tag)::type>(ctx, ctx.input(0), batch[0], batch[1]);
  });
  const double momentum = ctx.attr<float>("momentum");
  for (int i = 1; i < 3 && i < ctx.num_outputs(); ++i) {
    if (!ctx.output(i).has_data()) continue;
    const std::vector<double>& running = i == 1 ? mean : var;
    dispatch_float(ctx.output(i), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = ctx.output(i).data<T>();
      for (size_t c = 0; c < running.size(); ++c)
        out[c] = T(running[c] * momentum + batch[i - 1][c] * (1 - momentum));
    });
  }
  mean = std::move(batch[0]);
  var = std::move(batch[1]);
}

/// y = (x - mean) / sqrt(var + epsilon) * scale + B, per channel (or per activation when an old
/// opset's spatial=0: the parameters then cover C x D1 x ...); training mode uses batch statistics.
void batch_norm(KernelContext& ctx) {
  Tensor x = ctx.input(0);
  Planes p = planes_of(x, 2, "(N, C, ...)");
  if (ctx.has_attr("spatial") && ctx.attr<int64_t>("spatial") == 0) p = Planes{p.n, p.c * p.spatial, 1};
  const char* names[] = {"scale", "B", "mean", "var"};
  std::vector<double> params[4];
  for (int i = 0; i < 4; ++i) params[i] = channel_values(ctx.input(i + 1), p.c, names[i]);
  if (training(ctx)) batch_statistics(ctx, params[2], params[3]);
  const double eps = ctx.attr<float>("epsilon");
  std::vector<double> a(size_t(p.c)), b(size_t(p.c));
  for (size_t c = 0; c < a.size(); ++c) {
    a[c] = params[0][c] / std::sqrt(params[3][c] + eps);
    b[c] = params[1][c] - params[2][c] * a[c];
  }
  dispatch_float(x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_planes(ctx, x.data<T>(), ctx.output(0).data<T>(), p, a, b);
  });
}

/// Per (n, c) plane: y = (x - mean) / sqrt(var + epsilon) * scale[c] + B[c].
void instance_norm(KernelContext& ctx) {
  Tensor x = ctx.input(0);
  const Planes p = planes_of(x, 3, "(N, C, D1, ...)");
  const std::vector<double> scale = channel_values(ctx.input(1), p.c, "scale");
  const std::vector<double> bias = channel_values(ctx.input(2), p.c, "B");
  const double eps = ctx.attr<float>("epsilon");
  dispatch_float(x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = ctx.output(0).data<T>();
    ctx.parallel_for(p.n * p.c, grain_for(3 * p.spatial), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const Moments<T> m = row_moments(in + r * p.spatial, p.spatial);
        const size_t c = size_t(r % p.c);
        const T a = T(scale[c] / std::sqrt(double(m.var) + eps)), b = T(bias[c]) - m.mean * a;
        for (int64_t i = 0; i < p.spatial; ++i) out[r * p.spatial + i] = in[r * p.spatial + i] * a + b;
      }
    });
  });
}

/// y = x * (bias + k * sum)^-beta; the common beta = 0.75 goes through square roots, which vectorise.
template <class T> void lrn_scale(const T* x, const T* sum, T* y, int64_t n, T bias, T k, T beta) {
  if (beta == T(0.75)) {
    for (int64_t i = 0; i < n; ++i) {
      const T v = bias + k * sum[i];
      y[i] = x[i] / std::sqrt(v * std::sqrt(v));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * std::pow(bias + k * sum[i], -beta);
  }
}

/// Across channels: y = x / (bias + alpha / size * sum of x^2 over the window)^beta, the window
/// running from c - floor((size - 1) / 2) to c + ceil((size - 1) / 2), clipped to [0, C).
void lrn(KernelContext& ctx) {
  Tensor x = ctx.input(0);
  const Planes p = planes_of(x, 2, "(N, C, ...)");
  const int64_t size = ctx.attr<int64_t>("size");
  OPFORGE_CHECK(size >= 1, "attribute 'size' must be >= 1, got ", size);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  const double alpha = ctx.attr<float>("alpha"), beta = ctx.attr<float>("beta"), bias = ctx.attr<float>("bias");
  dispatch_float(x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = ctx.output(0).data<T>();
    const T k = T(alpha / double(size)), b = T(bias), be = T(beta);
    ctx.parallel_for(p.n * p.c, grain_for((size + 2) * p.spatial), [&](int64_t begin, int64_t end) {
      std::vector<T> sum(static_cast<size_t>(p.spatial));
      for (int64_t r = begin; r < end; ++r) {
        const int64_t c = r % p.c, lo = std::max<int64_t>(0, c - before), hi = std::min(p.c - 1, c + after);
        std::fill(sum.begin(), sum.end(), T(0));
        for (int64_t w = lo; w <= hi; ++w) {
          const T* xw = in + (r - c + w) * p.spatial;
          for (int64_t i = 0; i < p.spatial; ++i) sum[size_t(i)] += xw[i] * xw[i];
        }
        lrn_scale(in + r * p.spatial, sum.data(), out + r * p.spatial, p.spatial, b, k, be);
      }
    });
  });
}

template <int P, class T> T lp_term(T v) { return P == 1 ? std::abs(v) : v * v; }
template <int P, class T> T lp_root(T v) { return P == 1 ? v : std::sqrt(v); }
/// A zero norm only comes from an all-zero slice; dividing it by 1 keeps it zero, branch-free.
template <class T> T nonzero(T d) { return d == T(0) ? T(1) : d; }

/// y = x / ||x||_P over contiguous rows.
template <int P, class T> void lp_rows(const KernelContext& ctx, const T* x, T* y, int64_t rows, int64_t n) {
  ctx.parallel_for(rows, grain_for(2 * n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      T norm = 0;
      if constexpr (P == 1) norm = Stepped<L1Policy<T>>().run(T(0), x + r * n, n, 0);
      else norm = Stepped<SumSquarePolicy<T>>().run(T(0), x + r * n, n, 0);
      const T d = nonzero(lp_root<P>(norm));
      for (int64_t i = 0; i < n; ++i) y[r * n + i] = x[r * n + i] / d;
    }
  });
}

/// y = x / ||x||_P along the middle axis of (outer, n, inner), inner > 1: norms kept per lane.
template <int P, class T> void lp_columns(const KernelContext& ctx, const T* x, T* y, AxisSplit s) {
  const int64_t width = std::min<int64_t>(s.inner, 1024), segs = (s.inner + width - 1) / width;
  ctx.parallel_for(s.outer * segs, grain_for(2 * s.n * width), [&](int64_t begin, int64_t end) {
    std::vector<T> norm(static_cast<size_t>(width));
    for (int64_t u = begin; u < end; ++u) {
      const int64_t off = (u / segs) * s.n * s.inner + (u % segs) * width;
      const int64_t w = std::min(width, s.inner - (u % segs) * width);
      T* d = norm.data();
      std::fill(d, d + w, T(0));
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t i = 0; i < w; ++i) d[i] += lp_term<P>(x[off + j * s.inner + i]);
      for (int64_t i = 0; i < w; ++i) d[i] = nonzero(lp_root<P>(d[i]));
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t i = 0; i < w; ++i) y[off + j * s.inner + i] = x[off + j * s.inner + i] / d[i];
    }
  });
}

/// y = x / ||x||_p along `axis` (p = 1 or 2); an all-zero slice stays zero.
void lp_norm(KernelContext& ctx) {
  Tensor x = ctx.input(0);
  const int64_t p = ctx.attr<int64_t>("p");
  OPFORGE_CHECK(p == 1 || p == 2, "attribute 'p' must be 1 or 2, got ", p);
  OPFORGE_CHECK(x.ndim() >= 1, "input must have rank >= 1, got a scalar");
  const AxisSplit s = split_at(x.sizes(), normalize_axis(ctx.attr<int64_t>("axis"), x.ndim()));
  dispatch_float(x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = ctx.output(0).data<T>();
    if (s.inner == 1) {
      p == 1 ? lp_rows<1>(ctx, in, out, s.outer, s.n) : lp_rows<2>(ctx, in, out, s.outer, s.n);
    } else {
      p == 1 ? lp_columns<1>(ctx, in, out, s) : lp_columns<2>(ctx, in, out, s);
    }
  });
}

}  // namespace

using opforge::AttrType;
// One definition for every opset: opset 6 dropped consumed_inputs, 7 dropped is_test, 9 dropped
// spatial, 14 added training_mode (and names the statistics input_mean / input_var, and returns
// at most three outputs); 15 only widened the parameter types, which this kernel reads as any
// float type.
OPFORGE_OP(BatchNormalization)
    .since(1)
    .input("X", {opforge::f32, opforge::f64}).input("scale").input("B").input("mean").input("var")
    .output("Y").optional_output("mean").optional_output("var")
    .optional_output("saved_mean").optional_output("saved_var")
    .required_attr("consumed_inputs", AttrType::Ints).attr_versions(1, 5)
    .attr("epsilon", 1e-5f)
    .attr("is_test", int64_t(0)).attr_versions(1, 6)
    .attr("momentum", 0.9f)
    .attr("spatial", int64_t(1)).attr_versions(1, 8)
    .attr("training_mode", int64_t(0)).attr_versions(14)
    .inplace(0, 0)
    .infer(infer_batch_norm)
    .compute(batch_norm);
OPFORGE_OP(InstanceNormalization)
    .since(1)
    .input("input", {opforge::f32, opforge::f64}).input("scale").input("B")
    .output("output")
    .optional_attr("consumed_inputs", AttrType::Ints).attr_versions(1, 5)
    .attr("epsilon", 1e-5f)
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(instance_norm);

OPFORGE_OP(LRN)
    .since(1)
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .required_attr("size", AttrType::Int)
    .attr("alpha", 1e-4f).attr("beta", 0.75f).attr("bias", 1.0f)
    .infer(opforge::same_as_input0)
    .compute(lrn);

OPFORGE_OP(LpNormalization)
    .since(1)
    .input("input", {opforge::f32, opforge::f64})
    .output("output")
    .attr("axis", int64_t(-1)).attr("p", int64_t(2))
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(lp_norm);
