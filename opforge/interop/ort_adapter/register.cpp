// register.cpp: RegisterCustomOps, the entry point onnxruntime calls when a session's options
// register an opforge-built library (SessionOptions.register_custom_ops_library).
#include <dlfcn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "custom_op.h"

extern "C" const opf_library* opforge_library(void);  // opforge_support.cpp, linked in

namespace opforge_ort {

namespace {

/// The ops and domains made for the runtime of this process, kept until the library is
/// unloaded: every session options object that registers it gets the same domains.
struct Registration {
  const Runtime* rt = nullptr;
  std::vector<std::unique_ptr<AdaptedOp>> ops;
  std::vector<OrtCustomOpDomain*> domains;
  ~Registration() {
    for (OrtCustomOpDomain* d : domains) rt->ReleaseCustomOpDomain(d);
  }
};

/// This library's path, for messages.
std::string library_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&library_path), &info) != 0 && info.dli_fname) return info.dli_fname;
  return "this opforge library";
}

bool same_op(const opf_op_def* a, const opf_op_def* b) {
  return std::strcmp(a->name, b->name) == 0 && std::strcmp(a->domain, b->domain) == 0;
}

/// The definitions onnxruntime is given: the newest of each op. onnxruntime makes one schema per
/// custom op name, whose since-version is the first registration's, and picks the kernel by that
/// since-version, never by the model's opset: of several ranges registered, only the first would
/// ever run. With the newest one alone, registered from its since-version, a model of an older
/// opset of the domain is refused by onnxruntime instead of running another version's code.
std::vector<const opf_op_def*> definitions(const opf_library* lib) {
  std::vector<const opf_op_def*> kept;
  for (int32_t i = 0; i < lib->num_ops; ++i) {
    const opf_op_def* d = lib->ops[i];
    auto same = std::find_if(kept.begin(), kept.end(), [d](const opf_op_def* k) { return same_op(k, d); });
    if (same == kept.end())
      kept.push_back(d);
    else if ((*same)->since_version < d->since_version)
      *same = d;
  }
  return kept;
}

void build(const Runtime& rt, Registration& reg) {
  const opf_library* lib = opforge_library();
  if (lib->error != nullptr) throw RuntimeError(lib->error);
  reg.rt = &rt;
  std::map<std::string, OrtCustomOpDomain*> by_domain;
  for (const opf_op_def* def : definitions(lib)) {
    OrtCustomOpDomain*& domain = by_domain[def->domain];
    if (domain == nullptr) {
      rt.check(rt.CreateCustomOpDomain(def->domain, &domain), "creating a custom-op domain");
      reg.domains.push_back(domain);
    }
    reg.ops.push_back(std::make_unique<AdaptedOp>(rt, def));
    rt.check(rt.CustomOpDomain_Add(domain, reg.ops.back().get()), def->name);
  }
}

std::mutex registration_mutex;
/// One per runtime that registered this library (a process has one onnxruntime, and may have
/// opforge's host too): a runtime's sessions may outlive its registration call.
std::vector<std::unique_ptr<Registration>> registrations;

Registration& registration_for(const Runtime& rt) {
  for (auto& r : registrations)
    if (r->rt == &rt) return *r;
  auto made = std::make_unique<Registration>();
  build(rt, *made);
  registrations.push_back(std::move(made));
  return *registrations.back();
}

}  // namespace

}  // namespace opforge_ort

/// Registers every op of this library with the session options `options` of the onnxruntime
/// whose API `base` gives. Returns null, or a status naming what failed (and, for a runtime too
/// old, both versions).
extern "C" __attribute__((visibility("default"))) OrtStatus* RegisterCustomOps(OrtSessionOptions* options,
                                                                               const OrtApiBase* base) {
  using namespace opforge_ort;
  std::string error;
  const Runtime* rt = negotiate(base, error);
  if (rt == nullptr) {
    const OrtApi* first = base->GetApi(1);
    return entry<Fn_CreateStatus>(first, kCreateStatus)(ORT_FAIL, (library_path() + " " + error).c_str());
  }
  try {
    std::lock_guard<std::mutex> lock(registration_mutex);
    for (OrtCustomOpDomain* d : registration_for(*rt).domains)
      rt->check(rt->AddCustomOpDomain(options, d), "adding a custom-op domain");
    return nullptr;
  } catch (const std::exception& e) {
    return rt->status(library_path() + ": " + e.what());
  }
}
