// invoke.cpp: checked calls into an op's infer, workspace and compute.
#include "invoke.h"

#include <cstring>
#include <limits>

#include "opforge/dtype.h"
#include "views.h"

namespace opforge_core {

namespace {

/// The declared parameter serving position `i` (the last one when it is variadic), or null.
const opf_param* param_at(const opf_param* params, int32_t declared, int32_t i) {
  if (declared == 0) return nullptr;
  if (i < declared) return &params[i];
  return (params[declared - 1].flags & OPF_PARAM_VARIADIC) ? &params[declared - 1] : nullptr;
}

bool is_variadic(const opf_param* params, int32_t declared) {
  return declared > 0 && (params[declared - 1].flags & OPF_PARAM_VARIADIC);
}

/// Declared inputs before the last that is neither optional nor variadic.
int32_t required_inputs(const opf_op_def* def) {
  int32_t required = 0;
  for (int32_t i = 0; i < def->num_inputs; ++i)
    if (!(def->inputs[i].flags & (OPF_PARAM_OPTIONAL | OPF_PARAM_VARIADIC))) required = i + 1;
  return required;
}

std::string plural(int64_t n, const char* word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

std::string arg_name(const opf_param& p, int32_t i) { return std::string("'") + p.name + "' (#" + std::to_string(i) + ")"; }

/// Whether the k-th dtype of `p` is allowed at `opset` (0: any).
bool dtype_in_force(const opf_param& p, int32_t k, int32_t opset) {
  return opset == 0 || p.dtype_since == nullptr || p.dtype_since[k] <= opset;
}

std::string allowed_names(const opf_param& p, int32_t opset) {
  std::string s;
  for (int32_t k = 0; k < p.num_dtypes; ++k)
    if (dtype_in_force(p, k, opset)) s += std::string(s.empty() ? "" : ", ") + opforge::dtype_name(p.dtypes[k]);
  return s;
}

bool dtype_allowed(const opf_param& p, int32_t dtype, int32_t opset) {
  for (int32_t k = 0; k < p.num_dtypes; ++k)
    if (p.dtypes[k] == dtype) return dtype_in_force(p, k, opset);
  return p.num_dtypes == 0;
}

[[noreturn]] void refuse(const opf_op_def* def, const std::string& what) {
  throw CallError(std::string(def->name) + "(): " + what, true);
}

[[noreturn]] void op_failed(const opf_op_def* def, const std::string& what) {
  throw CallError(std::string(def->name) + ": " + what, false);
}

/// The inputs as infer and workspace see them: both run on the host, so the data of a tensor
/// in GPU memory is hidden (null) and reading it throws NeedsValue, where dereferencing the
/// device pointer would crash. `hidden` holds the copies when any input is on a GPU.
const opf_tensor* host_view(const opf_tensor* inputs, int32_t num_inputs, std::vector<opf_tensor>& hidden) {
  bool on_gpu = false;
  for (int32_t i = 0; i < num_inputs; ++i) on_gpu = on_gpu || (inputs[i].device_type == OPF_CUDA && inputs[i].data);
  if (!on_gpu) return inputs;
  hidden.assign(inputs, inputs + num_inputs);
  for (opf_tensor& t : hidden)
    if (t.device_type == OPF_CUDA) t.data = nullptr;
  return hidden.data();
}

/// The error for an infer or workspace function that read an input value in GPU memory.
[[noreturn]] void reads_gpu_value(const opf_op_def* def, const char* function) {
  op_failed(def, std::string(function) + " reads the value of an input in GPU memory, which it cannot: it runs "
                 "on the host. A CUDA op's " + function + " must follow from its inputs' dtypes and shapes and "
                 "its attributes (make the value an attribute)");
}

void check_count(const opf_op_def* def, int32_t num_inputs) {
  int32_t required = required_inputs(def), declared = def->num_inputs;
  bool variadic = is_variadic(def->inputs, declared);
  if (num_inputs >= required && (variadic || num_inputs <= declared)) return;
  std::string expect = variadic ? "at least " + std::to_string(required)
                       : required == declared ? std::to_string(declared)
                                              : std::to_string(required) + " to " + std::to_string(declared);
  throw CallError(std::string(def->name) + "() takes " + expect + " input" +
                      (declared == 1 && !variadic ? "" : "s") + ", got " + std::to_string(num_inputs), true);
}

void check_input(const opf_op_def* def, const opf_param& p, int32_t i, const opf_tensor& t, Sizes sizes,
                 int32_t opset) {
  if (t.dtype == OPF_UNDEFINED) {
    if (!(p.flags & OPF_PARAM_OPTIONAL)) refuse(def, "input " + arg_name(p, i) + " is required, got none");
    return;
  }
  if (opforge::dtype_size(t.dtype) == 0)
    refuse(def, "input " + arg_name(p, i) + " has dtype " + opforge::dtype_name(t.dtype) + ", which ops cannot take");
  if (!dtype_allowed(p, t.dtype, opset))
    refuse(def, "input " + arg_name(p, i) + " has dtype " + opforge::dtype_name(t.dtype) +
                    (dtype_allowed(p, t.dtype, 0) ? " (added after opset " + std::to_string(opset) + ")" : "") +
                    "; expected " + allowed_names(p, opset));
  if (t.ndim < 0 || t.ndim > OPF_MAX_DIMS)
    refuse(def, "input " + arg_name(p, i) + " has rank " + std::to_string(t.ndim) + "; opforge's limit is " +
                    std::to_string(OPF_MAX_DIMS));
  const int64_t lowest = sizes == Sizes::Known ? 0 : -1;
  for (int32_t d = 0; d < t.ndim; ++d)
    if (t.shape[d] < lowest) refuse(def, "input " + arg_name(p, i) + " has shape " + shape_text(t));
}

void check_output(const opf_op_def* def, int32_t k, opf_tensor& t, Sizes sizes) {
  const opf_param* p = param_at(def->outputs, def->num_outputs, k);
  // built only on failure: this runs for every output of every step of a plan
  auto name = [&] { return std::string("output '") + (p ? p->name : "?") + "' (#" + std::to_string(k) + ")"; };
  if (t.dtype == OPF_UNDEFINED) {
    if (p && !(p->flags & OPF_PARAM_OPTIONAL)) op_failed(def, "infer did not set " + name());
    return;
  }
  if (opforge::dtype_size(t.dtype) == 0) op_failed(def, "infer gave " + name() + " the unknown dtype " + std::to_string(t.dtype));
  if (t.ndim < 0 || t.ndim > OPF_MAX_DIMS)
    op_failed(def, "infer gave " + name() + " rank " + std::to_string(t.ndim) + "; opforge's limit is " +
                       std::to_string(OPF_MAX_DIMS));
  const int64_t lowest = sizes == Sizes::Known ? 0 : -1;
  for (int32_t d = 0; d < t.ndim; ++d)
    if (t.shape[d] < lowest) op_failed(def, "infer gave " + name() + " the shape " + shape_text(t));
  if (sizes == Sizes::Known) {
    try {
      nbytes(t);
    } catch (const CallError& e) {
      throw CallError(std::string(def->name) + ": " + name() + " " + e.what(), false, true);
    }
  }
}

}  // namespace

bool output_is_optional(const opf_op_def* def, int32_t k) {
  const opf_param* p = param_at(def->outputs, def->num_outputs, k);
  return p == nullptr || (p->flags & OPF_PARAM_OPTIONAL);
}

int64_t nbytes(const opf_tensor& t) {
  // numpy's rule, so that every tensor can also be handed to Python as an array
  int64_t span = opforge::dtype_size(t.dtype);
  bool empty = false;
  for (int32_t d = 0; d < t.ndim && d < OPF_MAX_DIMS; ++d) {
    if (t.shape[d] < 0 || __builtin_mul_overflow(span, t.shape[d] ? t.shape[d] : 1, &span))
      throw CallError("of shape " + shape_text(t) + " and dtype " + opforge::dtype_name(t.dtype) +
                          " does not fit in memory", false, true);
    empty = empty || t.shape[d] == 0;
  }
  return empty ? 0 : span;
}

std::string shape_text(const opf_tensor& t) {
  std::string s = "[";
  for (int32_t d = 0; d < t.ndim && d < OPF_MAX_DIMS; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

void check_call(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, int32_t num_outputs,
                Sizes sizes, int32_t opset) {
  check_count(def, num_inputs);
  for (int32_t i = 0; i < num_inputs; ++i)
    check_input(def, *param_at(def->inputs, def->num_inputs, i), i, inputs[i], sizes, opset);
  if (num_outputs > def->num_outputs && !is_variadic(def->outputs, def->num_outputs))
    refuse(def, "asked for " + plural(num_outputs, "output") + "; the op has " +
                    plural(def->num_outputs, "output"));
}

void set_contiguous(opf_tensor& t) {
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d] > 0 ? t.shape[d] : 1;
  }
  t.device_type = OPF_CPU;
  t.device_id = 0;
}

CallError not_made(const opf_op_def* def, int32_t k) {
  const opf_param* p = param_at(def->outputs, def->num_outputs, k);
  return CallError(std::string(def->name) + ": the caller reads output '" + (p ? p->name : "?") + "' (#" +
                       std::to_string(k) + "), which infer did not make for these inputs",
                   false);
}

void infer(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, const AttrView& attrs,
           opf_tensor* outputs, int32_t num_outputs, Sizes sizes, bool checked) {
  if (!checked) check_call(def, inputs, num_inputs, num_outputs, sizes, attrs.opset);
  for (int32_t k = 0; k < num_outputs; ++k) clear_view(outputs[k]);
  std::vector<opf_tensor> hidden;
  opf_infer_ctx ic{def, host_view(inputs, num_inputs, hidden), num_inputs, attrs.data, attrs.size, outputs,
                   num_outputs};
  opf_error err;
  err.code = OPF_ERR_FAILED;
  err.message[0] = '\0';
  if (def->infer(&ic, &err) != 0) {
    if (err.code == OPF_ERR_NEEDS_VALUE && !hidden.empty()) reads_gpu_value(def, "infer");
    throw CallError(err.message, false, false, err.code == OPF_ERR_NEEDS_VALUE);
  }
  for (int32_t k = 0; k < num_outputs; ++k) check_output(def, k, outputs[k], sizes);
}

int64_t workspace_bytes(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs,
                        const AttrView& attrs) {
  if (def->workspace == nullptr) return 0;
  std::vector<opf_tensor> hidden;
  opf_infer_ctx ic{def, host_view(inputs, num_inputs, hidden), num_inputs, attrs.data, attrs.size, nullptr, 0};
  opf_error err;
  err.code = OPF_ERR_FAILED;
  err.message[0] = '\0';
  int64_t bytes = 0;
  if (def->workspace(&ic, &bytes, &err) != 0) {
    if (err.code == OPF_ERR_NEEDS_VALUE && !hidden.empty()) reads_gpu_value(def, "workspace");
    throw CallError(err.message, false);
  }
  if (bytes < 0) op_failed(def, "the workspace function returned a negative size");
  return bytes;
}

void compute(const opf_op_def* def, const opf_tensor* inputs, int32_t num_inputs, const AttrView& attrs,
             const opf_tensor* outputs, int32_t num_outputs, void* workspace, int64_t workspace_bytes,
             const CallOptions& options) {
  ThreadPool* pool = options.pool;
  opf_compute_ctx cc{def, inputs, num_inputs, attrs.data, attrs.size, outputs, num_outputs, workspace,
                     workspace_bytes, options.stream, pool ? static_cast<void*>(pool) : options.parallel_arg,
                     pool ? &ThreadPool::entry : options.parallel_for,
                     pool ? pool->num_threads() : options.num_threads, attrs.state};
  opf_error err;
  err.code = OPF_ERR_FAILED;
  err.message[0] = '\0';
  if (def->compute(&cc, &err) != 0) throw CallError(err.message, false);
}

}  // namespace opforge_core
