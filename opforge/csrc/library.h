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

  /// Eager call: arrays in, new numpy arrays out, attributes as keyword arguments.
  py::object call(const py::args& args, const py::kwargs& kwargs) const;

  /// Shape inference: metas are (dtype, shape, value-or-None) per input, None for an absent
  /// optional input. Returns (dtype, shape) per output, None for an output left unset. Raises
  /// OpError when the op's infer fails, ValueError when what it declares cannot be allocated
  /// (an unknown dtype, too many dims, a byte size that overflows).
  py::list infer(const py::list& metas, const AttrPack& attrs, int num_outputs) const;

  /// Scratch bytes for these inputs (0 if the op declares no workspace function).
  int64_t workspace_bytes(const std::vector<opf_tensor>& inputs, const AttrPack& attrs) const;

  /// Runs compute on prepared views; raises OpError on failure. Releases the GIL.
  void compute(const std::vector<opf_tensor>& inputs, const std::vector<opf_tensor>& outputs,
               const AttrPack& attrs, void* workspace, int64_t workspace_bytes, ThreadPool* pool) const;

 private:
  const opf_param* param_for_input(size_t i) const;
  std::vector<opf_tensor> eager_inputs(const py::args& args, std::vector<py::array>& keep) const;

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
