// kernel_paths.h: which hand-written instruction-set path a call took, counted for tests and tools.
#pragma once

#include <atomic>
#include <cstdint>

namespace opforge_cpu {

/// One named path ("conv.depthwise.same3x3.avx512"), counted once per op call that takes it.
/// Counters join one list on their first use; the library's `opforge_kernel_paths` reads it.
struct KernelPath {
  explicit KernelPath(const char* name);
  void hit() { calls.fetch_add(1, std::memory_order_relaxed); }

  const char* name;
  std::atomic<uint64_t> calls{0};
  KernelPath* next = nullptr;
};

}  // namespace opforge_cpu

/// The instruction set a path's code was compiled for, as its name's last part.
#if defined(__AVX512F__)
#define OPFORGE_ISA_NAME "avx512"
#elif defined(__AVX2__) && defined(__FMA__)
#define OPFORGE_ISA_NAME "avx2"
#elif defined(__aarch64__)
#define OPFORGE_ISA_NAME "neon"
#else
#define OPFORGE_ISA_NAME "portable"
#endif

/// Counts one call taking the path `name` (a string literal, without the instruction set).
#define OPFORGE_KERNEL_PATH(name) OPFORGE_KERNEL_PATH_NAMED(name "." OPFORGE_ISA_NAME)

/// Counts one call taking the path `full_name`, instruction set included (for code that picks
/// its instruction set at run time).
#define OPFORGE_KERNEL_PATH_NAMED(full_name)                  \
  do {                                                        \
    static ::opforge_cpu::KernelPath opforge_path_(full_name); \
    opforge_path_.hit();                                      \
  } while (0)
