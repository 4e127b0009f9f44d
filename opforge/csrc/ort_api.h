// ort_api.h: the part of onnxruntime's C ABI that opforge speaks, declared from its documented
// header (onnxruntime's wheels ship none).
//
// Both directions compile it: the adapter that makes an opforge library an onnxruntime
// custom-op library (opforge/interop/ort_adapter) calls these entries on a real onnxruntime,
// and opforge's host for onnxruntime custom-op libraries (ort_host_*.cpp) implements them.
// Layouts, enum values and the order of the API table are facts of the ABI; the table's
// entries are named in ort_api_entries.h and typed below for the ones opforge uses.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ort_api_entries.h"

extern "C" {

/// Element types, numbered as ONNX's TensorProto.DataType (and so as opf_dtype).
typedef int32_t ONNXTensorElementDataType;
enum { ORT_TYPE_UNDEFINED = 0, ORT_TYPE_STRING = 8 };

/// What a value holds.
typedef enum ONNXType {
  ONNX_TYPE_UNKNOWN,
  ONNX_TYPE_TENSOR,
  ONNX_TYPE_SEQUENCE,
  ONNX_TYPE_MAP,
  ONNX_TYPE_OPAQUE,
  ONNX_TYPE_SPARSETENSOR,
  ONNX_TYPE_OPTIONAL
} ONNXType;

typedef enum OrtLoggingLevel {
  ORT_LOGGING_LEVEL_VERBOSE,
  ORT_LOGGING_LEVEL_INFO,
  ORT_LOGGING_LEVEL_WARNING,
  ORT_LOGGING_LEVEL_ERROR,
  ORT_LOGGING_LEVEL_FATAL
} OrtLoggingLevel;

typedef enum OrtErrorCode {
  ORT_OK,
  ORT_FAIL,
  ORT_INVALID_ARGUMENT,
  ORT_NO_SUCHFILE,
  ORT_NO_MODEL,
  ORT_ENGINE_ERROR,
  ORT_RUNTIME_EXCEPTION,
  ORT_INVALID_PROTOBUF,
  ORT_MODEL_LOADED,
  ORT_NOT_IMPLEMENTED,
  ORT_INVALID_GRAPH,
  ORT_EP_FAIL
} OrtErrorCode;

/// Attribute kinds ReadOpAttr reads.
typedef enum OrtOpAttrType {
  ORT_OP_ATTR_UNDEFINED = 0,
  ORT_OP_ATTR_INT,
  ORT_OP_ATTR_INTS,
  ORT_OP_ATTR_FLOAT,
  ORT_OP_ATTR_FLOATS,
  ORT_OP_ATTR_STRING,
  ORT_OP_ATTR_STRINGS
} OrtOpAttrType;

typedef enum OrtAllocatorType { OrtInvalidAllocator = -1, OrtDeviceAllocator = 0, OrtArenaAllocator = 1 } OrtAllocatorType;
typedef enum OrtMemType { OrtMemTypeCPUInput = -2, OrtMemTypeCPUOutput = -1, OrtMemTypeDefault = 0 } OrtMemType;
typedef enum OrtMemoryInfoDeviceType {
  OrtMemoryInfoDeviceType_CPU = 0,
  OrtMemoryInfoDeviceType_GPU = 1,
  OrtMemoryInfoDeviceType_FPGA = 2
} OrtMemoryInfoDeviceType;

/// Characteristics of a custom op's input or output.
typedef enum OrtCustomOpInputOutputCharacteristic {
  INPUT_OUTPUT_REQUIRED = 0,
  INPUT_OUTPUT_OPTIONAL,
  INPUT_OUTPUT_VARIADIC
} OrtCustomOpInputOutputCharacteristic;

// Opaque objects: onnxruntime's own, or opforge's host's (ort_host_*.cpp defines them).
struct OrtStatus;
struct OrtValue;
struct OrtMemoryInfo;
struct OrtTensorTypeAndShapeInfo;
struct OrtTypeInfo;
struct OrtSessionOptions;
struct OrtCustomOpDomain;
struct OrtKernelInfo;
struct OrtKernelContext;
struct OrtShapeInferContext;
struct OrtOpAttr;
struct OrtLogger;

/// A memory allocator: a struct of function pointers (fields past Info exist from version 18).
typedef struct OrtAllocator {
  uint32_t version;
  void* (*Alloc)(struct OrtAllocator* self, size_t size);
  void (*Free)(struct OrtAllocator* self, void* p);
  const OrtMemoryInfo* (*Info)(const struct OrtAllocator* self);
} OrtAllocator;

/// onnxruntime's API table: function pointers in the order of ort_api_entries.h.
typedef void (*OrtApiEntry)(void);
typedef struct OrtApi {
  OrtApiEntry entries[1];  ///< as many as the runtime's version has
} OrtApi;

/// What a custom-op library's RegisterCustomOps receives.
typedef struct OrtApiBase {
  const OrtApi* (*GetApi)(uint32_t version);
  const char* (*GetVersionString)(void);
} OrtApiBase;

/// One custom op: its schema and kernel callbacks. `version` says which fields exist: the
/// V2 callbacks from 16, shape inference and the opset range from 17, in-place maps from 18.
typedef struct OrtCustomOp {
  uint32_t version;
  void* (*CreateKernel)(const struct OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info);
  const char* (*GetName)(const struct OrtCustomOp* op);
  const char* (*GetExecutionProviderType)(const struct OrtCustomOp* op);
  ONNXTensorElementDataType (*GetInputType)(const struct OrtCustomOp* op, size_t index);
  size_t (*GetInputTypeCount)(const struct OrtCustomOp* op);
  ONNXTensorElementDataType (*GetOutputType)(const struct OrtCustomOp* op, size_t index);
  size_t (*GetOutputTypeCount)(const struct OrtCustomOp* op);
  void (*KernelCompute)(void* op_kernel, OrtKernelContext* context);
  void (*KernelDestroy)(void* op_kernel);
  OrtCustomOpInputOutputCharacteristic (*GetInputCharacteristic)(const struct OrtCustomOp* op, size_t index);
  OrtCustomOpInputOutputCharacteristic (*GetOutputCharacteristic)(const struct OrtCustomOp* op, size_t index);
  OrtMemType (*GetInputMemoryType)(const struct OrtCustomOp* op, size_t index);
  int (*GetVariadicInputMinArity)(const struct OrtCustomOp* op);
  int (*GetVariadicInputHomogeneity)(const struct OrtCustomOp* op);
  int (*GetVariadicOutputMinArity)(const struct OrtCustomOp* op);
  int (*GetVariadicOutputHomogeneity)(const struct OrtCustomOp* op);
  OrtStatus* (*CreateKernelV2)(const struct OrtCustomOp* op, const OrtApi* api, const OrtKernelInfo* info,
                               void** kernel);
  OrtStatus* (*KernelComputeV2)(void* op_kernel, OrtKernelContext* context);
  OrtStatus* (*InferOutputShapeFn)(const struct OrtCustomOp* op, OrtShapeInferContext* ctx);
  int (*GetStartVersion)(const struct OrtCustomOp* op);
  int (*GetEndVersion)(const struct OrtCustomOp* op);
  size_t (*GetMayInplace)(int** input_index, int** output_index);
  void (*ReleaseMayInplace)(int* input_index, int* output_index);
  size_t (*GetAliasMap)(int** input_index, int** output_index);
  void (*ReleaseAliasMap)(int* input_index, int* output_index);
} OrtCustomOp;

/// The exported entry point of a custom-op library.
typedef OrtStatus* (*OrtRegisterCustomOpsFn)(OrtSessionOptions* options, const OrtApiBase* api);

}  // extern "C"

namespace opforge_ort {

/// Every entry's index in the table.
enum Entry : int {
#define OPF_ORT_INDEX(name) k##name,
  OPF_ORT_API_ENTRIES(OPF_ORT_INDEX, OPF_ORT_INDEX)
#undef OPF_ORT_INDEX
  kNumEntries
};

/// The entries opforge calls or implements: (API version that added it, name, return type,
/// parameters). Entries of the first groups predate the adapter's oldest runtime (16).
#define OPF_ORT_TYPED_ENTRIES(X)                                                                                 \
  X(1, CreateStatus, OrtStatus*, (OrtErrorCode code, const char* msg))                                         \
  X(1, GetErrorCode, OrtErrorCode, (const OrtStatus* status))                                                  \
  X(1, GetErrorMessage, const char*, (const OrtStatus* status))                                                \
  X(1, ReleaseStatus, void, (OrtStatus * status))                                                              \
  X(1, CreateCustomOpDomain, OrtStatus*, (const char* domain, OrtCustomOpDomain** out))                        \
  X(1, CustomOpDomain_Add, OrtStatus*, (OrtCustomOpDomain * domain, const OrtCustomOp* op))                    \
  X(1, AddCustomOpDomain, OrtStatus*, (OrtSessionOptions * options, OrtCustomOpDomain* domain))                \
  X(1, ReleaseCustomOpDomain, void, (OrtCustomOpDomain * domain))                                              \
  X(1, CreateTensorAsOrtValue, OrtStatus*,                                                                     \
    (OrtAllocator * allocator, const int64_t* shape, size_t shape_len, ONNXTensorElementDataType type,         \
     OrtValue** out))                                                                                          \
  X(1, CreateTensorWithDataAsOrtValue, OrtStatus*,                                                             \
    (const OrtMemoryInfo* info, void* data, size_t data_len, const int64_t* shape, size_t shape_len,           \
     ONNXTensorElementDataType type, OrtValue** out))                                                          \
  X(1, IsTensor, OrtStatus*, (const OrtValue* value, int* out))                                                \
  X(1, GetTensorMutableData, OrtStatus*, (OrtValue * value, void** out))                                       \
  X(1, FillStringTensor, OrtStatus*, (OrtValue * value, const char* const* s, size_t s_len))                   \
  X(1, GetStringTensorDataLength, OrtStatus*, (const OrtValue* value, size_t* len))                            \
  X(1, GetStringTensorContent, OrtStatus*,                                                                     \
    (const OrtValue* value, void* s, size_t s_len, size_t* offsets, size_t offsets_len))                      \
  X(1, CastTypeInfoToTensorInfo, OrtStatus*, (const OrtTypeInfo* type_info, const OrtTensorTypeAndShapeInfo** out)) \
  X(1, GetOnnxTypeFromTypeInfo, OrtStatus*, (const OrtTypeInfo* type_info, ONNXType* out))                     \
  X(1, CreateTensorTypeAndShapeInfo, OrtStatus*, (OrtTensorTypeAndShapeInfo * *out))                           \
  X(1, SetTensorElementType, OrtStatus*, (OrtTensorTypeAndShapeInfo * info, ONNXTensorElementDataType type))   \
  X(1, SetDimensions, OrtStatus*, (OrtTensorTypeAndShapeInfo * info, const int64_t* dims, size_t count))       \
  X(1, GetTensorElementType, OrtStatus*, (const OrtTensorTypeAndShapeInfo* info, ONNXTensorElementDataType* out)) \
  X(1, GetDimensionsCount, OrtStatus*, (const OrtTensorTypeAndShapeInfo* info, size_t* out))                   \
  X(1, GetDimensions, OrtStatus*, (const OrtTensorTypeAndShapeInfo* info, int64_t* dims, size_t count))        \
  X(1, GetSymbolicDimensions, OrtStatus*, (const OrtTensorTypeAndShapeInfo* info, const char** dims, size_t count)) \
  X(1, GetTensorShapeElementCount, OrtStatus*, (const OrtTensorTypeAndShapeInfo* info, size_t* out))           \
  X(1, GetTensorTypeAndShape, OrtStatus*, (const OrtValue* value, OrtTensorTypeAndShapeInfo** out))            \
  X(1, GetTypeInfo, OrtStatus*, (const OrtValue* value, OrtTypeInfo** out))                                    \
  X(1, GetValueType, OrtStatus*, (const OrtValue* value, ONNXType* out))                                       \
  X(1, CreateMemoryInfo, OrtStatus*,                                                                           \
    (const char* name, OrtAllocatorType type, int id, OrtMemType mem_type, OrtMemoryInfo** out))               \
  X(1, CreateCpuMemoryInfo, OrtStatus*, (OrtAllocatorType type, OrtMemType mem_type, OrtMemoryInfo** out))     \
  X(1, CompareMemoryInfo, OrtStatus*, (const OrtMemoryInfo* a, const OrtMemoryInfo* b, int* out))              \
  X(1, MemoryInfoGetName, OrtStatus*, (const OrtMemoryInfo* info, const char** out))                           \
  X(1, MemoryInfoGetId, OrtStatus*, (const OrtMemoryInfo* info, int* out))                                     \
  X(1, MemoryInfoGetMemType, OrtStatus*, (const OrtMemoryInfo* info, OrtMemType* out))                         \
  X(1, MemoryInfoGetType, OrtStatus*, (const OrtMemoryInfo* info, OrtAllocatorType* out))                      \
  X(1, AllocatorAlloc, OrtStatus*, (OrtAllocator * allocator, size_t size, void** out))                        \
  X(1, AllocatorFree, OrtStatus*, (OrtAllocator * allocator, void* p))                                         \
  X(1, AllocatorGetInfo, OrtStatus*, (const OrtAllocator* allocator, const OrtMemoryInfo** out))               \
  X(1, GetAllocatorWithDefaultOptions, OrtStatus*, (OrtAllocator * *out))                                      \
  X(1, KernelInfoGetAttribute_float, OrtStatus*, (const OrtKernelInfo* info, const char* name, float* out))    \
  X(1, KernelInfoGetAttribute_int64, OrtStatus*, (const OrtKernelInfo* info, const char* name, int64_t* out))  \
  X(1, KernelInfoGetAttribute_string, OrtStatus*,                                                              \
    (const OrtKernelInfo* info, const char* name, char* out, size_t* size))                                    \
  X(1, KernelContext_GetInputCount, OrtStatus*, (const OrtKernelContext* context, size_t* out))                \
  X(1, KernelContext_GetOutputCount, OrtStatus*, (const OrtKernelContext* context, size_t* out))               \
  X(1, KernelContext_GetInput, OrtStatus*, (const OrtKernelContext* context, size_t index, const OrtValue** out)) \
  X(1, KernelContext_GetOutput, OrtStatus*,                                                                    \
    (OrtKernelContext * context, size_t index, const int64_t* dims, size_t dim_count, OrtValue** out))         \
  X(1, ReleaseMemoryInfo, void, (OrtMemoryInfo * info))                                                        \
  X(1, ReleaseValue, void, (OrtValue * value))                                                                 \
  X(1, ReleaseTypeInfo, void, (OrtTypeInfo * info))                                                            \
  X(1, ReleaseTensorTypeAndShapeInfo, void, (OrtTensorTypeAndShapeInfo * info))                                \
  X(1, GetStringTensorElementLength, OrtStatus*, (const OrtValue* value, size_t index, size_t* out))           \
  X(1, GetStringTensorElement, OrtStatus*, (const OrtValue* value, size_t s_len, size_t index, void* s))       \
  X(1, FillStringTensorElement, OrtStatus*, (OrtValue * value, const char* s, size_t index))                   \
  X(1, ReleaseAllocator, void, (OrtAllocator * allocator))                                                     \
  X(1, KernelInfoGetAttributeArray_float, OrtStatus*,                                                          \
    (const OrtKernelInfo* info, const char* name, float* out, size_t* size))                                   \
  X(1, KernelInfoGetAttributeArray_int64, OrtStatus*,                                                          \
    (const OrtKernelInfo* info, const char* name, int64_t* out, size_t* size))                                 \
  X(1, HasValue, OrtStatus*, (const OrtValue* value, int* out))                                                \
  X(1, KernelContext_GetGPUComputeStream, OrtStatus*, (const OrtKernelContext* context, void** out))           \
  X(1, GetTensorMemoryInfo, OrtStatus*, (const OrtValue* value, const OrtMemoryInfo** out))                    \
  X(12, CopyKernelInfo, OrtStatus*, (const OrtKernelInfo* info, OrtKernelInfo** out))                           \
  X(12, ReleaseKernelInfo, void, (OrtKernelInfo * info))                                                       \
  X(14, MemoryInfoGetDeviceType, void, (const OrtMemoryInfo* info, OrtMemoryInfoDeviceType* out))              \
  X(14, KernelInfo_GetInputCount, OrtStatus*, (const OrtKernelInfo* info, size_t* out))                        \
  X(14, KernelInfo_GetOutputCount, OrtStatus*, (const OrtKernelInfo* info, size_t* out))                       \
  X(14, KernelInfo_GetInputName, OrtStatus*, (const OrtKernelInfo* info, size_t index, char* out, size_t* size)) \
  X(14, KernelInfo_GetOutputName, OrtStatus*, (const OrtKernelInfo* info, size_t index, char* out, size_t* size)) \
  X(14, KernelInfo_GetInputTypeInfo, OrtStatus*, (const OrtKernelInfo* info, size_t index, OrtTypeInfo** out)) \
  X(14, KernelInfo_GetOutputTypeInfo, OrtStatus*, (const OrtKernelInfo* info, size_t index, OrtTypeInfo** out)) \
  X(14, KernelInfoGetAttribute_tensor, OrtStatus*,                                                             \
    (const OrtKernelInfo* info, const char* name, OrtAllocator* allocator, OrtValue** out))                    \
  X(15, KernelInfo_GetNodeName, OrtStatus*, (const OrtKernelInfo* info, char* out, size_t* size))              \
  X(15, KernelInfo_GetLogger, OrtStatus*, (const OrtKernelInfo* info, const OrtLogger** out))                  \
  X(15, KernelContext_GetLogger, OrtStatus*, (const OrtKernelContext* context, const OrtLogger** out))         \
  X(15, Logger_LogMessage, OrtStatus*,                                                                         \
    (const OrtLogger* logger, OrtLoggingLevel level, const char* message, const char* file, int line,          \
     const char* func))                                                                                        \
  X(15, Logger_GetLoggingSeverityLevel, OrtStatus*, (const OrtLogger* logger, OrtLoggingLevel* out))           \
  X(15, KernelInfoGetConstantInput_tensor, OrtStatus*,                                                         \
    (const OrtKernelInfo* info, size_t index, int* is_constant, const OrtValue** out))                         \
  X(15, GetResizedStringTensorElementBuffer, OrtStatus*,                                                       \
    (OrtValue * value, size_t index, size_t length, char** buffer))                                            \
  X(15, KernelContext_GetAllocator, OrtStatus*,                                                                \
    (const OrtKernelContext* context, const OrtMemoryInfo* info, OrtAllocator** out))                          \
  X(17, ShapeInferContext_GetInputCount, OrtStatus*, (const OrtShapeInferContext* context, size_t* out))       \
  X(17, ShapeInferContext_GetInputTypeShape, OrtStatus*,                                                       \
    (const OrtShapeInferContext* context, size_t index, OrtTensorTypeAndShapeInfo** out))                      \
  X(17, ShapeInferContext_GetAttribute, OrtStatus*,                                                            \
    (const OrtShapeInferContext* context, const char* name, const OrtOpAttr** out))                            \
  X(17, ShapeInferContext_SetOutputTypeShape, OrtStatus*,                                                      \
    (const OrtShapeInferContext* context, size_t index, const OrtTensorTypeAndShapeInfo* info))                \
  X(17, SetSymbolicDimensions, OrtStatus*, (OrtTensorTypeAndShapeInfo * info, const char** dims, size_t count)) \
  X(17, ReadOpAttr, OrtStatus*, (const OrtOpAttr* attr, OrtOpAttrType type, void* data, size_t len, size_t* out)) \
  X(17, KernelContext_ParallelFor, OrtStatus*,                                                                 \
    (const OrtKernelContext* context, void (*fn)(void*, size_t), size_t total, size_t num_batch, void* data))  \
  X(18, KernelInfoGetAllocator, OrtStatus*, (const OrtKernelInfo* info, OrtMemType mem_type, OrtAllocator** out)) \
  X(23, GetTensorSizeInBytes, OrtStatus*, (const OrtValue* value, size_t* size))                               \
  X(23, GetTensorData, OrtStatus*, (const OrtValue* value, const void** out))                                  \
  X(24, TensorTypeAndShape_HasShape, bool, (const OrtTensorTypeAndShapeInfo* info))                            \
  X(24, GetTensorElementTypeAndShapeDataReference, OrtStatus*,                                                 \
    (const OrtValue* value, ONNXTensorElementDataType* type, const int64_t** shape, size_t* rank))             \
  X(24, KernelInfo_GetOperatorDomain, OrtStatus*, (const OrtKernelInfo* info, char* out, size_t* size))     \
  X(24, KernelInfo_GetOperatorType, OrtStatus*, (const OrtKernelInfo* info, char* out, size_t* size))       \
  X(24, KernelInfo_GetOperatorSinceVersion, OrtStatus*, (const OrtKernelInfo* info, int* out))              \
  X(25, KernelInfoGetAttributeArray_string, OrtStatus*,                                                        \
    (const OrtKernelInfo* info, const char* name, OrtAllocator* allocator, char*** out, size_t* size))

/// The C type of each typed entry: Fn_CreateStatus is OrtStatus* (*)(OrtErrorCode, const char*).
#define OPF_ORT_FN_TYPE(since, name, ret, params) using Fn_##name = ret(*) params;
OPF_ORT_TYPED_ENTRIES(OPF_ORT_FN_TYPE)
#undef OPF_ORT_FN_TYPE

/// The API version that added each typed entry.
#define OPF_ORT_SINCE(since, name, ret, params) constexpr int kSince_##name = since;
OPF_ORT_TYPED_ENTRIES(OPF_ORT_SINCE)
#undef OPF_ORT_SINCE

/// The newest API version ort_api_entries.h covers: its table has kNumEntries entries.
constexpr int kNewestApi = 29;

/// Entry `index` of `api` as the function type F.
template <class F>
inline F entry(const OrtApi* api, int index) {
  return reinterpret_cast<F>(api->entries[index]);
}

}  // namespace opforge_ort
