// attrs.cpp: Python attribute values -> opf_attr, with errors that name the op and attribute.
#include "attrs.h"

#include <charconv>
#include <cstring>

#include "tensors.h"

namespace opforge_core {

const char* attr_type_name(int32_t type) {
  switch (type) {
    case OPF_ATTR_FLOAT: return "float";
    case OPF_ATTR_INT: return "int";
    case OPF_ATTR_STRING: return "str";
    case OPF_ATTR_TENSOR: return "tensor";
    case OPF_ATTR_GRAPH: return "graph";
    case OPF_ATTR_FLOATS: return "floats";
    case OPF_ATTR_INTS: return "ints";
    case OPF_ATTR_STRINGS: return "strs";
    case OPF_ATTR_TENSORS: return "tensors";
    case OPF_ATTR_GRAPHS: return "graphs";
    case OPF_ATTR_SPARSE_TENSOR: return "sparse_tensor";
    case OPF_ATTR_TYPE_PROTO: return "type_proto";
    default: return "undefined";
  }
}

namespace {

[[noreturn]] void wrong_kind(const opf_op_def* op, const opf_attr_def& def, const py::handle& value,
                             const char* wanted) {
  std::string got = py::str(py::type::of(value).attr("__name__"));
  std::string shown = py::repr(value);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  throw py::type_error(std::string(op->name) + "(): attribute '" + def.name + "' expects " + wanted +
                       ", got " + got + " " + shown);
}

bool is_int(const py::handle& v) {
  return py::isinstance<py::int_>(v) || py::isinstance(v, py::module_::import("numpy").attr("integer"));
}
bool is_number(const py::handle& v) {
  return is_int(v) || py::isinstance<py::float_>(v) ||
         py::isinstance(v, py::module_::import("numpy").attr("floating"));
}
bool is_sequence(const py::handle& v) {
  return (py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v) || py::isinstance<py::array>(v)) &&
         !py::isinstance<py::str>(v);
}

// Bytes of a str, bytes, or a protobuf message (anything with SerializeToString).
bool as_bytes(const py::handle& v, std::string& out) {
  if (py::isinstance<py::str>(v)) {
    out = v.cast<std::string>();
    return true;
  }
  if (py::isinstance<py::bytes>(v)) {
    out = std::string(v.cast<py::bytes>());
    return true;
  }
  if (py::hasattr(v, "SerializeToString")) {
    out = std::string(v.attr("SerializeToString")().cast<py::bytes>());
    return true;
  }
  return false;
}

}  // namespace

namespace {

/// Whether attribute `def` exists at `opset` (0: any version, as an eager call asks).
bool exists_at(const opf_attr_def& def, int opset) {
  return opset == 0 || ((def.since_version == 0 || opset >= def.since_version) &&
                        (def.until_version == 0 || opset <= def.until_version));
}

std::string versions_text(const opf_attr_def& def) {
  if (def.until_version == 0) return "opsets " + std::to_string(def.since_version) + " on";
  return "opsets " + std::to_string(def.since_version ? def.since_version : 1) + " to " + std::to_string(def.until_version);
}

}  // namespace

AttrPack::AttrPack(const opf_op_def* op, const py::dict& given, int opset) : opset_(opset) {
  attrs_.resize(size_t(op->num_attrs));
  size_t used = 0;
  for (int32_t i = 0; i < op->num_attrs; ++i) {
    const opf_attr_def& def = op->attrs[i];
    opf_attr& out = attrs_[size_t(i)];
    out = def.default_value;
    out.name = def.name;
    py::str key(def.name);
    const bool exists = exists_at(def, opset);
    if (given.contains(key) && !given[key].is_none()) {
      if (!exists)
        throw py::type_error(std::string(op->name) + "(): attribute '" + def.name + "' exists in " +
                             versions_text(def) + " only; this node is of opset " + std::to_string(opset));
      set(op, def, out, given[key]);
      ++used;
    } else if (given.contains(key)) {
      ++used;  // None: leave the default (or absent)
    }
    // Without an opset, an attribute of some versions only is not required (it may not exist).
    const bool versioned = def.since_version > 1 || def.until_version != 0;
    if (def.required && (opset != 0 ? exists : !versioned) && out.type == OPF_ATTR_UNDEFINED)
      throw py::type_error(std::string(op->name) + "(): missing required attribute '" + def.name +
                           "' (" + attr_type_name(def.type) + ")");
  }
  if (used != given.size()) {
    for (auto item : given) {
      std::string name = py::str(item.first);
      bool known = false;
      for (int32_t i = 0; i < op->num_attrs; ++i) known = known || name == op->attrs[i].name;
      if (known) continue;
      std::string names;
      for (int32_t i = 0; i < op->num_attrs; ++i) names += std::string(i ? ", " : "") + op->attrs[i].name;
      throw py::type_error(std::string(op->name) + "() got an unexpected attribute '" + name + "'" +
                           (names.empty() ? std::string("; it takes none") : "; its attributes are: " + names));
    }
  }
}

AttrPack::~AttrPack() {
  if (state_ != nullptr) state_->release(state_);
}

void AttrPack::set(const opf_op_def* op, const opf_attr_def& def, opf_attr& out, const py::handle& v) {
  out.type = def.type;
  switch (def.type) {
    case OPF_ATTR_FLOAT:
      if (!is_number(v) || py::isinstance<py::bool_>(v)) wrong_kind(op, def, v, "a float");
      out.f = v.cast<float>();
      return;
    case OPF_ATTR_INT:
      if (!is_int(v)) wrong_kind(op, def, v, "an int");
      out.i = v.cast<int64_t>();
      return;
    case OPF_ATTR_STRING:
    case OPF_ATTR_GRAPH:
    case OPF_ATTR_SPARSE_TENSOR:
    case OPF_ATTR_TYPE_PROTO: {
      std::string bytes;
      if (!as_bytes(v, bytes) || (def.type != OPF_ATTR_STRING && py::isinstance<py::str>(v)))
        wrong_kind(op, def, v, def.type == OPF_ATTR_STRING ? "a str" : "bytes or a protobuf message");
      strings_.push_back(std::move(bytes));
      out.s = strings_.back().c_str();
      out.s_len = int64_t(strings_.back().size());
      return;
    }
    case OPF_ATTR_INTS: {
      if (!is_sequence(v)) wrong_kind(op, def, v, "a list of ints");
      ints_.emplace_back();
      for (auto item : v) {
        if (!is_int(item)) wrong_kind(op, def, v, "a list of ints");
        ints_.back().push_back(item.cast<int64_t>());
      }
      out.ints = ints_.back().data();
      out.count = int64_t(ints_.back().size());
      return;
    }
    case OPF_ATTR_FLOATS: {
      if (!is_sequence(v)) wrong_kind(op, def, v, "a list of floats");
      floats_.emplace_back();
      for (auto item : v) {
        if (!is_number(item)) wrong_kind(op, def, v, "a list of floats");
        floats_.back().push_back(item.cast<float>());
      }
      out.floats = floats_.back().data();
      out.count = int64_t(floats_.back().size());
      return;
    }
    case OPF_ATTR_STRINGS:
    case OPF_ATTR_GRAPHS: {
      if (!is_sequence(v)) wrong_kind(op, def, v, "a list of str");
      ints_.emplace_back();
      string_ptrs_.emplace_back();
      for (auto item : v) {
        std::string bytes;
        if (!as_bytes(item, bytes)) wrong_kind(op, def, v, "a list of str");
        strings_.push_back(std::move(bytes));
        string_ptrs_.back().push_back(strings_.back().c_str());
        ints_.back().push_back(int64_t(strings_.back().size()));
      }
      out.strings = string_ptrs_.back().data();
      out.string_lens = ints_.back().data();
      out.count = int64_t(string_ptrs_.back().size());
      return;
    }
    case OPF_ATTR_TENSOR:
    case OPF_ATTR_TENSORS:
      set_tensors(out, v, def.type == OPF_ATTR_TENSORS);
      return;
    default:
      wrong_kind(op, def, v, "a supported attribute kind");
  }
}

void AttrPack::set_tensors(opf_attr& out, const py::handle& value, bool many) {
  py::module_ np = py::module_::import("numpy");
  tensors_.emplace_back();
  py::list items;
  if (many) {
    for (auto item : value) items.append(item);
  } else {
    items.append(value);
  }
  for (auto item : items) {
    py::array a = np.attr("asarray")(as_array(item), py::arg("order") = "C");  // keeps 0-d arrays 0-d
    keep_.push_back(a);
    tensors_.back().push_back(view_of(a));
  }
  out.tensors = tensors_.back().data();
  out.count = int64_t(tensors_.back().size());
}

namespace {
// The shortest decimal that reads back as the same float32 (0.01f shows as 0.01).
py::object float_value(float f) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, f);
  return py::float_(std::stod(std::string(buf, res.ptr)));
}
}  // namespace

py::str py_text(const char* s, size_t n) {
  PyObject* text = PyUnicode_DecodeUTF8(s, Py_ssize_t(n), "backslashreplace");
  if (text == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

py::object attr_value(const opf_attr& a) {
  switch (a.type) {
    case OPF_ATTR_FLOAT: return float_value(a.f);
    case OPF_ATTR_INT: return py::int_(a.i);
    case OPF_ATTR_STRING: return py_text(a.s, size_t(a.s_len));
    case OPF_ATTR_GRAPH:
    case OPF_ATTR_SPARSE_TENSOR:
    case OPF_ATTR_TYPE_PROTO: return py::bytes(a.s, size_t(a.s_len));
    case OPF_ATTR_INTS: {
      py::list l;
      for (int64_t i = 0; i < a.count; ++i) l.append(a.ints[i]);
      return l;
    }
    case OPF_ATTR_FLOATS: {
      py::list l;
      for (int64_t i = 0; i < a.count; ++i) l.append(float_value(a.floats[i]));
      return l;
    }
    case OPF_ATTR_STRINGS: {
      py::list l;
      for (int64_t i = 0; i < a.count; ++i) l.append(py_text(a.strings[i], size_t(a.string_lens[i])));
      return l;
    }
    default: return py::none();
  }
}

}  // namespace opforge_core
