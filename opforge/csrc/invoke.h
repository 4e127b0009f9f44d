// invoke.h: the one way to call an op through the C ABI, checked against the op's schema.
//
// Eager calls, the Python executor and compiled plans all call ops through these functions, so
// a check added here protects every caller: input counts, absent required inputs, dtypes, ranks,
// output counts, what infer declares (dtype, rank, sizes that fit in memory) and workspace sizes.
// Nothing here touches Python; failures are thrown as CallError for the caller to report.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "attrs.h"
#include "opforge/abi.h"
#include "thread_pool.h"

namespace opforge_core {

/// A refused or failed call. `bad_argument`: the caller passed something the schema does not
/// allow (eager calls raise TypeError for it); `too_big`: an output or workspace no memory can
/// hold (OpMemoryError, which no other kernel is tried for); otherwise the op itself failed
/// (OpError).
class CallError : public std::runtime_error {
 public:
  CallError(const std::string& message, bool bad_argument, bool too_big = false)
      : std::runtime_error(message), bad_argument(bad_argument), too_big(too_big) {}
  bool bad_argument;
  bool too_big;
};

/// Whether infer may see unknown sizes (-1) and absent data (graph shape inference), or every
/// value is concrete (a call that will compute).
enum class Sizes { Known, MaybeUnknown };

/// Checks a call's inputs and output count against `def`: enough inputs, no required one
/// absent, none past the declared ones (unless the last is variadic), allowed dtypes, rank at
/// most OPF_MAX_DIMS and no negative size (unless `sizes` allows unknown ones); no more outputs
/// than declared (unless the last is variadic).
void check_call(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, int32_t num_outputs,
                Sizes sizes = Sizes::Known);

/// Calls infer after check_call, then checks what it declared: every required output set, to a
/// known dtype, rank at most OPF_MAX_DIMS, sizes >= 0 (or -1 when unknown sizes are allowed)
/// whose byte count fits in memory. Outputs it leaves unset keep dtype OPF_UNDEFINED.
void infer(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, const AttrPack& attrs,
           opf_tensor* outputs, int32_t num_outputs, Sizes sizes = Sizes::Known);

/// Scratch bytes compute needs (0 without a workspace function); refuses a negative answer.
int64_t workspace_bytes(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs,
                        const AttrPack& attrs);

/// Runs compute on concrete inputs and outputs whose data is in place. Call without the GIL.
/// `stream` is the cudaStream_t a CUDA op launches on (NULL for CPU ops).
void compute(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, const AttrPack& attrs,
             const opf_tensor* outputs, int32_t num_outputs, void* workspace, int64_t workspace_bytes,
             ThreadPool* pool, void* stream = nullptr);

/// Whether output `k` of `def` is declared optional (then compute may see it without data).
bool output_is_optional(const opf_op_def* def, int32_t k);

/// Bytes of a concrete tensor; throws CallError (too_big) when, as numpy counts, the byte count
/// overflows: the nonzero sizes times the item size, so that [0, 2**62] cannot be made either.
int64_t nbytes(const opf_tensor& t);

/// A tensor view's shape as "[2, 3]".
std::string shape_text(const opf_tensor& t);

}  // namespace opforge_core
