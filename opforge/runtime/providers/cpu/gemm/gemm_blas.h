// gemm_blas.h: row-major GEMM on OpenBLAS (scipy-openblas32) for float and double, shared by
// the Gemm, MatMul, Conv and ConvTranspose kernels.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/common.h"
#include "common/kernel_paths.h"
#include "gemm/gemv_f32.h"

namespace opforge_nn {

/// Throws unless every dimension fits OpenBLAS's 32-bit integers.
inline void check_blas_dims(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMax = std::numeric_limits<blasint>::max();
  OPFORGE_CHECK(m <= kMax && n <= kMax && k <= kMax, "matrix dimensions ", m, "x", n, "x", k,
                " exceed OpenBLAS's 32-bit index range");
}

/// C = alpha * op(A) * op(B) + beta * C, row-major, with op() a transpose when ta / tb.
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blasint(m),
                    blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}
inline void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  scipy_cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, blasint(m),
                    blasint(n), blasint(k), alpha, a, blasint(lda), b, blasint(ldb), beta, c, blasint(ldc));
}

inline void gemv(bool trans, int64_t rows, int64_t cols, float alpha, const float* a, int64_t lda, const float* x,
                 int64_t incx, float beta, float* y, int64_t incy) {
  scipy_cblas_sgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, blasint(rows), blasint(cols), alpha, a,
                    blasint(lda), x, blasint(incx), beta, y, blasint(incy));
}
inline void gemv(bool trans, int64_t rows, int64_t cols, double alpha, const double* a, int64_t lda,
                 const double* x, int64_t incx, double beta, double* y, int64_t incy) {
  scipy_cblas_dgemv(CblasRowMajor, trans ? CblasTrans : CblasNoTrans, blasint(rows), blasint(cols), alpha, a,
                    blasint(lda), x, blasint(incx), beta, y, blasint(incy));
}

/// A float32 one-row product (or a one-column one whose operands are contiguous) of a matrix
/// that fits in L2 on the register loops of gemv_f32.h (AVX-512 or AVX2); false for anything
/// else, which goes to OpenBLAS (a matrix streamed from memory is bound by it either way).
inline bool gemv_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                     const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  constexpr int64_t kMaxFloats = 256 * 1024;  // 1 MB
  if (k <= 0 || (m == 1 ? n : m) > kMaxFloats / k) return false;
  if (m == 1 && !ta) {
    if (tb || (n == 1 && ldb == 1))  // B's columns contiguous (one column of stride 1: a dot product)
      row_times_matrix_t(k, n, alpha, a, b, tb ? ldb : k, beta, c);
    else
      row_times_matrix(k, n, alpha, a, b, ldb, beta, c);
  } else if (n == 1 && !ta && (tb || ldb == 1) && ldc == 1) {  // c column = A @ b
    row_times_matrix_t(k, m, alpha, b, a, lda, beta, c);
  } else {
    return false;
  }
  OPFORGE_KERNEL_PATH("gemv.f32");
  return true;
}

/// gemm() that hands a one-row or one-column product to GEMV, which streams the matrix once
/// where GEMM would first pack it.
template <class T>
void matmul(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
            int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float> && kHasGemvF32) {
    if (gemv_f32(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)) return;
  }
  if ((m == 1 || n == 1) && beta == T(0)) {  // GEMV scales y by beta: clear NaNs in fresh memory
    if (m == 1)
      for (int64_t j = 0; j < n; ++j) c[j] = T(0);
    else
      for (int64_t i = 0; i < m; ++i) c[i * ldc] = T(0);
  }
  if (m == 1)  // c row = op(B)^T * (row of op(A))
    gemv(!tb, tb ? n : k, tb ? k : n, alpha, b, ldb, a, ta ? lda : 1, beta, c, 1);
  else if (n == 1)  // c column = op(A) * (column of op(B))
    gemv(ta, ta ? k : m, ta ? m : k, alpha, a, lda, b, tb ? 1 : ldb, beta, c, ldc);
  else
    gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/// Sets OpenBLAS's thread count for the next calls (a process-wide setting, so set it before
/// every call: other kernels change it too).
inline void blas_threads(int n) { scipy_openblas_set_num_threads(n > 0 ? n : 1); }

/// matmul() split into one block of rows (or columns) per host thread, each a single-threaded
/// OpenBLAS call, so the host's pool does all the threading: OpenBLAS's own threads spin-wait
/// for each other, which costs dearly when other processes compete for the cores.
template <class T>
void parallel_matmul(const opforge::KernelContext& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
                     const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  blas_threads(1);
  const int64_t threads = ctx.num_threads();
  const bool split_rows = m >= n;
  const int64_t extent = split_rows ? m : n;
  // Blocks of at least 32 rows or columns, and no split below ~1 MFLOP per block; a one-row (or
  // one-column) product streams its matrix once, bound by memory more than by its FMAs: split
  // from 128K floats (512 KB) of matrix a block.
  const bool gemv = m == 1 || n == 1;
  const int64_t blocks = std::min({threads, extent / 32, m * n * k / (gemv ? int64_t(1) << 17 : int64_t(1) << 19)});
  if (blocks <= 1) return matmul(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  if (gemv) OPFORGE_KERNEL_PATH("gemv.split");
  const int64_t block = (extent + blocks - 1) / blocks;
  ctx.parallel_for(blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t lo = i * block, len = std::min(extent, lo + block) - lo;
      if (len <= 0) continue;
      if (split_rows)
        matmul(ta, tb, len, n, k, alpha, ta ? a + lo : a + lo * lda, lda, b, ldb, beta, c + lo * ldc, ldc);
      else
        matmul(ta, tb, m, len, k, alpha, a, lda, tb ? b + lo * ldb : b + lo, ldb, beta, c + lo, ldc);
    }
  });
}

}  // namespace opforge_nn
