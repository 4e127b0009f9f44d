// ml_svm.cpp: ai.onnx.ml's SVMRegressor: rho plus the coefficients times a kernel (LINEAR, POLY,
// RBF, SIGMOID) of the row and each support vector, or, with no support vectors, a linear model.
#include <cmath>
#include <string>
#include <vector>

#include "ml_common.h"

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
