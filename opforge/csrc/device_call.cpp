// device_call.cpp: eager calls of CUDA ops on GPU arrays. The Python side
// (opforge/builder/device_arrays.py) accepts the inputs, allocates with cupy and names the
// stream; the schema checks, infer, workspace and the call are the same as for CPU ops.
#include <cstring>

#include "library.h"
#include "tensors.h"

namespace opforge_core {

py::object OpHandle::call_cuda(const py::args& args, const py::kwargs& kwargs) const {
  AttrPack attrs(def_, kwargs);
  check_arity(args.size());
  py::list names;
  for (size_t i = 0; i < args.size(); ++i) names.append(param_for_input(i)->name);
  py::module_ arrays = py::module_::import("opforge.builder.device_arrays");
  py::tuple prepared = arrays.attr("prepare")(def_->name, names, args, bool(def_->accepts_strided));
  py::list inputs = prepared[0];
  int device = prepared[1].cast<int>();
  void* stream = reinterpret_cast<void*>(prepared[2].cast<uintptr_t>());
  std::vector<opf_tensor> ins(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (inputs[i].is_none()) {
      check_absent(i);
      std::memset(&ins[i], 0, sizeof(opf_tensor));
      continue;
    }
    ins[i] = cuda_view_of(inputs[i], device);
    check_dtype(i, ins[i], inputs[i]);
  }
  std::vector<opf_tensor> outs = infer_outputs(ins, attrs);
  py::list results;
  for (opf_tensor& t : outs) {
    if (t.dtype == OPF_UNDEFINED) {
      results.append(py::none());
      continue;
    }
    py::tuple shape(t.ndim);
    for (int d = 0; d < t.ndim; ++d) shape[size_t(d)] = t.shape[d];
    py::object out = arrays.attr("empty")(shape, dtype_name(t.dtype), device);
    t = cuda_view_of(out, device);
    results.append(out);
  }
  int64_t ws = workspace_bytes(ins, attrs);
  py::object scratch = ws > 0 ? arrays.attr("empty")(py::make_tuple(ws), "uint8", device) : py::none();
  void* ws_ptr = ws > 0 ? cuda_view_of(scratch, device).data : nullptr;
  compute(ins, outs, attrs, ws_ptr, ws, nullptr, stream);
  if (results.size() == 1) return results[0];
  return py::tuple(results);
}

}  // namespace opforge_core
