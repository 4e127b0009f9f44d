// gemm_packed.h: opforge's GEMM on packed weights (gemm_packed.cpp) for other kernels: a weight
// matrix packed into its column panels for one call, then the product on the register tiles.
// OpenBLAS runs the kernel $OPENBLAS_CORETYPE names where that is set (some machines set Haswell
// on AVX-512 CPUs); these tiles run the best the CPU has whatever the environment says.
#pragma once

#include <opforge/op.h>

#include <cstdint>

namespace opforge_gemm {

/// Floats pack_rows writes for an operand of n columns and k rows.
int64_t packed_floats(int64_t n, int64_t k);

/// The operand B = W^T (k x n) packed as gemm_packed.cpp's panels, from W given as n rows of k
/// floats, rows ldw apart (a recurrent layer's W or a Gemm's transB operand): panel p, row kk,
/// lane j holds W[32 p + j][kk], zero past n.
void pack_rows(const float* w, int64_t n, int64_t k, int64_t ldw, float* out);

/// y (m x n, rows n apart) = a (m x k, rows lda apart) @ B, B packed by pack_rows; split over
/// the pool's threads as PackedMatMul's product is.
void packed_product(const opforge::KernelContext& ctx, const float* a, int64_t lda, const float* b, float* y,
                    int64_t m, int64_t n, int64_t k);

}  // namespace opforge_gemm
