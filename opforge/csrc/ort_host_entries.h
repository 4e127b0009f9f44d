// ort_host_entries.h: how the host's source files each fill their part of the API table.
#pragma once

#include "ort_api.h"

namespace opforge_ort {

/// Sets the tensor, type-info, memory and allocator entries (ort_host_values.cpp).
void set_value_entries(OrtApiEntry* table);
/// A new tensor of `shape` and `type` (numeric: allocated; strings: empty), owned by the caller.
OrtValue* new_value(const int64_t* shape, size_t rank, ONNXTensorElementDataType type);
/// The host's one CPU allocator (every allocator entry hands it out).
OrtAllocator* cpu_allocator_of_host();
/// Sets the kernel-info, kernel-context, logger and shape-inference entries (ort_host_kernel.cpp).
void set_kernel_entries(OrtApiEntry* table);

}  // namespace opforge_ort

/// Sets table[k<name>] to api_<name>, checked against the entry's declared type.
#define OPF_ORT_SET(table, name) \
  (table)[opforge_ort::k##name] = reinterpret_cast<OrtApiEntry>(static_cast<opforge_ort::Fn_##name>(&api_##name))
