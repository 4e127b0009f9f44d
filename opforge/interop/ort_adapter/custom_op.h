// custom_op.h: an opforge op described to onnxruntime as an OrtCustomOp.
#pragma once

#include "runtime.h"
#include "opforge/abi.h"

namespace opforge_ort {

/// The OrtCustomOp of one op definition: its schema read from the opf_op_def (one dtype where
/// the op declares exactly one, else any, checked by opforge's call sequence), its kernels
/// opforge_ort::Kernel, its shape inference the op's infer (API >= 17).
struct AdaptedOp : OrtCustomOp {
  AdaptedOp(const Runtime& rt, const opf_op_def* def);
  const Runtime& rt;
  const opf_op_def* def;
  bool cuda;
};

/// Fills onnxruntime's output types and shapes from the op's infer (InferOutputShapeFn).
OrtStatus* infer_output_shapes(const AdaptedOp& op, OrtShapeInferContext* ctx);

}  // namespace opforge_ort
