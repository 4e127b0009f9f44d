// roi_pool.h: input checks shared by the region-of-interest pooling ops (RoiAlign, MaxRoiPool).
#pragma once

#include <string>

#include "common.h"

namespace opforge_cpu {

/// Checks X (N, C, H, W), rois (num_rois, roi_cols) and, when given, batch_indices (num_rois).
inline void check_rois(const Tensor& x, const Tensor& rois, int64_t roi_cols, const Tensor* batch_indices) {
  OPFORGE_CHECK(x.ndim() == 4, "input 'X' must be (N, C, H, W), got rank ", x.ndim());
  OPFORGE_CHECK(rois.ndim() == 2 && (rois.size(1) < 0 || rois.size(1) == roi_cols), "input 'rois' must be (num_rois, ",
                roi_cols, "), got ", rois.ndim() == 2 ? "a second dim of " + std::to_string(rois.size(1))
                                                      : "rank " + std::to_string(rois.ndim()));
  if (batch_indices == nullptr) return;
  OPFORGE_CHECK(batch_indices->ndim() == 1, "input 'batch_indices' must be (num_rois), got rank ",
                batch_indices->ndim());
  OPFORGE_CHECK(rois.size(0) < 0 || batch_indices->size(0) < 0 || rois.size(0) == batch_indices->size(0),
                "inputs 'rois' and 'batch_indices' disagree on num_rois: ", rois.size(0), " vs ",
                batch_indices->size(0));
}

}  // namespace opforge_cpu
