// ort_host_values.cpp: the host's tensors (OrtValue), type and shape infos, memory infos and
// its one CPU allocator, as onnxruntime's C API entries for them.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "opforge/dtype.h"
#include "ort_host.h"
#include "ort_host_entries.h"

int64_t OrtValue::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace opforge_ort {

namespace {

OrtStatus* invalid(const std::string& message) { return make_status(ORT_INVALID_ARGUMENT, message); }

int64_t element_bytes(ONNXTensorElementDataType t) { return t == ORT_TYPE_STRING ? 0 : opforge::dtype_size(t); }

// --- the CPU allocator every allocator entry hands out

void* cpu_alloc(OrtAllocator*, size_t size) { return std::aligned_alloc(64, (size + 63) / 64 * 64); }
void cpu_free(OrtAllocator*, void* p) { std::free(p); }
const OrtMemoryInfo* cpu_info(const OrtAllocator*) {
  static const OrtMemoryInfo info;
  return &info;
}
OrtAllocator cpu_allocator{16, &cpu_alloc, &cpu_free, &cpu_info};

// --- values

OrtStatus* api_IsTensor(const OrtValue* value, int* out) {
  *out = value != nullptr;
  return nullptr;
}
OrtStatus* api_HasValue(const OrtValue* value, int* out) {
  *out = value != nullptr;
  return nullptr;
}
OrtStatus* api_GetValueType(const OrtValue*, ONNXType* out) {
  *out = ONNX_TYPE_TENSOR;
  return nullptr;
}
OrtStatus* api_GetTensorMutableData(OrtValue* value, void** out) {
  *out = value->is_string() ? static_cast<void*>(value->strings.data()) : value->data;
  return nullptr;
}
OrtStatus* api_GetTensorData(const OrtValue* value, const void** out) {
  return api_GetTensorMutableData(const_cast<OrtValue*>(value), const_cast<void**>(out));
}
OrtStatus* api_GetTensorSizeInBytes(const OrtValue* value, size_t* size) {
  if (value->is_string()) return invalid("GetTensorSizeInBytes: a string tensor has no fixed size in bytes");
  *size = size_t(value->count() * element_bytes(value->dtype));
  return nullptr;
}
OrtStatus* api_GetTensorTypeAndShape(const OrtValue* value, OrtTensorTypeAndShapeInfo** out) {
  *out = new OrtTensorTypeAndShapeInfo{value->dtype, value->shape, std::vector<std::string>(value->shape.size()), true};
  return nullptr;
}
OrtStatus* api_GetTypeInfo(const OrtValue* value, OrtTypeInfo** out) {
  *out = new OrtTypeInfo{ONNX_TYPE_TENSOR, {value->dtype, value->shape, std::vector<std::string>(value->shape.size()), true}};
  return nullptr;
}
OrtStatus* api_GetTensorElementTypeAndShapeDataReference(const OrtValue* value, ONNXTensorElementDataType* type,
                                                         const int64_t** shape, size_t* rank) {
  *type = value->dtype;
  *shape = value->shape.data();
  *rank = value->shape.size();
  return nullptr;
}
OrtStatus* api_GetTensorMemoryInfo(const OrtValue*, const OrtMemoryInfo** out) {
  *out = cpu_info(nullptr);
  return nullptr;
}

}  // namespace

OrtValue* new_value(const int64_t* shape, size_t rank, ONNXTensorElementDataType type) {
  auto* v = new OrtValue;
  v->dtype = type;
  v->shape.assign(shape, shape + rank);
  v->released_by_caller = true;
  if (type == ORT_TYPE_STRING) {
    v->strings.resize(size_t(v->count()));
  } else {
    v->owned.reset(cpu_alloc(nullptr, size_t(std::max<int64_t>(v->count() * element_bytes(type), 1))), std::free);
    v->data = v->owned.get();
  }
  return v;
}

namespace {

OrtStatus* api_CreateTensorAsOrtValue(OrtAllocator*, const int64_t* shape, size_t rank, ONNXTensorElementDataType type,
                                      OrtValue** out) {
  if (type != ORT_TYPE_STRING && element_bytes(type) == 0)
    return invalid("CreateTensorAsOrtValue: element type " + std::to_string(type) + " is not one opforge holds");
  for (size_t d = 0; d < rank; ++d)
    if (shape[d] < 0) return invalid("CreateTensorAsOrtValue: negative size in the shape");
  *out = new_value(shape, rank, type);
  return nullptr;
}
OrtStatus* api_CreateTensorWithDataAsOrtValue(const OrtMemoryInfo*, void* data, size_t data_len, const int64_t* shape,
                                              size_t rank, ONNXTensorElementDataType type, OrtValue** out) {
  auto* v = new OrtValue;
  v->dtype = type;
  v->shape.assign(shape, shape + rank);
  v->data = data;
  v->released_by_caller = true;
  if (type == ORT_TYPE_STRING || size_t(v->count() * element_bytes(type)) > data_len) {
    delete v;
    return invalid("CreateTensorWithDataAsOrtValue: the buffer is smaller than the shape says (or holds strings)");
  }
  *out = v;
  return nullptr;
}
void api_ReleaseValue(OrtValue* value) {
  if (value != nullptr && value->released_by_caller) delete value;
}

// --- strings

OrtStatus* string_tensor(const OrtValue* value, const char* entry) {
  return value->is_string() ? nullptr : invalid(std::string(entry) + ": the tensor does not hold strings");
}
OrtStatus* api_FillStringTensor(OrtValue* value, const char* const* s, size_t n) {
  if (OrtStatus* st = string_tensor(value, "FillStringTensor")) return st;
  value->strings.assign(s, s + std::min(n, value->strings.size()));
  return nullptr;
}
OrtStatus* api_FillStringTensorElement(OrtValue* value, const char* s, size_t index) {
  if (OrtStatus* st = string_tensor(value, "FillStringTensorElement")) return st;
  if (index >= value->strings.size()) return invalid("FillStringTensorElement: index out of range");
  value->strings[index] = s;
  return nullptr;
}
OrtStatus* api_GetResizedStringTensorElementBuffer(OrtValue* value, size_t index, size_t length, char** buffer) {
  if (OrtStatus* st = string_tensor(value, "GetResizedStringTensorElementBuffer")) return st;
  if (index >= value->strings.size()) return invalid("GetResizedStringTensorElementBuffer: index out of range");
  value->strings[index].resize(length);
  *buffer = value->strings[index].data();
  return nullptr;
}
OrtStatus* api_GetStringTensorDataLength(const OrtValue* value, size_t* len) {
  if (OrtStatus* st = string_tensor(value, "GetStringTensorDataLength")) return st;
  *len = 0;
  for (const auto& s : value->strings) *len += s.size();
  return nullptr;
}
OrtStatus* api_GetStringTensorContent(const OrtValue* value, void* s, size_t s_len, size_t* offsets, size_t n) {
  if (OrtStatus* st = string_tensor(value, "GetStringTensorContent")) return st;
  if (n < value->strings.size()) return invalid("GetStringTensorContent: offsets buffer too small");
  size_t at = 0;
  for (size_t k = 0; k < value->strings.size(); ++k) {
    const std::string& e = value->strings[k];
    if (at + e.size() > s_len) return invalid("GetStringTensorContent: buffer too small");
    offsets[k] = at;
    std::memcpy(static_cast<char*>(s) + at, e.data(), e.size());
    at += e.size();
  }
  return nullptr;
}
OrtStatus* api_GetStringTensorElementLength(const OrtValue* value, size_t index, size_t* out) {
  if (OrtStatus* st = string_tensor(value, "GetStringTensorElementLength")) return st;
  if (index >= value->strings.size()) return invalid("GetStringTensorElementLength: index out of range");
  *out = value->strings[index].size();
  return nullptr;
}
OrtStatus* api_GetStringTensorElement(const OrtValue* value, size_t s_len, size_t index, void* s) {
  if (OrtStatus* st = string_tensor(value, "GetStringTensorElement")) return st;
  if (index >= value->strings.size()) return invalid("GetStringTensorElement: index out of range");
  const std::string& e = value->strings[index];
  if (s_len < e.size()) return invalid("GetStringTensorElement: buffer too small");
  std::memcpy(s, e.data(), e.size());
  return nullptr;
}

// --- type and shape infos

OrtStatus* api_CreateTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo** out) {
  *out = new OrtTensorTypeAndShapeInfo;
  return nullptr;
}
OrtStatus* api_SetTensorElementType(OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType type) {
  info->dtype = type;
  return nullptr;
}
OrtStatus* api_SetDimensions(OrtTensorTypeAndShapeInfo* info, const int64_t* dims, size_t count) {
  info->shape.assign(dims, dims + count);
  info->symbols.resize(count);
  info->has_shape = true;
  return nullptr;
}
OrtStatus* api_SetSymbolicDimensions(OrtTensorTypeAndShapeInfo* info, const char** dims, size_t count) {
  info->symbols.assign(count, "");
  for (size_t d = 0; d < count; ++d) info->symbols[d] = dims[d] ? dims[d] : "";
  return nullptr;
}
OrtStatus* api_GetTensorElementType(const OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType* out) {
  *out = info->dtype;
  return nullptr;
}
OrtStatus* api_GetDimensionsCount(const OrtTensorTypeAndShapeInfo* info, size_t* out) {
  *out = info->shape.size();
  return nullptr;
}
OrtStatus* api_GetDimensions(const OrtTensorTypeAndShapeInfo* info, int64_t* dims, size_t count) {
  std::copy_n(info->shape.begin(), std::min(count, info->shape.size()), dims);
  return nullptr;
}
OrtStatus* api_GetSymbolicDimensions(const OrtTensorTypeAndShapeInfo* info, const char** dims, size_t count) {
  for (size_t d = 0; d < count; ++d) dims[d] = d < info->symbols.size() ? info->symbols[d].c_str() : "";
  return nullptr;
}
OrtStatus* api_GetTensorShapeElementCount(const OrtTensorTypeAndShapeInfo* info, size_t* out) {
  int64_t n = 1;
  for (int64_t d : info->shape) n *= d < 0 ? 0 : d;
  *out = size_t(n);
  return nullptr;
}
bool api_TensorTypeAndShape_HasShape(const OrtTensorTypeAndShapeInfo* info) { return info->has_shape; }
void api_ReleaseTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo* info) { delete info; }
OrtStatus* api_CastTypeInfoToTensorInfo(const OrtTypeInfo* info, const OrtTensorTypeAndShapeInfo** out) {
  *out = info->type == ONNX_TYPE_TENSOR ? &info->tensor : nullptr;
  return nullptr;
}
OrtStatus* api_GetOnnxTypeFromTypeInfo(const OrtTypeInfo* info, ONNXType* out) {
  *out = info->type;
  return nullptr;
}
void api_ReleaseTypeInfo(OrtTypeInfo* info) { delete info; }

// --- memory infos and the allocator

OrtStatus* api_CreateMemoryInfo(const char* name, OrtAllocatorType type, int id, OrtMemType mem_type, OrtMemoryInfo** out) {
  *out = new OrtMemoryInfo{name ? name : "Cpu", id, type, mem_type};
  return nullptr;
}
OrtStatus* api_CreateCpuMemoryInfo(OrtAllocatorType type, OrtMemType mem_type, OrtMemoryInfo** out) {
  *out = new OrtMemoryInfo{"Cpu", 0, type, mem_type};
  return nullptr;
}
OrtStatus* api_CompareMemoryInfo(const OrtMemoryInfo* a, const OrtMemoryInfo* b, int* out) {
  *out = (a->name == b->name && a->id == b->id && a->mem_type == b->mem_type) ? 0 : -1;
  return nullptr;
}
OrtStatus* api_MemoryInfoGetName(const OrtMemoryInfo* info, const char** out) {
  *out = info->name.c_str();
  return nullptr;
}
OrtStatus* api_MemoryInfoGetId(const OrtMemoryInfo* info, int* out) {
  *out = info->id;
  return nullptr;
}
OrtStatus* api_MemoryInfoGetMemType(const OrtMemoryInfo* info, OrtMemType* out) {
  *out = info->mem_type;
  return nullptr;
}
OrtStatus* api_MemoryInfoGetType(const OrtMemoryInfo* info, OrtAllocatorType* out) {
  *out = info->type;
  return nullptr;
}
void api_MemoryInfoGetDeviceType(const OrtMemoryInfo*, OrtMemoryInfoDeviceType* out) { *out = OrtMemoryInfoDeviceType_CPU; }
void api_ReleaseMemoryInfo(OrtMemoryInfo* info) {
  if (info != cpu_info(nullptr)) delete info;
}
OrtStatus* api_AllocatorAlloc(OrtAllocator* a, size_t size, void** out) {
  *out = a->Alloc(a, size);
  return *out || size == 0 ? nullptr : make_status(ORT_FAIL, "AllocatorAlloc: out of memory");
}
OrtStatus* api_AllocatorFree(OrtAllocator* a, void* p) {
  a->Free(a, p);
  return nullptr;
}
OrtStatus* api_AllocatorGetInfo(const OrtAllocator* a, const OrtMemoryInfo** out) {
  *out = a->Info(a);
  return nullptr;
}
OrtStatus* api_GetAllocatorWithDefaultOptions(OrtAllocator** out) {
  *out = &cpu_allocator;
  return nullptr;
}
void api_ReleaseAllocator(OrtAllocator*) {}  // the one allocator lives as long as the process

}  // namespace

OrtAllocator* cpu_allocator_of_host() { return &cpu_allocator; }

void set_value_entries(OrtApiEntry* table) {
  OPF_ORT_SET(table, IsTensor);
  OPF_ORT_SET(table, HasValue);
  OPF_ORT_SET(table, GetValueType);
  OPF_ORT_SET(table, GetTensorMutableData);
  OPF_ORT_SET(table, GetTensorData);
  OPF_ORT_SET(table, GetTensorSizeInBytes);
  OPF_ORT_SET(table, GetTensorTypeAndShape);
  OPF_ORT_SET(table, GetTypeInfo);
  OPF_ORT_SET(table, GetTensorElementTypeAndShapeDataReference);
  OPF_ORT_SET(table, GetTensorMemoryInfo);
  OPF_ORT_SET(table, CreateTensorAsOrtValue);
  OPF_ORT_SET(table, CreateTensorWithDataAsOrtValue);
  OPF_ORT_SET(table, ReleaseValue);
  OPF_ORT_SET(table, FillStringTensor);
  OPF_ORT_SET(table, FillStringTensorElement);
  OPF_ORT_SET(table, GetResizedStringTensorElementBuffer);
  OPF_ORT_SET(table, GetStringTensorDataLength);
  OPF_ORT_SET(table, GetStringTensorContent);
  OPF_ORT_SET(table, GetStringTensorElementLength);
  OPF_ORT_SET(table, GetStringTensorElement);
  OPF_ORT_SET(table, CreateTensorTypeAndShapeInfo);
  OPF_ORT_SET(table, SetTensorElementType);
  OPF_ORT_SET(table, SetDimensions);
  OPF_ORT_SET(table, SetSymbolicDimensions);
  OPF_ORT_SET(table, GetTensorElementType);
  OPF_ORT_SET(table, GetDimensionsCount);
  OPF_ORT_SET(table, GetDimensions);
  OPF_ORT_SET(table, GetSymbolicDimensions);
  OPF_ORT_SET(table, GetTensorShapeElementCount);
  OPF_ORT_SET(table, TensorTypeAndShape_HasShape);
  OPF_ORT_SET(table, ReleaseTensorTypeAndShapeInfo);
  OPF_ORT_SET(table, CastTypeInfoToTensorInfo);
  OPF_ORT_SET(table, GetOnnxTypeFromTypeInfo);
  OPF_ORT_SET(table, ReleaseTypeInfo);
  OPF_ORT_SET(table, CreateMemoryInfo);
  OPF_ORT_SET(table, CreateCpuMemoryInfo);
  OPF_ORT_SET(table, CompareMemoryInfo);
  OPF_ORT_SET(table, MemoryInfoGetName);
  OPF_ORT_SET(table, MemoryInfoGetId);
  OPF_ORT_SET(table, MemoryInfoGetMemType);
  OPF_ORT_SET(table, MemoryInfoGetType);
  OPF_ORT_SET(table, MemoryInfoGetDeviceType);
  OPF_ORT_SET(table, ReleaseMemoryInfo);
  OPF_ORT_SET(table, AllocatorAlloc);
  OPF_ORT_SET(table, AllocatorFree);
  OPF_ORT_SET(table, AllocatorGetInfo);
  OPF_ORT_SET(table, GetAllocatorWithDefaultOptions);
  OPF_ORT_SET(table, ReleaseAllocator);
}

}  // namespace opforge_ort
