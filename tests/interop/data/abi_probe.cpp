// Calls, through opforge's declarations (csrc/ort_api.h) and the adapter's negotiation
// (interop/ort_adapter/runtime.cpp), the entries of a real onnxruntime that can be called outside
// a kernel, and checks what they answer: a wrong index or signature in the declarations fails
// here. Usage: abi_probe /path/to/libonnxruntime.so
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "runtime.h"

using namespace opforge_ort;

static int failures = 0;

static void expect(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  failures += ok ? 0 : 1;
}

int main(int argc, char** argv) {
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  auto get_base = lib ? reinterpret_cast<const OrtApiBase* (*)()>(dlsym(lib, "OrtGetApiBase")) : nullptr;
  if (get_base == nullptr) return std::printf("cannot load %s\n", argv[1]), 2;
  std::string error;
  const Runtime* rt = negotiate(get_base(), error);
  if (rt == nullptr) return std::printf("%s\n", error.c_str()), 2;
  std::printf("onnxruntime %s, C API %d\n", rt->version_text.c_str(), rt->version);

  OrtStatus* st = rt->CreateStatus(ORT_INVALID_GRAPH, "probe");
  expect(rt->GetErrorCode(st) == ORT_INVALID_GRAPH && std::strcmp(rt->GetErrorMessage(st), "probe") == 0,
         "CreateStatus GetErrorCode GetErrorMessage");
  rt->ReleaseStatus(st);

  OrtTensorTypeAndShapeInfo* info = nullptr;
  const int64_t dims[3] = {2, -1, 5};
  const char* names[3] = {"", "batch", ""};
  rt->check(rt->CreateTensorTypeAndShapeInfo(&info), "CreateTensorTypeAndShapeInfo");
  rt->check(rt->SetTensorElementType(info, 11), "SetTensorElementType");
  rt->check(rt->SetDimensions(info, dims, 3), "SetDimensions");
  rt->check(rt->SetSymbolicDimensions(info, names, 3), "SetSymbolicDimensions");
  ONNXTensorElementDataType type = 0;
  size_t rank = 0;
  int64_t got[3] = {0, 0, 0};
  const char* got_names[3] = {nullptr, nullptr, nullptr};
  rt->check(rt->GetTensorElementType(info, &type), "GetTensorElementType");
  rt->check(rt->GetDimensionsCount(info, &rank), "GetDimensionsCount");
  rt->check(rt->GetDimensions(info, got, rank), "GetDimensions");
  rt->check(rt->GetSymbolicDimensions(info, got_names, rank), "GetSymbolicDimensions");
  expect(type == 11 && rank == 3 && got[1] == -1 && got[2] == 5 && std::strcmp(got_names[1], "batch") == 0,
         "type and shape info: element type, dims, symbolic dims");
  expect(!rt->TensorTypeAndShape_HasShape || rt->TensorTypeAndShape_HasShape(info), "TensorTypeAndShape_HasShape");
  rt->ReleaseTensorTypeAndShapeInfo(info);

  OrtMemoryInfo* cpu = nullptr;
  OrtMemoryInfo* cuda = nullptr;
  const char* name = nullptr;
  int id = -1;
  rt->check(rt->CreateCpuMemoryInfo(OrtArenaAllocator, OrtMemTypeDefault, &cpu), "CreateCpuMemoryInfo");
  rt->check(rt->MemoryInfoGetName(cpu, &name), "MemoryInfoGetName");
  expect(std::strcmp(name, "Cpu") == 0, "CreateCpuMemoryInfo MemoryInfoGetName");
  rt->check(rt->CreateMemoryInfo("Cuda", OrtDeviceAllocator, 3, OrtMemTypeDefault, &cuda), "CreateMemoryInfo");
  rt->check(rt->MemoryInfoGetId(cuda, &id), "MemoryInfoGetId");
  expect(id == 3, "CreateMemoryInfo MemoryInfoGetId");
  rt->ReleaseMemoryInfo(cuda);

  OrtAllocator* alloc = nullptr;
  rt->check(rt->GetAllocatorWithDefaultOptions(&alloc), "GetAllocatorWithDefaultOptions");
  void* block = alloc->Alloc(alloc, 256);
  expect(block != nullptr, "GetAllocatorWithDefaultOptions, OrtAllocator::Alloc");
  alloc->Free(alloc, block);

  OrtValue* value = nullptr;
  const int64_t shape[2] = {3, 4};
  rt->check(entry<Fn_CreateTensorAsOrtValue>(rt->api, kCreateTensorAsOrtValue)(alloc, shape, 2, 1, &value),
            "CreateTensorAsOrtValue");
  void* data = nullptr;
  rt->check(rt->GetTensorMutableData(value, &data), "GetTensorMutableData");
  static_cast<float*>(data)[11] = 1.5f;
  rt->check(rt->GetTensorTypeAndShape(value, &info), "GetTensorTypeAndShape");
  rt->check(rt->GetDimensionsCount(info, &rank), "GetDimensionsCount");
  rt->ReleaseTensorTypeAndShapeInfo(info);
  expect(rank == 2, "GetTensorTypeAndShape of a value");
  if (rt->GetTensorElementTypeAndShapeDataReference) {
    const int64_t* ref = nullptr;
    rt->check(rt->GetTensorElementTypeAndShapeDataReference(value, &type, &ref, &rank),
              "GetTensorElementTypeAndShapeDataReference");
    expect(type == 1 && rank == 2 && ref[1] == 4, "GetTensorElementTypeAndShapeDataReference");
  }
  const OrtMemoryInfo* where = nullptr;
  rt->check(rt->GetTensorMemoryInfo(value, &where), "GetTensorMemoryInfo");
  rt->check(rt->MemoryInfoGetId(where, &id), "MemoryInfoGetId");
  expect(id == 0, "GetTensorMemoryInfo of a CPU value");
  rt->ReleaseValue(value);
  rt->ReleaseMemoryInfo(cpu);

  OrtCustomOpDomain* domain = nullptr;
  rt->check(rt->CreateCustomOpDomain("probe.domain", &domain), "CreateCustomOpDomain");
  expect(domain != nullptr, "CreateCustomOpDomain");
  rt->ReleaseCustomOpDomain(domain);
  return failures == 0 ? 0 : 1;
}
