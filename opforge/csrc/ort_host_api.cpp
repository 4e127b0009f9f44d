// ort_host_api.cpp: the host's API table. Entries it implements are set by name; every other
// slot holds a stub that returns an error status naming the entry (or, for an entry that
// returns no status, zero), so a library calling one gets an error, never a crash.
#include <array>
#include <cstring>
#include <utility>

#include "opforge/dtype.h"
#include "ort_host.h"
#include "ort_host_entries.h"

namespace opforge_ort {

namespace {

const char* const kNames[] = {
#define OPF_ORT_NAME(name) #name,
    OPF_ORT_API_ENTRIES(OPF_ORT_NAME, OPF_ORT_NAME)
#undef OPF_ORT_NAME
};

thread_local std::string unimplemented_called;

std::string unimplemented_text(int index) {
  return std::string("OrtApi::") + kNames[index] + " (entry #" + std::to_string(index) + ")";
}

template <int I>
OrtStatus* status_stub() {
  unimplemented_called = unimplemented_text(I);
  return make_status(ORT_NOT_IMPLEMENTED, "opforge does not implement " + unimplemented_called +
                                              " of onnxruntime's C API, which this custom op called");
}

template <int I>
void* value_stub() {
  unimplemented_called = unimplemented_text(I);
  return nullptr;
}

/// Whether entry I returns an OrtStatus*, from the S/V marks of ort_api_entries.h.
constexpr bool kReturnsStatus[] = {
#define OPF_ORT_S(name) true,
#define OPF_ORT_V(name) false,
    OPF_ORT_API_ENTRIES(OPF_ORT_S, OPF_ORT_V)
#undef OPF_ORT_S
#undef OPF_ORT_V
};

template <int... I>
std::array<OrtApiEntry, kNumEntries> stubs(std::integer_sequence<int, I...>) {
  return {(kReturnsStatus[I] ? reinterpret_cast<OrtApiEntry>(&status_stub<I>)
                             : reinterpret_cast<OrtApiEntry>(&value_stub<I>))...};
}

// --- status

OrtStatus* api_CreateStatus(OrtErrorCode code, const char* msg) { return make_status(code, msg ? msg : ""); }
OrtErrorCode api_GetErrorCode(const OrtStatus* st) { return st ? st->code : ORT_OK; }
const char* api_GetErrorMessage(const OrtStatus* st) { return st ? st->message.c_str() : ""; }
void api_ReleaseStatus(OrtStatus* st) { delete st; }

// --- registration: what RegisterCustomOps calls

OrtStatus* api_CreateCustomOpDomain(const char* domain, OrtCustomOpDomain** out) {
  *out = new OrtCustomOpDomain{domain ? domain : "", {}};
  return nullptr;
}
OrtStatus* api_CustomOpDomain_Add(OrtCustomOpDomain* domain, const OrtCustomOp* op) {
  if (op == nullptr) return make_status(ORT_INVALID_ARGUMENT, "CustomOpDomain_Add: no op given");
  domain->ops.push_back(op);
  return nullptr;
}
OrtStatus* api_AddCustomOpDomain(OrtSessionOptions* options, OrtCustomOpDomain* domain) {
  options->domains.push_back(domain);
  return nullptr;
}
void api_ReleaseCustomOpDomain(OrtCustomOpDomain* domain) { delete domain; }

std::array<OrtApiEntry, kNumEntries> make_table() {
  auto table = stubs(std::make_integer_sequence<int, kNumEntries>());
  OPF_ORT_SET(table, CreateStatus);
  OPF_ORT_SET(table, GetErrorCode);
  OPF_ORT_SET(table, GetErrorMessage);
  OPF_ORT_SET(table, ReleaseStatus);
  OPF_ORT_SET(table, CreateCustomOpDomain);
  OPF_ORT_SET(table, CustomOpDomain_Add);
  OPF_ORT_SET(table, AddCustomOpDomain);
  OPF_ORT_SET(table, ReleaseCustomOpDomain);
  set_value_entries(table.data());
  set_kernel_entries(table.data());
  return table;
}

const OrtApi* api_GetApi(uint32_t version) {
  static const std::array<OrtApiEntry, kNumEntries> table = make_table();
  if (version < 1 || version > uint32_t(kHostApi)) return nullptr;
  return reinterpret_cast<const OrtApi*>(table.data());
}

const char* api_GetVersionString() {
  static const std::string text = "1." + std::to_string(kHostApi) + ".0";
  return text.c_str();
}

}  // namespace

OrtStatus* make_status(OrtErrorCode code, const std::string& message) { return new OrtStatus{code, message}; }

std::string take_unimplemented() { return std::exchange(unimplemented_called, std::string()); }

std::string type_name(ONNXTensorElementDataType t) {
  return t == ORT_TYPE_STRING ? "string" : opforge::dtype_name(t);
}

const OrtApiBase* host_api_base() {
  static const OrtApiBase base{&api_GetApi, &api_GetVersionString};
  return &base;
}

const OrtApi* host_api() { return host_api_base()->GetApi(kHostApi); }

}  // namespace opforge_ort
