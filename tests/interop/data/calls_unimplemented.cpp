// A custom-op library whose kernel calls an entry of onnxruntime's C API that opforge's host does
// not implement (SessionGetInputCount, entry #30): the host must answer with an error naming it.
#include "ort_api.h"

namespace {

const OrtApi* api = nullptr;

template <int I, class F>
F fn() { return opforge_ort::entry<F>(api, I); }

OrtStatus* create(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*, void** kernel) {
  size_t n = 0;
  using Count = OrtStatus* (*)(const void*, size_t*);
  *kernel = nullptr;
  return fn<opforge_ort::kSessionGetInputCount, Count>()(nullptr, &n);
}

OrtStatus* compute(void*, OrtKernelContext*) { return nullptr; }
void destroy(void*) {}

OrtCustomOp make_op() {
  OrtCustomOp op{};
  op.version = 16;
  op.GetName = [](const OrtCustomOp*) { return "CallsUnimplemented"; };
  op.GetExecutionProviderType = [](const OrtCustomOp*) -> const char* { return nullptr; };
  op.GetInputTypeCount = [](const OrtCustomOp*) { return size_t(1); };
  op.GetOutputTypeCount = [](const OrtCustomOp*) { return size_t(1); };
  op.GetInputType = [](const OrtCustomOp*, size_t) { return ONNXTensorElementDataType(1); };
  op.GetOutputType = [](const OrtCustomOp*, size_t) { return ONNXTensorElementDataType(1); };
  op.GetInputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  op.GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  op.CreateKernelV2 = &create;
  op.KernelComputeV2 = &compute;
  op.KernelDestroy = &destroy;
  return op;
}

OrtCustomOp the_op = make_op();

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                               const OrtApiBase* base) {
  api = base->GetApi(16);
  using CreateDomain = OrtStatus* (*)(const char*, OrtCustomOpDomain**);
  using Add = OrtStatus* (*)(OrtCustomOpDomain*, const OrtCustomOp*);
  using AddDomain = OrtStatus* (*)(OrtSessionOptions*, OrtCustomOpDomain*);
  OrtCustomOpDomain* domain = nullptr;
  if (OrtStatus* st = fn<opforge_ort::kCreateCustomOpDomain, CreateDomain>()("test.unimplemented", &domain)) return st;
  if (OrtStatus* st = fn<opforge_ort::kCustomOpDomain_Add, Add>()(domain, &the_op)) return st;
  return fn<opforge_ort::kAddCustomOpDomain, AddDomain>()(options, domain);
}
