// cuda_hook.h: how opforge_cuda_support.cpp, linked into CUDA libraries only, takes over running
// their CUDA ops from opforge_support.cpp (which every library links).
#ifndef OPFORGE_CUDA_HOOK_H_
#define OPFORGE_CUDA_HOOK_H_

#include "opforge/op.h"

namespace opforge {
namespace detail {

/// Runs a CUDA op's compute: checks that a device is there, sets it, calls `fn`, and turns a
/// failed kernel launch into an error.
using CudaRunner = void (*)(const opf_compute_ctx* c, ComputeFn fn);

/// Set while a CUDA library loads (static initialisation); null in CPU libraries. Ops that do
/// not name a backend are CUDA ops when it is set.
extern CudaRunner cuda_runner;

}  // namespace detail
}  // namespace opforge

#endif  // OPFORGE_CUDA_HOOK_H_
