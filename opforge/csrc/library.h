// library.h: a loaded op library and the Python-callable handle of each op in it.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "attrs.h"
#include "opforge/abi.h"
#include "thread_pool.h"

namespace opforge_core {

namespace py = pybind11;

/// One op of a loaded library. Holds the descriptor; the library is never unloaded, so the
/// pointer stays valid for the life of the process.
class OpHandle {
 public:
  OpHandle(const opf_op_def* def, std::string library_path) : def_(def), path_(std::move(library_path)) {}

  const opf_op_def* def() const { return def_; }
  const std::string& library_path() const { return path_; }
  py::dict schema() const;

  /// Eager call: arrays in, new arrays out, attributes as keyword arguments. CPU ops take and
  /// give numpy arrays; CUDA ops take GPU arrays and give cupy arrays (device_call.cpp).
  py::object call(const py::args& args, const py::kwargs& kwargs) const;

  /// Shape inference: metas are (dtype, shape, value-or-None) per input, None for an absent
  /// optional input. Returns (dtype, shape) per output, None for an output left unset.
  py::list infer(const py::list& metas, const AttrPack& attrs, int num_outputs) const;

  /// Scratch bytes for these inputs (0 if the op declares no workspace function).
  int64_t workspace_bytes(const std::vector<opf_tensor>& inputs, const AttrPack& attrs) const;

  /// Runs compute on prepared views; raises OpError on failure. Releases the GIL. `stream`
  /// is the cudaStream_t a CUDA op launches on.
  void compute(const std::vector<opf_tensor>& inputs, const std::vector<opf_tensor>& outputs,
               const AttrPack& attrs, void* workspace, int64_t workspace_bytes, ThreadPool* pool,
               void* stream = nullptr) const;

  bool is_cuda() const { return def_->backend == OPF_BACKEND_CUDA; }

 private:
  const opf_param* param_for_input(size_t i) const;
  /// Raises TypeError unless `n` inputs fit the declared ones.
  void check_arity(size_t n) const;
  /// Raises TypeError if input i (given, not None) has a dtype the op does not take.
  void check_dtype(size_t i, const opf_tensor& t, const py::handle& array) const;
  /// Raises TypeError if input i is None but required.
  void check_absent(size_t i) const;
  /// Output metadata from the op's infer, with OpError for outputs left unset or negative.
  std::vector<opf_tensor> infer_outputs(const std::vector<opf_tensor>& ins, const AttrPack& attrs) const;
  std::vector<opf_tensor> eager_inputs(const py::args& args, std::vector<py::array>& keep) const;
  py::object call_cuda(const py::args& args, const py::kwargs& kwargs) const;

  const opf_op_def* def_;
  std::string path_;
};

/// dlopen()s a built library and reads its op table; raises ImportError with the reason.
std::vector<std::shared_ptr<OpHandle>> load_library(const std::string& path);

/// The default pool used by eager calls (sized once, from the first request).
ThreadPool* default_pool(int num_threads);

/// Raises opforge.OpError with `message`.
[[noreturn]] void raise_op_error(const std::string& message);

}  // namespace opforge_core
