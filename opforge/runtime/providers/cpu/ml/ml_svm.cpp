// ml_svm.cpp: ai.onnx.ml's SVMRegressor and SVMClassifier: a kernel (LINEAR, POLY, RBF, SIGMOID)
// of the row and each support vector weighed by the coefficients, or, with no support vectors, a
// linear model. The classifier votes one-against-one and, given prob_a/prob_b, turns the pairwise
// Platt probabilities into class probabilities (libsvm's method 2), with onnxruntime's choices of
// labels and score columns. String class labels are refused when the node is bound (reference).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ml/ml_common.h"

namespace {

using namespace opforge_ml;
using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

enum class Kernel { Linear, Poly, Rbf, Sigmoid };

Kernel kernel_type(const std::string& name) {
  if (name == "LINEAR") return Kernel::Linear;
  if (name == "POLY") return Kernel::Poly;
  if (name == "RBF") return Kernel::Rbf;
  if (name == "SIGMOID") return Kernel::Sigmoid;
  throw opforge::Error("kernel_type '" + name + "' is not one of LINEAR, POLY, RBF, SIGMOID");
}

/// The kernel and its parameters (gamma, coef0, degree).
struct SvmKernel {
  Kernel type;
  float gamma = 0, coef0 = 0, degree = 0;

  /// k(a, b) over n features.
  float operator()(const float* a, const float* b, int64_t n) const {
    float s = 0;
    if (type == Kernel::Rbf) {
      for (int64_t i = 0; i < n; ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
      return std::exp(-gamma * s);
    }
    for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
    if (type == Kernel::Poly) return std::pow(gamma * s + coef0, degree);
    if (type == Kernel::Sigmoid) return std::tanh(gamma * s + coef0);
    return s;
  }
};

std::vector<float> floats(const KernelContext& ctx, const char* name) {
  return ctx.has_attr(name) ? ctx.attr<std::vector<float>>(name) : std::vector<float>();
}

/// onnxruntime's transform of n scores (one score: PROBIT only).
void transform_scores(PostTransform t, float* z, int64_t n) {
  if (n > 1 || t == PostTransform::Probit) apply(t, z, n);
}

template <class X> void regress(KernelContext& ctx) {
  int64_t rows, cols;
  rows_cols(ctx.input(0), &rows, &cols);
  const std::vector<float> coef = floats(ctx, "coefficients"), vectors = floats(ctx, "support_vectors"),
                           rho = floats(ctx, "rho"), params = floats(ctx, "kernel_params");
  const int64_t supports = ctx.attr<int64_t>("n_supports");
  OPFORGE_CHECK(rho.size() == 1, "rho must hold one value, got ", rho.size());
  SvmKernel k{supports > 0 ? kernel_type(ctx.attr<std::string>("kernel_type")) : Kernel::Linear};
  if (params.size() >= 3) k.gamma = params[0], k.coef0 = params[1], k.degree = params[2];
  const float* w = coef.data();  // one support vector of weights in the linear case
  if (supports > 0) {
    OPFORGE_CHECK(int64_t(vectors.size()) == supports * cols && int64_t(coef.size()) == supports, "support_vectors hold ",
                  vectors.size(), " values and coefficients ", coef.size(), "; ", supports, " support vectors of X's ",
                  cols, " features need ", supports * cols, " and ", supports);
  } else {
    OPFORGE_CHECK(int64_t(coef.size()) == cols, "coefficients hold ", coef.size(), " values for X's ", cols, " features");
  }
  const bool one_class = ctx.attr<int64_t>("one_class") != 0;
  const PostTransform t = post_transform(ctx.attr<std::string>("post_transform"));
  const X* x = ctx.input(0).data<X>();
  float* y = ctx.output(0).data<float>();
  ctx.parallel_for(rows, 16, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = b; r < e; ++r) {
      for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = static_cast<float>(x[r * cols + c]);
      float s = 0;
      if (supports > 0) {
        for (int64_t v = 0; v < supports; ++v) s += coef[size_t(v)] * k(row.data(), vectors.data() + v * cols, cols);
      } else {
        s = k(row.data(), w, cols);
      }
      s += rho[0];
      if (one_class) s = s > 0 ? 1.f : -1.f;
      y[r] = t == PostTransform::Probit ? probit(s) : s;
    }
  });
}

void regressor_compute(KernelContext& ctx) {
  switch (ctx.input(0).dtype()) {
    case OPF_FLOAT32: return regress<float>(ctx);
    case OPF_FLOAT64: return regress<double>(ctx);
    case OPF_INT64: return regress<int64_t>(ctx);
    default: return regress<int32_t>(ctx);
  }
}

/// Class probabilities p[0..k) from pairwise ones r (k x k, r[i][j] = P(i | i or j)), by the
/// fixed-point iteration of Wu, Lin and Weng (2004) that libsvm uses.
void pairwise_to_classes(int64_t k, const std::vector<float>& r, float* p) {
  std::vector<float> q(static_cast<size_t>(k * k), 0.f), qp(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    p[i] = 1.0f / float(k);
    for (int64_t j = 0; j < k; ++j) {
      if (j == i) continue;
      q[size_t(i * k + i)] += r[size_t(j * k + i)] * r[size_t(j * k + i)];
      q[size_t(i * k + j)] = j < i ? q[size_t(j * k + i)] : -r[size_t(j * k + i)] * r[size_t(i * k + j)];
    }
  }
  const float eps = 0.005f / float(k);
  for (int iteration = 0; iteration < 100; ++iteration) {
    float pqp = 0;
    for (int64_t i = 0; i < k; ++i) {
      qp[size_t(i)] = 0;
      for (int64_t j = 0; j < k; ++j) qp[size_t(i)] += q[size_t(i * k + j)] * p[j];
      pqp += p[i] * qp[size_t(i)];
    }
    float worst = 0;
    for (int64_t i = 0; i < k; ++i) worst = std::max(worst, std::fabs(qp[size_t(i)] - pqp));
    if (worst < eps) break;
    for (int64_t i = 0; i < k; ++i) {
      const float qii = q[size_t(i * k + i)], diff = (-qp[size_t(i)] + pqp) / qii;
      p[i] += diff;
      pqp = (pqp + diff * (diff * qii + 2 * qp[size_t(i)])) / (1 + diff) / (1 + diff);
      for (int64_t j = 0; j < k; ++j) {
        qp[size_t(j)] = (qp[size_t(j)] + diff * q[size_t(i * k + j)]) / (1 + diff);
        p[j] /= (1 + diff);
      }
    }
  }
}

/// An SVMClassifier node's attributes, checked against X's width.
struct Svc {
  std::vector<float> coef, vectors, rho, prob_a, prob_b;
  std::vector<int64_t> per_class, first, labels;
  SvmKernel kernel{Kernel::Linear};
  int64_t classes = 0, supports = 0;
  PostTransform transform = PostTransform::None;

  Svc(const KernelContext& ctx, int64_t cols)
      : coef(floats(ctx, "coefficients")), vectors(floats(ctx, "support_vectors")), rho(floats(ctx, "rho")),
        prob_a(floats(ctx, "prob_a")), prob_b(floats(ctx, "prob_b")),
        per_class(ctx.has_attr("vectors_per_class") ? ctx.attr<std::vector<int64_t>>("vectors_per_class") : std::vector<int64_t>()),
        labels(ctx.attr<std::vector<int64_t>>("classlabels_ints")) {
    classes = int64_t(labels.size());
    OPFORGE_CHECK(classes >= 1 && prob_a.size() == prob_b.size(), "classlabels_ints must name the classes and prob_a, prob_b "
                  "have one value per pair of classes");
    for (int64_t n : per_class) first.push_back(supports), supports += n;
    const std::vector<float> params = floats(ctx, "kernel_params");
    if (supports > 0) {
      kernel.type = kernel_type(ctx.attr<std::string>("kernel_type"));
      if (params.size() >= 3) kernel.gamma = params[0], kernel.coef0 = params[1], kernel.degree = params[2];
      OPFORGE_CHECK(int64_t(per_class.size()) == classes && int64_t(vectors.size()) == supports * cols &&
                        int64_t(coef.size()) == (classes - 1) * supports && int64_t(rho.size()) == pairs(),
                    "vectors_per_class, support_vectors, coefficients and rho do not fit ", classes, " classes, ",
                    supports, " support vectors and X's ", cols, " features");
      OPFORGE_CHECK(prob_a.empty() || int64_t(prob_a.size()) == pairs(), "prob_a must hold one value per pair of classes");
    } else {
      OPFORGE_CHECK(int64_t(coef.size()) == classes * cols && !rho.empty(), "coefficients hold ", coef.size(),
                    " values; ", classes, " classes of X's ", cols, " features need ", classes * cols);
    }
    transform = post_transform(ctx.attr<std::string>("post_transform"));
  }
  int64_t pairs() const { return classes * (classes - 1) / 2; }
  bool svc() const { return supports > 0; }
  bool proba() const { return svc() && !prob_a.empty(); }
  /// Z's columns: one per class, or per pair of classes (two for two) when voting without probabilities.
  int64_t columns() const { return svc() && !proba() ? (classes > 2 ? pairs() : 2) : classes; }
};

/// One row: its label and scores z (Svc::columns() of them).
void classify_row(const Svc& m, const float* x, int64_t cols, int64_t* label, float* z) {
  const int64_t k = m.classes;
  if (!m.svc()) {  // one linear score per class, all offset by rho[0]
    for (int64_t c = 0; c < k; ++c) z[c] = m.kernel(x, m.coef.data() + c * cols, cols) + m.rho[0];
    const int64_t best = std::max_element(z, z + k) - z;
    *label = k == 2 && ((z[best] >= 0.5f && std::all_of(m.coef.begin(), m.coef.end(), [](float c) { return c >= 0; })) ||
                        (z[best] > 0 && !std::all_of(m.coef.begin(), m.coef.end(), [](float c) { return c >= 0; })))
                 ? m.labels[1] : m.labels[size_t(best)];
    transform_scores(m.transform, z, k);
    return;
  }
  std::vector<float> kern(size_t(m.supports)), pair_scores(size_t(m.pairs()));
  for (int64_t v = 0; v < m.supports; ++v) kern[size_t(v)] = m.kernel(x, m.vectors.data() + v * cols, cols);
  std::vector<int64_t> votes(size_t(k), 0);
  int64_t at = 0;
  for (int64_t i = 0; i < k - 1; ++i) {
    for (int64_t j = i + 1; j < k; ++j, ++at) {
      double sum = 0;  // class i's vectors with row j - 1 of coefficients, class j's with row i
      for (int64_t v = m.first[size_t(i)]; v < m.first[size_t(i)] + m.per_class[size_t(i)]; ++v)
        sum += m.coef[size_t((j - 1) * m.supports + v)] * kern[size_t(v)];
      for (int64_t v = m.first[size_t(j)]; v < m.first[size_t(j)] + m.per_class[size_t(j)]; ++v)
        sum += m.coef[size_t(i * m.supports + v)] * kern[size_t(v)];
      sum += m.rho[size_t(at)];
      pair_scores[size_t(at)] = float(sum);
      ++votes[size_t(sum > 0 ? i : j)];
    }
  }
  *label = m.labels[size_t(std::max_element(votes.begin(), votes.end()) - votes.begin())];
  if (m.proba()) {
    std::vector<float> r(size_t(k * k), 0.f);
    at = 0;
    for (int64_t i = 0; i < k - 1; ++i) {
      for (int64_t j = i + 1; j < k; ++j, ++at) {
        const float p = 1 - logistic(pair_scores[size_t(at)] * m.prob_a[size_t(at)] + m.prob_b[size_t(at)]);
        const float clamped = std::min(std::max(p, 1.0e-7f), 1 - 1.0e-7f);
        r[size_t(i * k + j)] = clamped;
        r[size_t(j * k + i)] = 1 - clamped;
      }
    }
    pairwise_to_classes(k, r, z);
    transform_scores(m.transform, z, k);
  } else if (k > 2) {
    std::copy(pair_scores.begin(), pair_scores.end(), z);
    transform_scores(m.transform, z, m.pairs());
  } else if (m.transform == PostTransform::Probit) {
    z[0] = probit(pair_scores[0]);
    z[1] = 0;
  } else if (m.transform == PostTransform::None) {  // the one score, both ways
    z[0] = -pair_scores[0];
    z[1] = pair_scores[0];
  } else if (m.transform == PostTransform::Logistic) {
    z[0] = logistic(-pair_scores[0]);
    z[1] = logistic(pair_scores[0]);
  } else {
    z[0] = 1 - pair_scores[0];
    z[1] = pair_scores[0];
  }
}

template <class X> void classify(KernelContext& ctx) {
  int64_t rows, cols;
  rows_cols(ctx.input(0), &rows, &cols);
  const Svc m(ctx, cols);
  const X* x = ctx.input(0).data<X>();
  int64_t* y = ctx.output(0).data<int64_t>();
  float* z = ctx.output(1).data<float>();
  ctx.parallel_for(rows, 16, [&](int64_t b, int64_t e) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = b; r < e; ++r) {
      for (int64_t c = 0; c < cols; ++c) row[size_t(c)] = static_cast<float>(x[r * cols + c]);
      classify_row(m, row.data(), cols, y + r, z + r * m.columns());
    }
  });
}

void classifier_compute(KernelContext& ctx) {
  switch (ctx.input(0).dtype()) {
    case OPF_FLOAT32: return classify<float>(ctx);
    case OPF_FLOAT64: return classify<double>(ctx);
    case OPF_INT64: return classify<int64_t>(ctx);
    default: return classify<int32_t>(ctx);
  }
}

void classifier_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() == 1 || x.ndim() == 2, "X must be (N, C) or (C), got rank ", x.ndim());
  const int64_t classes = int64_t(ctx.attr<std::vector<int64_t>>("classlabels_ints").size());
  int64_t supports = 0;
  if (ctx.has_attr("vectors_per_class"))
    for (int64_t n : ctx.attr<std::vector<int64_t>>("vectors_per_class")) supports += n;
  const bool proba = ctx.has_attr("prob_a") && !ctx.attr<std::vector<float>>("prob_a").empty();
  const int64_t columns = supports > 0 && !proba ? (classes > 2 ? classes * (classes - 1) / 2 : 2) : classes;
  const int64_t rows = x.ndim() == 1 ? 1 : x.size(0);
  ctx.set_output(0, opforge::i64, {rows});
  ctx.set_output(1, opforge::f32, {rows, columns});
}

void regressor_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() == 1 || x.ndim() == 2, "X must be (N, C) or (C), got rank ", x.ndim());
  ctx.set_output(0, opforge::f32, {x.ndim() == 1 ? 1 : x.size(0), 1});
}

}  // namespace

using opforge::AttrType;

OPFORGE_OP(SVMRegressor)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", {opforge::f32, opforge::f64, opforge::i64, opforge::i32})
    .output("Y", {opforge::f32})
    .optional_attr("coefficients", AttrType::Floats)
    .optional_attr("kernel_params", AttrType::Floats)
    .attr("kernel_type", "LINEAR")
    .attr("n_supports", int64_t(0))
    .attr("one_class", int64_t(0))
    .attr("post_transform", "NONE")
    .optional_attr("rho", AttrType::Floats)
    .optional_attr("support_vectors", AttrType::Floats)
    .infer(regressor_infer)
    .compute(regressor_compute);

OPFORGE_OP(SVMClassifier)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", {opforge::f32, opforge::f64, opforge::i64, opforge::i32})
    .output("Y", {opforge::i64})
    .output("Z", {opforge::f32})
    .required_attr("classlabels_ints", AttrType::Ints)
    .optional_attr("coefficients", AttrType::Floats)
    .optional_attr("kernel_params", AttrType::Floats)
    .attr("kernel_type", "LINEAR")
    .attr("post_transform", "NONE")
    .optional_attr("prob_a", AttrType::Floats)
    .optional_attr("prob_b", AttrType::Floats)
    .optional_attr("rho", AttrType::Floats)
    .optional_attr("support_vectors", AttrType::Floats)
    .optional_attr("vectors_per_class", AttrType::Ints)
    .infer(classifier_infer)
    .compute(classifier_compute);
