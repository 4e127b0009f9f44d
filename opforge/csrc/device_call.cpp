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

/// CUDA ops: outputs and workspace are cupy arrays on the call's device, so they come from
/// cupy's pool and stay alive as Python objects; compute launches without the GIL.
class CupyHost {
 public:
  CupyHost(int device, std::vector<py::object>& results)
      : device_(device), results_(results), empty_(device_arrays().attr("empty")) {}

  void place_output(int32_t k, opf_tensor& t, bool read) {
    py::tuple shape(t.ndim);
    for (int d = 0; d < t.ndim; ++d) shape[size_t(d)] = t.shape[d];
    py::object a = empty_(shape, dtype_name(t.dtype), device_);
    t = cuda_view_of(a, device_);
    if (read) {
      results_[size_t(k)] = a;
    } else {
      keep_.push_back(a);  // a required output nobody reads, alive until compute ends
    }
  }

  void* workspace(int64_t bytes) {
    keep_.push_back(empty_(py::make_tuple(bytes), "uint8", device_));
    return cuda_view_of(keep_.back(), device_).data;
  }

  template <class F>
  void enter_compute(F&& compute) {
    py::gil_scoped_release release;
    compute();
  }

 private:
  int device_;
  std::vector<py::object>& results_;
  py::object empty_;
  std::vector<py::object> keep_;
};

}  // namespace

py::object OpHandle::call_cuda(int opset, const py::tuple& args, const py::dict& kwargs) const {
  AttrPack attrs(def_, kwargs, opset);
  py::list names;
  for (int32_t i = 0; i < def_->num_inputs; ++i) names.append(def_->inputs[i].name);
  py::tuple prepared = device_arrays().attr("prepare")(def_->name, names, args, bool(def_->accepts_strided));
  py::list inputs = prepared[0];
  int device = prepared[1].cast<int>();
  void* stream = reinterpret_cast<void*>(prepared[2].cast<uintptr_t>());
  std::vector<Need> need(size_t(def_->num_outputs), Need::IfMade);
  std::vector<py::object> results = invoke_cuda(cuda_views(inputs, device), need, attrs.view(), device, stream);
  if (results.size() == 1) return results[0];
  py::tuple tup(results.size());
  for (size_t i = 0; i < results.size(); ++i) tup[i] = results[i];
  return tup;
}

py::list OpHandle::run_cuda(const py::list& inputs, const std::vector<bool>& wanted, const AttrPack& attrs,
                            int device, uintptr_t stream) const {
  std::vector<Need> need(wanted.size());
  for (size_t k = 0; k < wanted.size(); ++k) need[k] = wanted[k] ? Need::Required : Need::None;
  py::list out;
  for (auto& r : invoke_cuda(cuda_views(inputs, device), need, attrs.view(), device, reinterpret_cast<void*>(stream)))
    out.append(r);
  return out;
}

std::vector<py::object> OpHandle::invoke_cuda(const std::vector<opf_tensor>& ins, const std::vector<Need>& need,
                                              const AttrView& attrs, int device, void* stream) const {
  std::vector<opf_tensor> outs(need.size());
  std::vector<py::object> results(need.size(), py::none());
  CupyHost host(device, results);
  try {
    CallOptions options;
    options.stream = stream;
    call_op(def_, ins.data(), int32_t(ins.size()), attrs, outs.data(), int32_t(outs.size()), need.data(), host,
            options);
  } catch (const CallError& e) {
    raise_call_error(e);
  }
  return results;
}

}  // namespace opforge_core
