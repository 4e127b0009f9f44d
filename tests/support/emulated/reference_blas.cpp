// reference_blas.cpp: the few OpenBLAS functions the built-in kernels call, as plain loops, so
// the emulated kernel harness links without an OpenBLAS built for its CPU (the harness tests
// opforge's kernels, not OpenBLAS).
#include <cblas.h>

namespace {

/// Element (i, j) of a row- or column-major matrix with leading dimension ld, transposed or not.
template <class T>
T at(const T* m, bool row_major, bool trans, blasint ld, blasint i, blasint j) {
  if (trans) {
    const blasint t = i;
    i = j, j = t;
  }
  return row_major ? m[i * ld + j] : m[j * ld + i];
}

template <class T>
void gemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, blasint m, blasint n, blasint k, T alpha,
          const T* a, blasint lda, const T* b, blasint ldb, T beta, T* c, blasint ldc) {
  const bool rm = order == CblasRowMajor;
  for (blasint i = 0; i < m; ++i)
    for (blasint j = 0; j < n; ++j) {
      double acc = 0;
      for (blasint p = 0; p < k; ++p)
        acc += double(at(a, rm, ta != CblasNoTrans, lda, i, p)) * double(at(b, rm, tb != CblasNoTrans, ldb, p, j));
      T& out = rm ? c[i * ldc + j] : c[j * ldc + i];
      out = T(alpha * acc + (beta == T(0) ? T(0) : beta * out));
    }
}

template <class T>
void gemv(CBLAS_ORDER order, CBLAS_TRANSPOSE trans, blasint m, blasint n, T alpha, const T* a, blasint lda,
          const T* x, blasint incx, T beta, T* y, blasint incy) {
  const bool rm = order == CblasRowMajor, t = trans != CblasNoTrans;
  const blasint rows = t ? n : m, cols = t ? m : n;
  for (blasint i = 0; i < rows; ++i) {
    double acc = 0;
    for (blasint j = 0; j < cols; ++j) acc += double(at(a, rm, t, lda, i, j)) * double(x[j * incx]);
    T& out = y[i * incy];
    out = T(alpha * acc + (beta == T(0) ? T(0) : beta * out));
  }
}

}  // namespace

extern "C" {

void scipy_openblas_set_num_threads(int) {}

void scipy_cblas_sgemm(const CBLAS_ORDER order, const CBLAS_TRANSPOSE ta, const CBLAS_TRANSPOSE tb,
                       const blasint m, const blasint n, const blasint k, const float alpha, const float* a,
                       const blasint lda, const float* b, const blasint ldb, const float beta, float* c,
                       const blasint ldc) {
  gemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void scipy_cblas_dgemm(const CBLAS_ORDER order, const CBLAS_TRANSPOSE ta, const CBLAS_TRANSPOSE tb,
                       const blasint m, const blasint n, const blasint k, const double alpha, const double* a,
                       const blasint lda, const double* b, const blasint ldb, const double beta, double* c,
                       const blasint ldc) {
  gemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void scipy_cblas_sgemv(const CBLAS_ORDER order, const CBLAS_TRANSPOSE trans, const blasint m, const blasint n,
                       const float alpha, const float* a, const blasint lda, const float* x, const blasint incx,
                       const float beta, float* y, const blasint incy) {
  gemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

void scipy_cblas_dgemv(const CBLAS_ORDER order, const CBLAS_TRANSPOSE trans, const blasint m, const blasint n,
                       const double alpha, const double* a, const blasint lda, const double* x, const blasint incx,
                       const double beta, double* y, const blasint incy) {
  gemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

}  // extern "C"
