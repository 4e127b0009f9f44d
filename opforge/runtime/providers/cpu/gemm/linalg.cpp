// linalg.cpp: Det, the determinant of each square matrix in a batch (LU with partial pivoting in
// double precision).
#include <cmath>
#include <utility>

#include "common/elements.h"

namespace opforge_cpu {
namespace {

void det_infer(InferContext& ctx) {
  const Shape x = ctx.input(0).sizes();
  OPFORGE_CHECK(x.size() >= 2 && x[x.size() - 1] == x[x.size() - 2], "input 'X' ", x.size() >= 2 ? "" : "(a scalar) ",
                "must be a batch of square matrices [..., M, M]");
  ctx.set_output(0, ctx.input(0).dtype(), Shape(x.begin(), x.end() - 2));
}

/// The determinant of the m x m row-major matrix `a` (overwritten by its LU factors).
double determinant(double* a, int64_t m) {
  double det = 1;
  for (int64_t k = 0; k < m; ++k) {
    int64_t pivot = k;
    for (int64_t r = k + 1; r < m; ++r)
      if (std::fabs(a[r * m + k]) > std::fabs(a[pivot * m + k])) pivot = r;
    if (a[pivot * m + k] == 0) return 0;
    if (pivot != k) {
      for (int64_t c = 0; c < m; ++c) std::swap(a[k * m + c], a[pivot * m + c]);
      det = -det;
    }
    det *= a[k * m + k];
    for (int64_t r = k + 1; r < m; ++r) {
      const double f = a[r * m + k] / a[k * m + k];
      for (int64_t c = k + 1; c < m; ++c) a[r * m + c] -= f * a[k * m + c];
    }
  }
  return det;
}

void det_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const int64_t m = x.sizes().back(), count = ctx.output(0).numel();
  std::vector<double> a = read_floats<double>(x, "input 'X'"), det(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) det[size_t(i)] = determinant(a.data() + i * m * m, m);
  write_floats(det.data(), ctx.output(0));
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Det)
    .since(11)
    .input("X", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .infer(det_infer)
    .compute(det_compute);
