// ml_common.h: what the ai.onnx.ml kernels share: post transforms computed as onnxruntime's
// ml_common.h computes them (same operations in the same order, so results match it bit for bit
// on one thread), and reading the string-named modes of their attributes.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "common/common.h"

namespace opforge_ml {

/// A score transform, as the ai.onnx.ml ops name them.
enum class PostTransform { None, Softmax, Logistic, SoftmaxZero, Probit };

inline PostTransform post_transform(const std::string& name) {
  if (name == "NONE") return PostTransform::None;
  if (name == "SOFTMAX") return PostTransform::Softmax;
  if (name == "LOGISTIC") return PostTransform::Logistic;
  if (name == "SOFTMAX_ZERO") return PostTransform::SoftmaxZero;
  if (name == "PROBIT") return PostTransform::Probit;
  throw opforge::Error("post_transform '" + name + "' is not one of NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT");
}

// onnxruntime's build does not fuse a * b + c into one rounding (an FMA); -march=native would,
// and the results would differ in the last bit.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

/// 1 / (1 + e^-x), computed on |x| so it never overflows.
inline float logistic(float x) {
  const float v = 1 / (1 + std::exp(-std::abs(x)));
  return x < 0 ? 1 - v : v;
}

/// Winitzki's approximation of erf^-1, as onnxruntime computes it.
inline float erf_inv(float x) {
  const float sign = x < 0 ? -1.0f : 1.0f;
  x = (1 - x) * (1 + x);
  const float log = std::log(x);
  const float v = 2 / (3.14159265f * 0.147f) + 0.5f * log;
  const float v2 = 1 / 0.147f * log;
  const float v3 = -v + std::sqrt(v * v - v2);
  return sign * std::sqrt(v3);
}

inline float probit(float x) { return 1.41421356f * erf_inv(x * 2 - 1); }

/// Softmax of v[0..n) in place, the maximum subtracted first; in float whatever T is.
template <class T> void softmax(T* v, int64_t n) {
  float top = -std::numeric_limits<float>::max();
  for (int64_t i = 0; i < n; ++i) top = float(v[i]) > top ? float(v[i]) : top;
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = std::exp(float(v[i]) - top);
    sum += float(v[i]);
  }
  for (int64_t i = 0; i < n; ++i) v[i] = float(v[i]) / sum;
}

/// Softmax that leaves zeros (|v| <= 1e-7) as zeros: exp(0) is not zero. The last division is
/// in T, as onnxruntime divides.
template <class T> void softmax_zero(T* v, int64_t n) {
  float top = -std::numeric_limits<float>::max();
  for (int64_t i = 0; i < n; ++i) top = float(v[i]) > top ? float(v[i]) : top;
  const float exp_neg_top = std::exp(-top);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    if (float(v[i]) > 0.0000001f || float(v[i]) < -0.0000001f) {
      v[i] = std::exp(float(v[i]) - top);
      sum += float(v[i]);
    } else {
      v[i] = float(v[i]) * exp_neg_top;
    }
  }
  for (int64_t i = 0; i < n; ++i) v[i] /= sum;
}

/// Applies `transform` to the n scores of one row in place.
template <class T> void apply(PostTransform transform, T* v, int64_t n) {
  switch (transform) {
    case PostTransform::None: return;
    case PostTransform::Softmax: softmax(v, n); return;
    case PostTransform::SoftmaxZero: softmax_zero(v, n); return;
    case PostTransform::Logistic:
      for (int64_t i = 0; i < n; ++i) v[i] = logistic(float(v[i]));
      return;
    case PostTransform::Probit:
      for (int64_t i = 0; i < n; ++i) v[i] = probit(float(v[i]));
      return;
  }
}

#pragma GCC pop_options

/// Rows and columns of a feature input: (N, C), or one row (C).
inline void rows_cols(const opforge::Tensor& x, int64_t* rows, int64_t* cols) {
  OPFORGE_CHECK(x.ndim() == 1 || x.ndim() == 2, "X must be (N, C) or (C), got rank ", x.ndim());
  *rows = x.ndim() == 1 ? 1 : x.size(0);
  *cols = x.size(-1);
}

}  // namespace opforge_ml
