// ort_host.h: opforge's host for onnxruntime custom-op libraries. It loads a library that
// exports RegisterCustomOps, hands it opforge's implementation of the part of onnxruntime's C
// API that custom ops use, and runs its kernels on values the runtime passes in.
//
// The objects onnxruntime keeps opaque are defined here; the API entries that read and make
// them are in ort_host_api.cpp (status, registration, the table), ort_host_values.cpp
// (tensors, type and shape info, memory) and ort_host_kernel.cpp (kernel info and context,
// shape inference). Nothing here touches Python: ort_host_bindings.cpp converts arrays.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ort_api.h"
#include "thread_pool.h"

struct OrtStatus {
  OrtErrorCode code;
  std::string message;
};

/// Only CPU memory: the host runs CPU custom ops.
struct OrtMemoryInfo {
  std::string name = "Cpu";
  int id = 0;
  OrtAllocatorType type = OrtDeviceAllocator;
  OrtMemType mem_type = OrtMemTypeDefault;
};

struct OrtTensorTypeAndShapeInfo {
  ONNXTensorElementDataType dtype = ORT_TYPE_UNDEFINED;
  std::vector<int64_t> shape;          ///< -1 for an unknown size
  std::vector<std::string> symbols;    ///< per dim, "" where none
  bool has_shape = true;
};

struct OrtTypeInfo {
  ONNXType type = ONNX_TYPE_TENSOR;
  OrtTensorTypeAndShapeInfo tensor;
};

/// A tensor: numeric elements at `data` (borrowed from the caller's array, or `owned`), or
/// strings.
struct OrtValue {
  ONNXTensorElementDataType dtype = ORT_TYPE_UNDEFINED;
  std::vector<int64_t> shape;
  void* data = nullptr;
  std::shared_ptr<void> owned;
  std::vector<std::string> strings;
  bool released_by_caller = false;  ///< made by CreateTensor*: ReleaseValue frees it

  int64_t count() const;
  bool is_string() const { return dtype == ORT_TYPE_STRING; }
};

/// A node attribute: kind (an opf_attr_type) and value.
struct OrtOpAttr {
  int32_t type = 0;
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  OrtValue tensor;
};

struct OrtCustomOpDomain {
  std::string name;
  std::vector<const OrtCustomOp*> ops;
};

/// What a library's RegisterCustomOps fills: the domains it adds.
struct OrtSessionOptions {
  std::vector<OrtCustomOpDomain*> domains;
};

/// One node as a kernel sees it: names, types, attributes.
struct OrtKernelInfo {
  std::string node_name, op_type, domain;
  int since_version = 1;
  std::vector<std::string> input_names, output_names;
  std::vector<OrtTypeInfo> input_types, output_types;
  std::map<std::string, OrtOpAttr> attrs;
};

/// One call of a kernel: its inputs, the outputs it allocates, the threads it may use.
struct OrtKernelContext {
  std::vector<const OrtValue*> inputs;            ///< null for an absent optional input
  std::vector<std::unique_ptr<OrtValue>> outputs; ///< made by KernelContext_GetOutput
  std::vector<ONNXTensorElementDataType> output_types;
  opforge_core::ThreadPool* pool = nullptr;
};

/// Shape inference of one node: input types and shapes, attributes, what it sets.
struct OrtShapeInferContext {
  std::vector<OrtTensorTypeAndShapeInfo> inputs;
  const std::map<std::string, OrtOpAttr>* attrs = nullptr;
  std::vector<std::unique_ptr<OrtTensorTypeAndShapeInfo>> outputs;
};

struct OrtLogger {};

namespace opforge_ort {

/// The C API version the host gives libraries (its table holds every entry up to it).
constexpr int kHostApi = kNewestApi;

/// The host's OrtApiBase: GetApi(1..kHostApi) returns its table.
const OrtApiBase* host_api_base();
/// The host's table (for the kernels' calls into the library's callbacks).
const OrtApi* host_api();

/// A status of the host's (what its entries return).
OrtStatus* make_status(OrtErrorCode code, const std::string& message);

/// The entries a library called that the host does not implement, since the last call on
/// this thread (cleared by reading): "OrtApi::Name", or "".
std::string take_unimplemented();

/// Element type names ("float", "string") for messages.
std::string type_name(ONNXTensorElementDataType t);

}  // namespace opforge_ort
