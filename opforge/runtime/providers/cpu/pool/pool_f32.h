// pool_f32.h: the SIMD paths of 1-D/2-D float32 MaxPool and AveragePool: AVX-512 (pool_f32.cpp) and
// AVX2 (pool_avx2.cpp).
#pragma once

#include "pool/pool_window.h"

namespace opforge_nn {

/// Pools ctx's input 0 into output 0 (max, or the mean counting padded taps when include_pad);
/// false when this window or CPU has no such path (the generic loop then runs).
bool pool_f32(KernelContext& ctx, const PoolPlan& plan, bool max, bool include_pad);

}  // namespace opforge_nn
