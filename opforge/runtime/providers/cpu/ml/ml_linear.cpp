// ml_linear.cpp: ai.onnx.ml's LinearRegressor and LinearClassifier: scores = X * coefficients^T
// + intercepts, then the label and post transform as onnxruntime chooses them (its binary case
// of one score and two labels included). String class labels are not offered (a string tensor
// cannot cross the op ABI): such a node is refused when bound and runs on the reference provider.
#include <vector>

#include "ml/ml_common.h"

namespace {

using namespace opforge_ml;
using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

std::vector<float> floats(const KernelContext& ctx, const char* name) {
  return ctx.has_attr(name) ? ctx.attr<std::vector<float>>(name) : std::vector<float>();
}

/// Scores of rows [begin, end): `targets` dot products per row, plus the intercepts.
template <class X>
void linear_scores(const X* x, int64_t cols, const std::vector<float>& coef, const std::vector<float>& intercepts,
                   int64_t targets, int64_t begin, int64_t end, float* out) {
  for (int64_t r = begin; r < end; ++r) {
    const X* row = x + r * cols;
    for (int64_t t = 0; t < targets; ++t) {
      const float* w = coef.data() + t * cols;
      float s = 0.f;
      for (int64_t c = 0; c < cols; ++c) s += float(row[c]) * w[c];
      out[r * targets + t] = intercepts.empty() ? s : s + intercepts[size_t(t)];
    }
  }
}

/// The coefficient matrix checked against X's columns: `targets` rows of `cols`.
void check_coefficients(const std::vector<float>& coef, const std::vector<float>& intercepts, int64_t targets,
                        int64_t cols) {
  OPFORGE_CHECK(targets >= 1 && int64_t(coef.size()) == targets * cols, "coefficients hold ", coef.size(),
                " values; ", targets, " targets of X's ", cols, " features need ", targets * cols);
  OPFORGE_CHECK(intercepts.empty() || int64_t(intercepts.size()) == targets, "intercepts hold ", intercepts.size(),
                " values for ", targets, " targets");
}

/// The transform onnxruntime applies to rows of `n` scores (a single score: PROBIT only).
void transform_rows(PostTransform t, float* s, int64_t rows, int64_t n) {
  if (n == 1 && t != PostTransform::Probit) return;
  for (int64_t r = 0; r < rows; ++r) apply(t, s + r * n, n);
}

template <class X> void regressor_run(KernelContext& ctx) {
  int64_t rows, cols;
  rows_cols(ctx.input(0), &rows, &cols);
  const int64_t targets = ctx.attr<int64_t>("targets");
  const std::vector<float> coef = floats(ctx, "coefficients"), intercepts = floats(ctx, "intercepts");
  check_coefficients(coef, intercepts, targets, cols);
  const PostTransform t = post_transform(ctx.attr<std::string>("post_transform"));
  const X* x = ctx.input(0).data<X>();
  float* y = ctx.output(0).data<float>();
  ctx.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols * targets)), [&](int64_t b, int64_t e) {
    linear_scores(x, cols, coef, intercepts, targets, b, e, y);
    transform_rows(t, y + b * targets, e - b, targets);
  });
}

/// Labels and probabilities of rows [b, e) from their raw scores in z (n per row, or one per
/// row laid out at z[r] when onnxruntime's binary case widens them to two).
void classify(const std::vector<int64_t>& labels, PostTransform t, int64_t n, bool second, const float* s,
              int64_t b, int64_t e, int64_t* y, float* z) {
  for (int64_t r = b; r < e; ++r) {
    const float* row = s + r * n;
    if (n == 1) {
      y[r] = labels.size() == 2 ? labels[row[0] > 0 ? 1 : 0] : (row[0] > 0 ? 1 : 0);
    } else {
      int64_t best = 0;
      for (int64_t j = 1; j < n; ++j) best = row[j] > row[best] ? j : best;
      y[r] = labels[size_t(best)];
    }
  }
  if (!second) {
    transform_rows(t, z + b * n, e - b, n);
    return;
  }
  for (int64_t r = b; r < e; ++r) {  // one score p becomes (1 - p, p), its logistic both ways, or its probit
    const float p = s[r];
    if (t == PostTransform::Logistic) {
      z[2 * r] = logistic(-p);
      z[2 * r + 1] = logistic(p);
    } else {
      z[2 * r] = t == PostTransform::Probit ? probit(p) : 1.f - p;
      z[2 * r + 1] = t == PostTransform::Probit ? 0.f : p;
    }
  }
}

template <class X> void classifier_run(KernelContext& ctx) {
  int64_t rows, cols;
  rows_cols(ctx.input(0), &rows, &cols);
  const std::vector<float> coef = floats(ctx, "coefficients"), intercepts = floats(ctx, "intercepts");
  const std::vector<int64_t> labels = ctx.attr<std::vector<int64_t>>("classlabels_ints");
  const int64_t n = int64_t(intercepts.size());
  check_coefficients(coef, intercepts, n, cols);
  const bool second = n == 1 && labels.size() == 2;
  OPFORGE_CHECK(n == 1 || int64_t(labels.size()) == n, "classlabels_ints names ", labels.size(), " classes for ", n,
                " intercepts");
  const PostTransform t = post_transform(ctx.attr<std::string>("post_transform"));
  const X* x = ctx.input(0).data<X>();
  int64_t* y = ctx.output(0).data<int64_t>();
  float* z = ctx.output(1).data<float>();
  std::vector<float> single(second ? size_t(rows) : 0);  // the one score per row, widened later
  float* s = second ? single.data() : z;
  ctx.parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols * n)), [&](int64_t b, int64_t e) {
    linear_scores(x, cols, coef, intercepts, n, b, e, s);
    classify(labels, t, n, second, s, b, e, y, z);
  });
}

template <template <class> class Run> void by_dtype(KernelContext& ctx) {
  switch (ctx.input(0).dtype()) {
    case OPF_FLOAT32: return Run<float>::go(ctx);
    case OPF_FLOAT64: return Run<double>::go(ctx);
    case OPF_INT64: return Run<int64_t>::go(ctx);
    default: return Run<int32_t>::go(ctx);
  }
}

template <class X> struct Regress { static void go(KernelContext& ctx) { regressor_run<X>(ctx); } };
template <class X> struct Classify { static void go(KernelContext& ctx) { classifier_run<X>(ctx); } };

void regressor_compute(KernelContext& ctx) { by_dtype<Regress>(ctx); }
void classifier_compute(KernelContext& ctx) { by_dtype<Classify>(ctx); }

int64_t rows_of(const InferContext& ctx) {
  const Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() == 1 || x.ndim() == 2, "X must be (N, C) or (C), got rank ", x.ndim());
  return x.ndim() == 1 ? 1 : x.size(0);
}

void regressor_infer(InferContext& ctx) {
  ctx.set_output(0, opforge::f32, {rows_of(ctx), ctx.attr<int64_t>("targets")});
}

void classifier_infer(InferContext& ctx) {
  const int64_t rows = rows_of(ctx);
  const int64_t n = ctx.has_attr("intercepts") ? int64_t(ctx.attr<std::vector<float>>("intercepts").size()) : 0;
  const int64_t labels = int64_t(ctx.attr<std::vector<int64_t>>("classlabels_ints").size());
  ctx.set_output(0, opforge::i64, {rows});
  ctx.set_output(1, opforge::f32, {rows, n == 1 && labels == 2 ? 2 : n});
}

}  // namespace

using opforge::AttrType;

OPFORGE_OP(LinearRegressor)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", {opforge::f32, opforge::f64, opforge::i64, opforge::i32})
    .output("Y", {opforge::f32})
    .optional_attr("coefficients", AttrType::Floats)
    .optional_attr("intercepts", AttrType::Floats)
    .attr("post_transform", "NONE")
    .attr("targets", int64_t(1))
    .infer(regressor_infer)
    .compute(regressor_compute);

OPFORGE_OP(LinearClassifier)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", {opforge::f32, opforge::f64, opforge::i64, opforge::i32})
    .output("Y", {opforge::i64})
    .output("Z", {opforge::f32})
    .required_attr("coefficients", AttrType::Floats)
    .optional_attr("intercepts", AttrType::Floats)
    .required_attr("classlabels_ints", AttrType::Ints)
    .attr("multi_class", int64_t(0))
    .attr("post_transform", "NONE")
    .infer(classifier_infer)
    .compute(classifier_compute);
