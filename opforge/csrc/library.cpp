// library.cpp: loading op libraries and calling their ops from Python.
#include "library.h"

#include <dlfcn.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <mutex>

#include "invoke.h"
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

[[noreturn]] void raise_call_error(const CallError& e) {
  const char* cls = e.bad_argument ? "OpArgumentError" : e.too_big ? "OpMemoryError" : "OpError";
  py::object type = py::module_::import("opforge.errors").attr(cls);
  PyErr_SetString(type.ptr(), e.what());
  throw py::error_already_set();
}

std::vector<opf_tensor> OpHandle::eager_inputs(const py::args& args, std::vector<py::array>& keep) const {
  std::vector<opf_tensor> ins(args.size());
  py::module_ np;
  for (size_t i = 0; i < args.size(); ++i) {
    std::memset(&ins[i], 0, sizeof(opf_tensor));
    if (args[i].is_none()) continue;
    py::array a = as_array(args[i]);
    if (!def_->accepts_strided && !(a.flags() & py::array::c_style)) {
      if (!np) np = py::module_::import("numpy");
      a = np.attr("asarray")(a, py::arg("order") = "C");
    }
    keep.push_back(a);
    if (dtype_code(a.dtype()) == OPF_UNDEFINED)
      throw py::type_error(std::string(def_->name) + "(): input #" + std::to_string(i) + " has dtype " +
                           std::string(py::str(a.dtype())) + ", which ops cannot take");
    ins[i] = view_of(a);
  }
  return ins;
}

py::array OpHandle::given_output(const py::list& given, int32_t k, const opf_tensor& inferred) const {
  py::array a = given[size_t(k)].cast<py::array>();
  opf_tensor v = view_of(a);
  bool same = v.dtype == inferred.dtype && v.ndim == inferred.ndim;
  for (int32_t d = 0; same && d < v.ndim; ++d) same = v.shape[d] == inferred.shape[d];
  if (!same || !(a.flags() & py::array::c_style) || !a.writeable())
    throw CallError(std::string(def_->name) + "(): output #" + std::to_string(k) + " given as a " +
                        dtype_name(v.dtype) + shape_text(v) + " array; infer says " +
                        dtype_name(inferred.dtype) + shape_text(inferred) + ", C-contiguous and writable",
                    true);
  return a;
}

py::object OpHandle::call(const py::args& args, const py::kwargs& kwargs) const {
  if (is_cuda()) return call_cuda(args, kwargs);
  AttrPack attrs(def_, kwargs);
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = eager_inputs(args, keep);
  std::vector<bool> wanted(size_t(def_->num_outputs), true);
  std::vector<py::object> results = invoke(ins, wanted, attrs, default_pool(0));
  if (results.size() == 1) return results[0];
  py::tuple tup(results.size());
  for (size_t i = 0; i < results.size(); ++i) tup[i] = results[i];
  return tup;
}

std::vector<py::object> OpHandle::invoke(const std::vector<opf_tensor>& ins, const std::vector<bool>& wanted,
                                         const AttrPack& attrs, ThreadPool* pool, const py::list* given) const {
  const int32_t nout = int32_t(wanted.size());
  std::vector<opf_tensor> outs(wanted.size());
  std::vector<py::object> results(wanted.size(), py::none());
  std::vector<py::array> unwanted;  // required outputs nobody reads, alive until compute ends
  int64_t ws = 0;
  try {
    opforge_core::infer(def_, ins.data(), int32_t(ins.size()), attrs, outs.data(), nout);
    for (int32_t k = 0; k < nout; ++k) {
      opf_tensor& t = outs[size_t(k)];
      // an output the node does not ask for still gets memory unless the op declares it
      // optional: kernels write their required outputs unconditionally
      if (t.dtype == OPF_UNDEFINED || (!wanted[size_t(k)] && output_is_optional(def_, k))) {
        t.data = nullptr;
        continue;
      }
      std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim);
      py::array a = given && !(*given)[size_t(k)].is_none() ? given_output(*given, k, t)
                                                            : py::array(numpy_dtype(t.dtype), shape);
      t = view_of(a);
      if (wanted[size_t(k)]) {
        results[size_t(k)] = a;
      } else {
        unwanted.push_back(a);
      }
    }
    ws = opforge_core::workspace_bytes(def_, ins.data(), int32_t(ins.size()), attrs);
  } catch (const CallError& e) {
    raise_call_error(e);
  }
  std::vector<unsigned char> scratch;
  try {
    if (ws > PTRDIFF_MAX - 64) throw std::bad_alloc();
    scratch.resize(size_t(ws) + 64);
  } catch (const std::bad_alloc&) {
    raise_call_error(CallError(std::string(def_->name) + ": cannot allocate " + std::to_string(ws) +
                                   " bytes of workspace", false, true));
  }
  void* ws_ptr = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
  try {
    py::gil_scoped_release release;
    opforge_core::compute(def_, ins.data(), int32_t(ins.size()), attrs, outs.data(), nout,
                          ws > 0 ? ws_ptr : nullptr, ws, pool);
  } catch (const CallError& e) {
    raise_call_error(e);
  }
  return results;
}

namespace {

/// Input views from metadata: (dtype code, shape[, value]) tuples, None for an absent input.
std::vector<opf_tensor> metas_to_views(const py::list& metas, std::vector<py::array>& keep) {
  std::vector<opf_tensor> ins(metas.size());
  for (size_t i = 0; i < metas.size(); ++i) {
    std::memset(&ins[i], 0, sizeof(opf_tensor));
    if (metas[i].is_none()) continue;
    py::tuple m = metas[i].cast<py::tuple>();
    ins[i] = meta_of(m[0].cast<int32_t>(), m[1].cast<std::vector<int64_t>>());
    if (m.size() > 2 && !m[2].is_none()) {
      py::array a = py::module_::import("numpy").attr("asarray")(m[2], py::arg("order") = "C");
      keep.push_back(a);
      ins[i].data = const_cast<void*>(a.data());
    }
  }
  return ins;
}

}  // namespace

py::list OpHandle::infer(const py::list& metas, const AttrPack& attrs, int num_outputs, bool sizes_known) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = metas_to_views(metas, keep);
  std::vector<opf_tensor> outs(size_t(num_outputs > 0 ? num_outputs : 0));
  try {
    opforge_core::infer(def_, ins.data(), int32_t(ins.size()), attrs, outs.data(), int32_t(outs.size()),
                        sizes_known ? Sizes::Known : Sizes::MaybeUnknown);
  } catch (const CallError& e) {
    raise_call_error(e);
  }
  py::list result;
  for (auto& t : outs) {
    if (t.dtype == OPF_UNDEFINED) {
      result.append(py::none());
      continue;
    }
    py::list shape;
    for (int d = 0; d < t.ndim; ++d) shape.append(t.shape[d]);
    result.append(py::make_tuple(t.dtype, py::tuple(shape)));
  }
  return result;
}

int64_t OpHandle::workspace_size(const py::list& metas, const AttrPack& attrs) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = metas_to_views(metas, keep);
  try {
    return opforge_core::workspace_bytes(def_, ins.data(), int32_t(ins.size()), attrs);
  } catch (const CallError& e) {
    raise_call_error(e);
  }
}

std::vector<opf_tensor> OpHandle::runtime_inputs(const py::list& inputs, std::vector<py::array>& keep) const {
  std::vector<opf_tensor> ins(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::memset(&ins[i], 0, sizeof(opf_tensor));
    if (inputs[i].is_none()) continue;
    py::array a = as_array(inputs[i]);
    if (!(a.flags() & py::array::c_style)) a = py::module_::import("numpy").attr("ascontiguousarray")(a);
    keep.push_back(a);
    ins[i] = view_of(a);
  }
  return ins;
}

py::list OpHandle::run(const py::list& inputs, const std::vector<bool>& wanted, const AttrPack& attrs,
                       ThreadPool* pool) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = runtime_inputs(inputs, keep);
  py::list out;
  for (auto& r : invoke(ins, wanted, attrs, pool)) out.append(r);
  return out;
}

void OpHandle::run_into(const py::list& inputs, const py::list& outputs, const AttrPack& attrs,
                        ThreadPool* pool) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = runtime_inputs(inputs, keep);
  std::vector<bool> wanted(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) wanted[k] = !outputs[k].is_none();
  try {
    invoke(ins, wanted, attrs, pool, &outputs);
  } catch (const CallError& e) {
    raise_call_error(e);
  }
}

}  // namespace opforge_core
