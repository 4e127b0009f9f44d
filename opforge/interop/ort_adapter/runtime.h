// runtime.h: the onnxruntime an adapted library was registered with, and the entries it has.
#pragma once

#include <stdexcept>
#include <string>

#include "ort_api.h"

namespace opforge_ort {

/// The oldest C API the adapter runs on: CreateKernelV2/KernelComputeV2 (errors as statuses).
constexpr int kOldestApi = 16;
/// Shape inference, opset ranges and ParallelFor for custom ops.
constexpr int kShapeInferenceApi = 17;

/// The entries of one onnxruntime that the adapter calls, typed; an entry the runtime's API
/// version does not have is null (the feature it serves is off).
struct Runtime {
  const OrtApi* api = nullptr;
  int version = 0;           ///< the C API version in use (the runtime's, capped at kNewestApi)
  std::string version_text;  ///< the runtime's own version string ("1.32.0")
#define OPF_ORT_FIELD(since, name, ret, params) Fn_##name name = nullptr;
  OPF_ORT_TYPED_ENTRIES(OPF_ORT_FIELD)
#undef OPF_ORT_FIELD

  /// A status carrying `message` (the caller's to hand to onnxruntime).
  OrtStatus* status(const std::string& message, OrtErrorCode code = ORT_FAIL) const {
    return CreateStatus(code, message.c_str());
  }
  /// Throws RuntimeError with the message of a non-null status (released here).
  void check(OrtStatus* status, const char* what) const;
};

/// A failed call into onnxruntime, its message prefixed by what was being done.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The runtime `base` belongs to, with the newest API version both it and the adapter know.
/// Returns null and sets `error` (naming both versions) when it is older than kOldestApi.
const Runtime* negotiate(const OrtApiBase* base, std::string& error);

}  // namespace opforge_ort
