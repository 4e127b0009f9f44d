// invoke.h: the one way to call an op through the C ABI, checked against the op's schema.
//
// Every host calls ops through `call_op`: eager calls on numpy and cupy arrays, the Python
// executor, compiled plans (csrc/executor.cpp) and the onnxruntime adapter. It runs the whole
// sequence, checks -> infer -> outputs from the host -> workspace from the host -> compute, so a
// check added here protects every caller: input counts, absent required inputs, dtypes, ranks,
// output counts, what infer declares (dtype, rank, sizes that fit in memory) and workspace
// sizes. A host differs from another only in where memory comes from and how compute is
// entered (see CallHost). Nothing here touches Python; failures are thrown as CallError.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "opforge/abi.h"
#include "thread_pool.h"

namespace opforge_core {

/// An op's attribute values as compute reads them, and the slot of its per-node state.
struct AttrView {
  const opf_attr* data = nullptr;
  int32_t size = 0;
  opf_state** state = nullptr;
  int32_t opset = 0;  ///< the node's opset (0: any): inputs of a dtype added later are refused
};

/// What a caller needs of each output.
enum class Need : uint8_t {
  None = 0,      ///< not read: memory only if the op declares it required (kernels write those)
  IfMade = 1,    ///< read when infer makes it (an eager call's outputs)
  Required = 2,  ///< read: infer must make it (a node's named outputs)
};

/// A refused or failed call. `bad_argument`: the caller passed something the schema does not
/// allow (eager calls raise TypeError for it); `too_big`: an output or workspace no memory can
/// hold (OpMemoryError, which no other kernel is tried for); otherwise the op itself failed
/// (OpError).
class CallError : public std::runtime_error {
 public:
  CallError(const std::string& message, bool bad_argument, bool too_big = false, bool needs_value = false)
      : std::runtime_error(message), bad_argument(bad_argument), too_big(too_big), needs_value(needs_value) {}
  bool bad_argument;
  bool too_big;
  bool needs_value;  ///< infer could not tell without an input's value (graph inference only)
};

/// Whether infer may see unknown sizes (-1) and absent data (graph shape inference), or every
/// value is concrete (a call that will compute).
enum class Sizes { Known, MaybeUnknown };

/// Checks a call's inputs and output count against `def`: enough inputs, no required one
/// absent, none past the declared ones (unless the last is variadic), allowed dtypes, rank at
/// most OPF_MAX_DIMS and no negative size (unless `sizes` allows unknown ones); no more outputs
/// than declared (unless the last is variadic). At `opset` (0: any), a dtype the op added in a
/// later opset is refused.
void check_call(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, int32_t num_outputs,
                Sizes sizes = Sizes::Known, int32_t opset = 0);

/// Calls infer after check_call (unless `checked`: the caller checked these inputs' dtypes and
/// counts already, a compiled plan at its compile), then checks what it declared: every
/// required output set, to a known dtype, rank at most OPF_MAX_DIMS, sizes >= 0 (or -1 when
/// unknown sizes are allowed) whose byte count fits in memory. Outputs it leaves unset keep
/// dtype OPF_UNDEFINED.
void infer(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, const AttrView& attrs,
           opf_tensor* outputs, int32_t num_outputs, Sizes sizes = Sizes::Known, bool checked = false);

/// Scratch bytes compute needs (0 without a workspace function); refuses a negative answer.
int64_t workspace_bytes(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs,
                        const AttrView& attrs);

struct CallOptions;

/// Runs compute on concrete inputs and outputs whose data is in place, with the threads and
/// stream `options` name. Call without the GIL.
void compute(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, const AttrView& attrs,
             const opf_tensor* outputs, int32_t num_outputs, void* workspace, int64_t workspace_bytes,
             const CallOptions& options);

/// A host of calls gives them their memory and enters compute. It has
///   void place_output(int32_t k, opf_tensor& t, bool read);
///     memory for output `k`, whose dtype and shape infer set: data, strides and device filled
///     in; `read` false for a required output nobody reads (freed by the host after the call);
///   void* workspace(int64_t bytes);   `bytes` > 0 of scratch, 64-byte aligned, for the call;
///   template <class F> void enter_compute(F&& compute);   runs compute (a host holding
///     Python's GIL releases it meanwhile).
/// call_op is a template on it, so a compiled plan's host costs no call through a pointer.
struct CallOptions {
  bool checked = false;          ///< inputs already checked (see infer)
  ThreadPool* pool = nullptr;    ///< the thread pool compute's parallel_for runs on
  void* stream = nullptr;        ///< the cudaStream_t of a CUDA op
  /// Another runtime's threads, used when `pool` is null (onnxruntime's intra-op pool, through
  /// the adapter): parallel_for(parallel_arg, ...) over `num_threads` threads.
  opf_parallel_for_fn parallel_for = nullptr;
  void* parallel_arg = nullptr;
  int32_t num_threads = 1;
  bool always_workspace = false; ///< ask the host for a workspace even of 0 bytes (a checked call
                                 ///< guards it, so that an op writing to one it did not ask for is caught)
};

/// The one call sequence: checks -> infer -> outputs placed by `host` -> workspace from `host`
/// -> compute (entered through `host`). `outputs` (num_outputs views) get the outputs' views;
/// one with Need::None, or one infer did not make, has data null unless the op requires it.
/// Returns the workspace bytes the call took. Throws CallError.
template <class Host>
int64_t call_op(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, const AttrView& attrs,
                opf_tensor* outputs, int32_t num_outputs, const Need* need, Host& host, const CallOptions& options);

/// Whether output `k` of `def` is declared optional (then compute may see it without data).
bool output_is_optional(const opf_op_def* def, int32_t k);

/// Bytes of a concrete tensor; throws CallError (too_big) when, as numpy counts, the byte count
/// overflows: the nonzero sizes times the item size, so that [0, 2**62] cannot be made either.
int64_t nbytes(const opf_tensor& t);

/// A tensor view's shape as "[2, 3]".
std::string shape_text(const opf_tensor& t);

/// Fills `t`'s strides for a C-contiguous layout on the CPU.
void set_contiguous(opf_tensor& t);

/// The CallError for output `k`, which the caller needs and infer did not make.
CallError not_made(const opf_op_def* def, int32_t k);

template <class Host>
int64_t call_op(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, const AttrView& attrs,
                opf_tensor* outputs, int32_t num_outputs, const Need* need, Host& host, const CallOptions& options) {
  infer(def, inputs, num_inputs, attrs, outputs, num_outputs, Sizes::Known, options.checked);
  for (int32_t k = 0; k < num_outputs; ++k) {
    opf_tensor& t = outputs[k];
    if (t.dtype == OPF_UNDEFINED) {
      if (need[k] == Need::Required) throw not_made(def, k);
      t.data = nullptr;
    } else if (need[k] != Need::None) {
      host.place_output(k, t, true);
    } else if (!output_is_optional(def, k)) {  // kernels write their required outputs regardless
      host.place_output(k, t, false);
    } else {
      t.data = nullptr;
    }
  }
  const int64_t ws = workspace_bytes(def, inputs, num_inputs, attrs);
  void* scratch = ws > 0 || options.always_workspace ? host.workspace(ws) : nullptr;
  host.enter_compute([&] {
    compute(def, inputs, num_inputs, attrs, outputs, num_outputs, scratch, ws, options);
  });
  return ws;
}

}  // namespace opforge_core
