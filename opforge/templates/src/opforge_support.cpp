// opforge_support.cpp: the out-of-line half of opforge/op.h, linked into every op library.
//
// It keeps the library's op registry, freezes each OpDef into the C structs of opforge/abi.h,
// wraps the user's functions so no C++ exception crosses the ABI, and exports `opforge_library`.
// The builder compiles it once per toolchain and flags and caches the object.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cuda_hook.h"
#include "opforge/op.h"

namespace opforge {

struct OpDef::Impl {
  struct Param {
    std::string name, doc;
    std::vector<int32_t> dtypes, since;  // since: per dtype, the first opset it is allowed in
    int32_t flags;
  };
  struct Attr {
    std::string name, doc, str;
    int32_t type = OPF_ATTR_UNDEFINED;
    bool required = false, has_default = true;
    int32_t since = 0, until = 0;
    opf_attr value{};
    std::vector<int64_t> ints;
    std::vector<float> floats;
    std::vector<std::string> strings;
    std::vector<const char*> string_ptrs;
    std::vector<int64_t> string_lens;
  };
  struct Fns {
    InferFn infer;
    WorkspaceFn workspace;
    ComputeFn compute;
  };

  std::string name, domain, doc, source;
  int since = 1, until = 0;
  Param* last_param = nullptr;
  int32_t backend = -1;  // unset: the library's default, decided when the table is frozen
  std::vector<Param> inputs, outputs;
  std::vector<Attr> attrs;
  std::vector<int32_t> inplace;
  bool strided = false;
  Fns fns{nullptr, nullptr, nullptr};
  std::vector<opf_param> c_inputs, c_outputs;
  std::vector<opf_attr_def> c_attrs;
  opf_op_def def{};

  OpDef& add_param(OpDef& self, std::vector<Param>& list, const char* pname,
                   std::initializer_list<DType> types, int32_t flags, const char* pdoc) {
    Param p{pname, pdoc, {}, {}, flags};
    for (DType d : types) {
      p.dtypes.push_back(int32_t(d));
      p.since.push_back(0);
    }
    list.push_back(std::move(p));
    last_param = &list.back();
    return self;
  }
  Attr& add_attr(const char* aname, int32_t type, const char* adoc) {
    attrs.emplace_back();
    Attr& a = attrs.back();
    a.name = aname;
    a.doc = adoc;
    a.type = type;
    return a;
  }
  void check() const;
  void freeze_attr(Attr& a);
};

namespace {

std::vector<std::unique_ptr<OpDef>>& registry() {
  static std::vector<std::unique_ptr<OpDef>> ops;
  return ops;
}

void report(opf_error* err, const opf_op_def* op, const char* what, int32_t code = OPF_ERR_FAILED) {
  std::string msg = str(op->name, ": ", what);
  size_t n = msg.size() < sizeof(err->message) - 1 ? msg.size() : sizeof(err->message) - 1;
  std::memcpy(err->message, msg.data(), n);
  err->message[n] = '\0';
  err->code = code;
}

// Runs body, turning any C++ exception into a non-zero status and a message.
template <class Body> int32_t guarded(const opf_op_def* op, opf_error* err, Body&& body) {
  try {
    body();
    return 0;
  } catch (const NeedsValue& e) {
    report(err, op, e.what(), OPF_ERR_NEEDS_VALUE);
  } catch (const std::exception& e) {
    report(err, op, e.what());
  } catch (...) {
    report(err, op, "unknown C++ exception");
  }
  return 1;
}

const OpDef::Impl::Fns& fns_of(const opf_op_def* op) {
  return *static_cast<const OpDef::Impl::Fns*>(op->user_data);
}

int32_t infer_entry(const opf_infer_ctx* c, opf_error* err) {
  return guarded(c->op, err, [&] {
    InferContext ctx(c);
    fns_of(c->op).infer(ctx);
  });
}

int32_t workspace_entry(const opf_infer_ctx* c, int64_t* bytes, opf_error* err) {
  return guarded(c->op, err, [&] {
    InferContext ctx(c);
    *bytes = fns_of(c->op).workspace(ctx);
  });
}

int32_t compute_entry(const opf_compute_ctx* c, opf_error* err) {
  return guarded(c->op, err, [&] {
    ComputeFn fn = fns_of(c->op).compute;
    if (c->op->backend == OPF_BACKEND_CUDA) {
      if (detail::cuda_runner == nullptr)
        throw Error("this CUDA op is in a library built without CUDA: build it with backend='CUDA'");
      detail::cuda_runner(c, fn);
      return;
    }
    KernelContext ctx(c);
    fn(ctx);
  });
}

void freeze_params(const std::vector<OpDef::Impl::Param>& src, std::vector<opf_param>& dst) {
  for (const auto& p : src) {
    bool versioned = false;
    for (int32_t v : p.since) versioned = versioned || v > 0;
    dst.push_back({p.name.c_str(), p.dtypes.data(), int32_t(p.dtypes.size()), p.flags, p.doc.c_str(),
                   versioned ? p.since.data() : nullptr});
  }
}

/// Whether two version ranges (until 0: no end) share a version.
bool overlap(int32_t a_since, int32_t a_until, int32_t b_since, int32_t b_until) {
  const int64_t a_end = a_until ? a_until : INT32_MAX, b_end = b_until ? b_until : INT32_MAX;
  return a_since <= b_end && b_since <= a_end;
}

std::string range_text(const opf_op_def* d) {
  return d->until_version ? str("opsets ", d->since_version, "-", d->until_version)
                          : str("opsets ", d->since_version, " on");
}

}  // namespace

detail::CudaRunner detail::cuda_runner = nullptr;

OpDef& detail::register_op(const char* name, const char* file, int line) {
  registry().emplace_back(new OpDef(name));
  registry().back()->impl_source(str(file, ":", line));
  return *registry().back();
}

OpDef::OpDef(const char* name) : impl_(new Impl) { impl_->name = name; }
const char* OpDef::name() const { return impl_->name.c_str(); }
OpDef& OpDef::domain(const char* d) { impl_->domain = d; return *this; }
OpDef& OpDef::since(int version) { impl_->since = version; return *this; }
OpDef& OpDef::until(int version) { impl_->until = version; return *this; }
OpDef& OpDef::versions(int since_version, int until_version) { return since(since_version).until(until_version); }
void OpDef::impl_source(std::string where) { impl_->source = std::move(where); }
OpDef& OpDef::doc(const char* text) { impl_->doc = text; return *this; }
OpDef& OpDef::backend(opf_backend b) { impl_->backend = b; return *this; }

OpDef& OpDef::input(const char* n, std::initializer_list<DType> t, const char* d) {
  return impl_->add_param(*this, impl_->inputs, n, t, 0, d);
}
OpDef& OpDef::optional_input(const char* n, std::initializer_list<DType> t, const char* d) {
  return impl_->add_param(*this, impl_->inputs, n, t, OPF_PARAM_OPTIONAL, d);
}
OpDef& OpDef::variadic_input(const char* n, std::initializer_list<DType> t, const char* d) {
  return impl_->add_param(*this, impl_->inputs, n, t, OPF_PARAM_VARIADIC, d);
}
OpDef& OpDef::output(const char* n, std::initializer_list<DType> t, const char* d) {
  return impl_->add_param(*this, impl_->outputs, n, t, 0, d);
}
OpDef& OpDef::optional_output(const char* n, std::initializer_list<DType> t, const char* d) {
  return impl_->add_param(*this, impl_->outputs, n, t, OPF_PARAM_OPTIONAL, d);
}
OpDef& OpDef::variadic_output(const char* n, std::initializer_list<DType> t, const char* d) {
  return impl_->add_param(*this, impl_->outputs, n, t, OPF_PARAM_VARIADIC, d);
}

OpDef& OpDef::attr(const char* n, float v, const char* d) {
  impl_->add_attr(n, OPF_ATTR_FLOAT, d).value.f = v;
  return *this;
}
OpDef& OpDef::attr(const char* n, double v, const char* d) { return attr(n, float(v), d); }
OpDef& OpDef::attr(const char* n, int64_t v, const char* d) {
  impl_->add_attr(n, OPF_ATTR_INT, d).value.i = v;
  return *this;
}
OpDef& OpDef::attr(const char* n, int v, const char* d) { return attr(n, int64_t(v), d); }
OpDef& OpDef::attr(const char* n, bool v, const char* d) { return attr(n, int64_t(v), d); }
OpDef& OpDef::attr(const char* n, const char* v, const char* d) {
  impl_->add_attr(n, OPF_ATTR_STRING, d).str = v;
  return *this;
}
OpDef& OpDef::attr(const char* n, std::initializer_list<int64_t> v, const char* d) {
  impl_->add_attr(n, OPF_ATTR_INTS, d).ints.assign(v.begin(), v.end());
  return *this;
}
OpDef& OpDef::attr(const char* n, std::initializer_list<float> v, const char* d) {
  impl_->add_attr(n, OPF_ATTR_FLOATS, d).floats.assign(v.begin(), v.end());
  return *this;
}
OpDef& OpDef::attr(const char* n, std::initializer_list<const char*> v, const char* d) {
  auto& a = impl_->add_attr(n, OPF_ATTR_STRINGS, d);
  for (const char* s : v) a.strings.emplace_back(s);
  return *this;
}
OpDef& OpDef::required_attr(const char* n, AttrType type, const char* d) {
  auto& a = impl_->add_attr(n, int32_t(type), d);
  a.required = true;
  a.has_default = false;
  return *this;
}
OpDef& OpDef::optional_attr(const char* n, AttrType type, const char* d) {
  impl_->add_attr(n, int32_t(type), d).has_default = false;
  return *this;
}

OpDef& OpDef::attr_versions(int since_version, int until_version) {
  if (impl_->attrs.empty()) throw Error("attr_versions() before any attribute");
  impl_->attrs.back().since = since_version;
  impl_->attrs.back().until = until_version;
  return *this;
}

OpDef& OpDef::dtypes_since(int version, std::initializer_list<DType> dtypes) {
  if (impl_->last_param == nullptr) throw Error("dtypes_since() before any input or output");
  for (DType d : dtypes) {
    impl_->last_param->dtypes.push_back(int32_t(d));
    impl_->last_param->since.push_back(version);
  }
  return *this;
}

OpDef& OpDef::inplace(int output, int input) {
  if (impl_->inplace.size() < size_t(output + 1)) impl_->inplace.resize(size_t(output + 1), -1);
  impl_->inplace[size_t(output)] = input;
  return *this;
}
OpDef& OpDef::accepts_strided() { impl_->strided = true; return *this; }
OpDef& OpDef::infer(InferFn f) { impl_->fns.infer = f; return *this; }
OpDef& OpDef::workspace(WorkspaceFn f) { impl_->fns.workspace = f; return *this; }
OpDef& OpDef::compute(ComputeFn f) { impl_->fns.compute = f; return *this; }

void OpDef::Impl::check() const {
  if (fns.infer == nullptr)
    throw Error("no .infer(...) given (opforge::same_as_input0 suits elementwise ops)");
  if (fns.compute == nullptr) throw Error("no .compute(...) given");
  for (size_t i = 0; i + 1 < inputs.size(); ++i)
    if (inputs[i].flags & OPF_PARAM_VARIADIC)
      throw Error(str("variadic input '", inputs[i].name, "' must be the last input"));
  for (size_t i = 0; i + 1 < outputs.size(); ++i)
    if (outputs[i].flags & OPF_PARAM_VARIADIC)
      throw Error(str("variadic output '", outputs[i].name, "' must be the last output"));
  for (size_t o = 0; o < inplace.size(); ++o)
    if (inplace[o] >= int32_t(inputs.size()) || o >= outputs.size())
      throw Error(str("inplace(", o, ", ", inplace[o], ") names a missing input or output"));
  for (size_t i = 0; i < attrs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (attrs[i].name == attrs[j].name) throw Error(str("attribute '", attrs[i].name, "' is declared twice"));
  if (since < 1 || (until != 0 && until < since))
    throw Error(str("its versions ", since, " to ", until, " are not a range (since >= 1, until >= since or 0)"));
}

void OpDef::Impl::freeze_attr(Attr& a) {
  opf_attr& v = a.value;
  v.name = a.name.c_str();
  v.type = a.has_default ? a.type : OPF_ATTR_UNDEFINED;
  v.s = a.str.c_str();
  v.s_len = int64_t(a.str.size());
  if (a.type == OPF_ATTR_INTS) {
    v.ints = a.ints.data();
    v.count = int64_t(a.ints.size());
  } else if (a.type == OPF_ATTR_FLOATS) {
    v.floats = a.floats.data();
    v.count = int64_t(a.floats.size());
  } else if (a.type == OPF_ATTR_STRINGS) {
    for (const std::string& s : a.strings) {
      a.string_ptrs.push_back(s.c_str());
      a.string_lens.push_back(int64_t(s.size()));
    }
    v.strings = a.string_ptrs.data();
    v.string_lens = a.string_lens.data();
    v.count = int64_t(a.strings.size());
  }
  c_attrs.push_back({a.name.c_str(), a.type, a.required ? 1 : 0, v, a.doc.c_str(), a.since, a.until});
}

const opf_op_def* OpDef::freeze() {
  Impl& m = *impl_;
  m.check();
  freeze_params(m.inputs, m.c_inputs);
  freeze_params(m.outputs, m.c_outputs);
  for (auto& a : m.attrs) m.freeze_attr(a);
  if (!m.inplace.empty()) m.inplace.resize(m.outputs.size(), -1);
  if (m.backend < 0) m.backend = detail::cuda_runner ? OPF_BACKEND_CUDA : OPF_BACKEND_CPU;
  m.def = opf_op_def{sizeof(opf_op_def), m.name.c_str(), m.domain.c_str(), m.since, m.backend,
                     m.doc.c_str(), m.c_inputs.data(), int32_t(m.c_inputs.size()),
                     m.c_outputs.data(), int32_t(m.c_outputs.size()), m.c_attrs.data(),
                     int32_t(m.c_attrs.size()), m.inplace.empty() ? nullptr : m.inplace.data(),
                     m.strided ? 1 : 0, infer_entry,
                     m.fns.workspace ? workspace_entry : nullptr, compute_entry, &m.fns, m.until,
                     m.source.c_str()};
  return &m.def;
}

}  // namespace opforge

extern "C" __attribute__((visibility("default"))) const opf_library* opforge_library(void) {
  static std::string error;
  static std::vector<const opf_op_def*> defs;
  static opf_library lib = [] {
    opf_library l{OPFORGE_ABI_VERSION, 0, nullptr, nullptr};
    auto& ops = opforge::registry();
    for (size_t i = 0; i < ops.size(); ++i) {
      try {
        defs.push_back(ops[i]->freeze());
      } catch (const std::exception& e) {
        error = opforge::str("op '", ops[i]->name(), "' is not fully defined: ", e.what());
        l.error = error.c_str();
        return l;
      }
    }
    // A definition without .until() serves until the next definition of the same op begins;
    // two that still share an opset (the same since, or an explicit until past the next
    // one's since) are refused, naming both places.
    for (size_t i = 0; i < defs.size(); ++i) {
      opf_op_def* a = const_cast<opf_op_def*>(defs[i]);
      if (a->until_version != 0) continue;
      for (const opf_op_def* b : defs)
        if (b != a && std::strcmp(a->name, b->name) == 0 && std::strcmp(a->domain, b->domain) == 0 &&
            b->since_version > a->since_version &&
            (a->until_version == 0 || b->since_version - 1 < a->until_version))
          a->until_version = b->since_version - 1;
    }
    for (size_t i = 0; i < defs.size(); ++i)
      for (size_t j = 0; j < i; ++j) {
        const opf_op_def *a = defs[j], *b = defs[i];
        if (std::strcmp(a->name, b->name) == 0 && std::strcmp(a->domain, b->domain) == 0 &&
            opforge::overlap(a->since_version, a->until_version, b->since_version, b->until_version)) {
          error = opforge::str("op '", b->name, "' of domain '", b->domain, "' is defined twice for the same opsets: at ",
                               a->source, " (", opforge::range_text(a), ") and at ", b->source, " (",
                               opforge::range_text(b), "); give each definition its own range with .since()/.until()");
          l.error = error.c_str();
          return l;
        }
      }
    l.num_ops = int32_t(defs.size());
    l.ops = defs.data();
    return l;
  }();
  return &lib;
}
