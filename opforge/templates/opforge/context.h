/// opforge/context.h: what an op's infer, workspace and compute functions are handed.
#ifndef OPFORGE_CONTEXT_H_
#define OPFORGE_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "opforge/abi.h"
#include "opforge/tensor.h"

/// What cudaStream_t points to; declared here so ctx.stream() is a cudaStream_t without
/// including CUDA's headers in CPU ops.
struct CUstream_st;

namespace opforge __attribute__((visibility("hidden"))) {

/// Reads attributes by name, converting to the C++ type asked for.
class Attrs {
 public:
  Attrs(const opf_attr* attrs, int32_t n) : attrs_(attrs), n_(n) {}

  /// True if the attribute was given or has a default.
  bool has(const char* name) const {
    const opf_attr* a = find(name);
    return a != nullptr && a->type != OPF_ATTR_UNDEFINED;
  }
  /// The value as T: float, double, int64_t, int, bool, std::string, std::vector<int64_t>,
  /// std::vector<float>, std::vector<std::string>, Tensor or std::vector<Tensor>.
  template <class T> T get(const char* name) const {
    T out;
    read(expect(name), &out);
    return out;
  }

 private:
  const opf_attr* find(const char* name) const {
    for (int32_t i = 0; i < n_; ++i)
      if (std::strcmp(attrs_[i].name, name) == 0) return &attrs_[i];
    return nullptr;
  }
  const opf_attr& expect(const char* name) const {
    const opf_attr* a = find(name);
    if (a == nullptr) throw Error(str("no attribute '", name, "' is declared by this op"));
    if (a->type == OPF_ATTR_UNDEFINED) throw Error(str("attribute '", name, "' was not given"));
    return *a;
  }
  static void require(const opf_attr& a, int32_t type, const char* wanted) {
    if (a.type != type) throw Error(str("attribute '", a.name, "' is not ", wanted));
  }
  static void read(const opf_attr& a, float* out) {
    if (a.type == OPF_ATTR_INT) { *out = float(a.i); return; }
    require(a, OPF_ATTR_FLOAT, "a float");
    *out = a.f;
  }
  static void read(const opf_attr& a, double* out) { float f; read(a, &f); *out = f; }
  static void read(const opf_attr& a, int64_t* out) { require(a, OPF_ATTR_INT, "an int"); *out = a.i; }
  static void read(const opf_attr& a, int* out) { require(a, OPF_ATTR_INT, "an int"); *out = int(a.i); }
  static void read(const opf_attr& a, bool* out) { require(a, OPF_ATTR_INT, "an int"); *out = a.i != 0; }
  static void read(const opf_attr& a, std::string* out) {
    if (a.type != OPF_ATTR_STRING && a.type != OPF_ATTR_GRAPH && a.type != OPF_ATTR_SPARSE_TENSOR &&
        a.type != OPF_ATTR_TYPE_PROTO)
      throw Error(str("attribute '", a.name, "' is not a string"));
    out->assign(a.s, size_t(a.s_len));
  }
  static void read(const opf_attr& a, std::vector<int64_t>* out) {
    require(a, OPF_ATTR_INTS, "a list of ints");
    out->assign(a.ints, a.ints + a.count);
  }
  static void read(const opf_attr& a, std::vector<float>* out) {
    require(a, OPF_ATTR_FLOATS, "a list of floats");
    out->assign(a.floats, a.floats + a.count);
  }
  static void read(const opf_attr& a, std::vector<std::string>* out) {
    if (a.type != OPF_ATTR_STRINGS && a.type != OPF_ATTR_GRAPHS)
      throw Error(str("attribute '", a.name, "' is not a list of strings"));
    out->clear();
    for (int64_t i = 0; i < a.count; ++i) out->emplace_back(a.strings[i], size_t(a.string_lens[i]));
  }
  static void read(const opf_attr& a, Tensor* out) {
    require(a, OPF_ATTR_TENSOR, "a tensor");
    *out = Tensor(a.tensors);
  }
  static void read(const opf_attr& a, std::vector<Tensor>* out) {
    require(a, OPF_ATTR_TENSORS, "a list of tensors");
    out->clear();
    for (int64_t i = 0; i < a.count; ++i) out->emplace_back(&a.tensors[i]);
  }

  const opf_attr* attrs_;
  int32_t n_;
};

/// Handed to infer and workspace: input metadata, attributes, and the outputs to describe.
/// During graph shape inference an input's data may be absent (has_data() false) and a dim
/// may be -1 (unknown); an infer that needs a value should check has_data().
class InferContext {
 public:
  explicit InferContext(const opf_infer_ctx* c) : c_(c), attrs_(c->attrs, c->num_attrs) {}
  int num_inputs() const { return c_->num_inputs; }
  int num_outputs() const { return c_->num_outputs; }
  /// Input i's metadata; an absent optional input is not defined(). Its data is there when
  /// the value is known: reading it when it is not throws NeedsValue.
  Tensor input(int i) const { return Tensor(&c_->inputs[i], true); }
  bool has_input(int i) const { return i < c_->num_inputs && input(i).defined(); }
  template <class T> T attr(const char* name) const { return attrs_.get<T>(name); }
  bool has_attr(const char* name) const { return attrs_.has(name); }
  /// Declares output i's dtype and shape.
  void set_output(int i, int32_t dtype, const std::vector<int64_t>& shape) const {
    if (i < 0 || i >= c_->num_outputs) throw Error(str("output index ", i, " out of range"));
    if (shape.size() > OPF_MAX_DIMS) throw Error(str("output ", i, " has too many dimensions"));
    opf_tensor& t = c_->outputs[i];
    t.dtype = dtype;
    t.ndim = int32_t(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) t.shape[d] = shape[d];
  }
  void set_output(int i, DType dtype, const std::vector<int64_t>& shape) const {
    set_output(i, int32_t(dtype), shape);
  }
  /// Output i takes input j's dtype and shape.
  void set_output_like(int i, int j) const { set_output(i, input(j).dtype(), input(j).sizes()); }

 private:
  const opf_infer_ctx* c_;
  Attrs attrs_;
};

/// One address per type T: what marks a node's kept state as a T (KernelContext::state).
template <class T> inline constexpr char state_tag = 0;

/// Handed to compute: inputs, preallocated outputs, attributes, workspace, stream, thread pool.
class KernelContext {
 public:
  explicit KernelContext(const opf_compute_ctx* c) : c_(c), attrs_(c->attrs, c->num_attrs) {}
  int num_inputs() const { return c_->num_inputs; }
  int num_outputs() const { return c_->num_outputs; }
  Tensor input(int i) const { return Tensor(&c_->inputs[i]); }
  bool has_input(int i) const { return i < c_->num_inputs && input(i).defined(); }
  Tensor output(int i) const { return Tensor(&c_->outputs[i]); }
  template <class T> T attr(const char* name) const { return attrs_.get<T>(name); }
  bool has_attr(const char* name) const { return attrs_.has(name); }
  /// The scratch space the op asked for in its workspace function, as T*.
  template <class T = void> T* workspace() const { return static_cast<T*>(c_->workspace); }
  int64_t workspace_bytes() const { return c_->workspace_bytes; }
  /// The cudaStream_t a CUDA op must launch on (the caller's stream: cupy's current one for
  /// eager calls, the session's in a model); NULL on the CPU.
  CUstream_st* stream() const { return static_cast<CUstream_st*>(c_->stream); }
  int num_threads() const { return c_->num_threads > 0 ? c_->num_threads : 1; }

  /// The T this node keeps from call to call, made by make() (returning a T) on the node's
  /// first call. make() may read attributes only, never inputs: the state outlives the call.
  /// Calls racing on a first call may each make one; one is kept. Without a slot from the host
  /// (eager calls have none) it is made for this call only.
  template <class T, class Make> const T& state(Make&& make) const {
    struct Held : opf_state {
      Held(const void* t, T v) : tag(t), value(std::move(v)) {
        release = [](opf_state* s) { delete static_cast<Held*>(s); };
      }
      const void* tag;  ///< state_tag<T>, so a slot is never read as another type
      T value;
    };
    const void* tag = &state_tag<T>;
    opf_state** slot = c_->state;
    opf_state* kept = slot ? __atomic_load_n(slot, __ATOMIC_ACQUIRE) : nullptr;
    if (kept == nullptr) {
      Held* made = new Held(tag, make());
      if (slot == nullptr) {
        local_.reset(made);
        return made->value;
      }
      if (__atomic_compare_exchange_n(slot, &kept, made, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return made->value;
      made->release(made);  // another call kept its own first
    }
    Held* held = static_cast<Held*>(kept);
    if (held->tag != tag) throw Error("this node's kept state is of another type");
    return held->value;
  }

  /// Runs fn(begin, end) over [0, n) on the host's threads, chunks of at least `grain`.
  template <class F> void parallel_for(int64_t n, int64_t grain, F&& fn) const {
    if (n <= 0) return;
    if (c_->parallel_for == nullptr || num_threads() == 1 || n <= grain) {
      run_whole(fn, n);
      return;
    }
    // Exceptions must not cross the host's C boundary: keep the first, rethrow it here.
    struct Job {
      explicit Job(F& f) : fn(f) {}
      F& fn;
      std::atomic<bool> failed{false};
      std::string message;
    } job(fn);
    c_->parallel_for(
        c_->pool, n, grain,
        [](void* arg, int64_t b, int64_t e) {
          Job& j = *static_cast<Job*>(arg);
          try {
            j.fn(b, e);
          } catch (const std::exception& ex) {
            if (!j.failed.exchange(true)) j.message = ex.what();
          } catch (...) {
            if (!j.failed.exchange(true)) j.message = "unknown exception";
          }
        },
        &job);
    if (job.failed) throw Error(job.message);
  }

 private:
  /// fn(0, n) from a function of its own, as the pool's chunks call it: inlined into its caller,
  /// GCC can give up inlining fn's per-element work and call it per element, unvectorised.
  template <class F> __attribute__((noinline)) static void run_whole(F& fn, int64_t n) { fn(int64_t(0), n); }

  struct Release {
    void operator()(opf_state* s) const { s->release(s); }
  };
  const opf_compute_ctx* c_;
  Attrs attrs_;
  mutable std::unique_ptr<opf_state, Release> local_;  ///< state made for one call (no slot)
};

}  // namespace opforge

#endif  // OPFORGE_CONTEXT_H_
