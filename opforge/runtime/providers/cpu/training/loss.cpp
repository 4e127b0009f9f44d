// loss.cpp: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (opsets 12 and 13): per-element
// -weight[t] * input[n, t, d] over class axis 1, with ignore_index and none/sum/mean reduction;
// SoftmaxCrossEntropyLoss takes a log-softmax over the classes first and may return it.
#include <cmath>
#include <limits>
#include <string>

#include "common/float_io.h"

namespace {

using namespace opforge_cpu;

/// Input (N, C, d1...) and target (N, d1...) seen as (N, C, D) and (N, D).
struct Geometry {
  int64_t n = 0, classes = 0, inner = 1;
};

template <class Ctx> Geometry geometry(const Ctx& ctx) {
  Tensor x = ctx.input(0), t = ctx.input(1);
  OPFORGE_CHECK(x.ndim() >= 2, "input 'scores' must be (N, C, d1, ...), got rank ", x.ndim());
  OPFORGE_CHECK(t.ndim() == x.ndim() - 1, "input 'labels' must have rank ", x.ndim() - 1, " (N, d1, ...), got ",
                t.ndim());
  OPFORGE_CHECK(t.dtype() == OPF_INT32 || t.dtype() == OPF_INT64, "input 'labels' must be int32 or int64");
  Geometry g{x.size(0), x.size(1), 1};
  for (int d = 0; d < t.ndim(); ++d) {
    const int64_t want = d == 0 ? x.size(0) : x.size(d + 1);
    OPFORGE_CHECK(t.size(d) < 0 || want < 0 || t.size(d) == want, "input 'labels' dim ", d, " (", t.size(d),
                  ") differs from the scores' (", want, ")");
    if (d > 0) g.inner *= x.size(d + 1);
  }
  if (ctx.has_input(2)) {
    Tensor w = ctx.input(2);
    OPFORGE_CHECK(w.ndim() == 1 && (w.size(0) < 0 || g.classes < 0 || w.size(0) == g.classes),
                  "input 'weights' must be 1-D with one weight per class (", g.classes, ")");
    OPFORGE_CHECK(w.dtype() == x.dtype(), "input 'weights' must have the scores' dtype");
  }
  const std::string r = ctx.template attr<std::string>("reduction");
  OPFORGE_CHECK(r == "none" || r == "sum" || r == "mean", "attribute 'reduction' must be none, sum or mean, got '", r,
                "'");
  return g;
}

void infer(InferContext& ctx) {
  geometry(ctx);
  const int32_t dt = ctx.input(0).dtype();
  if (ctx.attr<std::string>("reduction") == "none") ctx.set_output(0, dt, ctx.input(1).sizes());
  else ctx.set_output(0, dt, {});
  if (ctx.num_outputs() > 1) ctx.set_output_like(1, 0);
}

/// log_softmax over the class axis of (N, C, D), in place.
void log_softmax_classes(std::vector<double>& x, const Geometry& g) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t d = 0; d < g.inner; ++d) {
      double* p = x.data() + n * g.classes * g.inner + d;
      double top = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < g.classes; ++c) top = std::max(top, p[c * g.inner]);
      double sum = 0;
      for (int64_t c = 0; c < g.classes; ++c) sum += std::exp(p[c * g.inner] - top);
      const double shift = top + std::log(sum);
      for (int64_t c = 0; c < g.classes; ++c) p[c * g.inner] -= shift;
    }
}

/// The losses of every (n, d) and the weight each counts with in a mean.
void gather_losses(const KernelContext& ctx, const std::vector<double>& logp, const Geometry& g,
                   std::vector<double>& loss, std::vector<double>& weight) {
  const std::vector<int64_t> labels = read_ints(ctx.input(1));
  const std::vector<double> w = ctx.has_input(2) ? read_floats<double>(ctx.input(2), "weights") : std::vector<double>{};
  const bool has_ignore = ctx.has_attr("ignore_index");
  const int64_t ignore = has_ignore ? ctx.attr<int64_t>("ignore_index") : 0;
  loss.assign(labels.size(), 0.0);
  weight.assign(labels.size(), 0.0);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t d = 0; d < g.inner; ++d) {
      const size_t at = size_t(n * g.inner + d);
      const int64_t t = labels[at];
      if (has_ignore && t == ignore) continue;
      OPFORGE_CHECK(t >= 0 && t < g.classes, "label ", t, " is outside [0, ", g.classes, ")");
      weight[at] = w.empty() ? 1.0 : w[size_t(t)];
      loss[at] = -weight[at] * logp[size_t((n * g.classes + t) * g.inner + d)];
    }
}

template <bool kSoftmax> void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx);
  Tensor x = ctx.input(0), out = ctx.output(0);
  std::vector<double> logp = read_floats<double>(x, "scores");
  if (kSoftmax) log_softmax_classes(logp, g);
  std::vector<double> loss, weight;
  gather_losses(ctx, logp, g, loss, weight);
  const std::string reduction = ctx.attr<std::string>("reduction");
  if (reduction == "none") {
    write_floats(loss.data(), out);
  } else {
    double total = 0, count = 0;
    for (size_t i = 0; i < loss.size(); ++i) total += loss[i], count += weight[i];
    // A mean over weights: with no weights and no ignore_index every element counts once.
    const bool weighted = ctx.has_input(2) || ctx.has_attr("ignore_index");
    const double value = reduction == "sum" ? total : total / (weighted ? count : double(loss.size()));
    write_floats(&value, out);
  }
  if (kSoftmax && ctx.num_outputs() > 1 && ctx.output(1).has_data()) write_floats(logp.data(), ctx.output(1));
}

}  // namespace

#define LOSS_FLOATS {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}

#define LOSS_OP(NAME, VERSION, SOFTMAX, ...)                                     \
  OPFORGE_OP(NAME)                                                               \
      .since(VERSION)                                                            \
      .input("scores", LOSS_FLOATS)                                              \
      .input("labels", {opforge::i32, opforge::i64})                             \
      .optional_input("weights", LOSS_FLOATS)                                    \
      .output("loss")                                                            \
      __VA_ARGS__                                                                \
      .optional_attr("ignore_index", opforge::AttrType::Int)                     \
      .attr("reduction", "mean")                                                 \
      .infer(infer)                                                              \
      .compute(compute<SOFTMAX>)

// Opset 13 widened the types onnx lists; this kernel takes the same ones from 12 on.
LOSS_OP(NegativeLogLikelihoodLoss, 12, false);
LOSS_OP(SoftmaxCrossEntropyLoss, 12, true, .optional_output("log_prob"));
