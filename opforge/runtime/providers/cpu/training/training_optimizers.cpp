// training_optimizers.cpp: the ai.onnx.preview.training optimizer steps Adagrad, Adam and Momentum.
// Each takes a learning rate R, a step count T and then n tensors to optimize followed by their
// gradients and accumulators (variadic, grouped by kind), and returns the updated tensors and
// accumulators. Elementwise, in double, as onnx's reference mixes its float32 tensors with
// double scalars.
#include <cmath>
#include <string>

#include "common/float_io.h"

namespace {

using namespace opforge_cpu;

/// How the variadic inputs and outputs of one optimizer group: `in` tensors per optimized
/// tensor (X, G, then accumulators) and `out` results (X_new, then accumulators).
struct Layout {
  const char* op;
  int in, out;
};

/// Equal ranks and dims, a dim not known yet (-1) matching any.
bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (a[d] >= 0 && b[d] >= 0 && a[d] != b[d]) return false;
  return true;
}

/// n, the number of tensors optimized, checked against the inputs and outputs.
template <class Ctx> int64_t group_count(const Ctx& ctx, const Layout& l) {
  const int tensors = ctx.num_inputs() - 2;
  OPFORGE_CHECK(tensors > 0 && tensors % l.in == 0, l.op, " takes R, T and then ", l.in,
                " tensors per optimized tensor (X..., G..., accumulators...), got ", tensors, " after R and T");
  const int64_t n = tensors / l.in;
  OPFORGE_CHECK(ctx.num_outputs() == n * l.out, l.op, " with ", n, " optimized tensors has ", n * l.out,
                " outputs, the node has ", ctx.num_outputs());
  for (int64_t i = 0; i < n; ++i) {
    Tensor x = ctx.input(int(2 + i));
    for (int k = 1; k < l.in; ++k) {
      Tensor other = ctx.input(int(2 + k * n + i));
      OPFORGE_CHECK(other.dtype() == x.dtype() && same_shape(other.sizes(), x.sizes()), l.op, " input ",
                    2 + k * n + i, " must have the shape and dtype of the tensor it goes with (input ", 2 + i, ")");
    }
  }
  return n;
}

/// Outputs k * n + i are shaped like input 2 + i.
template <int In, int Out> void infer(InferContext& ctx, const char* op) {
  const int64_t n = group_count(ctx, {op, In, Out});
  for (int k = 0; k < Out; ++k)
    for (int64_t i = 0; i < n; ++i) ctx.set_output_like(int(k * n + i), int(2 + i));
}

/// The hyper-parameters every rule reads.
struct Step {
  double rate = 0;
  int64_t count = 0;
  double norm = 0;  // L2 regularization added to the gradient
};

template <class Ctx> Step read_step(const Ctx& ctx) {
  OPFORGE_CHECK(ctx.input(0).numel() == 1, "input 'R' (the learning rate) must hold one value");
  OPFORGE_CHECK(ctx.input(1).numel() == 1, "input 'T' (the update count) must hold one value");
  Step s;
  s.rate = read_floats<double>(ctx.input(0), "R")[0];
  s.count = read_ints(ctx.input(1))[0];
  s.norm = ctx.template attr<float>("norm_coefficient");
  return s;
}

/// Calls f(x, g, acc..., outs...) as double pointers for every optimized tensor, converting the
/// float ones through scratch copies.
template <int In, int Out, class F> void each_tensor(KernelContext& ctx, const char* op, F&& f) {
  const int64_t n = group_count(ctx, {op, In, Out});
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> in[In], out[Out];
    const int64_t size = ctx.input(int(2 + i)).numel();
    for (int k = 0; k < In; ++k) in[k] = read_floats<double>(ctx.input(int(2 + k * n + i)), op);
    for (int k = 0; k < Out; ++k) out[k].resize(size_t(size));
    f(size, in, out);
    for (int k = 0; k < Out; ++k) write_floats(out[k].data(), ctx.output(int(k * n + i)));
  }
}

void adagrad(KernelContext& ctx) {
  const Step s = read_step(ctx);
  const double eps = ctx.attr<float>("epsilon");
  const double rate = s.rate / (1 + double(s.count) * ctx.attr<float>("decay_factor"));
  each_tensor<3, 2>(ctx, "Adagrad", [&](int64_t size, const std::vector<double>* in, std::vector<double>* out) {
    const double *x = in[0].data(), *g = in[1].data(), *h = in[2].data();
    for (int64_t j = 0; j < size; ++j) {
      const double grad = s.norm * x[j] + g[j], acc = h[j] + grad * grad;
      out[0][size_t(j)] = x[j] - rate * grad / (std::sqrt(acc) + eps);
      out[1][size_t(j)] = acc;
    }
  });
}

void adam(KernelContext& ctx) {
  const Step s = read_step(ctx);
  const float alpha = ctx.attr<float>("alpha"), beta = ctx.attr<float>("beta");
  const double eps = ctx.attr<float>("epsilon");
  // 1 - a for a float attribute a is a float, as in onnx's reference (which reads attributes as
  // float32 scalars); the products with the tensors are double
  const double new_mean = 1.0f - alpha, new_square = 1.0f - beta;
  const double keep = 1.0f - ctx.attr<float>("norm_coefficient_post");
  // bias correction of both moments from the second step on
  const double rate = s.count > 0 ? s.rate * std::sqrt(1 - std::pow(beta, double(s.count))) /
                                        (1 - std::pow(alpha, double(s.count)))
                                  : s.rate;
  each_tensor<4, 3>(ctx, "Adam", [&](int64_t size, const std::vector<double>* in, std::vector<double>* out) {
    const double *x = in[0].data(), *g = in[1].data(), *v = in[2].data(), *h = in[3].data();
    for (int64_t j = 0; j < size; ++j) {
      const double grad = s.norm * x[j] + g[j];
      const double mean = alpha * v[j] + new_mean * grad, square = beta * h[j] + new_square * grad * grad;
      out[0][size_t(j)] = keep * (x[j] - rate * mean / (std::sqrt(square) + eps));
      out[1][size_t(j)] = mean;
      out[2][size_t(j)] = square;
    }
  });
}

void momentum(KernelContext& ctx) {
  const Step s = read_step(ctx);
  const std::string mode = ctx.attr<std::string>("mode");
  OPFORGE_CHECK(mode == "standard" || mode == "nesterov", "attribute 'mode' must be 'standard' or 'nesterov', got '",
                mode, "'");
  const double alpha = ctx.attr<float>("alpha");
  const double beta = s.count > 0 ? double(ctx.attr<float>("beta")) : 1.0;  // the first step takes the whole gradient
  const bool nesterov = mode == "nesterov";
  each_tensor<3, 2>(ctx, "Momentum", [&](int64_t size, const std::vector<double>* in, std::vector<double>* out) {
    const double *x = in[0].data(), *g = in[1].data(), *v = in[2].data();
    for (int64_t j = 0; j < size; ++j) {
      const double grad = s.norm * x[j] + g[j], velocity = alpha * v[j] + beta * grad;
      out[0][size_t(j)] = x[j] - s.rate * (nesterov ? grad + alpha * velocity : velocity);
      out[1][size_t(j)] = velocity;
    }
  });
}

}  // namespace

#define OPTIMIZER(NAME, IN, OUT)                                              \
  OPFORGE_OP(NAME)                                                            \
      .domain("ai.onnx.preview.training")                                     \
      .since(1)                                                               \
      .input("R", {opforge::f32, opforge::f64})                               \
      .input("T", {opforge::i64})                                             \
      .variadic_input("inputs", {opforge::f32, opforge::f64})                 \
      .variadic_output("outputs")                                             \
      .infer([](InferContext& ctx) { infer<IN, OUT>(ctx, #NAME); })

OPTIMIZER(Adagrad, 3, 2)
    .attr("decay_factor", 0.0f)
    .attr("epsilon", 1e-6f)
    .attr("norm_coefficient", 0.0f)
    .compute(adagrad);

OPTIMIZER(Adam, 4, 3)
    .attr("alpha", 0.9f)
    .attr("beta", 0.999f)
    .attr("epsilon", 1e-6f)
    .attr("norm_coefficient", 0.0f)
    .attr("norm_coefficient_post", 0.0f)
    .compute(adam);

OPTIMIZER(Momentum, 3, 2)
    .required_attr("alpha", opforge::AttrType::Float)
    .required_attr("beta", opforge::AttrType::Float)
    .required_attr("mode", opforge::AttrType::String)
    .required_attr("norm_coefficient", opforge::AttrType::Float)
    .compute(momentum);
