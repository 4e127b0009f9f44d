// library.cpp: loading op libraries and calling their ops from Python.
#include "library.h"

#include <dlfcn.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "invoke.h"
#include "tensors.h"

namespace opforge_core {

[[noreturn]] void raise_error(py::handle type, const std::string& message) {
  PyErr_SetObject(type.ptr(), py_text(message).ptr());
  throw py::error_already_set();
}

[[noreturn]] void raise_op_error(const std::string& message) {
  raise_error(py::module_::import("opforge.errors").attr("OpError"), message);
}

namespace {

std::mutex& loaded_mutex() {
  static std::mutex m;
  return m;
}

std::vector<const LoadedLibrary*>& loaded_list() {
  static std::vector<const LoadedLibrary*> list;
  return list;
}

}  // namespace

LoadedLibrary::LoadedLibrary(void* handle, std::string path, bool kept)
    : handle_(handle), path_(std::move(path)), kept_(kept) {
  std::lock_guard<std::mutex> lock(loaded_mutex());
  loaded_list().push_back(this);
}

LoadedLibrary::~LoadedLibrary() {
  {
    std::lock_guard<std::mutex> lock(loaded_mutex());
    auto& list = loaded_list();
    list.erase(std::find(list.begin(), list.end(), this));
  }
  if (!kept_) dlclose(handle_);
}

std::vector<std::pair<std::string, bool>> loaded_libraries() {
  std::lock_guard<std::mutex> lock(loaded_mutex());
  std::vector<std::pair<std::string, bool>> out;
  for (const LoadedLibrary* lib : loaded_list()) out.emplace_back(lib->path(), lib->kept());
  return out;
}

std::vector<std::shared_ptr<OpHandle>> load_library(const std::string& path, bool keep) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw py::import_error("cannot load op library " + path + ": " + (why ? why : "unknown error"));
  }
  auto library = std::make_shared<LoadedLibrary>(handle, path, keep);
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
    ops.push_back(std::make_shared<OpHandle>(def, library));
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
    py::dict since;   // dtype -> the first opset it is allowed in, for those added after since_version
    for (int32_t k = 0; ps[i].dtype_since && k < ps[i].num_dtypes; ++k)
      if (ps[i].dtype_since[k] > 0) since[py::str(dtype_name(ps[i].dtypes[k]))] = ps[i].dtype_since[k];
    d["dtype_since"] = since;
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
  d["until_version"] = def_->until_version;
  d["source"] = def_->source ? def_->source : "";
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
    ad["since_version"] = a.since_version;
    ad["until_version"] = a.until_version;
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
  raise_error(py::module_::import("opforge.errors").attr(cls), e.what());
}

std::vector<opf_tensor> OpHandle::eager_inputs(const py::tuple& args, std::vector<py::array>& keep) const {
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

py::object OpHandle::call_at(int opset, const py::tuple& args, const py::dict& kwargs) const {
  if (is_cuda()) return call_cuda(opset, args, kwargs);
  AttrPack attrs(def_, kwargs, opset);
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = eager_inputs(args, keep);
  std::vector<Need> need(size_t(def_->num_outputs), Need::IfMade);
  std::vector<py::object> results = invoke(ins, need, attrs.view(), default_pool(0));
  if (results.size() == 1) return results[0];
  py::tuple tup(results.size());
  for (size_t i = 0; i < results.size(); ++i) tup[i] = results[i];
  return tup;
}

namespace {

/// Eager calls and the Python executor: outputs are new numpy arrays (or arrays the caller
/// gave, for run_into), the workspace a buffer of the call, and compute runs without the GIL.
class NumpyHost {
 public:
  NumpyHost(const opf_op_def* def, std::vector<py::object>& results, const py::list* given)
      : def_(def), results_(results), given_(given) {}

  void place_output(int32_t k, opf_tensor& t, bool read) {
    py::array a = given_ && !(*given_)[size_t(k)].is_none() ? given_output(k, t) : new_array(t);
    t = view_of(a);
    if (read) {
      results_[size_t(k)] = a;
    } else {
      unread_.push_back(a);  // a required output nobody reads, alive until compute ends
    }
  }

  void* workspace(int64_t bytes) {
    if (bytes > PTRDIFF_MAX - 64 - 2 * guard_)
      throw CallError(std::string(def_->name) + ": cannot allocate " + std::to_string(bytes) + " bytes of workspace",
                      false, true);
    try {
      scratch_.resize(size_t(bytes + 2 * guard_) + 64);
    } catch (const std::bad_alloc&) {
      throw CallError(std::string(def_->name) + ": cannot allocate " + std::to_string(bytes) + " bytes of workspace",
                      false, true);
    }
    unsigned char* start = scratch_.data() + (64 - reinterpret_cast<uintptr_t>(scratch_.data()) % 64) % 64;
    if (guard_ > 0) {
      std::memset(start, kGuardByte, size_t(guard_));
      std::memset(start + guard_, poison_, size_t(bytes));
      std::memset(start + guard_ + bytes, kGuardByte, size_t(guard_));
    }
    workspace_ = start + guard_;
    workspace_bytes_ = bytes;
    return workspace_;
  }

  /// Puts `guard` bytes (a multiple of 64) of a known pattern on both sides of the workspace,
  /// which starts filled with `poison`.
  void set_guard(int64_t guard, int poison) {
    guard_ = guard;
    poison_ = poison;
  }

  /// How far compute wrote outside its workspace (see set_guard).
  GuardDamage damage() const {
    GuardDamage d;
    if (guard_ == 0 || workspace_ == nullptr) return d;
    for (int64_t i = guard_; i > 0 && d.before == 0; --i)
      if (workspace_[-i] != kGuardByte) d.before = i;
    for (int64_t i = guard_; i > 0 && d.after == 0; --i)
      if (workspace_[workspace_bytes_ + i - 1] != kGuardByte) d.after = i;
    return d;
  }

  template <class F>
  void enter_compute(F&& compute) {
    py::gil_scoped_release release;
    compute();
  }

 private:
  py::array new_array(const opf_tensor& t) {
    std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim);
    try {
      return py::array(numpy_dtype(t.dtype), shape);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_MemoryError) && !e.matches(PyExc_ValueError)) throw;
      throw CallError(std::string(def_->name) + ": an output of shape " + shape_text(t) + " and dtype " +
                          dtype_name(t.dtype) + " does not fit in memory",
                      false, true);
    }
  }

  py::array given_output(int32_t k, const opf_tensor& inferred) {
    py::array a = (*given_)[size_t(k)].cast<py::array>();
    opf_tensor v = view_of(a);
    bool same = v.dtype == inferred.dtype && v.ndim == inferred.ndim;
    for (int32_t d = 0; same && d < v.ndim; ++d) same = v.shape[d] == inferred.shape[d];
    if (!same || !(a.flags() & py::array::c_style) || !a.writeable())
      throw CallError(std::string(def_->name) + "(): output #" + std::to_string(k) + " given as a " +
                          dtype_name(v.dtype) + shape_text(v) + " array; infer says " + dtype_name(inferred.dtype) +
                          shape_text(inferred) + ", C-contiguous and writable",
                      true);
    return a;
  }

  static constexpr unsigned char kGuardByte = 0xE7;

  const opf_op_def* def_;
  std::vector<py::object>& results_;
  const py::list* given_;
  std::vector<py::array> unread_;
  std::vector<unsigned char> scratch_;
  int64_t guard_ = 0;
  int poison_ = 0;
  unsigned char* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
};

}  // namespace

std::vector<py::object> OpHandle::invoke(const std::vector<opf_tensor>& ins, const std::vector<Need>& need,
                                         const AttrView& attrs, ThreadPool* pool, const py::list* given,
                                         int64_t* workspace, int64_t guard, int poison, GuardDamage* damage) const {
  std::vector<opf_tensor> outs(need.size());
  std::vector<py::object> results(need.size(), py::none());
  NumpyHost host(def_, results, given);
  host.set_guard(guard, poison);
  try {
    CallOptions options;
    options.pool = pool;
    options.always_workspace = guard > 0;
    const int64_t ws = call_op(def_, ins.data(), int32_t(ins.size()), attrs, outs.data(), int32_t(outs.size()),
                               need.data(), host, options);
    if (workspace) *workspace = ws;
    if (damage) *damage = host.damage();
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
    opforge_core::infer(def_, ins.data(), int32_t(ins.size()), attrs.view(), outs.data(), int32_t(outs.size()),
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

py::object OpHandle::refusal(const py::list& metas, const AttrPack& attrs, int num_outputs) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = metas_to_views(metas, keep);
  std::vector<opf_tensor> outs(size_t(num_outputs > 0 ? num_outputs : 0));
  try {
    opforge_core::infer(def_, ins.data(), int32_t(ins.size()), attrs.view(), outs.data(), int32_t(outs.size()),
                        Sizes::MaybeUnknown);
  } catch (const CallError& e) {
    if (!e.needs_value) return py_text(e.what());
  }
  return py::none();
}

int64_t OpHandle::workspace_size(const py::list& metas, const AttrPack& attrs) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = metas_to_views(metas, keep);
  try {
    return opforge_core::workspace_bytes(def_, ins.data(), int32_t(ins.size()), attrs.view());
  } catch (const CallError& e) {
    raise_call_error(e);
  }
}

std::vector<opf_tensor> OpHandle::runtime_inputs(const py::list& inputs, std::vector<py::array>& keep) const {
  std::vector<opf_tensor> ins(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::memset(&ins[i], 0, sizeof(opf_tensor));
    if (inputs[i].is_none()) continue;
    if (!py::isinstance<py::array>(inputs[i]) && !py::hasattr(inputs[i], "__dlpack__"))
      raise_call_error(CallError(std::string(def_->name) + "(): input #" + std::to_string(i) + " is a " +
                                     std::string(py::str(py::type::of(inputs[i]).attr("__name__"))) +
                                     ", not a tensor",
                                 true));
    py::array a = as_array(inputs[i]);
    if (!(a.flags() & py::array::c_style)) a = py::module_::import("numpy").attr("ascontiguousarray")(a);
    keep.push_back(a);
    ins[i] = view_of(a);
    if (ins[i].dtype == OPF_UNDEFINED)
      raise_call_error(CallError(std::string(def_->name) + "(): input #" + std::to_string(i) + " has dtype " +
                                     std::string(py::str(a.dtype())) + ", which ops cannot take",
                                 true));
  }
  return ins;
}

py::tuple OpHandle::run(const py::list& inputs, const std::vector<bool>& wanted, const AttrPack& attrs,
                        ThreadPool* pool) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = runtime_inputs(inputs, keep);
  std::vector<Need> need(wanted.size());
  for (size_t k = 0; k < wanted.size(); ++k) need[k] = wanted[k] ? Need::Required : Need::None;
  int64_t workspace = 0;
  py::list out;
  for (auto& r : invoke(ins, need, attrs.view(), pool, nullptr, &workspace)) out.append(r);
  return py::make_tuple(out, workspace);
}

void OpHandle::run_into(const py::list& inputs, const py::list& outputs, const AttrPack& attrs,
                        ThreadPool* pool) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = runtime_inputs(inputs, keep);
  std::vector<Need> need(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) need[k] = outputs[k].is_none() ? Need::None : Need::Required;
  invoke(ins, need, attrs.view(), pool, &outputs);
}

py::tuple OpHandle::run_guarded(const py::tuple& inputs, const py::list& outputs, const AttrPack& attrs,
                                ThreadPool* pool, int64_t guard, int poison) const {
  std::vector<py::array> keep;
  std::vector<opf_tensor> ins = eager_inputs(inputs, keep);
  std::vector<Need> need(outputs.size());
  for (size_t k = 0; k < outputs.size(); ++k) need[k] = outputs[k].is_none() ? Need::None : Need::Required;
  int64_t workspace = 0;
  GuardDamage damage;
  guard = (std::max<int64_t>(guard, 0) + 63) / 64 * 64;
  invoke(ins, need, attrs.view(), pool, &outputs, &workspace, guard, poison & 0xFF, &damage);
  return py::make_tuple(workspace, damage.before, damage.after);
}

}  // namespace opforge_core
