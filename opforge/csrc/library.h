// library.h: a loaded op library and the Python-callable handle of each op in it.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "attrs.h"
#include "invoke.h"
#include "opforge/abi.h"
#include "thread_pool.h"

namespace opforge_core {

namespace py = pybind11;

/// A dlopen()ed op library. Every op handle of it (and every AttrPack holding state its code
/// made) shares ownership; the last one to let go dlclose()s it, unless it is `kept` (a
/// library whose code may outlive its handles: CUDA's registered kernels, the built-ins).
class LoadedLibrary {
 public:
  LoadedLibrary(void* handle, std::string path, bool kept);
  LoadedLibrary(const LoadedLibrary&) = delete;
  LoadedLibrary& operator=(const LoadedLibrary&) = delete;
  ~LoadedLibrary();

  const std::string& path() const { return path_; }
  void* handle() const { return handle_; }
  bool kept() const { return kept_; }

 private:
  void* handle_;
  std::string path_;
  bool kept_;
};

/// (path, kept) of every op library loaded now, once per load (for tools and tests that check
/// that reloaded libraries are unloaded).
std::vector<std::pair<std::string, bool>> loaded_libraries();

/// Bytes a guarded call found damaged around its workspace: the furthest before its start
/// and past its end (0 when untouched).
struct GuardDamage {
  int64_t before = 0;
  int64_t after = 0;
};

/// One op of a loaded library: its descriptor, valid for as long as the handle holds the library.
class OpHandle {
 public:
  OpHandle(const opf_op_def* def, std::shared_ptr<LoadedLibrary> library) : def_(def), library_(std::move(library)) {}

  const opf_op_def* def() const { return def_; }
  const std::string& library_path() const { return library_->path(); }
  /// The library the descriptor lives in (what state made by the op's code must keep alive).
  const std::shared_ptr<LoadedLibrary>& library() const { return library_; }
  py::dict schema() const;

  /// Eager call: arrays in, new arrays out, attributes as keyword arguments. CPU ops take and
  /// give numpy arrays; CUDA ops take GPU arrays and give cupy arrays (device_call.cpp).
  py::object call(const py::args& args, const py::kwargs& kwargs) const { return call_at(0, args, kwargs); }
  /// The same as a node of `opset` would be called (0: any version): attributes and dtypes
  /// that version of the op does not have are refused.
  py::object call_at(int opset, const py::tuple& args, const py::dict& kwargs) const;

  /// Whether compute runs on a GPU (the op's inputs and outputs are device memory).
  bool is_cuda() const { return def_->backend == OPF_BACKEND_CUDA; }

  /// Runtime call of a CUDA op on GPU arrays (or None) on `device`, launched on `stream`:
  /// one cupy array per output, None where `wanted` is false (device_call.cpp).
  py::list run_cuda(const py::list& inputs, const std::vector<bool>& wanted, const AttrPack& attrs,
                    int device, uintptr_t stream) const;

  /// Runtime call: arrays (or None) in; (one array per output, None where `wanted` is false,
  /// and the workspace bytes the call took). An output `wanted` that infer does not make fails.
  py::tuple run(const py::list& inputs, const std::vector<bool>& wanted, const AttrPack& attrs,
                ThreadPool* pool) const;

  /// Runtime call into given arrays: `outputs` holds one C-contiguous array per output (None for
  /// an output not wanted), of the dtype and shape infer gives; an output may alias an input
  /// where the op allows in-place. For tests and tools.
  void run_into(const py::list& inputs, const py::list& outputs, const AttrPack& attrs, ThreadPool* pool) const;

  /// A checked call for opforge.testing: inputs as an eager call takes them (strided views
  /// passed through where the op accepts them), into the given outputs (as run_into), with a
  /// workspace filled with `poison` and `guard` bytes of a known pattern on both sides.
  /// Returns (workspace bytes, bytes damaged before the workspace, bytes damaged past it).
  py::tuple run_guarded(const py::tuple& inputs, const py::list& outputs, const AttrPack& attrs,
                        ThreadPool* pool, int64_t guard, int poison) const;

  /// Shape inference: metas are (dtype, shape, value-or-None) per input, None for an absent
  /// optional input. Returns (dtype, shape) per output, None for an output left unset. With
  /// `sizes_known` false, sizes may be -1 (unknown), as in graph shape inference.
  py::list infer(const py::list& metas, const AttrPack& attrs, int num_outputs, bool sizes_known) const;

  /// Why the op refuses a node whose inputs have these metas (as infer() takes them, sizes may
  /// be unknown) with these attributes: infer's message; None when it takes it, or cannot tell
  /// without an input's value. How a session decides at creation which kernel runs a node.
  py::object refusal(const py::list& metas, const AttrPack& attrs, int num_outputs) const;

  /// Scratch bytes compute asks for with inputs of these metas (0 without a workspace function).
  int64_t workspace_size(const py::list& metas, const AttrPack& attrs) const;

  private:
  std::vector<opf_tensor> eager_inputs(const py::tuple& args, std::vector<py::array>& keep) const;
  /// call_op (invoke.h) on numpy: outputs new arrays (or `given` ones), the GIL released for
  /// compute; `workspace`, if given, gets the bytes the call took.
  std::vector<py::object> invoke(const std::vector<opf_tensor>& ins, const std::vector<Need>& need,
                                 const AttrView& attrs, ThreadPool* pool, const py::list* given = nullptr,
                                 int64_t* workspace = nullptr, int64_t guard = 0, int poison = 0,
                                 GuardDamage* damage = nullptr) const;
  py::object call_cuda(int opset, const py::tuple& args, const py::dict& kwargs) const;
  /// call_op (invoke.h) on cupy: outputs and workspace allocated with cupy on `device`.
  std::vector<py::object> invoke_cuda(const std::vector<opf_tensor>& ins, const std::vector<Need>& need,
                                      const AttrView& attrs, int device, void* stream) const;
  std::vector<opf_tensor> runtime_inputs(const py::list& inputs, std::vector<py::array>& keep) const;

  const opf_op_def* def_;
  std::shared_ptr<LoadedLibrary> library_;
};

/// dlopen()s a built library and reads its op table; raises ImportError with the reason. The
/// library is dlclose()d when its last handle goes, unless `keep`.
std::vector<std::shared_ptr<OpHandle>> load_library(const std::string& path, bool keep = true);

/// The default pool used by eager calls (sized once, from the first request).
ThreadPool* default_pool(int num_threads);

/// Raises opforge.OpError with `message`.
// Raises `type` with a message from C++ (not-UTF-8 bytes escaped, see py_text).
[[noreturn]] void raise_error(py::handle type, const std::string& message);
[[noreturn]] void raise_op_error(const std::string& message);

/// Raises a CallError as opforge.OpArgumentError (bad arguments) or opforge.OpError.
[[noreturn]] void raise_call_error(const CallError& e);

}  // namespace opforge_core
