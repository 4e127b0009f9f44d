// Deliberately broken ops, each with one classic bug, and a correct twin (scale): what
// opforge.testing.check_op must catch, and must not flag, in tests/testing/test_check_op.py.
// Each computes y = 2 * x (add_bad_broadcast: a + b) except for its bug.
#include <opforge/op.h>

#include <algorithm>
#include <type_traits>

namespace {

using opforge::KernelContext;

template <class F>
void for_float_types(const opforge::Tensor& x, F&& f) {
  opforge::dispatch<float, double>(x.dtype(), [&](auto tag) { f(tag); });
}

void scale(KernelContext& ctx) {
  for_float_types(ctx.input(0), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = ctx.input(0).data<T>();
    T* y = ctx.output(0).data<T>();
    ctx.parallel_for(ctx.input(0).numel(), 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = T(2) * x[i];
    });
  });
}

void off_by_one(KernelContext& ctx) {  // the loop bound: <= n
  for_float_types(ctx.input(0), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = ctx.input(0).data<T>();
    T* y = ctx.output(0).data<T>();
    const int64_t n = ctx.input(0).numel();
    for (int64_t i = 0; i <= n; ++i) y[i] = T(2) * (i < n ? x[i] : T(1));
  });
}

void last_unwritten(KernelContext& ctx) {  // stops one short
  for_float_types(ctx.input(0), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = ctx.input(0).data<T>();
    T* y = ctx.output(0).data<T>();
    for (int64_t i = 0; i < ctx.input(0).numel() - 1; ++i) y[i] = T(2) * x[i];
  });
}

void float32_output(opforge::InferContext& ctx) {  // whatever the input's dtype
  ctx.set_output(0, opforge::f32, ctx.input(0).sizes());
}

void shared_buffer(KernelContext& ctx) {  // one scratch buffer for every chunk and call
  static float scratch[1 << 21];  // room for the largest chunk check_op makes
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  ctx.parallel_for(ctx.input(0).numel(), 1024, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) scratch[i - b] = 2.f * x[i];
    for (int64_t i = b; i < e; ++i) y[i] = scratch[i - b];
  });
}

int64_t one_float_each(opforge::InferContext& ctx) { return ctx.input(0).numel() * int64_t(sizeof(float)); }

void workspace_overrun(KernelContext& ctx) {  // stages n + 1 values in room for n
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  float* staged = ctx.workspace<float>();
  const int64_t n = ctx.input(0).numel();
  for (int64_t i = 0; i <= n; ++i) staged[i] = i < n ? 2.f * x[i] : 0.f;
  for (int64_t i = 0; i < n; ++i) y[i] = staged[i];
}

void float64_wrong(KernelContext& ctx) {  // the double path adds a stray term
  for_float_types(ctx.input(0), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* x = ctx.input(0).data<T>();
    T* y = ctx.output(0).data<T>();
    const T extra = std::is_same_v<T, double> ? T(1e-3) : T(0);
    for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = T(2) * x[i] + extra;
  });
}

void broadcast_shape(opforge::InferContext& ctx) {  // numpy's rule, correctly
  std::vector<int64_t> a = ctx.input(0).sizes(), b = ctx.input(1).sizes();
  std::vector<int64_t> out(std::max(a.size(), b.size()), 1);
  for (size_t k = 0; k < out.size(); ++k) {
    int64_t da = k < a.size() ? a[a.size() - 1 - k] : 1, db = k < b.size() ? b[b.size() - 1 - k] : 1;
    OPFORGE_CHECK(da == db || da == 1 || db == 1, "shapes do not broadcast");
    out[out.size() - 1 - k] = da == 1 ? db : da;
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void bad_broadcast(KernelContext& ctx) {  // indexes each input modulo its size: right only
  const float* a = ctx.input(0).data<float>();  // when the smaller one is a trailing block
  const float* b = ctx.input(1).data<float>();
  float* y = ctx.output(0).data<float>();
  const int64_t na = ctx.input(0).numel(), nb = ctx.input(1).numel();
  for (int64_t i = 0; i < ctx.output(0).numel(); ++i) y[i] = a[i % na] + b[i % nb];
}

void blocked_tail(KernelContext& ctx) {  // from 1024 elements on, a blocked loop whose tail scales by 3
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  const int64_t n = ctx.input(0).numel(), blocked = n >= 1024 ? n / 256 * 256 : 0;
  for (int64_t i = 0; i < blocked; ++i) y[i] = 2.f * x[i];
  for (int64_t i = blocked; i < n; ++i) y[i] = (blocked ? 3.f : 2.f) * x[i];
}

}  // namespace

#define UNARY(name) OPFORGE_OP(name).domain("com.broken").output("Y")

UNARY(scale).input("X", {opforge::f32, opforge::f64}).infer(opforge::same_as_input0).compute(scale);
UNARY(off_by_one).input("X", {opforge::f32, opforge::f64}).infer(opforge::same_as_input0).compute(off_by_one);
UNARY(last_unwritten).input("X", {opforge::f32, opforge::f64}).infer(opforge::same_as_input0).compute(last_unwritten);
UNARY(infer_dtype).input("X", {opforge::f32, opforge::f64}).infer(float32_output).compute(scale);
UNARY(shared_buffer).input("X", {opforge::f32}).infer(opforge::same_as_input0).compute(shared_buffer);
UNARY(workspace_overrun).input("X", {opforge::f32}).infer(opforge::same_as_input0).workspace(one_float_each)
    .compute(workspace_overrun);
UNARY(blocked_tail).input("X", {opforge::f32}).infer(opforge::same_as_input0).compute(blocked_tail);
UNARY(float64_wrong).input("X", {opforge::f32, opforge::f64}).infer(opforge::same_as_input0).compute(float64_wrong);
OPFORGE_OP(add_bad_broadcast).domain("com.broken").input("A", {opforge::f32}).input("B", {opforge::f32})
    .output("Y").infer(broadcast_shape).compute(bad_broadcast);
