/// opforge/tensor.h: Tensor, a non-owning C++ view of an opf_tensor, and the error type ops throw.
#ifndef OPFORGE_TENSOR_H_
#define OPFORGE_TENSOR_H_

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "opforge/abi.h"
#include "opforge/dtype.h"

namespace opforge __attribute__((visibility("hidden"))) {

/// What an op throws to fail; the host reports it with the op's name.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What infer throws when it cannot tell the outputs without an input's value, which shape
/// inference may not have (a Reshape's target shape computed at run time): not a refusal, the
/// call works once the value is there.
class NeedsValue : public Error {
 public:
  using Error::Error;
};

namespace detail {
inline void append(std::string&) {}
template <class T, class... Rest> void append(std::string& out, const T& v, const Rest&... rest);
inline void append_one(std::string& out, const char* v) { out += v; }
inline void append_one(std::string& out, const std::string& v) { out += v; }
inline void append_one(std::string& out, char v) { out += v; }
template <class T> void append_one(std::string& out, const T& v) { out += std::to_string(v); }
template <class T, class... Rest> void append(std::string& out, const T& v, const Rest&... rest) {
  append_one(out, v);
  append(out, rest...);
}
}  // namespace detail

/// Builds a message from pieces: str("got ", n, " inputs").
template <class... Ts> std::string str(const Ts&... parts) {
  std::string out;
  detail::append(out, parts...);
  return out;
}

/// Throws opforge::Error with the message pieces unless `cond` holds.
#define OPFORGE_CHECK(cond, ...)                                                           \
  do {                                                                                     \
    if (!(cond)) throw ::opforge::Error(::opforge::str("check failed: " #cond ": ", ##__VA_ARGS__)); \
  } while (0)

/// A non-owning view: data pointer, dtype, shape, strides (in elements) and device.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(const opf_tensor* t) : t_(t) {}
  /// An input as infer sees it: its data may be unknown (shape inference), and reading it then
  /// throws NeedsValue instead of handing out a null pointer.
  Tensor(const opf_tensor* t, bool value_may_be_unknown) : t_(t), value_may_be_unknown_(value_may_be_unknown) {}

  /// False for an absent optional input.
  bool defined() const { return t_ != nullptr && t_->dtype != OPF_UNDEFINED; }
  int32_t dtype() const { return t_->dtype; }
  int ndim() const { return t_->ndim; }
  /// Size of dimension i; negative i counts from the end.
  int64_t size(int i) const { return t_->shape[i < 0 ? i + t_->ndim : i]; }
  int64_t stride(int i) const { return t_->strides[i < 0 ? i + t_->ndim : i]; }
  const int64_t* shape() const { return t_->shape; }
  std::vector<int64_t> sizes() const { return std::vector<int64_t>(t_->shape, t_->shape + t_->ndim); }
  /// Elements in the tensor; -1 if a dimension is unknown (shape inference only).
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < t_->ndim; ++i) {
      if (t_->shape[i] < 0) return -1;
      n *= t_->shape[i];
    }
    return n;
  }
  int64_t nbytes() const { return numel() * dtype_size(t_->dtype); }
  bool is_contiguous() const {
    int64_t expect = 1;
    for (int i = t_->ndim - 1; i >= 0; --i) {
      if (t_->shape[i] != 1 && t_->strides[i] != expect) return false;
      expect *= t_->shape[i];
    }
    return true;
  }
  bool on_cpu() const { return t_->device_type == OPF_CPU; }
  /// True for GPU memory (the inputs and outputs of CUDA ops); device_id() names the GPU.
  bool on_cuda() const { return t_->device_type == OPF_CUDA; }
  int device_id() const { return t_->device_id; }
  bool has_data() const { return t_->data != nullptr; }
  void* raw() const { return t_->data; }
  /// Typed data pointer; throws if T is not the tensor's dtype.
  template <class T> T* data() const {
    if (t_->dtype != int32_t(dtype_of<T>::value))
      throw Error(str("tensor holds ", dtype_name(t_->dtype), ", not ",
                      dtype_name(int32_t(dtype_of<T>::value))));
    if (value_may_be_unknown_ && t_->data == nullptr)
      throw NeedsValue("needs the value of an input whose value is not known yet");
    return static_cast<T*>(t_->data);
  }
  const opf_tensor* get() const { return t_; }

 private:
  const opf_tensor* t_ = nullptr;
  bool value_may_be_unknown_ = false;
};

}  // namespace opforge

#endif  // OPFORGE_TENSOR_H_
