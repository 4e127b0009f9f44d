// runtime.cpp: asking onnxruntime for its API table and reading the entries the adapter uses.
#include "runtime.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace opforge_ort {

namespace {

/// The minor number of "1.N.x" (onnxruntime's API version is its minor version); 0 if none.
int minor_version(const std::string& text) {
  size_t dot = text.find('.');
  return dot == std::string::npos ? 0 : std::atoi(text.c_str() + dot + 1);
}

/// Asks for the newest version both sides know, so that an older runtime, which prints an
/// error for versions it lacks, is asked once; probes downwards if its string is unusual.
int api_version(const OrtApiBase* base, const std::string& text) {
  int guess = minor_version(text);
  if (guess >= kOldestApi && guess <= kNewestApi && base->GetApi(uint32_t(guess)) != nullptr) return guess;
  if (guess > kNewestApi && base->GetApi(kNewestApi) != nullptr) return kNewestApi;
  if (guess != 0 && guess < kOldestApi) return 0;
  for (int v = kNewestApi; v >= kOldestApi; --v)
    if (base->GetApi(uint32_t(v)) != nullptr) return v;
  return 0;
}

void fill(Runtime& rt) {
#define OPF_ORT_READ(since, name, ret, params) \
  rt.name = rt.version >= since ? entry<Fn_##name>(rt.api, k##name) : nullptr;
  OPF_ORT_TYPED_ENTRIES(OPF_ORT_READ)
#undef OPF_ORT_READ
}

}  // namespace

void Runtime::check(OrtStatus* st, const char* what) const {
  if (st == nullptr) return;
  std::string message = std::string(what) + ": " + GetErrorMessage(st);
  ReleaseStatus(st);
  throw RuntimeError(message);
}

const Runtime* negotiate(const OrtApiBase* base, std::string& error) {
  // A process has one onnxruntime: its answer is worked out once and kept.
  static std::mutex mu;
  static std::vector<std::unique_ptr<Runtime>> known;  // ops point at theirs until unload
  std::lock_guard<std::mutex> lock(mu);
  const std::string text = base->GetVersionString ? base->GetVersionString() : "unknown";
  for (auto& rt : known)
    if (rt->version_text == text) return rt.get();
  const int version = api_version(base, text);
  if (version == 0) {
    error = "needs onnxruntime 1." + std::to_string(kOldestApi) + " or newer (C API version " +
            std::to_string(kOldestApi) + "); this onnxruntime is " + text;
    return nullptr;
  }
  auto rt = std::make_unique<Runtime>();
  rt->api = base->GetApi(uint32_t(version));
  rt->version = version;
  rt->version_text = text;
  fill(*rt);
  known.push_back(std::move(rt));
  return known.back().get();
}

}  // namespace opforge_ort
