// normalization_rms.cpp: RMSNormalization (opset 23): y = x / sqrt(mean(x^2) + epsilon) * scale
// over the axes from `axis` on, computed in float (double for double inputs); and
// SimplifiedLayerNormalization, the same norm that onnxruntime registers in the default domain
// (since 1, outside the ONNX standard) and that LLM exporters write, with an optional float
// inv_std_var output (X's shape, 1 from `axis` on).
#include <algorithm>
#include <cmath>

#include "common/float_io.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using opforge_cpu::reduction::grain_for;

/// True when `from` broadcasts to `to` without growing it.
bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  for (size_t k = 1; k <= from.size(); ++k)
    if (from[from.size() - k] != 1 && from[from.size() - k] != to[to.size() - k]) return false;
  return true;
}

void infer(InferContext& ctx) {
  Tensor x = ctx.input(0), scale = ctx.input(1);
  OPFORGE_CHECK(x.ndim() >= 1, "input X must have rank >= 1, got a scalar");
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  const int64_t stash = ctx.attr<int64_t>("stash_type");
  OPFORGE_CHECK(stash == 1, "attribute 'stash_type' must be 1 (float32), got ", stash);
  const Shape shape = x.sizes(), normalized(shape.begin() + axis, shape.end());
  bool known = true;
  for (int64_t d : normalized) known = known && d >= 0;
  OPFORGE_CHECK(!known || broadcasts_to(scale.sizes(), normalized), "input 'scale' (rank ", scale.ndim(),
                ") does not broadcast to the normalized shape (the dims of X from axis ", axis, " on)");
  ctx.set_output(0, scale.dtype(), shape);
  if (ctx.num_outputs() > 1) {
    Shape stats = shape;
    std::fill(stats.begin() + axis, stats.end(), 1);
    ctx.set_output(1, OPF_FLOAT32, stats);
  }
}

/// scale broadcast over the normalized shape, as C.
template <class C> std::vector<C> broadcast_scale(const Tensor& t, const Shape& normalized) {
  OPFORGE_CHECK(broadcasts_to(t.sizes(), normalized), "input 'scale' does not broadcast to the normalized shape");
  const std::vector<C> v = read_floats<C>(t, "scale");
  std::vector<C> out(static_cast<size_t>(numel(normalized)));
  const Shape strides[1] = {broadcast_strides(t.sizes(), normalized)};
  for_each_broadcast(normalized, strides, [&](int64_t i, const int64_t* off) { out[size_t(i)] = v[size_t(off[0])]; });
  return out;
}

template <class C> void rms_norm(KernelContext& ctx) {
  Tensor x = ctx.input(0), y = ctx.output(0);
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), x.ndim());
  const Shape shape = x.sizes(), normalized(shape.begin() + axis, shape.end());
  const int64_t n = numel(normalized), rows = n == 0 ? 0 : x.numel() / n;
  const double eps = ctx.attr<float>("epsilon");
  const std::vector<C> scale = broadcast_scale<C>(ctx.input(1), normalized);
  std::vector<C> keep_x, keep_y;
  const C* in = floats_of<C>(x, keep_x, "X");
  const bool direct = y.dtype() == int32_t(opforge::dtype_of<C>::value);
  if (!direct) keep_y.resize(size_t(y.numel()));
  C* out = direct ? y.data<C>() : keep_y.data();
  float* inv_out = ctx.num_outputs() > 1 && ctx.output(1).defined() ? ctx.output(1).data<float>() : nullptr;
  ctx.parallel_for(rows, grain_for(2 * n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const C* xr = in + r * n;
      C* yr = out + r * n;
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += double(xr[i]) * double(xr[i]);
      const C inv = C(1 / std::sqrt(sum / double(n) + eps));
      for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * scale[size_t(i)];
      if (inv_out) inv_out[r] = float(inv);
    }
  });
  if (!direct) write_floats(keep_y.data(), y);
}

void compute(KernelContext& ctx) {
  dispatch_compute(ctx.input(0), "X", [&](auto tag) { rms_norm<typename decltype(tag)::type>(ctx); });
}

}  // namespace

OPFORGE_OP(RMSNormalization)
    .since(23)
    .input("X", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("scale", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .attr("axis", int64_t(-1))
    .attr("epsilon", 1e-5f)
    .attr("stash_type", int64_t(1))
    .infer(infer)
    .compute(compute);

OPFORGE_OP(SimplifiedLayerNormalization)
    .since(1)
    .input("X", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("scale", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .optional_output("inv_std_var")
    .attr("axis", int64_t(-1))
    .attr("epsilon", 1e-5f)
    .attr("stash_type", int64_t(1))
    .infer(infer)
    .compute(compute);
