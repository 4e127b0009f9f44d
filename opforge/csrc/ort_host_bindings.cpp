// ort_host_bindings.cpp: onnxruntime custom-op libraries in Python: loading one, its ops'
// schemas and shape inference, and a kernel bound to a node that runs on numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>

#include "opforge/dtype.h"
#include "ort_host_library.h"
#include "tensors.h"

namespace py = pybind11;

namespace opforge_ort {

namespace {

const char* kind_name(OrtCustomOpInputOutputCharacteristic c) {
  return c == INPUT_OUTPUT_OPTIONAL ? "optional" : c == INPUT_OUTPUT_VARIADIC ? "variadic" : "required";
}

/// A library's op, as Python sees it.
struct OpHandle {
  HostOp op;

  std::string name() const { return op.op->GetName(op.op); }
  std::string provider() const {
    const char* p = op.op->GetExecutionProviderType ? op.op->GetExecutionProviderType(op.op) : nullptr;
    return p ? p : "CPUExecutionProvider";
  }
  int since() const {
    return op.op->version >= kOpShapeInference && op.op->GetStartVersion ? op.op->GetStartVersion(op.op) : 1;
  }
  int until() const {
    const int end = op.op->version >= kOpShapeInference && op.op->GetEndVersion ? op.op->GetEndVersion(op.op) : 0;
    return end == INT_MAX ? 0 : end;
  }
  py::list params(bool inputs) const {
    const OrtCustomOp* o = op.op;
    const size_t n = inputs ? o->GetInputTypeCount(o) : o->GetOutputTypeCount(o);
    py::list out;
    for (size_t i = 0; i < n; ++i) {
      auto c = INPUT_OUTPUT_REQUIRED;
      if (o->version >= kOpOptional) c = inputs ? o->GetInputCharacteristic(o, i) : o->GetOutputCharacteristic(o, i);
      if (c == INPUT_OUTPUT_VARIADIC && o->version < kOpVariadic) c = INPUT_OUTPUT_REQUIRED;
      out.append(py::make_tuple(int(inputs ? o->GetInputType(o, i) : o->GetOutputType(o, i)), kind_name(c)));
    }
    return out;
  }
};

OrtTensorTypeAndShapeInfo meta_of(const py::handle& meta) {
  OrtTensorTypeAndShapeInfo info;
  if (meta.is_none()) return info;
  py::tuple m = meta.cast<py::tuple>();
  info.dtype = m[0].cast<int32_t>();
  if (m[1].is_none()) {
    info.has_shape = false;
    return info;
  }
  for (auto d : m[1]) {
    info.shape.push_back(d.is_none() || py::isinstance<py::str>(d) ? -1 : d.cast<int64_t>());
    info.symbols.push_back(py::isinstance<py::str>(d) ? d.cast<std::string>() : "");
  }
  return info;
}

py::object meta_to_py(const OrtTensorTypeAndShapeInfo* info) {
  if (info == nullptr) return py::none();
  py::list shape;
  for (size_t d = 0; d < info->shape.size(); ++d) {
    if (info->shape[d] >= 0) shape.append(info->shape[d]);
    else if (d < info->symbols.size() && !info->symbols[d].empty()) shape.append(info->symbols[d]);
    else shape.append(py::none());
  }
  return py::make_tuple(int(info->dtype), info->has_shape ? py::object(py::tuple(shape)) : py::object(py::none()));
}

/// A string tensor's elements as UTF-8 bytes (str encoded, bytes kept).
void read_strings(const py::array& a, OrtValue& v) {
  py::list flat = a.attr("ravel")().attr("tolist")();
  v.strings.reserve(flat.size());
  for (auto item : flat) {
    if (py::isinstance<py::bytes>(item)) v.strings.push_back(item.cast<std::string>());
    else v.strings.push_back(py::str(item).cast<std::string>());
  }
}

OrtOpAttr attr_of(const py::handle& value, int32_t type) {
  OrtOpAttr a;
  a.type = type;
  switch (type) {
    case 1: a.f = value.cast<float>(); break;
    case 2: a.i = value.cast<int64_t>(); break;
    case 3: a.s = py::isinstance<py::bytes>(value) ? value.cast<std::string>() : py::str(value).cast<std::string>(); break;
    case 6: a.floats = value.cast<std::vector<float>>(); break;
    case 7: a.ints = value.cast<std::vector<int64_t>>(); break;
    case 8:
      for (auto s : value) a.strings.push_back(py::isinstance<py::bytes>(s) ? s.cast<std::string>() : py::str(s).cast<std::string>());
      break;
    case 4: {
      py::array arr = py::module_::import("numpy").attr("ascontiguousarray")(value);
      a.tensor.shape.assign(arr.shape(), arr.shape() + arr.ndim());
      if (arr.dtype().kind() == 'O' || arr.dtype().kind() == 'U' || arr.dtype().kind() == 'S') {
        a.tensor.dtype = ORT_TYPE_STRING;
        read_strings(arr, a.tensor);
      } else {
        a.tensor.dtype = opforge_core::dtype_code(arr.dtype());
        auto bytes = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(arr.data()),
                                                                  static_cast<const unsigned char*>(arr.data()) + arr.nbytes());
        a.tensor.data = bytes->data();
        a.tensor.owned = bytes;
      }
      break;
    }
    default: a.type = 0;  // graphs, lists of tensors: kinds custom ops cannot read
  }
  return a;
}

std::map<std::string, OrtOpAttr> attrs_of(const py::dict& attrs, const py::dict& types) {
  std::map<std::string, OrtOpAttr> out;
  for (auto item : attrs) {
    const std::string name = py::str(item.first);
    const int32_t type = types.contains(item.first) ? types[item.first].cast<int32_t>() : 0;
    OrtOpAttr a = attr_of(item.second, type);
    if (a.type != 0) out.emplace(name, std::move(a));
  }
  return out;
}

/// A kernel bound to a node, with the numpy conversions of its calls.
class KernelHandle {
 public:
  KernelHandle(std::shared_ptr<OpHandle> op, OrtKernelInfo info) : op_(std::move(op)), kernel_(op_->op.op, std::move(info)) {}

  py::list run(const py::list& inputs, opforge_core::ThreadPool* pool) const {
    OrtKernelContext ctx;
    ctx.pool = pool;
    std::vector<OrtValue> values(inputs.size());
    std::vector<py::array> keep;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].is_none()) {
        ctx.inputs.push_back(nullptr);
        continue;
      }
      py::array a = py::module_::import("numpy").attr("ascontiguousarray")(inputs[i]);
      OrtValue& v = values[i];
      v.shape.assign(a.shape(), a.shape() + a.ndim());
      const char kind = a.dtype().kind();
      if (kind == 'O' || kind == 'U' || kind == 'S') {
        v.dtype = ORT_TYPE_STRING;
        read_strings(a, v);
      } else {
        v.dtype = opforge_core::dtype_code(a.dtype());
        v.data = const_cast<void*>(a.data());
        keep.push_back(a);
      }
      ctx.inputs.push_back(&v);
    }
    const OrtKernelInfo& info = kernel_.info();
    ctx.outputs.resize(info.output_names.size());
    ctx.output_types = output_types(ctx);
    {
      py::gil_scoped_release release;
      kernel_.compute(ctx);
    }
    py::list out;
    for (auto& v : ctx.outputs) out.append(v ? to_numpy(*v) : py::object(py::none()));
    return out;
  }

 private:
  /// The type of each output: the node's (type inference), else the op's declared one, else,
  /// as onnxruntime does for an op's untyped output, the type of its last untyped input.
  std::vector<ONNXTensorElementDataType> output_types(const OrtKernelContext& ctx) const {
    const OrtCustomOp* o = op_->op.op;
    const OrtKernelInfo& info = kernel_.info();
    ONNXTensorElementDataType propagated = ORT_TYPE_UNDEFINED;
    const size_t declared_inputs = o->GetInputTypeCount(o);
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const size_t p = declared_inputs == 0 ? 0 : std::min(i, declared_inputs - 1);
      if (ctx.inputs[i] && (declared_inputs == 0 || o->GetInputType(o, p) == ORT_TYPE_UNDEFINED))
        propagated = ctx.inputs[i]->dtype;
    }
    const size_t declared_outputs = o->GetOutputTypeCount(o);
    std::vector<ONNXTensorElementDataType> types;
    for (size_t k = 0; k < info.output_names.size(); ++k) {
      ONNXTensorElementDataType t = info.output_types[k].tensor.dtype;
      if (t == ORT_TYPE_UNDEFINED && declared_outputs > 0)
        t = o->GetOutputType(o, std::min(k, declared_outputs - 1));
      types.push_back(t == ORT_TYPE_UNDEFINED ? propagated : t);
    }
    return types;
  }

  static py::object to_numpy(OrtValue& v) {
    std::vector<py::ssize_t> shape(v.shape.begin(), v.shape.end());
    if (v.is_string()) {
      py::list items;
      for (const auto& s : v.strings) {
        PyObject* text = PyUnicode_DecodeUTF8(s.data(), py::ssize_t(s.size()), "surrogateescape");
        if (text == nullptr) throw py::error_already_set();
        items.append(py::reinterpret_steal<py::object>(text));
      }
      py::array out = py::module_::import("numpy").attr("array")(items, py::arg("dtype") = "object");
      return out.attr("reshape")(shape);
    }
    auto* holder = new std::shared_ptr<void>(v.owned);
    py::capsule owner(holder, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
    return py::array(opforge_core::numpy_dtype(v.dtype), shape, v.data, owner);
  }

  std::shared_ptr<OpHandle> op_;
  HostKernel kernel_;
};

}  // namespace

void bind_ort_host(py::module_& m) {
  py::class_<OpHandle, std::shared_ptr<OpHandle>>(m, "OrtCustomOp",
                                                  "An op of an onnxruntime custom-op library loaded into opforge.")
      .def_property_readonly("domain", [](const OpHandle& h) { return h.op.domain; })
      .def_property_readonly("name", &OpHandle::name)
      .def_property_readonly("provider", &OpHandle::provider)
      .def_property_readonly("since_version", &OpHandle::since)
      .def_property_readonly("until_version", &OpHandle::until)
      .def_property_readonly("inputs", [](const OpHandle& h) { return h.params(true); },
                             "(element type, 'required' | 'optional' | 'variadic') per declared input; type 0: any")
      .def_property_readonly("outputs", [](const OpHandle& h) { return h.params(false); })
      .def("infer",
           [](const std::shared_ptr<OpHandle>& h, const py::list& metas, const py::dict& attrs, const py::dict& types,
              int num_outputs) -> py::object {
             OrtShapeInferContext ctx;
             for (auto meta : metas) ctx.inputs.push_back(meta_of(meta));
             auto values = attrs_of(attrs, types);
             ctx.attrs = &values;
             ctx.outputs.resize(size_t(num_outputs));
             try {
               if (!infer_shapes(h->op.op, ctx)) return py::none();
             } catch (const std::exception& e) {
               throw py::value_error(e.what());
             }
             py::list out;
             for (auto& o : ctx.outputs) out.append(meta_to_py(o.get()));
             return out;
           },
           py::arg("metas"), py::arg("attrs"), py::arg("attr_types"), py::arg("num_outputs"),
           "The op's own shape inference: (type, shape) or None per output; None when it has none. "
           "Raises ValueError with its error.")
      .def("bind",
           [](const std::shared_ptr<OpHandle>& h, const py::dict& node) {
             OrtKernelInfo info;
             info.node_name = node["name"].cast<std::string>();
             info.op_type = node["op_type"].cast<std::string>();
             info.domain = node["domain"].cast<std::string>();
             info.since_version = node["since_version"].cast<int>();
             info.input_names = node["inputs"].cast<std::vector<std::string>>();
             info.output_names = node["outputs"].cast<std::vector<std::string>>();
             for (auto meta : node["input_types"].cast<py::list>()) info.input_types.push_back({ONNX_TYPE_TENSOR, meta_of(meta)});
             for (auto meta : node["output_types"].cast<py::list>()) info.output_types.push_back({ONNX_TYPE_TENSOR, meta_of(meta)});
             info.attrs = attrs_of(node["attrs"].cast<py::dict>(), node["attr_types"].cast<py::dict>());
             try {
               return std::make_shared<KernelHandle>(h, std::move(info));
             } catch (const std::exception& e) {
               throw py::value_error(e.what());
             }
           },
           py::arg("node"),
           "Creates the op's kernel for a node (a dict: name, op_type, domain, since_version, inputs, "
           "outputs, input_types, output_types, attrs, attr_types). Raises ValueError with its error.");
  py::class_<KernelHandle, std::shared_ptr<KernelHandle>>(m, "OrtKernel", "A custom op's kernel bound to a node.")
      .def("run",
           [](const KernelHandle& k, const py::list& inputs, opforge_core::ThreadPool* pool) {
             try {
               return k.run(inputs, pool);
             } catch (const std::runtime_error& e) {
               throw py::value_error(e.what());
             }
           },
           py::arg("inputs"), py::arg("pool") = nullptr,
           "One call: arrays (or None) in, one array (or None, for one the kernel did not make) per "
           "output out. Raises ValueError with the kernel's error.");
  m.def("load_ort_library",
        [](const std::string& path) {
          std::vector<HostOp> ops;
          try {
            ops = load_host_library(path);
          } catch (const std::exception& e) {
            throw py::import_error(e.what());
          }
          py::list out;
          for (auto& op : ops) out.append(std::make_shared<OpHandle>(OpHandle{op}));
          return out;
        },
        py::arg("path"),
        "Loads an onnxruntime custom-op library (it exports RegisterCustomOps) and returns its ops. "
        "Raises ImportError naming the path and what failed.");
}

}  // namespace opforge_ort
