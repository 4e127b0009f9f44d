// device_call.cpp: calls of CUDA ops on GPU arrays, eager (`lib.op(cupy_array)`) and from the
// CUDA provider. The Python side (opforge/builder/device_arrays.py) accepts the inputs, allocates
// with cupy and names the stream; the checks and the call are invoke.h's, as for CPU ops.
#include <cstring>

#include "library.h"
#include "tensors.h"

namespace opforge_core {

namespace {

py::module_ device_arrays() { return py::module_::import("opforge.builder.device_arrays"); }

std::vector<opf_tensor> cuda_views(const py::list& arrays, int device) {
  std::vector<opf_tensor> views(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    std::memset(&views[i], 0, sizeof(opf_tensor));
    if (!arrays[i].is_none()) views[i] = cuda_view_of(arrays[i], device);
  }
  return views;
}

}  // namespace

py::object OpHandle::call_cuda(const py::args& args, const py::kwargs& kwargs) const {
  AttrPack attrs(def_, kwargs);
  py::list names;
  for (int32_t i = 0; i < def_->num_inputs; ++i) names.append(def_->inputs[i].name);
  py::tuple prepared = device_arrays().attr("prepare")(def_->name, names, args, bool(def_->accepts_strided));
  py::list inputs = prepared[0];
  int device = prepared[1].cast<int>();
  void* stream = reinterpret_cast<void*>(prepared[2].cast<uintptr_t>());
  std::vector<bool> wanted(size_t(def_->num_outputs), true);
  std::vector<py::object> results = invoke_cuda(cuda_views(inputs, device), wanted, attrs, device, stream);
  if (results.size() == 1) return results[0];
  py::tuple tup(results.size());
  for (size_t i = 0; i < results.size(); ++i) tup[i] = results[i];
  return tup;
}

py::list OpHandle::run_cuda(const py::list& inputs, const std::vector<bool>& wanted, const AttrPack& attrs,
                            int device, uintptr_t stream) const {
  py::list out;
  for (auto& r : invoke_cuda(cuda_views(inputs, device), wanted, attrs, device, reinterpret_cast<void*>(stream)))
    out.append(r);
  return out;
}

std::vector<py::object> OpHandle::invoke_cuda(const std::vector<opf_tensor>& ins, const std::vector<bool>& wanted,
                                              const AttrPack& attrs, int device, void* stream) const {
  const int32_t nout = int32_t(wanted.size());
  std::vector<opf_tensor> outs(wanted.size());
  std::vector<py::object> results(wanted.size(), py::none()), unwanted;
  py::object empty = device_arrays().attr("empty"), scratch;
  int64_t ws = 0;
  try {
    opforge_core::infer(def_, ins.data(), int32_t(ins.size()), attrs, outs.data(), nout);
    for (int32_t k = 0; k < nout; ++k) {
      opf_tensor& t = outs[size_t(k)];
      if (t.dtype == OPF_UNDEFINED || (!wanted[size_t(k)] && output_is_optional(def_, k))) {
        t.data = nullptr;
        continue;
      }
      py::tuple shape(t.ndim);
      for (int d = 0; d < t.ndim; ++d) shape[size_t(d)] = t.shape[d];
      py::object a = empty(shape, dtype_name(t.dtype), device);
      t = cuda_view_of(a, device);
      if (wanted[size_t(k)]) {
        results[size_t(k)] = a;
      } else {
        unwanted.push_back(a);  // a required output nobody reads, alive until compute ends
      }
    }
    ws = opforge_core::workspace_bytes(def_, ins.data(), int32_t(ins.size()), attrs);
  } catch (const CallError& e) {
    raise_call_error(e);
  }
  void* ws_ptr = nullptr;
  if (ws > 0) {
    scratch = empty(py::make_tuple(ws), "uint8", device);
    ws_ptr = cuda_view_of(scratch, device).data;
  }
  try {
    py::gil_scoped_release release;
    opforge_core::compute(def_, ins.data(), int32_t(ins.size()), attrs, outs.data(), nout, ws_ptr, ws, nullptr,
                          stream);
  } catch (const CallError& e) {
    raise_call_error(e);
  }
  return results;
}

}  // namespace opforge_core
