// ml_features.cpp: ai.onnx.ml's numeric feature transforms as sklearn pipelines export them:
// Scaler, Normalizer, Binarizer, Imputer, ArrayFeatureExtractor and FeatureVectorizer, each
// computed as onnxruntime computes it (same types and order of operations).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ml/ml_common.h"

namespace {

using namespace opforge_ml;
using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

#define OPFORGE_ML_NUMERIC {opforge::f32, opforge::f64, opforge::i64, opforge::i32}

/// Calls F<X>::go(ctx) for input 0's dtype (one of OPFORGE_ML_NUMERIC).
template <template <class> class F> void by_dtype(KernelContext& ctx) {
  switch (ctx.input(0).dtype()) {
    case OPF_FLOAT32: return F<float>::go(ctx);
    case OPF_FLOAT64: return F<double>::go(ctx);
    case OPF_INT64: return F<int64_t>::go(ctx);
    default: return F<int32_t>::go(ctx);
  }
}

/// Output 0: float, input 0's shape.
void float_like_input(InferContext& ctx) { ctx.set_output(0, opforge::f32, ctx.input(0).sizes()); }

// ---- Scaler: (x - offset) * scale, per feature or one pair for all

template <class X> struct Scale {
  static void go(KernelContext& ctx) {
    const Tensor in = ctx.input(0);
    const int64_t cols = in.ndim() == 0 ? 1 : in.size(-1), total = in.numel();
    const std::vector<float> offset = ctx.attr<std::vector<float>>("offset"), scale = ctx.attr<std::vector<float>>("scale");
    const bool per_feature = int64_t(offset.size()) == cols && int64_t(scale.size()) == cols;
    OPFORGE_CHECK(per_feature || (offset.size() == 1 && scale.size() == 1), "offset and scale must both hold one value or ",
                  cols, " (one per feature); they hold ", offset.size(), " and ", scale.size());
    const X* x = in.data<X>();
    float* y = ctx.output(0).data<float>();
    ctx.parallel_for(total, 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t k = per_feature ? i % cols : 0;
        y[i] = static_cast<float>((x[i] - offset[size_t(k)]) * scale[size_t(k)]);
      }
    });
  }
};

void scaler_compute(KernelContext& ctx) { by_dtype<Scale>(ctx); }

// ---- Normalizer: each row divided by its MAX, L1 or L2 norm

template <class X> struct Normalize {
  static void go(KernelContext& ctx) {
    int64_t rows, cols;
    rows_cols(ctx.input(0), &rows, &cols);
    const std::string norm = ctx.attr<std::string>("norm");
    OPFORGE_CHECK(norm == "MAX" || norm == "L1" || norm == "L2", "norm '", norm, "' is not one of MAX, L1, L2");
    const X* x = ctx.input(0).data<X>();
    float* y = ctx.output(0).data<float>();
    ctx.parallel_for(rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, cols)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) row(norm[1], x + r * cols, y + r * cols, cols);
    });
  }

  /// One row; kind is norm[1]: 'A' (MAX), '1' or '2'. Squares are summed without FMAs, as
  /// onnxruntime sums them.
  __attribute__((optimize("fp-contract=off"))) static void row(char kind, const X* in, float* out, int64_t n) {
    if (kind == 'A') {
      float top = std::numeric_limits<float>::lowest();
      for (int64_t i = 0; i < n; ++i) top = std::max(top, static_cast<float>(in[i]));
      for (int64_t i = 0; i < n; ++i) out[i] = top != 0.f ? static_cast<float>(in[i]) / top : static_cast<float>(in[i]);
    } else if (kind == '1') {
      float sum = 0.f;
      for (int64_t i = 0; i < n; ++i) sum += static_cast<float>(std::abs(in[i]));
      for (int64_t i = 0; i < n; ++i) out[i] = sum != 0.f ? static_cast<float>(in[i]) / sum : static_cast<float>(in[i]);
    } else {
      float sum = 0.f;
      for (int64_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(in[i]);
        out[i] = v * v;
        sum += out[i];
      }
      for (int64_t i = 0; i < n; ++i) {
        const float root = std::sqrt(out[i] / sum);
        out[i] = sum != 0.f ? (in[i] < 0 ? -root : root) : static_cast<float>(in[i]);
      }
    }
  }
};

void normalizer_compute(KernelContext& ctx) { by_dtype<Normalize>(ctx); }

// ---- Binarizer: 1 above the threshold, else 0, in X's type

template <class X> struct Binarize {
  static void go(KernelContext& ctx) {
    const Tensor in = ctx.input(0);
    const float threshold = ctx.attr<float>("threshold");
    const X* x = in.data<X>();
    X* y = ctx.output(0).data<X>();
    ctx.parallel_for(in.numel(), 1 << 15, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = x[i] > threshold ? X(1) : X(0);
    });
  }
};

void binarizer_compute(KernelContext& ctx) { by_dtype<Binarize>(ctx); }

// ---- Imputer: replaced values (NaN, or one given value) become the feature's imputed value

template <class X> void impute(KernelContext& ctx, X replaced, const std::vector<X>& imputed) {
  const Tensor in = ctx.input(0);
  const int64_t cols = in.ndim() == 0 ? 1 : in.size(-1);
  OPFORGE_CHECK(int64_t(imputed.size()) == cols || imputed.size() == 1, "the imputed values hold ", imputed.size(),
                " values; X has ", cols, " features (give one per feature, or one for all)");
  const X* x = in.data<X>();
  X* y = ctx.output(0).data<X>();
  const bool nan = std::isnan(double(replaced));
  ctx.parallel_for(in.numel(), 1 << 15, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const bool hit = nan ? std::isnan(double(x[i])) : x[i] == replaced;
      y[i] = hit ? imputed[imputed.size() == 1 ? 0 : size_t(i % cols)] : x[i];
    }
  });
}

void imputer_compute(KernelContext& ctx) {
  if (ctx.input(0).dtype() == OPF_FLOAT32) {
    OPFORGE_CHECK(ctx.has_attr("imputed_value_floats"), "imputed_value_floats must be given for float input");
    impute<float>(ctx, ctx.attr<float>("replaced_value_float"), ctx.attr<std::vector<float>>("imputed_value_floats"));
  } else {
    OPFORGE_CHECK(ctx.has_attr("imputed_value_int64s"), "imputed_value_int64s must be given for int64 input");
    impute<int64_t>(ctx, ctx.attr<int64_t>("replaced_value_int64"), ctx.attr<std::vector<int64_t>>("imputed_value_int64s"));
  }
}

// ---- ArrayFeatureExtractor: the last axis gathered at the indices Y

std::vector<int64_t> extracted_shape(const Tensor& x, int64_t count) {
  if (x.ndim() <= 1) return {1, count};
  std::vector<int64_t> shape = x.sizes();
  shape.back() = count;
  return shape;
}

void extractor_infer(InferContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.input(1);
  ctx.set_output(0, x.dtype(), extracted_shape(x, y.numel()));
}

void extractor_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), idx = ctx.input(1);
  const int64_t stride = x.ndim() == 0 ? 1 : x.size(-1), count = idx.numel();
  const int64_t rows = stride == 0 ? 0 : x.numel() / stride, item = opforge::dtype_size(x.dtype());
  const int64_t* at = idx.data<int64_t>();
  for (int64_t j = 0; j < count; ++j)
    OPFORGE_CHECK(at[j] >= 0 && at[j] < stride, "index ", at[j], " in Y is out of range for X's last axis of ", stride);
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(ctx.output(0).raw());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < count; ++j)
      std::memcpy(dst + (r * count + j) * item, src + (r * stride + at[j]) * item, size_t(item));
}

// ---- FeatureVectorizer: inputs' features side by side, each cut or zero-padded to its width

int64_t vector_rows(const Tensor& t) { return t.ndim() <= 1 ? 1 : t.size(0); }

void vectorizer_infer(InferContext& ctx) {
  const std::vector<int64_t> dims = ctx.attr<std::vector<int64_t>>("inputdimensions");
  OPFORGE_CHECK(int64_t(dims.size()) == ctx.num_inputs(), "inputdimensions names ", dims.size(), " widths for ",
                ctx.num_inputs(), " inputs");
  int64_t width = 0;
  for (int64_t d : dims) {
    OPFORGE_CHECK(d >= 0, "inputdimensions holds a negative width ", d);
    width += d;
  }
  ctx.set_output(0, opforge::f32, {vector_rows(ctx.input(0)), width});
}

template <class X> void place(const Tensor& t, int64_t width, int64_t offset, int64_t total, int64_t rows, float* y) {
  const int64_t cols = rows == 0 ? 0 : t.numel() / rows, copied = std::min(cols, width);
  const X* x = t.data<X>();
  for (int64_t r = 0; r < rows; ++r) {
    float* out = y + r * total + offset;
    for (int64_t c = 0; c < copied; ++c) out[c] = static_cast<float>(x[r * cols + c]);
    for (int64_t c = copied; c < width; ++c) out[c] = 0.f;
  }
}

void vectorizer_compute(KernelContext& ctx) {
  const std::vector<int64_t> dims = ctx.attr<std::vector<int64_t>>("inputdimensions");
  const Tensor out = ctx.output(0);
  const int64_t rows = out.size(0), total = out.size(1);
  float* y = out.data<float>();
  int64_t offset = 0;
  for (int i = 0; i < ctx.num_inputs(); ++i) {
    const Tensor t = ctx.input(i);
    OPFORGE_CHECK(vector_rows(t) == rows, "input #", i, " has ", vector_rows(t), " rows; input #0 has ", rows);
    switch (t.dtype()) {
      case OPF_FLOAT32: place<float>(t, dims[size_t(i)], offset, total, rows, y); break;
      case OPF_FLOAT64: place<double>(t, dims[size_t(i)], offset, total, rows, y); break;
      case OPF_INT64: place<int64_t>(t, dims[size_t(i)], offset, total, rows, y); break;
      default: place<int32_t>(t, dims[size_t(i)], offset, total, rows, y); break;
    }
    offset += dims[size_t(i)];
  }
}

}  // namespace

using opforge::AttrType;

OPFORGE_OP(Scaler)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", OPFORGE_ML_NUMERIC)
    .output("Y", {opforge::f32})
    .attr("offset", std::initializer_list<float>{})
    .attr("scale", std::initializer_list<float>{})
    .infer(float_like_input)
    .compute(scaler_compute);

OPFORGE_OP(Normalizer)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", OPFORGE_ML_NUMERIC)
    .output("Y", {opforge::f32})
    .attr("norm", "MAX")
    .infer(float_like_input)
    .compute(normalizer_compute);

OPFORGE_OP(Binarizer)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", OPFORGE_ML_NUMERIC)
    .output("Y")
    .attr("threshold", 0.0f)
    .infer(opforge::same_as_input0)
    .compute(binarizer_compute);

OPFORGE_OP(Imputer)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", {opforge::f32, opforge::i64})
    .output("Y")
    .optional_attr("imputed_value_floats", AttrType::Floats)
    .optional_attr("imputed_value_int64s", AttrType::Ints)
    .attr("replaced_value_float", 0.0f)
    .attr("replaced_value_int64", int64_t(0))
    .infer(opforge::same_as_input0)
    .compute(imputer_compute);

OPFORGE_OP(ArrayFeatureExtractor)
    .domain("ai.onnx.ml")
    .since(1)
    .input("X", OPFORGE_ML_NUMERIC)
    .input("Y", {opforge::i64})
    .output("Z")
    .infer(extractor_infer)
    .compute(extractor_compute);

OPFORGE_OP(FeatureVectorizer)
    .domain("ai.onnx.ml")
    .since(1)
    .variadic_input("X", OPFORGE_ML_NUMERIC)
    .output("Y", {opforge::f32})
    .required_attr("inputdimensions", AttrType::Ints)
    .infer(vectorizer_infer)
    .compute(vectorizer_compute);
