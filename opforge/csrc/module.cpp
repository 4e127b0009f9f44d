// module.cpp: opforge._core, the compiled half of opforge's Python package.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "attrs.h"
#include "opforge/dtype.h"
#include "executor.h"
#include "library.h"
#include "tensors.h"
#include "thread_pool.h"

namespace py = pybind11;
using namespace opforge_core;

namespace {

// A numpy array's view, or a GPU array's (anything with __cuda_array_interface__) on `device`.
opf_tensor view_any(const py::handle& value, int device) {
  if (py::isinstance<py::array>(value)) return view_of(value.cast<py::array>());
  return cuda_view_of(value, device);
}

std::vector<opf_tensor> views(const py::list& values, int device) {
  std::vector<opf_tensor> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i].is_none()) {
      std::memset(&out[i], 0, sizeof(opf_tensor));
    } else {
      out[i] = view_any(values[i], device);
    }
  }
  return out;
}

int64_t nbytes(const opf_tensor& t) {
  int64_t n = opforge::dtype_size(t.dtype);
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "opforge's compiled core: loads op libraries and calls their ops.";
  m.attr("ABI_VERSION") = OPFORGE_ABI_VERSION;
  m.attr("MAX_DIMS") = OPF_MAX_DIMS;

  py::class_<ThreadPool>(m, "ThreadPool")
      .def(py::init<int>(), py::arg("num_threads"))
      .def_property_readonly("num_threads", &ThreadPool::num_threads);

  py::class_<AttrPack>(m, "AttrPack", "An op's attributes converted once, in declaration order.");

  py::class_<OpHandle, std::shared_ptr<OpHandle>>(m, "OpHandle")
      .def_property_readonly("name", [](const OpHandle& h) { return h.def()->name; })
      .def_property_readonly("domain", [](const OpHandle& h) { return h.def()->domain; })
      .def_property_readonly("since_version", [](const OpHandle& h) { return h.def()->since_version; })
      .def_property_readonly("library_path", &OpHandle::library_path)
      .def("schema", &OpHandle::schema)
      .def("__call__", &OpHandle::call)
      .def("attrs", [](const OpHandle& h, const py::dict& given) { return new AttrPack(h.def(), given); },
           py::arg("given"), "Converts attribute values (name -> value) for this op; raises TypeError.")
      .def("infer", &OpHandle::infer, py::arg("metas"), py::arg("attrs"), py::arg("num_outputs"))
      .def_property_readonly("is_cuda", &OpHandle::is_cuda)
      .def(
          "workspace_size",
          [](const OpHandle& h, const py::list& inputs, const AttrPack& attrs, int device) {
            return h.workspace_bytes(views(inputs, device), attrs);
          },
          py::arg("inputs"), py::arg("attrs"), py::arg("device") = 0,
          "Scratch bytes the op asks for with these inputs (numpy or GPU arrays).")
      .def(
          "run",
          [](const OpHandle& h, const py::list& inputs, const py::list& outputs, const AttrPack& attrs,
             ThreadPool* pool, uintptr_t stream, int device, const py::object& workspace) {
            // Runtime path: inputs (arrays or None) and preallocated contiguous outputs, numpy
            // for CPU ops; GPU arrays on `device`, a GPU workspace and a stream for CUDA ops.
            std::vector<opf_tensor> ins = views(inputs, device), outs = views(outputs, device);
            int64_t ws = h.workspace_bytes(ins, attrs);
            if (!workspace.is_none()) {
              opf_tensor w = view_any(workspace, device);
              if (ws > 0 && nbytes(w) < ws) throw py::value_error(std::string(h.def()->name) + ": workspace too small");
              h.compute(ins, outs, attrs, ws > 0 ? w.data : nullptr, ws, pool, reinterpret_cast<void*>(stream));
              return;
            }
            if (ws > 0 && h.is_cuda())
              throw py::value_error(std::string(h.def()->name) + " needs a GPU workspace of " + std::to_string(ws) + " bytes");
            std::vector<unsigned char> scratch(size_t(ws > 0 ? ws : 0) + 64);
            void* p = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
            h.compute(ins, outs, attrs, ws > 0 ? p : nullptr, ws, pool, reinterpret_cast<void*>(stream));
          },
          py::arg("inputs"), py::arg("outputs"), py::arg("attrs"), py::arg("pool") = nullptr,
          py::arg("stream") = 0, py::arg("device") = 0, py::arg("workspace") = py::none());

  py::class_<Plan>(m, "Plan", "A compiled execution plan for one input-shape signature.")
      .def(py::init<int, int64_t, ThreadPool*>(), py::arg("num_slots"), py::arg("arena_bytes"),
           py::arg("pool") = nullptr, py::keep_alive<1, 4>())
      .def("set_slot", &Plan::set_slot, py::arg("slot"), py::arg("kind"), py::arg("offset"),
           py::arg("planned_bytes"))
      .def("set_constant", &Plan::set_constant, py::arg("slot"), py::arg("value"))
      .def("add_native", &Plan::add_native)
      .def("add_python", &Plan::add_python)
      .def("run", &Plan::run, py::arg("feeds"), py::arg("outputs"), py::arg("cancel") = py::none())
      .def_property_readonly("arena_bytes", &Plan::arena_bytes)
      .def_property_readonly("num_steps", &Plan::num_steps);

  m.def("load_library", &load_library, py::arg("path"),
        "dlopen()s an op library and returns its ops; raises ImportError with the reason.");
  m.def("set_default_threads", [](int n) { default_pool(n); }, py::arg("num_threads"),
        "Sizes the pool eager calls use; only the first call has an effect.");
}
