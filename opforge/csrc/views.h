// views.h: copying and clearing opf_tensor views, with no Python in sight (every host uses them).
#pragma once

#include "opforge/abi.h"

namespace opforge_core {

/// dst = src up to src's rank (the dims past it are left as they were): a whole opf_tensor is
/// 280 bytes, and a plan copies views at every step.
inline void copy_view(opf_tensor& dst, const opf_tensor& src) {
  dst.data = src.data;
  dst.dtype = src.dtype;
  dst.ndim = src.ndim;
  dst.device_type = src.device_type;
  dst.device_id = src.device_id;
  for (int32_t d = 0; d < src.ndim; ++d) {
    dst.shape[d] = src.shape[d];
    dst.strides[d] = src.strides[d];
  }
}

/// An empty view (no data, undefined dtype, rank 0), as a zeroed opf_tensor reads.
inline void clear_view(opf_tensor& t) {
  t.data = nullptr;
  t.dtype = OPF_UNDEFINED;
  t.ndim = 0;
  t.device_type = 0;
  t.device_id = 0;
}

}  // namespace opforge_core
