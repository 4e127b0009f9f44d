// module.cpp: opforge._core, the compiled half of opforge's Python package.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "attrs.h"
#include "opforge/dtype.h"
#include "executor.h"
#include "loop.h"
#include "library.h"
#include "tensors.h"
#include "thread_pool.h"

namespace py = pybind11;
using namespace opforge_core;

namespace opforge_ort {
void bind_ort_host(py::module_& m);  // ort_host_bindings.cpp
}

PYBIND11_MODULE(_core, m) {
  m.doc() = "opforge's compiled core: loads op libraries and calls their ops.";
  m.attr("ABI_VERSION") = OPFORGE_ABI_VERSION;
  m.attr("MAX_DIMS") = OPF_MAX_DIMS;
  // the tables Python shares with this core, from their one definition here
  py::dict dtype_names;
  for (int32_t code = OPF_FLOAT32; code <= OPF_INT2; ++code)
    if (code != OPF_STRING && opforge::dtype_size(code) > 0)
      dtype_names[py::int_(code)] = opforge::dtype_name(code);
  m.attr("DTYPE_NAMES") = dtype_names;
  py::dict slot_kinds;
  slot_kinds["dynamic"] = int(SlotKind::Dynamic);
  slot_kinds["arena"] = int(SlotKind::Arena);
  slot_kinds["output"] = int(SlotKind::Output);
  slot_kinds["constant"] = int(SlotKind::Constant);
  slot_kinds["feed"] = int(SlotKind::Feed);
  m.attr("SLOT_KINDS") = slot_kinds;
  py::dict core_steps;
  core_steps["string_onehot"] = int(CoreStep::StringOneHot);
  core_steps["index_to_string"] = int(CoreStep::IndexToString);
  core_steps["zipmap"] = int(CoreStep::ZipMap);
  m.attr("CORE_STEPS") = core_steps;

  opforge_ort::bind_ort_host(m);

  py::class_<ThreadPool>(m, "ThreadPool")
      .def(py::init<int>(), py::arg("num_threads"))
      .def_property_readonly("num_threads", &ThreadPool::num_threads)
      .def("prewake", &ThreadPool::prewake, "Wakes sleeping workers to poll for the next job for a while.");

  py::class_<AttrPack>(m, "AttrPack", "An op's attributes converted once, in declaration order.");

  py::class_<OpHandle, std::shared_ptr<OpHandle>>(m, "OpHandle")
      .def_property_readonly("name", [](const OpHandle& h) { return h.def()->name; })
      .def_property_readonly("domain", [](const OpHandle& h) { return h.def()->domain; })
      .def_property_readonly("since_version", [](const OpHandle& h) { return h.def()->since_version; })
      .def_property_readonly("until_version", [](const OpHandle& h) { return h.def()->until_version; })
      .def_property_readonly("source", [](const OpHandle& h) { return std::string(h.def()->source ? h.def()->source : ""); })
      .def("__repr__", [](const OpHandle& h) {   // what a list of handles (op_table) shows
        const opf_op_def* d = h.def();
        return "<opforge op " + std::string(*d->domain ? d->domain : "ai.onnx") + "::" + d->name +
               " since " + std::to_string(d->since_version) + ">";
      })
      .def_property_readonly("library_path", &OpHandle::library_path)
      .def("schema", &OpHandle::schema)
      .def_property_readonly("is_cuda", &OpHandle::is_cuda)
      .def("__call__", &OpHandle::call)
      .def("call_at", &OpHandle::call_at, py::arg("opset"), py::arg("args"), py::arg("kwargs"),
           "Calls the op as a node of `opset` would be (0: any version): attributes and dtypes "
           "that version does not have are refused.")
      .def("attrs",
           [](const OpHandle& h, const py::dict& given, int opset) {
             auto* pack = new AttrPack(h.def(), given, opset);
             pack->keep_alive(h.library());
             return pack;
           },
           py::arg("given"), py::arg("opset") = 0,
           "Converts attribute values (name -> value) for this op, for a node of `opset` (0: any "
           "version); raises TypeError.")
      .def("infer", &OpHandle::infer, py::arg("metas"), py::arg("attrs"), py::arg("num_outputs"),
           py::arg("sizes_known") = false)
      .def("refusal", &OpHandle::refusal, py::arg("metas"), py::arg("attrs"), py::arg("num_outputs"),
           "Why the op refuses a node with inputs of these metas (infer's message), or None.")
      .def("workspace_size", &OpHandle::workspace_size, py::arg("metas"), py::arg("attrs"),
           "Scratch bytes the op asks for with inputs of these (dtype, shape) metas.")
      .def("invoke", &OpHandle::run, py::arg("inputs"), py::arg("wanted"), py::arg("attrs"),
           py::arg("pool") = nullptr,
           "Runs the op on arrays (None for absent inputs) through the one call sequence; returns "
           "(one array per output, None where `wanted` is false; the workspace bytes it took). An "
           "output `wanted` that infer does not make raises OpError.")
      .def("invoke_cuda", &OpHandle::run_cuda, py::arg("inputs"), py::arg("wanted"), py::arg("attrs"),
           py::arg("device"), py::arg("stream"),
           "Runs a CUDA op on GPU arrays (or None) on `device`, launched on `stream` (a cudaStream_t as "
           "an int); returns a cupy array per output, None where `wanted` is false.")
      .def("run_guarded", &OpHandle::run_guarded, py::arg("inputs"), py::arg("outputs"), py::arg("attrs"),
           py::arg("pool") = nullptr, py::arg("guard") = 256, py::arg("poison") = 0xA5,
           "A checked call (opforge.testing): inputs as an eager call takes them, into the given outputs, "
           "with a workspace filled with `poison` between `guard` bytes of a known pattern; returns "
           "(workspace bytes, bytes damaged before it, bytes damaged past it).")
      .def("run", &OpHandle::run_into, py::arg("inputs"), py::arg("outputs"), py::arg("attrs"),
           py::arg("pool") = nullptr,
           "Runs the op into preallocated outputs (None for one not wanted), checked against infer.");

  py::class_<Plan>(m, "Plan", "A compiled execution plan for one input-shape signature.")
      .def(py::init<int, int64_t, ThreadPool*>(), py::arg("num_slots"), py::arg("arena_bytes"),
           py::arg("pool") = nullptr, py::keep_alive<1, 4>())
      .def("set_slot", &Plan::set_slot, py::arg("slot"), py::arg("kind"), py::arg("offset"),
           py::arg("planned_bytes"))
      .def("set_constant", &Plan::set_constant, py::arg("slot"), py::arg("value"))
      .def("add_native", &Plan::add_native)
      .def("add_python", &Plan::add_python)
      .def("add_core_step", &Plan::add_core_step)
      .def("run", &Plan::run, py::arg("feeds"), py::arg("outputs"), py::arg("cancel") = py::none(),
           py::arg("observe") = py::none())
      .def("set_feed", &Plan::set_feed, py::arg("slot"), py::arg("name"))
      .def("set_outputs", &Plan::set_outputs, py::arg("outputs"))
      .def("run_env", &Plan::run_env, py::arg("env"), py::arg("cancel") = py::none(),
           py::arg("observe") = py::none())
      .def("set_profiling", &Plan::set_profiling, py::arg("on"))
      .def("take_profile", &Plan::take_profile)
      .def_property_readonly("arena_bytes", &Plan::arena_bytes)
      .def_property_readonly("num_steps", &Plan::num_steps)
      .def_property_readonly("alone_steps", &Plan::alone_steps,
                             "Indices of the steps measured faster on the calling thread alone than with "
                             "the pool's workers, which run that way");

  m.def("run_loop", &run_loop, py::arg("plan"), py::arg("fixed"), py::arg("iteration_slot"),
        py::arg("condition_slot"), py::arg("carried_slots"), py::arg("carried"), py::arg("scanned_slots"),
        py::arg("scanned"), py::arg("scanned_reverse"), py::arg("outputs"),
        py::arg("start"), py::arg("limit"), py::arg("condition"), py::arg("cancel") = py::none(),
        "Iterates a Loop or Scan body through its compiled plan (see csrc/loop.h).");
  m.def("load_library", &load_library, py::arg("path"), py::arg("keep") = true,
        "dlopen()s an op library and returns its ops; raises ImportError with the reason. Unless "
        "`keep`, the library is dlclose()d once no handle (and no node state its code made) is left.");
  m.def("loaded_libraries", &loaded_libraries,
        "(path, kept) of every op library loaded now, one entry per load.");
  m.def("set_default_threads", [](int n) { default_pool(n); }, py::arg("num_threads"),
        "Sizes the pool eager calls use; only the first call has an effect.");
}
