// custom_op.cpp: the OrtCustomOp callbacks of an adapted op.
#include "custom_op.h"

#include <climits>

#include "kernel.h"

namespace opforge_ort {

namespace {

const AdaptedOp& self(const OrtCustomOp* op) { return *static_cast<const AdaptedOp*>(op); }

/// The declared parameter at position `i` (the last one when it is variadic).
const opf_param& param(const opf_param* params, int32_t declared, size_t i) {
  return params[i < size_t(declared) ? i : size_t(declared - 1)];
}

ONNXTensorElementDataType type_of(const opf_param& p) {
  return p.num_dtypes == 1 ? p.dtypes[0] : ORT_TYPE_UNDEFINED;  // several: any, checked by call_op
}

OrtCustomOpInputOutputCharacteristic characteristic(const opf_param& p) {
  if (p.flags & OPF_PARAM_VARIADIC) return INPUT_OUTPUT_VARIADIC;
  return (p.flags & OPF_PARAM_OPTIONAL) ? INPUT_OUTPUT_OPTIONAL : INPUT_OUTPUT_REQUIRED;
}

OrtStatus* create_kernel(const OrtCustomOp* op, const OrtApi*, const OrtKernelInfo* info, void** kernel) {
  const AdaptedOp& a = self(op);
  try {
    *kernel = new Kernel(a.rt, a.def, a.cuda, info);
    return nullptr;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return a.rt.status(what.rfind(a.def->name, 0) == 0 ? what : std::string(a.def->name) + ": " + what,
                       ORT_INVALID_ARGUMENT);
  }
}

OrtStatus* compute_kernel(void* kernel, OrtKernelContext* ctx) { return static_cast<Kernel*>(kernel)->compute(ctx); }

void destroy_kernel(void* kernel) { delete static_cast<Kernel*>(kernel); }

/// A failed V2 callback's status as the exception the first callbacks report errors with
/// (onnxruntime catches it as a std::exception).
void throw_status(const Runtime& rt, OrtStatus* st) {
  if (st == nullptr) return;
  std::string message = rt.GetErrorMessage(st);
  rt.ReleaseStatus(st);
  throw std::runtime_error(message);
}

/// The first API's callbacks, which runtimes that ignore the V2 ones (1.16) call.
void* create_kernel_v1(const OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info) {
  void* kernel = nullptr;
  throw_status(self(op).rt, create_kernel(op, api, info, &kernel));
  return kernel;
}

void compute_kernel_v1(void* kernel, OrtKernelContext* ctx) {
  Kernel* k = static_cast<Kernel*>(kernel);
  throw_status(k->rt, k->compute(ctx));
}

}  // namespace

AdaptedOp::AdaptedOp(const Runtime& runtime, const opf_op_def* op)
    : OrtCustomOp{}, rt(runtime), def(op), cuda(op->backend == OPF_BACKEND_CUDA) {
  // Fields past the version given are never read; 17 has all the ones filled here.
  version = uint32_t(rt.version < kShapeInferenceApi ? rt.version : kShapeInferenceApi);
  CreateKernel = &create_kernel_v1;
  KernelCompute = &compute_kernel_v1;
  CreateKernelV2 = &create_kernel;
  KernelComputeV2 = &compute_kernel;
  KernelDestroy = &destroy_kernel;
  GetName = [](const OrtCustomOp* op) { return self(op).def->name; };
  GetExecutionProviderType = [](const OrtCustomOp* op) -> const char* {
    return self(op).cuda ? "CUDAExecutionProvider" : nullptr;
  };
  GetInputTypeCount = [](const OrtCustomOp* op) { return size_t(self(op).def->num_inputs); };
  GetOutputTypeCount = [](const OrtCustomOp* op) { return size_t(self(op).def->num_outputs); };
  GetInputType = [](const OrtCustomOp* op, size_t i) {
    return type_of(param(self(op).def->inputs, self(op).def->num_inputs, i));
  };
  GetOutputType = [](const OrtCustomOp* op, size_t i) {
    return type_of(param(self(op).def->outputs, self(op).def->num_outputs, i));
  };
  GetInputCharacteristic = [](const OrtCustomOp* op, size_t i) {
    return characteristic(param(self(op).def->inputs, self(op).def->num_inputs, i));
  };
  GetOutputCharacteristic = [](const OrtCustomOp* op, size_t i) {
    return characteristic(param(self(op).def->outputs, self(op).def->num_outputs, i));
  };
  GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
  // onnxruntime's variadic parameters take at least one value, all of one type.
  GetVariadicInputMinArity = [](const OrtCustomOp*) { return 1; };
  GetVariadicInputHomogeneity = [](const OrtCustomOp*) { return 1; };
  GetVariadicOutputMinArity = [](const OrtCustomOp*) { return 1; };
  GetVariadicOutputHomogeneity = [](const OrtCustomOp*) { return 1; };
  if (rt.version >= kShapeInferenceApi) {
    InferOutputShapeFn = [](const OrtCustomOp* op, OrtShapeInferContext* ctx) {
      return infer_output_shapes(self(op), ctx);
    };
    GetStartVersion = [](const OrtCustomOp* op) { return int(self(op).def->since_version); };
    GetEndVersion = [](const OrtCustomOp* op) {
      return self(op).def->until_version ? int(self(op).def->until_version) : INT_MAX;
    };
  }
}

}  // namespace opforge_ort
