// checks.h: what an op's infer declared, checked before anything is allocated or written from it.
#pragma once

#include <cstdint>
#include <string>

#include "opforge/abi.h"

namespace opforge_core {

/// Bytes of `t`'s elements into `bytes`; false when a size is negative or, as numpy counts, the
/// byte count overflows (the nonzero sizes times the item size, so [0, 2**62] overflows too).
bool checked_nbytes(const opf_tensor& t, int64_t* bytes);

/// Why `t`, an output as infer declared it, cannot be allocated: an unknown dtype, a rank
/// outside [0, OPF_MAX_DIMS], a negative size (unless `unknown_sizes` allows -1), or a byte
/// count that overflows. Empty when it is fine.
std::string declared_problem(const opf_tensor& t, bool unknown_sizes);

/// A tensor's shape as "[2, 3]" (at most OPF_MAX_DIMS dims are read).
std::string shape_text(const opf_tensor& t);

}  // namespace opforge_core
