// ort_host_library.cpp: loading an onnxruntime custom-op library with the host's API and
// calling its ops' callbacks (whose errors come back as statuses, or, from callbacks of the
// first API, as C++ exceptions).
#include "ort_host_library.h"

#include <dlfcn.h>

namespace opforge_ort {

namespace {

/// The message of a non-null status (released), with the unimplemented entries the callback
/// called, if any.
std::string message_of(OrtStatus* st) {
  std::string text = st->message;
  delete st;
  std::string missing = take_unimplemented();
  if (!missing.empty() && text.find(missing) == std::string::npos)
    text += " (it called " + missing + ", which opforge does not implement)";
  return text;
}

std::string name_of(const OrtCustomOp* op) { return op->GetName ? op->GetName(op) : "?"; }

}  // namespace

std::vector<HostOp> load_host_library(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw std::runtime_error("cannot load custom-op library " + path + ": " + (why ? why : "unknown error"));
  }
  auto reg = reinterpret_cast<OrtRegisterCustomOpsFn>(dlsym(handle, "RegisterCustomOps"));
  if (reg == nullptr)
    throw std::runtime_error(path + " exports no RegisterCustomOps: it is not an onnxruntime custom-op library");
  OrtSessionOptions options;
  take_unimplemented();
  OrtStatus* st = nullptr;
  try {
    st = reg(&options, host_api_base());
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": RegisterCustomOps failed: " + e.what());
  }
  if (st != nullptr) throw std::runtime_error(path + ": RegisterCustomOps failed: " + message_of(st));
  std::vector<HostOp> ops;
  for (OrtCustomOpDomain* d : options.domains)
    for (const OrtCustomOp* op : d->ops) ops.push_back({d->name, op});
  return ops;
}

HostKernel::HostKernel(const OrtCustomOp* op, OrtKernelInfo info) : op_(op), info_(std::move(info)) {
  take_unimplemented();
  const OrtApi* api = host_api();
  try {
    if (op_->version >= kOpV2Callbacks && op_->CreateKernelV2 != nullptr) {
      if (OrtStatus* st = op_->CreateKernelV2(op_, api, &info_, &kernel_)) fail(message_of(st));
    } else {
      kernel_ = op_->CreateKernel(op_, api, &info_);
    }
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::exception& e) {
    fail(e.what());
  }
  std::string missing = take_unimplemented();
  if (!missing.empty()) fail("creating its kernel called " + missing + ", which opforge does not implement");
}

HostKernel::~HostKernel() {
  if (op_->KernelDestroy != nullptr) op_->KernelDestroy(kernel_);
}

void HostKernel::fail(const std::string& what) const { throw std::runtime_error(name_of(op_) + ": " + what); }

void HostKernel::compute(OrtKernelContext& ctx) const {
  take_unimplemented();
  try {
    if (op_->version >= kOpV2Callbacks && op_->KernelComputeV2 != nullptr) {
      if (OrtStatus* st = op_->KernelComputeV2(kernel_, &ctx)) fail(message_of(st));
    } else {
      op_->KernelCompute(kernel_, &ctx);
    }
  } catch (const std::runtime_error& e) {
    const std::string prefix = name_of(op_) + ": ";
    if (std::string(e.what()).rfind(prefix, 0) == 0) throw;
    fail(e.what());
  } catch (const std::exception& e) {
    fail(e.what());
  }
  std::string missing = take_unimplemented();
  if (!missing.empty()) fail("it called " + missing + ", which opforge does not implement");
}

bool infer_shapes(const OrtCustomOp* op, OrtShapeInferContext& ctx) {
  if (op->version < kOpShapeInference || op->InferOutputShapeFn == nullptr) return false;
  take_unimplemented();
  if (OrtStatus* st = op->InferOutputShapeFn(op, &ctx)) throw std::runtime_error(name_of(op) + ": " + message_of(st));
  return true;
}

}  // namespace opforge_ort
