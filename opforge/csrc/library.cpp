// library.cpp: loading op libraries and calling their ops from Python.
#include "library.h"

#include <dlfcn.h>
#include <pybind11/stl.h>

#include <cstring>
#include <mutex>

#include "checks.h"
#include "tensors.h"

namespace opforge_core {

[[noreturn]] void raise_op_error(const std::string& message) {
  py::object cls = py::module_::import("opforge.errors").attr("OpError");
  PyErr_SetString(cls.ptr(), message.c_str());
  throw py::error_already_set();
}

std::vector<std::shared_ptr<OpHandle>> load_library(const std::string& path) {
  // Libraries stay loaded for the life of the process: ops hand out function pointers.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw py::import_error("cannot load op library " + path + ": " + (why ? why : "unknown error"));
  }
  auto fn = reinterpret_cast<opf_library_fn>(dlsym(handle, OPFORGE_LIBRARY_SYMBOL));
  if (fn == nullptr)
    throw py::import_error(path + " exports no '" OPFORGE_LIBRARY_SYMBOL
                           "' table: was it built from sources that include <opforge/op.h>?");
  const opf_library* lib = fn();
  if (lib == nullptr) throw py::import_error(path + ": " OPFORGE_LIBRARY_SYMBOL "() returned NULL");
  if (lib->abi_version != OPFORGE_ABI_VERSION)
    throw py::import_error(path + " was built for opforge ABI " + std::to_string(lib->abi_version) +
                           ", this opforge speaks " + std::to_string(OPFORGE_ABI_VERSION) + "; rebuild it");
  if (lib->error != nullptr) throw py::value_error(path + ": " + lib->error);
  std::vector<std::shared_ptr<OpHandle>> ops;
  for (int32_t i = 0; i < lib->num_ops; ++i) {
    const opf_op_def* def = lib->ops[i];
    if (def->struct_size < sizeof(opf_op_def))
      throw py::import_error(path + ": op descriptor of an older layout; rebuild it");
    ops.push_back(std::make_shared<OpHandle>(def, path));
  }
  return ops;
}

ThreadPool* default_pool(int num_threads) {
  static std::once_flag once;
  static ThreadPool* pool = nullptr;
  std::call_once(once, [&] { pool = new ThreadPool(num_threads > 0 ? num_threads : 1); });
  return pool;
}

namespace {

py::list params(const opf_param* ps, int32_t n) {
  py::list out;
  for (int32_t i = 0; i < n; ++i) {
    py::list dtypes;
    for (int32_t k = 0; k < ps[i].num_dtypes; ++k) dtypes.append(dtype_name(ps[i].dtypes[k]));
    py::dict d;
    d["name"] = ps[i].name;
    d["dtypes"] = dtypes;
    d["optional"] = bool(ps[i].flags & OPF_PARAM_OPTIONAL);
    d["variadic"] = bool(ps[i].flags & OPF_PARAM_VARIADIC);
    d["doc"] = ps[i].doc;
    out.append(d);
  }
  return out;
}

std::string allowed_names(const opf_param& p) {
  std::string s;
  for (int32_t k = 0; k < p.num_dtypes; ++k) s += std::string(k ? ", " : "") + dtype_name(p.dtypes[k]);
  return s;
}

bool dtype_allowed(const opf_param& p, int32_t dtype) {
  if (p.num_dtypes == 0) return true;
  for (int32_t k = 0; k < p.num_dtypes; ++k)
    if (p.dtypes[k] == dtype) return true;
  return false;
}

}  // namespace

py::dict OpHandle::schema() const {
  py::dict d;
  d["name"] = def_->name;
  d["domain"] = def_->domain;
  d["since_version"] = def_->since_version;
  d["backend"] = def_->backend == OPF_BACKEND_CUDA ? "CUDA" : "CPU";
  d["doc"] = def_->doc;
  d["inputs"] = params(def_->inputs, def_->num_inputs);
  d["outputs"] = params(def_->outputs, def_->num_outputs);
  py::list attrs;
  for (int32_t i = 0; i < def_->num_attrs; ++i) {
    const opf_attr_def& a = def_->attrs[i];
    py::dict ad;
    ad["name"] = a.name;
    ad["type"] = attr_type_name(a.type);
    ad["required"] = bool(a.required);
    ad["has_default"] = a.default_value.type != OPF_ATTR_UNDEFINED;
    ad["default"] = attr_value(a.default_value);
    ad["doc"] = a.doc;
    attrs.append(ad);
  }
  d["attributes"] = attrs;
  py::list inplace;
  for (int32_t o = 0; o < def_->num_outputs; ++o) inplace.append(def_->inplace ? def_->inplace[o] : -1);
  d["inplace"] = inplace;
  d["accepts_strided"] = bool(def_->accepts_strided);
  d["has_workspace"] = def_->workspace != nullptr;
  return d;
}

const opf_param* OpHandle::param_for_input(size_t i) const {
  if (def_->num_inputs == 0) return nullptr;
  size_t last = size_t(def_->num_inputs - 1);
  if (i <= last) return &def_->inputs[i];
  return (def_->inputs[last].flags & OPF_PARAM_VARIADIC) ? &def_->inputs[last] : nullptr;
}

std::vector<opf_tensor> OpHandle::eager_inputs(const py::args& args, std::vector<py::array>& keep) const {
  std::string op = def_->name;
  size_t required = 0, fixed = size_t(def_->num_inputs);
  bool variadic = fixed > 0 && (def_->inputs[fixed - 1].flags & OPF_PARAM_VARIADIC);
  for (size_t i = 0; i < fixed; ++i)
    if (!(def_->inputs[i].flags & (OPF_PARAM_OPTIONAL | OPF_PARAM_VARIADIC))) required = i + 1;
  if (args.size() < required || (!variadic && args.size() > fixed)) {
    std::string expect = variadic ? "at least " + std::to_string(required)
                         : required == fixed ? std::to_string(fixed)
                                             : std::to_string(required) + " to " + std::to_string(fixed);
    throw py::type_error(op + "() takes " + expect + " input" + (fixed == 1 && !variadic ? "" : "s") +
                         ", got " + std::to_string(args.size()));
  }
  std::vector<opf_tensor> ins(args.size());
  py::module_ np;
  for (size_t i = 0; i < args.size(); ++i) {
    const opf_param& p = *param_for_input(i);
    if (args[i].is_none()) {
      if (!(p.flags & OPF_PARAM_OPTIONAL))
        throw py::type_error(op + "(): input '" + p.name + "' (#" + std::to_string(i) + ") is required, got None");
      std::memset(&ins[i], 0, sizeof(opf_tensor));
      continue;
    }
    py::array a = as_array(args[i]);
    if (!def_->accepts_strided && !(a.flags() & py::array::c_style)) {
      if (!np) np = py::module_::import("numpy");
      a = np.attr("asarray")(a, py::arg("order") = "C");
    }
    keep.push_back(a);
    ins[i] = view_of(a);
    if (ins[i].dtype == OPF_UNDEFINED)
      throw py::type_error(op + "(): input '" + p.name + "' (#" + std::to_string(i) + ") has dtype " +
                           std::string(py::str(a.dtype())) + ", which ops cannot take");
    if (!dtype_allowed(p, ins[i].dtype))
      throw py::type_error(op + "(): input '" + p.name + "' (#" + std::to_string(i) + ") has dtype " +
                           dtype_name(ins[i].dtype) + "; expected " + allowed_names(p));
  }
  return ins;
}

py::object OpHandle::call(const py::args& args, const py::kwargs& kwargs) const {
  AttrPack attrs(def_, kwargs);
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = eager_inputs(args, keep);
  int32_t nout = def_->num_outputs;
  std::vector<opf_tensor> outs(static_cast<size_t>(nout));
  std::memset(outs.data(), 0, sizeof(opf_tensor) * outs.size());
  opf_infer_ctx ic{def_, ins.data(), int32_t(ins.size()), attrs.data(), attrs.size(), outs.data(), nout};
  opf_error err;
  err.message[0] = '\0';
  if (def_->infer(&ic, &err) != 0) raise_op_error(err.message);
  std::vector<py::object> results;
  for (int32_t o = 0; o < nout; ++o) {
    opf_tensor& t = outs[size_t(o)];
    const opf_param& p = def_->outputs[o];
    if (t.dtype == OPF_UNDEFINED) {
      if (p.flags & OPF_PARAM_OPTIONAL) {
        results.push_back(py::none());
        continue;
      }
      raise_op_error(std::string(def_->name) + ": infer did not set output '" + p.name + "'");
    }
    const std::string problem = declared_problem(t, false);
    if (!problem.empty())
      raise_op_error(std::string(def_->name) + ": infer gave output '" + p.name + "' " + problem);
    std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim);
    py::array a(numpy_dtype(t.dtype), shape);
    t = view_of(a);
    results.push_back(a);
  }
  int64_t ws = workspace_bytes(ins, attrs);
  std::vector<unsigned char> scratch(size_t(ws > 0 ? ws : 0) + 64);
  void* ws_ptr = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  compute(ins, outs, attrs, ws > 0 ? ws_ptr : nullptr, ws, default_pool(0));
  if (results.size() == 1) return results[0];
  py::tuple tup(results.size());
  for (size_t i = 0; i < results.size(); ++i) tup[i] = results[i];
  return tup;
}

int64_t OpHandle::workspace_bytes(const std::vector<opf_tensor>& inputs, const AttrPack& attrs) const {
  if (def_->workspace == nullptr) return 0;
  opf_infer_ctx ic{def_, inputs.data(), int32_t(inputs.size()), attrs.data(), attrs.size(), nullptr, 0};
  opf_error err;
  err.message[0] = '\0';
  int64_t bytes = 0;
  if (def_->workspace(&ic, &bytes, &err) != 0) raise_op_error(err.message);
  if (bytes < 0) raise_op_error(std::string(def_->name) + ": workspace function returned a negative size");
  return bytes;
}

void OpHandle::compute(const std::vector<opf_tensor>& inputs, const std::vector<opf_tensor>& outputs,
                       const AttrPack& attrs, void* workspace, int64_t ws_bytes, ThreadPool* pool) const {
  opf_compute_ctx cc{def_, inputs.data(), int32_t(inputs.size()), attrs.data(), attrs.size(),
                     outputs.data(), int32_t(outputs.size()), workspace, ws_bytes, nullptr, pool,
                     pool ? &ThreadPool::entry : nullptr, pool ? pool->num_threads() : 1};
  opf_error err;
  err.message[0] = '\0';
  int32_t rc;
  {
    py::gil_scoped_release release;
    rc = def_->compute(&cc, &err);
  }
  if (rc != 0) raise_op_error(err.message);
}

py::list OpHandle::infer(const py::list& metas, const AttrPack& attrs, int num_outputs) const {
  std::vector<opf_tensor> ins(metas.size());
  std::vector<py::array> keep;
  for (size_t i = 0; i < metas.size(); ++i) {
    if (metas[i].is_none()) {
      std::memset(&ins[i], 0, sizeof(opf_tensor));
      continue;
    }
    py::tuple m = metas[i].cast<py::tuple>();
    ins[i] = meta_of(m[0].cast<int32_t>(), m[1].cast<std::vector<int64_t>>());
    if (m.size() > 2 && !m[2].is_none()) {
      py::array a = py::module_::import("numpy").attr("asarray")(m[2], py::arg("order") = "C");
      keep.push_back(a);
      ins[i].data = const_cast<void*>(a.data());
    }
  }
  std::vector<opf_tensor> outs(static_cast<size_t>(num_outputs));
  std::memset(outs.data(), 0, sizeof(opf_tensor) * outs.size());
  opf_infer_ctx ic{def_, ins.data(), int32_t(ins.size()), attrs.data(), attrs.size(), outs.data(), num_outputs};
  opf_error err;
  err.message[0] = '\0';
  if (def_->infer(&ic, &err) != 0) raise_op_error(err.message);
  py::list result;
  for (size_t k = 0; k < outs.size(); ++k) {
    const opf_tensor& t = outs[k];
    if (t.dtype == OPF_UNDEFINED) {
      result.append(py::none());
      continue;
    }
    // ValueError, not OpError: no other kernel would do better with these inputs
    const std::string problem = declared_problem(t, true);
    if (!problem.empty())
      throw py::value_error(std::string(def_->name) + ": infer gave output #" + std::to_string(k) + " " + problem);
    py::list shape;
    for (int d = 0; d < t.ndim; ++d) shape.append(t.shape[d]);
    result.append(py::make_tuple(t.dtype, py::tuple(shape)));
  }
  return result;
}

}  // namespace opforge_core
