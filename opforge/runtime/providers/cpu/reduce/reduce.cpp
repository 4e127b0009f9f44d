// reduce.cpp: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceLogSum, ReduceLogSumExp and ReduceSumSquare, with axes as an attribute or as an input.
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using namespace opforge_cpu::reduction;

/// Float types accumulate in themselves; integers in double where a real function follows.
template <class T> using RealAcc = std::conditional_t<std::is_floating_point_v<T>, T, double>;

template <class T>
struct MeanPolicy : SumPolicy<T> {
  T finish(T a, int64_t count, int64_t) const { return count == 0 ? T(0) : T(a / T(count)); }
};

template <class T>
struct ProdPolicy : SumPolicy<T> {
  T init() const { return T(1); }
  T step(T a, T x, int64_t) const { return a * x; }
  T merge(T a, T b) const { return a * b; }
};

template <class T>
struct L2Policy : SumSquarePolicy<T> {
  T finish(T a, int64_t, int64_t) const { return from_real<T>(std::sqrt(RealAcc<T>(a))); }
};

template <class T>
struct LogSumPolicy : SumPolicy<T> {
  T finish(T a, int64_t, int64_t) const { return from_real<T>(std::log(RealAcc<T>(a))); }
};

/// The second pass of log-sum-exp: log(sum(exp(x - shift[o]))) + shift[o], shift being the max.
/// Integers truncate each term, as onnxruntime does.
template <class T>
struct LogSumExpPolicy : SumPolicy<T> {
  const T* shift = nullptr;
  T step(T a, T x, int64_t o) const { return a + T(exp_fast(RealAcc<T>(x) - RealAcc<T>(shift[o]))); }
  T finish(T a, int64_t, int64_t o) const { return from_real<T>(std::log(RealAcc<T>(a))) + shift[o]; }
};

/// Reduces with the policy; log-sum-exp first finds each output's max to shift by.
template <template <class> class Policy, class T>
void apply(const KernelContext& ctx, const ReducePlan& plan, const T* x, T* y) {
  if constexpr (std::is_same_v<Policy<T>, LogSumExpPolicy<T>>) {
    std::vector<T> shift(size_t(plan.outputs));
    run_reduce(ctx, plan, x, shift.data(), Stepped<MaxPolicy<T>>());
    for (T& s : shift)
      if (!std::isfinite(double(s))) s = T(0);
    Stepped<LogSumExpPolicy<T>> op;
    op.shift = shift.data();
    run_reduce(ctx, plan, x, y, op);
  } else {
    run_reduce(ctx, plan, x, y, Stepped<Policy<T>>());
  }
}

/// The axes to reduce: the attribute (old opsets) or input 1 (new ones); empty when absent.
template <bool kAxesInput, class Ctx>
std::vector<int64_t> read_axes(const Ctx& ctx) {
  if constexpr (kAxesInput) {
    if (!ctx.has_input(1)) return {};
    Tensor axes = ctx.input(1);
    if (!axes.has_data()) throw opforge::NeedsValue("needs the value of input 'axes'");
    return read_ints(axes);
  } else {
    return ctx.has_attr("axes") ? ctx.template attr<std::vector<int64_t>>("axes") : std::vector<int64_t>{};
  }
}

/// Which axes of `rank` to reduce, from the axes given and noop_with_empty_axes.
template <bool kAxesInput, class Ctx>
std::vector<bool> reduce_mask(const Ctx& ctx, int64_t rank) {
  const std::vector<int64_t> axes = read_axes<kAxesInput>(ctx);
  if (!axes.empty()) return axes_mask(rank, axes);
  bool noop = false;
  if constexpr (kAxesInput) noop = ctx.template attr<int64_t>("noop_with_empty_axes") != 0;
  return std::vector<bool>(size_t(rank), !noop);
}

template <bool kAxesInput>
void infer_reduce(InferContext& ctx) {
  Tensor x = ctx.input(0);
  const std::vector<bool> mask = reduce_mask<kAxesInput>(ctx, x.ndim());
  const bool keepdims = ctx.attr<int64_t>("keepdims") != 0;
  Shape out;
  for (int d = 0; d < x.ndim(); ++d) {
    if (!mask[size_t(d)]) out.push_back(x.size(d));
    else if (keepdims) out.push_back(1);
  }
  ctx.set_output(0, x.dtype(), out);
}

/// float16/bfloat16: reduced in float32 (as numpy sums halves), rounded once per output.
template <template <class> class Policy, class H>
void reduce_half(KernelContext& ctx, const ReducePlan& plan, const Tensor& x, const Tensor& y) {
  const H* in = x.data<H>();
  H* out = y.data<H>();
  std::vector<float> wide(static_cast<size_t>(x.numel())), reduced(static_cast<size_t>(y.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) wide[size_t(i)] = opforge::to_float(in[i]);
  apply<Policy, float>(ctx, plan, wide.data(), reduced.data());
  for (int64_t i = 0; i < y.numel(); ++i) out[i] = opforge::from_float(reduced[size_t(i)], H{});
}

template <template <class> class Policy, bool kAxesInput, class... Ts>
void compute_reduce(KernelContext& ctx) {
  Tensor x = ctx.input(0), y = ctx.output(0);
  const ReducePlan plan = plan_reduce(x.sizes(), reduce_mask<kAxesInput>(ctx, x.ndim()));
  if (opforge::dispatch<opforge::float16_t, opforge::bfloat16_t>(x.dtype(), [&](auto tag) {
        reduce_half<Policy, typename decltype(tag)::type>(ctx, plan, x, y);
      }))
    return;
  const bool ok = opforge::dispatch<Ts...>(x.dtype(), [&](auto tag) {
    // bool reduces as bytes of 0 and 1: max is any, min is all
    using T = std::conditional_t<std::is_same_v<typename decltype(tag)::type, bool>, uint8_t,
                                 typename decltype(tag)::type>;
    apply<Policy, T>(ctx, plan, static_cast<const T*>(x.raw()), static_cast<T*>(y.raw()));
  });
  OPFORGE_CHECK(ok, "unsupported dtype ", opforge::dtype_name(x.dtype()));
}

}  // namespace

using opforge::AttrType;

// The dtypes each version accepts, as lists so that macro arguments carry no commas.
// float16 and bfloat16 are reduced in float32.
static const std::initializer_list<opforge::DType> kReduceDtypes = {opforge::f32, opforge::f64, opforge::i32,
                                                                    opforge::i64, opforge::f16, opforge::bf16};
static const std::initializer_list<opforge::DType> kMinMaxDtypes = {
    opforge::f32, opforge::f64, opforge::i32, opforge::i64, opforge::i8, opforge::u8, opforge::f16, opforge::bf16};
static const std::initializer_list<opforge::DType> kMinMax20Dtypes = {
    opforge::f32, opforge::f64, opforge::i32, opforge::i64, opforge::i8, opforge::u8, opforge::boolean,
    opforge::f16, opforge::bf16};
#define REDUCE_TYPES float, double, int32_t, int64_t
#define MINMAX_TYPES float, double, int32_t, int64_t, int8_t, uint8_t

// Axes as an attribute (opset 1 on).
#define REDUCE_AXES_ATTRIBUTE(NAME, POLICY, DTYPES, ...)        \
  OPFORGE_OP(NAME)                                              \
      .since(1)                                                 \
      .input("data", DTYPES)                                    \
      .output("reduced")                                        \
      .optional_attr("axes", AttrType::Ints)                    \
      .attr("keepdims", int64_t(1))                             \
      .infer(infer_reduce<false>)                               \
      .compute(compute_reduce<POLICY, false, __VA_ARGS__>)

// Axes as an optional input (opset 13 for ReduceSum, 18 for the others).
#define REDUCE_AXES_INPUT(NAME, SINCE, POLICY, DTYPES, ...)     \
  OPFORGE_OP(NAME)                                              \
      .since(SINCE)                                             \
      .input("data", DTYPES)                                    \
      .optional_input("axes", {opforge::i64})                   \
      .output("reduced")                                        \
      .attr("keepdims", int64_t(1))                             \
      .attr("noop_with_empty_axes", int64_t(0))                 \
      .infer(infer_reduce<true>)                                \
      .compute(compute_reduce<POLICY, true, __VA_ARGS__>)

REDUCE_AXES_ATTRIBUTE(ReduceSum, SumPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_INPUT(ReduceSum, 13, SumPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_ATTRIBUTE(ReduceMean, MeanPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_INPUT(ReduceMean, 18, MeanPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_ATTRIBUTE(ReduceProd, ProdPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_INPUT(ReduceProd, 18, ProdPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_ATTRIBUTE(ReduceL1, L1Policy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_INPUT(ReduceL1, 18, L1Policy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_ATTRIBUTE(ReduceL2, L2Policy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_INPUT(ReduceL2, 18, L2Policy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_ATTRIBUTE(ReduceLogSum, LogSumPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_INPUT(ReduceLogSum, 18, LogSumPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_ATTRIBUTE(ReduceLogSumExp, LogSumExpPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_INPUT(ReduceLogSumExp, 18, LogSumExpPolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_ATTRIBUTE(ReduceSumSquare, SumSquarePolicy, kReduceDtypes, REDUCE_TYPES);
REDUCE_AXES_INPUT(ReduceSumSquare, 18, SumSquarePolicy, kReduceDtypes, REDUCE_TYPES);
// ReduceMax and ReduceMin also take int8 and uint8 (opset 12 on) and bool (opset 20 on).
REDUCE_AXES_ATTRIBUTE(ReduceMax, MaxPolicy, kMinMaxDtypes, MINMAX_TYPES);
REDUCE_AXES_INPUT(ReduceMax, 18, MaxPolicy, kMinMaxDtypes, MINMAX_TYPES);
REDUCE_AXES_INPUT(ReduceMax, 20, MaxPolicy, kMinMax20Dtypes, MINMAX_TYPES, bool);
REDUCE_AXES_ATTRIBUTE(ReduceMin, MinPolicy, kMinMaxDtypes, MINMAX_TYPES);
REDUCE_AXES_INPUT(ReduceMin, 18, MinPolicy, kMinMaxDtypes, MINMAX_TYPES);
REDUCE_AXES_INPUT(ReduceMin, 20, MinPolicy, kMinMax20Dtypes, MINMAX_TYPES, bool);
