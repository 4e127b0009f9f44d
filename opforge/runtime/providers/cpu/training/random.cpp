// random.cpp: ops that draw random numbers: Dropout (a random mask in training mode; the identity
// in inference), Bernoulli, RandomUniform, RandomNormal and their -Like forms.
//
// RandomUniform, RandomNormal, their -Like forms and Bernoulli draw onnxruntime's streams: its
// CPU kernels keep a std::default_random_engine (libstdc++'s minstd_rand0) per node, seeded with
// the seed attribute as uint32 (else at random), and each run goes on where the last stopped;
// values come from std::uniform_real_distribution / std::normal_distribution of the output's
// type, made anew each run. So a seeded model gives onnxruntime's numbers, run after run.
// Bernoulli draws as onnxruntime does (onnx's function body: RandomUniformLike in the input's
// type) but gives 1 where the draw is below the probability, so that 1 comes with probability
// p, as the operator's definition, onnx's reference and torch.bernoulli have it. onnxruntime
// runs the function body's Greater(draw, p) and gives 1 with probability 1 - p: seeded, our
// output is the complement of its.
//
// Training-mode Dropout draws numpy's legacy np.random.RandomState(seed) stream (MT19937 seeded
// as init_genrand, doubles from two 32-bit words), as onnx's reference does, which the node
// tests check bit for bit (onnxruntime uses a Philox generator there). Without a seed each call
// draws a fresh one.
// numpy, and libstdc++'s distributions as onnxruntime's wheel is built (no FMA), multiply and
// add separately: a fused multiply-add would round the draws differently. Before the includes,
// so that it covers the <random> templates instantiated here too.
#pragma GCC optimize("fp-contract=off")

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <mutex>
#include <random>

#include "data_movement/data_movement.h"
#include "common/elements.h"


namespace opforge_cpu {
namespace {

using namespace data_movement;

/// numpy's RandomState stream of uniform doubles in [0, 1) (training-mode Dropout's).
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}

  double uniform() {
    const uint32_t a = mt_() >> 5, b = mt_() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }

 private:
  std::mt19937 mt_;
};

/// The stream for an op's 'seed' attribute (an int for Dropout, a float for the others); a
/// random seed when the node gives none.
template <class Ctx> NumpyRandomState stream_for(const Ctx& ctx) {
  if (!ctx.has_attr("seed")) return NumpyRandomState(std::random_device{}());
  const double seed = ctx.template attr<double>("seed");
  OPFORGE_CHECK(seed >= 0 && seed <= 4294967295.0, "attribute 'seed' = ", seed, " must be in [0, 2**32)");
  return NumpyRandomState(uint32_t(seed));
}

/// A node's onnxruntime stream (see the top of the file), kept from run to run; `lock` guards
/// it for threads running the node at once.
struct OrtStream {
  std::unique_ptr<std::mutex> lock = std::make_unique<std::mutex>();
  std::unique_ptr<std::default_random_engine> engine;
};

template <class Ctx> const OrtStream& ort_stream(const Ctx& ctx) {
  return ctx.template state<OrtStream>([&] {
    uint32_t seed;
    if (ctx.has_attr("seed")) {
      const double given = ctx.template attr<double>("seed");
      OPFORGE_CHECK(given >= 0 && given <= 4294967295.0, "attribute 'seed' = ", given, " must be in [0, 2**32)");
      seed = uint32_t(given);
    } else {
      seed = std::random_device{}();
    }
    OrtStream made;
    made.engine = std::make_unique<std::default_random_engine>(seed);
    return made;
  });
}

/// Writes f() converted to the element type of t into each element, in order.
template <class F> void fill_with(const Tensor& t, F&& f) {
  dispatch_storage(t, "output", [&](auto tag) {
    using S = typename decltype(tag)::type;
    S* p = static_cast<S*>(t.raw());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = store_as<S>(f());
  });
}

// ---- Dropout ----

/// Whether a Dropout call trains (input 'training_mode' present and true).
template <class Ctx> bool training(const Ctx& ctx) {
  if (!ctx.has_input(2)) return false;
  const Tensor mode = ctx.input(2);
  OPFORGE_CHECK(mode.numel() == 1, "input 'training_mode' must hold one value, got ", mode.numel());
  return mode.has_data() && *mode.template data<bool>();
}

/// The drop probability: input 'ratio' (opset 12), else the attribute, else 0.5.
double drop_ratio(const KernelContext& ctx) {
  double r = ctx.has_attr("ratio") ? ctx.attr<double>("ratio") : 0.5;
  if (ctx.num_inputs() > 1 && ctx.has_input(1)) r = read_scalar(ctx.input(1), "ratio");
  OPFORGE_CHECK(r >= 0 && r < 1, "the drop ratio must be in [0, 1), got ", r);
  return r;
}

/// Dropout's infer; the mask is bool from opset 10, of the data's dtype before.
template <bool BoolMask> void dropout_infer(InferContext& ctx) {
  ctx.set_output_like(0, 0);
  if (ctx.num_outputs() > 1)
    ctx.set_output(1, BoolMask ? int32_t(opforge::boolean) : ctx.input(0).dtype(), ctx.input(0).sizes());
}

/// Writes "kept" (true, or 1 in the mask's float type) into every element of the mask.
void fill_kept(const Tensor& mask) {
  if (mask.dtype() == OPF_BOOL) {
    std::fill(mask.data<bool>(), mask.data<bool>() + mask.numel(), true);
    return;
  }
  fill_with(mask, [] { return 1.0; });
}

/// Training-mode Dropout: keeps an element where a uniform draw is >= ratio, scaled by
/// 1 / (1 - ratio) in the data's precision, as onnx's reference does.
void dropout_train(const KernelContext& ctx, double ratio) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const bool with_mask = ctx.num_outputs() > 1 && ctx.output(1).has_data();
  NumpyRandomState rng = stream_for(ctx);
  std::vector<bool> keep(size_t(x.numel()));
  for (size_t i = 0; i < keep.size(); ++i) keep[i] = rng.uniform() >= ratio;
  dispatch_storage(x, "input 'data'", [&](auto tag) {
    using S = typename decltype(tag)::type;
    using C = compute_t<S>;
    const C scale = C(1) / (C(1) - C(ratio));
    const S* in = static_cast<const S*>(x.raw());
    S* out = static_cast<S*>(y.raw());
    for (size_t i = 0; i < keep.size(); ++i) out[i] = store_as<S>(keep[i] ? C(load_as<C>(in[i]) * scale) : C(0));
  });
  if (!with_mask) return;
  size_t i = 0;
  if (ctx.output(1).dtype() == OPF_BOOL) {
    bool* m = ctx.output(1).data<bool>();
    for (bool k : keep) m[i++] = k;
    return;
  }
  fill_with(ctx.output(1), [&] { return keep[i++] ? 1.0 : 0.0; });
}

void dropout_compute(KernelContext& ctx) {
  if (training(ctx)) {
    const double ratio = drop_ratio(ctx);
    if (ratio > 0) return dropout_train(ctx, ratio);
  }
  copy_input0(ctx);
  if (ctx.num_outputs() > 1 && ctx.output(1).has_data()) fill_kept(ctx.output(1));
}

// ---- random tensors ----

/// The output dtype of a random op: attribute 'dtype' when given and not 0, else `fallback`.
template <class Ctx> int32_t random_dtype(const Ctx& ctx, int32_t fallback) {
  const int64_t d = ctx.has_attr("dtype") ? ctx.template attr<int64_t>("dtype") : 0;
  const int32_t dtype = d != 0 ? int32_t(d) : fallback;
  OPFORGE_CHECK(is_float_dtype(dtype), "the output dtype must be float16, bfloat16, float or double, got ",
                opforge::dtype_name(dtype));
  return dtype;
}

void random_infer(InferContext& ctx) {
  ctx.set_output(0, random_dtype(ctx, OPF_FLOAT32), ctx.attr<std::vector<int64_t>>("shape"));
}

void random_like_infer(InferContext& ctx) {
  ctx.set_output(0, random_dtype(ctx, ctx.input(0).dtype()), ctx.input(0).sizes());
}

/// Fills y with draws of Dist<T> (T: double for a double output, else float) from the node's
/// stream, a distribution made by make(T) for this run.
template <template <class> class Dist, class Make>
void draw_into(const KernelContext& ctx, const Tensor& y, Make&& make) {
  const OrtStream& stream = ort_stream(ctx);
  std::lock_guard<std::mutex> hold(*stream.lock);
  auto fill = [&](auto zero) {
    using T = decltype(zero);
    Dist<T> dist = make(T{});
    fill_with(y, [&] { return dist(*stream.engine); });
  };
  if (y.dtype() == OPF_FLOAT64) fill(double{});
  else fill(float{});
}

template <class T> using Uniform = std::uniform_real_distribution<T>;
template <class T> using Normal = std::normal_distribution<T>;

/// RandomUniform(Like): std::uniform_real_distribution(low, high) in the output's type.
void uniform_compute(KernelContext& ctx) {
  const double low = ctx.attr<double>("low"), high = ctx.attr<double>("high");
  draw_into<Uniform>(ctx, ctx.output(0), [&](auto zero) {
    using T = decltype(zero);
    return Uniform<T>(T(low), T(high));
  });
}

/// RandomNormal(Like): std::normal_distribution(mean, scale) in the output's type.
void normal_compute(KernelContext& ctx) {
  const double mean = ctx.attr<double>("mean"), scale = ctx.attr<double>("scale");
  draw_into<Normal>(ctx, ctx.output(0), [&](auto zero) {
    using T = decltype(zero);
    return Normal<T>(T(mean), T(scale));
  });
}

void bernoulli_infer(InferContext& ctx) {
  const int64_t d = ctx.has_attr("dtype") ? ctx.attr<int64_t>("dtype") : 0;
  ctx.set_output(0, d != 0 ? int32_t(d) : ctx.input(0).dtype(), ctx.input(0).sizes());
}

/// Bernoulli: 1 where a uniform draw in [0, 1) of the input's type (onnxruntime's draws) is
/// below the element's probability, else 0 (see the top of the file).
void bernoulli_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const std::vector<double> p = read_doubles(x);
  for (double v : p) OPFORGE_CHECK(v >= 0 && v <= 1, "input 'input' holds a probability ", v, " outside [0, 1]");
  std::vector<double> draws(p.size());
  {
    const OrtStream& stream = ort_stream(ctx);
    std::lock_guard<std::mutex> hold(*stream.lock);
    if (x.dtype() == OPF_FLOAT64) {
      Uniform<double> dist(0.0, 1.0);
      for (double& d : draws) d = dist(*stream.engine);
    } else {   // float, and float16 / bfloat16 drawn as float then rounded to the input's type
      Uniform<float> dist(0.f, 1.f);
      for (double& d : draws) d = dist(*stream.engine);
      if (x.dtype() != OPF_FLOAT32) {
        dispatch_storage(x, "input", [&](auto tag) {
          using S = typename decltype(tag)::type;
          for (double& d : draws) d = double(load_as<float>(store_as<S>(float(d))));
        });
      }
    }
  }
  const Tensor y = ctx.output(0);
  dispatch_elements(y, [&](auto tag) {
    using S = typename decltype(tag)::type;
    S* out = static_cast<S*>(y.raw());
    for (size_t i = 0; i < p.size(); ++i) out[i] = store_as<S>(compute_t<S>(draws[i] < p[i] ? 1 : 0));
  });
}

// ---- Multinomial ----

void multinomial_infer(InferContext& ctx) {
  const int64_t dtype = ctx.attr<int64_t>("dtype");
  OPFORGE_CHECK(dtype == OPF_INT32 || dtype == OPF_INT64, "attribute 'dtype' must be int32 or int64, got ",
                opforge::dtype_name(int32_t(dtype)));
  const auto& x = ctx.input(0).sizes();
  OPFORGE_CHECK(x.size() == 2, "input 'input' must be [batch, classes], got rank ", x.size());
  ctx.set_output(0, int32_t(dtype), {x[0], ctx.attr<int64_t>("sample_size")});
}

/// Multinomial as onnxruntime draws it: per row, the running sum of exp(logit - max) over the
/// finite logits, and each sample the first class whose sum exceeds a uniform double times
/// the total, from the node's stream (a seeded node's runs go on from one another, as in
/// onnxruntime).
void multinomial_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const int64_t batch = x.sizes()[0], classes = x.sizes()[1], samples = ctx.attr<int64_t>("sample_size");
  OPFORGE_CHECK(batch >= 1 && classes >= 1 && samples >= 1, "batch, classes and sample_size must be >= 1, got ",
                batch, ", ", classes, " and ", samples);
  const std::vector<double> logits = read_doubles(x);
  const OrtStream& stream = ort_stream(ctx);
  std::lock_guard<std::mutex> hold(*stream.lock);
  std::default_random_engine& engine = *stream.engine;
  std::uniform_real_distribution<double> dist(0.0, 1.0);
  std::vector<double> cdf(static_cast<size_t>(classes));
  std::vector<int64_t> out(static_cast<size_t>(batch * samples));
  for (int64_t b = 0; b < batch; ++b) {
    const double* row = logits.data() + b * classes;
    float top = std::numeric_limits<float>::lowest();
    for (int64_t j = 0; j < classes; ++j)
      if (std::isfinite(row[j])) top = std::max(top, float(row[j]));
    double total = 0;
    for (int64_t j = 0; j < classes; ++j) {
      if (std::isfinite(row[j])) total += std::exp(row[j] - double(top));
      cdf[size_t(j)] = total;
    }
    for (int64_t k = 0; k < samples; ++k) {
      const double target = dist(engine) * total;
      out[size_t(b * samples + k)] = std::upper_bound(cdf.begin(), cdf.end(), target) - cdf.begin();
    }
  }
  const Tensor y = ctx.output(0);
  if (y.dtype() == OPF_INT32) {
    int32_t* p = y.data<int32_t>();
    for (size_t i = 0; i < out.size(); ++i) p[i] = int32_t(out[i]);
  } else {
    std::copy(out.begin(), out.end(), y.data<int64_t>());
  }
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

#define DROPOUT_DTYPES {opforge::f32, opforge::f64, opforge::f16}
#define RANDOM_DTYPES {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}

// Opsets 1-9 differ only in attributes: consumed_inputs until 5, is_test until 6.
OPFORGE_OP(Dropout)
    .since(1)
    .input("data", DROPOUT_DTYPES)
    .output("output")
    .optional_output("mask")
    .optional_attr("consumed_inputs", opforge::AttrType::Ints, "legacy optimization hint")
    .attr_versions(1, 5)
    .attr("is_test", int64_t(0), "ignored: these opsets have no training mode here")
    .attr_versions(1, 6)
    .attr("ratio", 0.5f)
    .inplace(0, 0)
    .infer(dropout_infer<false>)
    .compute(dropout_compute);

OPFORGE_OP(Dropout)
    .since(10)
    .input("data", DROPOUT_DTYPES)
    .output("output")
    .optional_output("mask", {opforge::boolean})
    .attr("ratio", 0.5f)
    .inplace(0, 0)
    .infer(dropout_infer<true>)
    .compute(dropout_compute);

OPFORGE_OP(Dropout)
    .since(12)
    .input("data", RANDOM_DTYPES)
    .optional_input("ratio", RANDOM_DTYPES)
    .optional_input("training_mode", {opforge::boolean})
    .output("output")
    .optional_output("mask", {opforge::boolean})
    .optional_attr("seed", opforge::AttrType::Int)
    .inplace(0, 0)
    .infer(dropout_infer<true>)
    .compute(dropout_compute);

OPFORGE_OP(RandomUniform)
    .since(1)
    .output("output", RANDOM_DTYPES)
    .attr("dtype", int64_t(OPF_FLOAT32))
    .attr("high", 1.0f)
    .attr("low", 0.0f)
    .optional_attr("seed", opforge::AttrType::Float)
    .required_attr("shape", opforge::AttrType::Ints)
    .infer(random_infer)
    .compute(uniform_compute);

OPFORGE_OP(RandomUniformLike)
    .since(1)
    .input("input", OPFORGE_ALL_DTYPES)
    .output("output", RANDOM_DTYPES)
    .optional_attr("dtype", opforge::AttrType::Int)
    .attr("high", 1.0f)
    .attr("low", 0.0f)
    .optional_attr("seed", opforge::AttrType::Float)
    .infer(random_like_infer)
    .compute(uniform_compute);

OPFORGE_OP(RandomNormal)
    .since(1)
    .output("output", RANDOM_DTYPES)
    .attr("dtype", int64_t(OPF_FLOAT32))
    .attr("mean", 0.0f)
    .attr("scale", 1.0f)
    .optional_attr("seed", opforge::AttrType::Float)
    .required_attr("shape", opforge::AttrType::Ints)
    .infer(random_infer)
    .compute(normal_compute);

OPFORGE_OP(RandomNormalLike)
    .since(1)
    .input("input", OPFORGE_ALL_DTYPES)
    .output("output", RANDOM_DTYPES)
    .optional_attr("dtype", opforge::AttrType::Int)
    .attr("mean", 0.0f)
    .attr("scale", 1.0f)
    .optional_attr("seed", opforge::AttrType::Float)
    .infer(random_like_infer)
    .compute(normal_compute);

OPFORGE_OP(Bernoulli)
    .since(15)
    .input("input", RANDOM_DTYPES)
    .output("output", OPFORGE_ALL_DTYPES)
    .optional_attr("dtype", opforge::AttrType::Int)
    .optional_attr("seed", opforge::AttrType::Float)
    .infer(bernoulli_infer)
    .compute(bernoulli_compute);

OPFORGE_OP(Multinomial)
    .since(7)
    .input("input", {opforge::f32})
    .output("output", {opforge::i32, opforge::i64})
    .attr("dtype", int64_t(OPF_INT32))
    .attr("sample_size", int64_t(1))
    .optional_attr("seed", opforge::AttrType::Float)
    .infer(multinomial_infer)
    .compute(multinomial_compute);
