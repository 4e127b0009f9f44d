// ort_host_kernel.cpp: what a library's kernels ask of the node they serve (kernel info:
// attributes, names, types) and of a call (kernel context: inputs, outputs, threads), what
// its shape inference reads and sets, and the logger; and running its callbacks.
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "opforge/dtype.h"
#include "ort_host.h"
#include "ort_host_entries.h"

namespace opforge_ort {

namespace {

OrtStatus* invalid(const std::string& message) { return make_status(ORT_INVALID_ARGUMENT, message); }

/// The attribute `name` of kind `type`, or an error status as onnxruntime words it.
OrtStatus* find_attr(const std::map<std::string, OrtOpAttr>& attrs, const char* name, int32_t type,
                     const OrtOpAttr** out) {
  auto it = attrs.find(name ? name : "");
  if (it == attrs.end()) return make_status(ORT_FAIL, std::string("No attribute with name:'") + name + "'is defined.");
  if (it->second.type != type)
    return make_status(ORT_FAIL, std::string("Attribute name and type don't match for '") + name + "'");
  *out = &it->second;
  return nullptr;
}

/// onnxruntime's convention for copying into a caller's buffer: `out` null asks the size.
template <class T>
OrtStatus* copy_out(const T* data, size_t n, T* out, size_t* size) {
  if (out == nullptr) {
    *size = n;
    return nullptr;
  }
  if (*size < n) {
    *size = n;
    return invalid("Result buffer is not large enough");
  }
  std::copy_n(data, n, out);
  *size = n;
  return nullptr;
}

OrtStatus* copy_text(const std::string& text, char* out, size_t* size) {
  return copy_out(text.c_str(), text.size() + 1, out, size);
}

// --- kernel info

OrtStatus* api_KernelInfoGetAttribute_float(const OrtKernelInfo* info, const char* name, float* out) {
  const OrtOpAttr* a = nullptr;
  if (OrtStatus* st = find_attr(info->attrs, name, 1, &a)) return st;
  *out = a->f;
  return nullptr;
}
OrtStatus* api_KernelInfoGetAttribute_int64(const OrtKernelInfo* info, const char* name, int64_t* out) {
  const OrtOpAttr* a = nullptr;
  if (OrtStatus* st = find_attr(info->attrs, name, 2, &a)) return st;
  *out = a->i;
  return nullptr;
}
OrtStatus* api_KernelInfoGetAttribute_string(const OrtKernelInfo* info, const char* name, char* out, size_t* size) {
  const OrtOpAttr* a = nullptr;
  if (OrtStatus* st = find_attr(info->attrs, name, 3, &a)) return st;
  return copy_text(a->s, out, size);
}
OrtStatus* api_KernelInfoGetAttributeArray_float(const OrtKernelInfo* info, const char* name, float* out, size_t* size) {
  const OrtOpAttr* a = nullptr;
  if (OrtStatus* st = find_attr(info->attrs, name, 6, &a)) return st;
  return copy_out(a->floats.data(), a->floats.size(), out, size);
}
OrtStatus* api_KernelInfoGetAttributeArray_int64(const OrtKernelInfo* info, const char* name, int64_t* out, size_t* size) {
  const OrtOpAttr* a = nullptr;
  if (OrtStatus* st = find_attr(info->attrs, name, 7, &a)) return st;
  return copy_out(a->ints.data(), a->ints.size(), out, size);
}
OrtStatus* api_KernelInfoGetAttributeArray_string(const OrtKernelInfo* info, const char* name, OrtAllocator* alloc,
                                                  char*** out, size_t* size) {
  const OrtOpAttr* a = nullptr;
  if (OrtStatus* st = find_attr(info->attrs, name, 8, &a)) return st;
  *size = a->strings.size();
  if (out == nullptr) return nullptr;
  *out = nullptr;
  if (a->strings.empty()) return nullptr;
  *out = static_cast<char**>(alloc->Alloc(alloc, sizeof(char*) * a->strings.size()));
  for (size_t k = 0; k < a->strings.size(); ++k) {
    (*out)[k] = static_cast<char*>(alloc->Alloc(alloc, a->strings[k].size() + 1));
    std::memcpy((*out)[k], a->strings[k].c_str(), a->strings[k].size() + 1);
  }
  return nullptr;
}
OrtStatus* api_KernelInfoGetAttribute_tensor(const OrtKernelInfo* info, const char* name, OrtAllocator*, OrtValue** out) {
  const OrtOpAttr* a = nullptr;
  if (OrtStatus* st = find_attr(info->attrs, name, 4, &a)) return st;
  const OrtValue& t = a->tensor;
  OrtValue* v = new_value(t.shape.data(), t.shape.size(), t.dtype);
  if (t.is_string()) {
    v->strings = t.strings;
  } else {
    std::memcpy(v->data, t.data, size_t(t.count() * opforge::dtype_size(t.dtype)));
  }
  *out = v;
  return nullptr;
}
OrtStatus* api_KernelInfo_GetInputCount(const OrtKernelInfo* info, size_t* out) {
  *out = info->input_names.size();
  return nullptr;
}
OrtStatus* api_KernelInfo_GetOutputCount(const OrtKernelInfo* info, size_t* out) {
  *out = info->output_names.size();
  return nullptr;
}
OrtStatus* api_KernelInfo_GetInputName(const OrtKernelInfo* info, size_t index, char* out, size_t* size) {
  if (index >= info->input_names.size()) return invalid("::OrtKernelInfo input index is out of bounds");
  return copy_text(info->input_names[index], out, size);
}
OrtStatus* api_KernelInfo_GetOutputName(const OrtKernelInfo* info, size_t index, char* out, size_t* size) {
  if (index >= info->output_names.size()) return invalid("::OrtKernelInfo output index is out of bounds");
  return copy_text(info->output_names[index], out, size);
}
OrtStatus* api_KernelInfo_GetInputTypeInfo(const OrtKernelInfo* info, size_t index, OrtTypeInfo** out) {
  if (index >= info->input_types.size()) return invalid("::OrtKernelInfo input index is out of bounds");
  *out = new OrtTypeInfo(info->input_types[index]);
  return nullptr;
}
OrtStatus* api_KernelInfo_GetOutputTypeInfo(const OrtKernelInfo* info, size_t index, OrtTypeInfo** out) {
  if (index >= info->output_types.size()) return invalid("::OrtKernelInfo output index is out of bounds");
  *out = new OrtTypeInfo(info->output_types[index]);
  return nullptr;
}
OrtStatus* api_KernelInfo_GetNodeName(const OrtKernelInfo* info, char* out, size_t* size) {
  return copy_text(info->node_name, out, size);
}
OrtStatus* api_KernelInfo_GetOperatorDomain(const OrtKernelInfo* info, char* out, size_t* size) {
  return copy_text(info->domain, out, size);
}
OrtStatus* api_KernelInfo_GetOperatorType(const OrtKernelInfo* info, char* out, size_t* size) {
  return copy_text(info->op_type, out, size);
}
OrtStatus* api_KernelInfo_GetOperatorSinceVersion(const OrtKernelInfo* info, int* out) {
  *out = info->since_version;
  return nullptr;
}
OrtStatus* api_KernelInfoGetConstantInput_tensor(const OrtKernelInfo*, size_t, int* is_constant, const OrtValue** out) {
  *is_constant = 0;  // the host does not tell constant inputs apart
  *out = nullptr;
  return nullptr;
}
OrtStatus* api_KernelInfoGetAllocator(const OrtKernelInfo*, OrtMemType, OrtAllocator** out) {
  *out = cpu_allocator_of_host();
  return nullptr;
}
OrtStatus* api_CopyKernelInfo(const OrtKernelInfo* info, OrtKernelInfo** out) {
  *out = new OrtKernelInfo(*info);
  return nullptr;
}
void api_ReleaseKernelInfo(OrtKernelInfo* info) { delete info; }

OrtLogger logger;

OrtStatus* api_KernelInfo_GetLogger(const OrtKernelInfo*, const OrtLogger** out) {
  *out = &logger;
  return nullptr;
}

// --- kernel context

OrtStatus* api_KernelContext_GetInputCount(const OrtKernelContext* ctx, size_t* out) {
  *out = ctx->inputs.size();
  return nullptr;
}
OrtStatus* api_KernelContext_GetOutputCount(const OrtKernelContext* ctx, size_t* out) {
  *out = ctx->outputs.size();
  return nullptr;
}
OrtStatus* api_KernelContext_GetInput(const OrtKernelContext* ctx, size_t index, const OrtValue** out) {
  *out = index < ctx->inputs.size() ? ctx->inputs[index] : nullptr;
  return nullptr;
}
OrtStatus* api_KernelContext_GetOutput(OrtKernelContext* ctx, size_t index, const int64_t* dims, size_t count,
                                       OrtValue** out) {
  if (index >= ctx->outputs.size()) return invalid("KernelContext_GetOutput: output index " + std::to_string(index) + " is out of range");
  const ONNXTensorElementDataType type = ctx->output_types[index];
  if (type == ORT_TYPE_UNDEFINED)
    return invalid("KernelContext_GetOutput: the type of output #" + std::to_string(index) + " is not known");
  for (size_t d = 0; d < count; ++d)
    if (dims[d] < 0) return invalid("KernelContext_GetOutput: negative size in the shape");
  ctx->outputs[index].reset(new_value(dims, count, type));
  ctx->outputs[index]->released_by_caller = false;
  *out = ctx->outputs[index].get();
  return nullptr;
}
OrtStatus* api_KernelContext_GetGPUComputeStream(const OrtKernelContext*, void** out) {
  *out = nullptr;  // CPU kernels only
  return nullptr;
}
OrtStatus* api_KernelContext_GetAllocator(const OrtKernelContext*, const OrtMemoryInfo*, OrtAllocator** out) {
  *out = cpu_allocator_of_host();
  return nullptr;
}
OrtStatus* api_KernelContext_GetLogger(const OrtKernelContext*, const OrtLogger** out) {
  *out = &logger;
  return nullptr;
}

struct Indexed {
  void (*fn)(void*, size_t);
  void* data;
};

OrtStatus* api_KernelContext_ParallelFor(const OrtKernelContext* ctx, void (*fn)(void*, size_t), size_t total,
                                         size_t num_batch, void* data) {
  if (fn == nullptr || total == 0) return nullptr;
  Indexed job{fn, data};
  auto each = [](void* arg, int64_t begin, int64_t end) {
    const Indexed& j = *static_cast<const Indexed*>(arg);
    for (int64_t i = begin; i < end; ++i) j.fn(j.data, size_t(i));
  };
  const int64_t grain = num_batch ? int64_t((total + num_batch - 1) / num_batch) : 1;
  if (ctx->pool == nullptr) {
    each(&job, 0, int64_t(total));
  } else {
    ctx->pool->parallel_for(int64_t(total), grain, each, &job);
  }
  return nullptr;
}

// --- logging: warnings and errors go to stderr, as onnxruntime's default logger sends them

OrtStatus* api_Logger_LogMessage(const OrtLogger*, OrtLoggingLevel level, const char* message, const char* file,
                                 int line, const char*) {
  if (level >= ORT_LOGGING_LEVEL_WARNING)
    std::fprintf(stderr, "onnxruntime custom op (%s:%d): %s\n", file ? file : "?", line, message ? message : "");
  return nullptr;
}
OrtStatus* api_Logger_GetLoggingSeverityLevel(const OrtLogger*, OrtLoggingLevel* out) {
  *out = ORT_LOGGING_LEVEL_WARNING;
  return nullptr;
}

// --- shape inference

OrtStatus* api_ShapeInferContext_GetInputCount(const OrtShapeInferContext* ctx, size_t* out) {
  *out = ctx->inputs.size();
  return nullptr;
}
OrtStatus* api_ShapeInferContext_GetInputTypeShape(const OrtShapeInferContext* ctx, size_t index,
                                                   OrtTensorTypeAndShapeInfo** out) {
  if (index >= ctx->inputs.size()) return invalid("Failed to fetch type shape info for the index.");
  *out = const_cast<OrtTensorTypeAndShapeInfo*>(&ctx->inputs[index]);
  return nullptr;
}
OrtStatus* api_ShapeInferContext_GetAttribute(const OrtShapeInferContext* ctx, const char* name, const OrtOpAttr** out) {
  auto it = ctx->attrs->find(name ? name : "");
  if (it == ctx->attrs->end()) return invalid("Attribute does not exist.");
  *out = &it->second;
  return nullptr;
}
OrtStatus* api_ShapeInferContext_SetOutputTypeShape(const OrtShapeInferContext* ctx, size_t index,
                                                    const OrtTensorTypeAndShapeInfo* info) {
  auto& outputs = const_cast<OrtShapeInferContext*>(ctx)->outputs;
  if (index >= outputs.size()) return invalid("ShapeInferContext_SetOutputTypeShape: output index out of range");
  outputs[index].reset(new OrtTensorTypeAndShapeInfo(*info));
  return nullptr;
}
OrtStatus* api_ReadOpAttr(const OrtOpAttr* a, OrtOpAttrType type, void* data, size_t len, size_t* out) {
  auto fits = [&](size_t bytes) {
    *out = bytes;
    return len >= bytes;
  };
  switch (type) {
    case ORT_OP_ATTR_FLOAT:
      if (a->type != 1) return invalid("Attribute has no float value.");
      if (!fits(sizeof(float))) return invalid("Size of data not large enough to hold a float.");
      std::memcpy(data, &a->f, sizeof(float));
      return nullptr;
    case ORT_OP_ATTR_INT:
      if (a->type != 2) return invalid("Attribute has no int64 value.");
      if (!fits(sizeof(int64_t))) return invalid("Size of data not large enough to hold an int64.");
      std::memcpy(data, &a->i, sizeof(int64_t));
      return nullptr;
    case ORT_OP_ATTR_FLOATS:
      if (!fits(a->floats.size() * sizeof(float))) return invalid("Size of data not large enough to hold the array of floats.");
      if (!a->floats.empty()) std::memcpy(data, a->floats.data(), *out);
      return nullptr;
    case ORT_OP_ATTR_INTS:
      if (!fits(a->ints.size() * sizeof(int64_t))) return invalid("Size of data not large enough to hold the array of int64.");
      if (!a->ints.empty()) std::memcpy(data, a->ints.data(), *out);
      return nullptr;
    case ORT_OP_ATTR_STRING:
      if (!fits(a->s.size() + 1)) return invalid("Size of data not large enough to hold the string.");
      std::memcpy(data, a->s.c_str(), a->s.size() + 1);
      return nullptr;
    case ORT_OP_ATTR_STRINGS: {
      size_t bytes = 0;
      for (const auto& s : a->strings) bytes += s.size() + 1;
      if (!fits(bytes)) return invalid("Size of data not large enough to hold the array of strings.");
      char* p = static_cast<char*>(data);
      for (const auto& s : a->strings) p = static_cast<char*>(std::memcpy(p, s.c_str(), s.size() + 1)) + s.size() + 1;
      return nullptr;
    }
    default:
      return invalid("Unexpected attribute type. ");
  }
}

}  // namespace

void set_kernel_entries(OrtApiEntry* table) {
  OPF_ORT_SET(table, KernelInfoGetAttribute_float);
  OPF_ORT_SET(table, KernelInfoGetAttribute_int64);
  OPF_ORT_SET(table, KernelInfoGetAttribute_string);
  OPF_ORT_SET(table, KernelInfoGetAttributeArray_float);
  OPF_ORT_SET(table, KernelInfoGetAttributeArray_int64);
  OPF_ORT_SET(table, KernelInfoGetAttributeArray_string);
  OPF_ORT_SET(table, KernelInfoGetAttribute_tensor);
  OPF_ORT_SET(table, KernelInfo_GetInputCount);
  OPF_ORT_SET(table, KernelInfo_GetOutputCount);
  OPF_ORT_SET(table, KernelInfo_GetInputName);
  OPF_ORT_SET(table, KernelInfo_GetOutputName);
  OPF_ORT_SET(table, KernelInfo_GetInputTypeInfo);
  OPF_ORT_SET(table, KernelInfo_GetOutputTypeInfo);
  OPF_ORT_SET(table, KernelInfo_GetNodeName);
  OPF_ORT_SET(table, KernelInfo_GetOperatorDomain);
  OPF_ORT_SET(table, KernelInfo_GetOperatorType);
  OPF_ORT_SET(table, KernelInfo_GetOperatorSinceVersion);
  OPF_ORT_SET(table, KernelInfoGetConstantInput_tensor);
  OPF_ORT_SET(table, KernelInfoGetAllocator);
  OPF_ORT_SET(table, CopyKernelInfo);
  OPF_ORT_SET(table, ReleaseKernelInfo);
  OPF_ORT_SET(table, KernelInfo_GetLogger);
  OPF_ORT_SET(table, KernelContext_GetInputCount);
  OPF_ORT_SET(table, KernelContext_GetOutputCount);
  OPF_ORT_SET(table, KernelContext_GetInput);
  OPF_ORT_SET(table, KernelContext_GetOutput);
  OPF_ORT_SET(table, KernelContext_GetGPUComputeStream);
  OPF_ORT_SET(table, KernelContext_GetAllocator);
  OPF_ORT_SET(table, KernelContext_GetLogger);
  OPF_ORT_SET(table, KernelContext_ParallelFor);
  OPF_ORT_SET(table, Logger_LogMessage);
  OPF_ORT_SET(table, Logger_GetLoggingSeverityLevel);
  OPF_ORT_SET(table, ShapeInferContext_GetInputCount);
  OPF_ORT_SET(table, ShapeInferContext_GetInputTypeShape);
  OPF_ORT_SET(table, ShapeInferContext_GetAttribute);
  OPF_ORT_SET(table, ShapeInferContext_SetOutputTypeShape);
  OPF_ORT_SET(table, ReadOpAttr);
}

}  // namespace opforge_ort
