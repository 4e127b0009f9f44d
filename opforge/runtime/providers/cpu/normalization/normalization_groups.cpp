// normalization_groups.cpp: LayerNormalization, GroupNormalization and MeanVarianceNormalization:
// statistics over a group of axes, then (x - mean) / std, scaled.
#include "normalization/normalization_stats.h"

namespace {

using namespace opforge_cpu;
using namespace opforge_cpu::reduction;
using namespace opforge_cpu::normalization;

/// True when `from` broadcasts to `to` without growing it.
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t k = 1; k <= from.size(); ++k)
    if (from[from.size() - k] != 1 && from[from.size() - k] != to[to.size() - k]) return false;
  return true;
}

/// A parameter broadcast to `shape` (numpy rules, trailing-aligned), flattened to T.
template <class T> std::vector<T> broadcast_param(const Tensor& t, const Shape& shape, const char* name) {
  const Shape from = t.sizes();
  OPFORGE_CHECK(broadcasts_to(from, shape), "input '", name, "' (rank ", from.size(), ", ", t.numel(),
                " elements) does not broadcast to the normalized shape");
  const std::vector<double> v = channel_values(t, t.numel(), name);
  std::vector<T> out(static_cast<size_t>(numel(shape)));
  const Shape strides[1] = {broadcast_strides(from, shape)};
  for_each_broadcast(shape, strides, [&](int64_t i, const int64_t* off) { out[size_t(i)] = T(v[size_t(off[0])]); });
  return out;
}

/// Mean and InvStdDev outputs: the input shape with the normalized axes set to 1, float32.
Shape stats_shape(const Tensor& x, int64_t axis) {
  Shape s = x.sizes();
  for (size_t d = size_t(axis); d < s.size(); ++d) s[d] = 1;
  return s;
}

void infer_layer_norm(InferContext& ctx) {
  Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() >= 1, "input X must have rank >= 1, got a scalar");
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  const int64_t stash = ctx.attr<int64_t>("stash_type");
  OPFORGE_CHECK(stash == 1, "attribute 'stash_type' must be 1 (float32), got ", stash);
  ctx.set_output_like(0, 0);
  for (int i = 1; i < ctx.num_outputs() && i < 3; ++i) ctx.set_output(i, opforge::f32, stats_shape(x, axis));
}

/// Optional output i as float*, or null when the caller did not ask for it.
float* optional_floats(const KernelContext& ctx, int i) {
  return i < ctx.num_outputs() && ctx.output(i).has_data() ? ctx.output(i).data<float>() : nullptr;
}

/// Over rows of the axes from `axis` on: y = (x - mean) / sqrt(var + epsilon) * Scale + B.
void layer_norm(KernelContext& ctx) {
  Tensor x = ctx.input(0);
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  const Shape shape = x.sizes(), normalized(shape.begin() + axis, shape.end());
  const int64_t n = numel(normalized), rows = n == 0 ? 0 : x.numel() / n;
  const double eps = ctx.attr<float>("epsilon");
  float* mean_out = optional_floats(ctx, 1);
  float* inv_out = optional_floats(ctx, 2);
  dispatch_float(x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const std::vector<T> scale = broadcast_param<T>(ctx.input(1), normalized, "Scale");
    const std::vector<T> bias = ctx.has_input(2) ? broadcast_param<T>(ctx.input(2), normalized, "B")
                                                 : std::vector<T>(static_cast<size_t>(n), T(0));
    const T* in = x.data<T>();
    T* out = ctx.output(0).data<T>();
    ctx.parallel_for(rows, grain_for(3 * n), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const Moments<T> m = row_moments(in + r * n, n);
        const T inv = T(1 / std::sqrt(double(m.var) + eps));
        const T* xr = in + r * n;
        T* yr = out + r * n;
        for (int64_t i = 0; i < n; ++i) yr[i] = (xr[i] - m.mean) * inv * scale[size_t(i)] + bias[size_t(i)];
        if (mean_out) mean_out[r] = float(m.mean);
        if (inv_out) inv_out[r] = float(inv);
      }
    });
  });
}

/// Per (n, group) over C / num_groups channels: normalize, then scale and shift per channel
/// (opset 21) or per group (opset 18).
template <bool kPerChannel> void group_norm(KernelContext& ctx) {
  Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() >= 2, "input X must be (N, C, ...), got rank ", x.ndim());
  const int64_t groups = ctx.attr<int64_t>("num_groups"), C = x.size(1);
  OPFORGE_CHECK(groups > 0 && C % groups == 0, "attribute 'num_groups' (", groups,
                ") must be positive and divide the channel count ", C);
  if (ctx.has_attr("stash_type"))
    OPFORGE_CHECK(ctx.attr<int64_t>("stash_type") == 1, "attribute 'stash_type' must be 1 (float32)");
  int64_t spatial = 1;
  for (int d = 2; d < x.ndim(); ++d) spatial *= x.size(d);
  const int64_t per = C / groups;
  const std::vector<double> scale = channel_values(ctx.input(1), kPerChannel ? C : groups, "scale");
  const std::vector<double> bias = channel_values(ctx.input(2), kPerChannel ? C : groups, "bias");
  const double eps = ctx.attr<float>("epsilon");
  const int64_t len = per * spatial;
  dispatch_float(x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    T* out = ctx.output(0).data<T>();
    ctx.parallel_for(x.size(0) * groups, grain_for(3 * len), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const Moments<T> m = row_moments(in + r * len, len);
        const double inv = 1 / std::sqrt(double(m.var) + eps);
        for (int64_t k = 0; k < per; ++k) {
          const size_t p = size_t(kPerChannel ? (r % groups) * per + k : r % groups);
          const T a = T(inv * scale[p]), b = T(bias[p]) - m.mean * a;
          const int64_t off = r * len + k * spatial;
          for (int64_t i = 0; i < spatial; ++i) out[off + i] = in[off + i] * a + b;
        }
      }
    });
  });
}

/// y = (x - mean[o]) * inv[o], visiting each output's elements the way the plan reduced them.
template <class T>
void normalize_by_plan(const KernelContext& ctx, const ReducePlan& p, const T* x, T* y, const T* mean,
                       const T* inv) {
  if (p.inner_reduced) {
    ctx.parallel_for(p.outputs, grain_for(p.count), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        for (int64_t r = 0; r < p.reduced.count; ++r) {
          const int64_t off = p.kept[o] + p.reduced[r];
          for (int64_t i = 0; i < p.run; ++i) y[off + i] = (x[off + i] - mean[o]) * inv[o];
        }
    });
    return;
  }
  ctx.parallel_for(p.kept.count, grain_for(p.count * p.run), [&](int64_t b, int64_t e) {
    for (int64_t blk = b; blk < e; ++blk)
      for (int64_t r = 0; r < p.reduced.count; ++r) {
        const int64_t off = p.kept[blk] + p.reduced[r], o = blk * p.run;
        for (int64_t i = 0; i < p.run; ++i) y[off + i] = (x[off + i] - mean[o + i]) * inv[o + i];
      }
  });
}

/// y = (x - mean) / (std + 1e-9) over `axes`, as ONNX's function body (and onnxruntime) compute it.
void mean_variance_norm(KernelContext& ctx) {
  Tensor x = ctx.input(0);
  const ReducePlan plan = plan_reduce(x.sizes(), axes_mask(x.ndim(), ctx.attr<std::vector<int64_t>>("axes")));
  if (plan.outputs == 0 || plan.count == 0) return;
  dispatch_float(x, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = x.data<T>();
    std::vector<T> mean(static_cast<size_t>(plan.outputs)), inv(mean.size());
    run_reduce(ctx, plan, in, mean.data(), Stepped<SumPolicy<T>>());
    for (T& m : mean) m /= T(plan.count);
    Stepped<SquaredDeviationPolicy<T>> dev;
    dev.shift = mean.data();
    run_reduce(ctx, plan, in, inv.data(), dev);
    for (T& v : inv) v = T(1) / (std::sqrt(v / T(plan.count)) + T(1e-9));
    normalize_by_plan(ctx, plan, in, ctx.output(0).data<T>(), mean.data(), inv.data());
  });
}

}  // namespace

using opforge::AttrType;

OPFORGE_OP(LayerNormalization)
    .since(17)
    .input("X", {opforge::f32, opforge::f64}).input("Scale").optional_input("B")
    .output("Y").optional_output("Mean").optional_output("InvStdDev")
    .attr("axis", int64_t(-1)).attr("epsilon", 1e-5f).attr("stash_type", int64_t(1))
    .inplace(0, 0)
    .infer(infer_layer_norm)
    .compute(layer_norm);

OPFORGE_OP(GroupNormalization)
    .since(18)
    .input("X", {opforge::f32, opforge::f64}).input("scale").input("bias")
    .output("Y")
    .required_attr("num_groups", AttrType::Int).attr("epsilon", 1e-5f)
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(group_norm<false>);

OPFORGE_OP(GroupNormalization)
    .since(21)
    .input("X", {opforge::f32, opforge::f64}).input("scale").input("bias")
    .output("Y")
    .required_attr("num_groups", AttrType::Int).attr("epsilon", 1e-5f).attr("stash_type", int64_t(1))
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(group_norm<true>);

OPFORGE_OP(MeanVarianceNormalization)
    .since(9)
    .input("X", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("axes", {int64_t(0), int64_t(2), int64_t(3)})
    .inplace(0, 0)
    .infer(opforge::same_as_input0)
    .compute(mean_variance_norm);
