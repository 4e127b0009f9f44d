// The anchor of bench_interop: leaky_relu on float32 written directly against onnxruntime's C API
// (as a custom-op library author would without opforge), registered in domain "com.hand".
// It uses opforge's declarations of the ABI (csrc/ort_api.h): onnxruntime's wheels ship no headers.
#include "ort_api.h"

namespace {

using namespace opforge_ort;

const OrtApi* api = nullptr;
template <class F> F call(int index) { return entry<F>(api, index); }

struct Kernel {
  float alpha;
};

OrtStatus* create(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo* info, void** out) {
  auto* k = new Kernel{0.01f};
  OrtStatus* st = call<Fn_KernelInfoGetAttribute_float>(kKernelInfoGetAttribute_float)(info, "alpha", &k->alpha);
  if (st != nullptr) call<Fn_ReleaseStatus>(kReleaseStatus)(st);  // absent: the default
  *out = k;
  return nullptr;
}

OrtStatus* compute(void* kernel, OrtKernelContext* ctx) {
  const float alpha = static_cast<Kernel*>(kernel)->alpha;
  const OrtValue* x = nullptr;
  if (OrtStatus* st = call<Fn_KernelContext_GetInput>(kKernelContext_GetInput)(ctx, 0, &x)) return st;
  OrtTensorTypeAndShapeInfo* info = nullptr;
  if (OrtStatus* st = call<Fn_GetTensorTypeAndShape>(kGetTensorTypeAndShape)(x, &info)) return st;
  size_t rank = 0;
  int64_t dims[16];
  call<Fn_GetDimensionsCount>(kGetDimensionsCount)(info, &rank);
  call<Fn_GetDimensions>(kGetDimensions)(info, dims, rank);
  call<Fn_ReleaseTensorTypeAndShapeInfo>(kReleaseTensorTypeAndShapeInfo)(info);
  void* in = nullptr;
  void* out = nullptr;
  OrtValue* y = nullptr;
  if (OrtStatus* st = call<Fn_GetTensorMutableData>(kGetTensorMutableData)(const_cast<OrtValue*>(x), &in)) return st;
  if (OrtStatus* st = call<Fn_KernelContext_GetOutput>(kKernelContext_GetOutput)(ctx, 0, dims, rank, &y)) return st;
  if (OrtStatus* st = call<Fn_GetTensorMutableData>(kGetTensorMutableData)(y, &out)) return st;
  int64_t n = 1;
  for (size_t d = 0; d < rank; ++d) n *= dims[d];
  const float* a = static_cast<const float*>(in);
  float* b = static_cast<float*>(out);
  for (int64_t i = 0; i < n; ++i) b[i] = a[i] > 0.f ? a[i] : alpha * a[i];
  return nullptr;
}

void destroy(void* kernel) { delete static_cast<Kernel*>(kernel); }
void* create_v1(const OrtCustomOp*, const OrtApi*, const OrtKernelInfo*) { return nullptr; }
void compute_v1(void*, OrtKernelContext*) {}

OrtCustomOp make_op() {
  OrtCustomOp op{};
  op.version = 16;
  op.GetName = [](const OrtCustomOp*) { return "leaky_relu"; };
  op.GetExecutionProviderType = [](const OrtCustomOp*) -> const char* { return nullptr; };
  op.GetInputTypeCount = [](const OrtCustomOp*) { return size_t(1); };
  op.GetOutputTypeCount = [](const OrtCustomOp*) { return size_t(1); };
  op.GetInputType = [](const OrtCustomOp*, size_t) { return ONNXTensorElementDataType(1); };
  op.GetOutputType = [](const OrtCustomOp*, size_t) { return ONNXTensorElementDataType(1); };
  op.GetInputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  op.GetOutputCharacteristic = [](const OrtCustomOp*, size_t) { return INPUT_OUTPUT_REQUIRED; };
  op.GetInputMemoryType = [](const OrtCustomOp*, size_t) { return OrtMemTypeDefault; };
  op.CreateKernel = &create_v1;
  op.KernelCompute = &compute_v1;
  op.CreateKernelV2 = &create;
  op.KernelComputeV2 = &compute;
  op.KernelDestroy = &destroy;
  return op;
}

OrtCustomOp the_op = make_op();
OrtCustomOpDomain* domain = nullptr;

}  // namespace

extern "C" __attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                               const OrtApiBase* base) {
  api = base->GetApi(16);
  if (domain == nullptr) {
    if (OrtStatus* st = call<Fn_CreateCustomOpDomain>(kCreateCustomOpDomain)("com.hand", &domain)) return st;
    if (OrtStatus* st = call<Fn_CustomOpDomain_Add>(kCustomOpDomain_Add)(domain, &the_op)) return st;
  }
  return call<Fn_AddCustomOpDomain>(kAddCustomOpDomain)(options, domain);
}
