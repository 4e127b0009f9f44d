// host.h: a minimal host for opforge's op ABI, for running the built-in kernels in a plain C++
// program (compiled for another CPU and run under emulation, where no Python runs): it finds an
// op in the library table, fills its attributes from their defaults, infers and allocates the
// outputs, and computes on a two-thread pool.
#pragma once

#include <opforge/abi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern "C" const opf_library* opforge_library(void);

namespace harness {

/// A dense float32 tensor that owns its data.
struct Array {
  std::vector<int64_t> shape;
  std::vector<float> data;

  Array() = default;
  explicit Array(std::vector<int64_t> dims) : shape(std::move(dims)), data(numel()) {}
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

/// The definition of `domain`::`name` serving `opset`.
inline const opf_op_def* find_op(const char* domain, const char* name, int opset) {
  const opf_library* lib = opforge_library();
  if (lib->error != nullptr) throw std::runtime_error(lib->error);
  for (int i = 0; i < lib->num_ops; ++i) {
    const opf_op_def* op = lib->ops[i];
    if (std::strcmp(op->name, name) == 0 && std::strcmp(op->domain, domain) == 0 && op->since_version <= opset &&
        (op->until_version == 0 || opset <= op->until_version))
      return op;
  }
  throw std::runtime_error(std::string("no op ") + domain + "::" + name);
}

/// Runs fn over [0, n) in two halves on two threads (one when there is too little work).
inline void parallel_for(void*, int64_t n, int64_t grain, opf_range_fn fn, void* arg) {
  if (n < 2 * (grain > 0 ? grain : 1)) return fn(arg, 0, n);
  std::thread other(fn, arg, n / 2, n);
  fn(arg, 0, n / 2);
  other.join();
}

/// One call of an op: attributes set by name over the defaults, then run() on float inputs.
class Call {
 public:
  explicit Call(const opf_op_def* op) : op_(op), attrs_(op->num_attrs) {
    for (int i = 0; i < op->num_attrs; ++i) {
      attrs_[i] = op->attrs[i].default_value;
      attrs_[i].name = op->attrs[i].name;
    }
  }

  Call& ints(const char* name, std::vector<int64_t> values) {
    opf_attr& a = slot(name);
    keep_ints_.push_back(std::make_unique<std::vector<int64_t>>(std::move(values)));
    a.type = OPF_ATTR_INTS, a.ints = keep_ints_.back()->data(), a.count = int64_t(keep_ints_.back()->size());
    return *this;
  }
  Call& integer(const char* name, int64_t value) {
    opf_attr& a = slot(name);
    a.type = OPF_ATTR_INT, a.i = value;
    return *this;
  }
  Call& text(const char* name, const char* value) {
    opf_attr& a = slot(name);
    a.type = OPF_ATTR_STRING, a.s = value, a.s_len = int64_t(std::strlen(value));
    return *this;
  }

  /// The op's first `outputs` outputs (float32) for `inputs` (a null pointer: an absent optional
  /// input), on `threads` threads.
  std::vector<Array> run(const std::vector<const Array*>& inputs, int threads = 2, int outputs = 1) {
    std::vector<opf_tensor> in(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) in[i] = view(inputs[i]);
    std::vector<opf_tensor> out(outputs);
    opf_infer_ctx ictx{op_, in.data(), int32_t(in.size()), attrs_.data(), int32_t(attrs_.size()), out.data(),
                       int32_t(out.size())};
    opf_error err{};
    check(op_->infer(&ictx, &err), err);
    std::vector<Array> results;
    for (opf_tensor& t : out) {
      if (t.dtype != OPF_FLOAT32) throw std::runtime_error(std::string(op_->name) + ": output is not float32");
      results.emplace_back(std::vector<int64_t>(t.shape, t.shape + t.ndim));
    }
    for (size_t i = 0; i < out.size(); ++i) out[i] = view(&results[i]);
    int64_t bytes = 0;
    if (op_->workspace != nullptr) check(op_->workspace(&ictx, &bytes, &err), err);
    std::vector<unsigned char> workspace(size_t(bytes) + 64);
    opf_state* state = nullptr;
    opf_compute_ctx cctx{op_, in.data(), int32_t(in.size()), attrs_.data(), int32_t(attrs_.size()), out.data(),
                         int32_t(out.size()), workspace.data(), bytes, nullptr, nullptr,
                         threads > 1 ? parallel_for : nullptr, threads, &state};
    check(op_->compute(&cctx, &err), err);
    if (state != nullptr) state->release(state);
    return results;
  }

 private:
  opf_attr& slot(const char* name) {
    for (opf_attr& a : attrs_)
      if (std::strcmp(a.name, name) == 0) return a;
    throw std::runtime_error(std::string(op_->name) + " has no attribute " + name);
  }
  static opf_tensor view(const Array* a) {
    opf_tensor t{};
    if (a == nullptr) return t;  // dtype OPF_UNDEFINED: absent
    t.data = const_cast<float*>(a->data.data());
    t.dtype = OPF_FLOAT32, t.ndim = int32_t(a->shape.size()), t.device_type = OPF_CPU;
    int64_t stride = 1;
    for (int d = t.ndim - 1; d >= 0; --d) t.shape[d] = a->shape[d], t.strides[d] = stride, stride *= a->shape[d];
    return t;
  }
  void check(int32_t status, const opf_error& err) const {
    if (status != 0) throw std::runtime_error(std::string(op_->name) + ": " + err.message);
  }

  const opf_op_def* op_;
  std::vector<opf_attr> attrs_;
  std::vector<std::unique_ptr<std::vector<int64_t>>> keep_ints_;
};

}  // namespace harness
