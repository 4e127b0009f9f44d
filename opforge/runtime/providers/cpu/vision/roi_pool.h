// roi_pool.h: input checks shared by the region-of-interest ops (RoiAlign, CropAndResize).
#pragma once

#include <string>

#include "common/common.h"

namespace opforge_cpu {

/// Checks X (N, C, H, W), rois (num_rois, 4) and batch_indices (num_rois); -1 dims pass.
inline void check_rois(const Tensor& x, const Tensor& rois, const Tensor& batch_indices) {
  OPFORGE_CHECK(x.ndim() == 4, "input 'X' must be (N, C, H, W), got rank ", x.ndim());
  OPFORGE_CHECK(rois.ndim() == 2 && (rois.size(1) < 0 || rois.size(1) == 4), "input 'rois' must be (num_rois, 4), got ",
                rois.ndim() == 2 ? "a second dim of " + std::to_string(rois.size(1))
                                 : "rank " + std::to_string(rois.ndim()));
  OPFORGE_CHECK(batch_indices.ndim() == 1, "input 'batch_indices' must be (num_rois), got rank ",
                batch_indices.ndim());
  OPFORGE_CHECK(rois.size(0) < 0 || batch_indices.size(0) < 0 || rois.size(0) == batch_indices.size(0),
                "inputs 'rois' and 'batch_indices' disagree on num_rois: ", rois.size(0), " vs ",
                batch_indices.size(0));
}

}  // namespace opforge_cpu
