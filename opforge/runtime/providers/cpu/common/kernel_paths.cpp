// kernel_paths.cpp: the list of path counters, and the C functions tools read it through.
#include "common/kernel_paths.h"

#include <cstdint>

namespace opforge_cpu {

namespace {
std::atomic<KernelPath*> g_paths{nullptr};
}  // namespace

KernelPath::KernelPath(const char* path_name) : name(path_name) {
  next = g_paths.load(std::memory_order_relaxed);
  while (!g_paths.compare_exchange_weak(next, this, std::memory_order_release, std::memory_order_relaxed)) {
  }
}

}  // namespace opforge_cpu

/// Fills up to `capacity` (name, calls) pairs of the paths taken so far; returns how many
/// there are (call again with a larger capacity when that is more).
extern "C" __attribute__((visibility("default"))) int32_t opforge_kernel_paths(const char** names,
                                                                              uint64_t* calls,
                                                                              int32_t capacity) {
  int32_t n = 0;
  for (auto* p = opforge_cpu::g_paths.load(std::memory_order_acquire); p != nullptr; p = p->next, ++n) {
    if (n < capacity) {
      names[n] = p->name;
      calls[n] = p->calls.load(std::memory_order_relaxed);
    }
  }
  return n;
}

/// The instruction sets this build's hand-written paths were compiled for, space-separated.
extern "C" __attribute__((visibility("default"))) const char* opforge_kernel_isa() {
  return ""
#if defined(__AVX512F__)
         "avx512f "
#endif
#if defined(__AVX512BW__)
         "avx512bw "
#endif
#if defined(__AVX512VL__)
         "avx512vl "
#endif
#if defined(__AVX512VNNI__)
         "avx512vnni "
#endif
#if defined(__AVX2__)
         "avx2 "
#endif
#if defined(__FMA__)
         "fma "
#endif
#if defined(__F16C__)
         "f16c "
#endif
#if defined(__SSE4_2__)
         "sse4.2 "
#endif
#if defined(__aarch64__)
         "aarch64 "
#endif
#if defined(__ARM_NEON)
         "neon "
#endif
         "";
}
