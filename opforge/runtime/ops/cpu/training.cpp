// training.cpp: the optimizers of ai.onnx.preview.training: Adagrad, Adam and Momentum. Each
// takes a learning rate R, a step count T and, for n tensors, n of each of its operands (X, G, then
// its running state), and returns n of each updated tensor. Computed in double, as onnx's
// reference ends up computing them.
#include <cmath>

#include "data_movement.h"
#include "elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// The operand groups of one call: `per` tensors per updated X (X, G and state), n X's.
template <class Ctx> int64_t tensor_count(const Ctx& ctx, int per, const char* op) {
  const int64_t rest = ctx.num_inputs() - 2;
  OPFORGE_CHECK(rest > 0 && rest % per == 0, op, " takes R, T and ", per, " tensors per updated tensor, got ",
                ctx.num_inputs(), " inputs");
  const int64_t n = rest / per;
  OPFORGE_CHECK(ctx.num_outputs() == (per - 1) * n, op, " returns ", (per - 1) * n, " outputs for these inputs, the node names ",
                ctx.num_outputs());
  for (int64_t i = 0; i < n; ++i)
    for (int j = 1; j < per; ++j)
      OPFORGE_CHECK(ctx.input(int(2 + j * n + i)).sizes() == ctx.input(int(2 + i)).sizes(), op, "'s operand ",
                    2 + j * n + i, " does not have the shape of X #", i);
  return n;
}

template <int Per> void optimizer_infer(InferContext& ctx) {
  const int64_t n = tensor_count(ctx, Per, "the optimizer");
  for (int64_t i = 0; i < (Per - 1) * n; ++i) ctx.set_output(int(i), ctx.input(int(2 + i % n)).dtype(), ctx.input(int(2 + i % n)).sizes());
}

/// Runs `step(r, t, operands, results)` on every element: operands are X, G and the state of one
/// element, results the new X and state.
template <int Per, class Step> void for_each_element(KernelContext& ctx, Step step) {
  const int64_t n = tensor_count(ctx, Per, "the optimizer");
  const double r = read_scalar(ctx.input(0), "R");
  const int64_t t = int64_t(read_scalar(ctx.input(1), "T"));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::vector<double>> in;
    for (int j = 0; j < Per; ++j) in.push_back(read_floats<double>(ctx.input(int(2 + j * n + i)), "operand"));
    std::vector<std::vector<double>> out(Per - 1, std::vector<double>(in[0].size()));
    double operands[Per], results[Per - 1];
    for (size_t e = 0; e < in[0].size(); ++e) {
      for (int j = 0; j < Per; ++j) operands[j] = in[size_t(j)][e];
      step(r, t, operands, results);
      for (int j = 0; j < Per - 1; ++j) out[size_t(j)][e] = results[j];
    }
    for (int j = 0; j < Per - 1; ++j) write_floats(out[size_t(j)].data(), ctx.output(int(j * n + i)));
  }
}

void adagrad_compute(KernelContext& ctx) {
  const double decay = ctx.attr<double>("decay_factor"), eps = ctx.attr<double>("epsilon");
  const double norm = ctx.attr<double>("norm_coefficient");
  for_each_element<3>(ctx, [&](double r, int64_t t, const double* in, double* out) {
    const double rate = r / (1 + double(t) * decay), g = norm * in[0] + in[1];
    out[1] = in[2] + g * g;
    out[0] = in[0] - rate * g / (std::sqrt(out[1]) + eps);
  });
}

void adam_compute(KernelContext& ctx) {
  const double alpha = ctx.attr<double>("alpha"), beta = ctx.attr<double>("beta"), eps = ctx.attr<double>("epsilon");
  const double norm = ctx.attr<double>("norm_coefficient"), post = ctx.attr<double>("norm_coefficient_post");
  for_each_element<4>(ctx, [&](double r, int64_t t, const double* in, double* out) {
    const double g = norm * in[0] + in[1];
    out[1] = alpha * in[2] + (1 - alpha) * g;
    out[2] = beta * in[3] + (1 - beta) * (g * g);
    const double rate = t > 0 ? r * std::sqrt(1 - std::pow(beta, double(t))) / (1 - std::pow(alpha, double(t))) : r;
    out[0] = (1 - post) * (in[0] - rate * (out[1] / (std::sqrt(out[2]) + eps)));
  });
}

void momentum_compute(KernelContext& ctx) {
  const double alpha = ctx.attr<double>("alpha"), beta = ctx.attr<double>("beta");
  const double norm = ctx.attr<double>("norm_coefficient");
  const std::string mode = ctx.attr<std::string>("mode");
  OPFORGE_CHECK(mode == "standard" || mode == "nesterov", "attribute 'mode' = '", mode, "' is not standard or nesterov");
  const bool nesterov = mode == "nesterov";
  for_each_element<3>(ctx, [&](double r, int64_t t, const double* in, double* out) {
    const double g = norm * in[0] + in[1];
    out[1] = alpha * in[2] + (t > 0 ? beta : 1.0) * g;
    out[0] = in[0] - r * (nesterov ? g + alpha * out[1] : out[1]);
  });
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Adagrad)
    .domain("ai.onnx.preview.training")
    .since(1)
    .input("R", {opforge::f32, opforge::f64})
    .input("T", {opforge::i64})
    .variadic_input("inputs", {opforge::f32, opforge::f64})
    .variadic_output("outputs")
    .attr("decay_factor", 0.0f)
    .attr("epsilon", 0.0f)
    .attr("norm_coefficient", 0.0f)
    .infer(optimizer_infer<3>)
    .compute(adagrad_compute);

OPFORGE_OP(Adam)
    .domain("ai.onnx.preview.training")
    .since(1)
    .input("R", {opforge::f32, opforge::f64})
    .input("T", {opforge::i64})
    .variadic_input("inputs", {opforge::f32, opforge::f64})
    .variadic_output("outputs")
    .attr("alpha", 0.9f)
    .attr("beta", 0.999f)
    .attr("epsilon", 0.0f)
    .attr("norm_coefficient", 0.0f)
    .attr("norm_coefficient_post", 0.0f)
    .infer(optimizer_infer<4>)
    .compute(adam_compute);

OPFORGE_OP(Momentum)
    .domain("ai.onnx.preview.training")
    .since(1)
    .input("R", {opforge::f32, opforge::f64})
    .input("T", {opforge::i64})
    .variadic_input("inputs", {opforge::f32, opforge::f64})
    .variadic_output("outputs")
    .required_attr("alpha", opforge::AttrType::Float)
    .required_attr("beta", opforge::AttrType::Float)
    .required_attr("mode", opforge::AttrType::String)
    .required_attr("norm_coefficient", opforge::AttrType::Float)
    .infer(optimizer_infer<3>)
    .compute(momentum_compute);
