// attributes.cpp: reading a node's attributes through onnxruntime's kernel-info and
// shape-inference entries into the opf_attr array an op reads.
#include "attributes.h"

#include <cstring>

#include "opforge/dtype.h"

namespace opforge_ort {

const char* kind_name(int32_t kind) {
  switch (kind) {
    case OPF_ATTR_FLOAT: return "float";
    case OPF_ATTR_INT: return "int";
    case OPF_ATTR_STRING: return "string";
    case OPF_ATTR_TENSOR: return "tensor";
    case OPF_ATTR_GRAPH: return "graph";
    case OPF_ATTR_FLOATS: return "list of floats";
    case OPF_ATTR_INTS: return "list of ints";
    case OPF_ATTR_STRINGS: return "list of strings";
    case OPF_ATTR_TENSORS: return "list of tensors";
    case OPF_ATTR_GRAPHS: return "list of graphs";
    case OPF_ATTR_SPARSE_TENSOR: return "sparse tensor";
    case OPF_ATTR_TYPE_PROTO: return "type proto";
    default: return "attribute of unknown kind";
  }
}

namespace {

/// The API version from which onnxruntime hands custom ops attributes of `kind` (0: never).
int readable_from(int32_t kind) {
  switch (kind) {
    case OPF_ATTR_FLOAT: case OPF_ATTR_INT: case OPF_ATTR_STRING: case OPF_ATTR_FLOATS: case OPF_ATTR_INTS:
      return 1;
    case OPF_ATTR_TENSOR: return kSince_KernelInfoGetAttribute_tensor;
    case OPF_ATTR_STRINGS: return kSince_KernelInfoGetAttributeArray_string;
    default: return 0;
  }
}

/// Kinds tried, in turn, to tell an attribute of another kind from an absent one.
constexpr int32_t kProbed[] = {OPF_ATTR_INT, OPF_ATTR_FLOAT, OPF_ATTR_STRING, OPF_ATTR_INTS,
                               OPF_ATTR_FLOATS, OPF_ATTR_TENSOR, OPF_ATTR_STRINGS};

/// True when the status is null (success); a failure's status is released.
bool ok(const Runtime& rt, OrtStatus* st) {
  if (st == nullptr) return true;
  rt.ReleaseStatus(st);
  return false;
}

template <class T, class Fn>
bool read_array(const Runtime& rt, Fn fn, const OrtKernelInfo* info, const char* name, std::vector<T>& out) {
  size_t size = 0;
  if (!ok(rt, fn(info, name, nullptr, &size))) return false;
  out.resize(size);
  return size == 0 || ok(rt, fn(info, name, out.data(), &size));
}

}  // namespace

NodeAttrs::NodeAttrs(const opf_op_def* def) : def_(def), attrs_(size_t(def->num_attrs)) {
  for (int32_t i = 0; i < def->num_attrs; ++i) {
    attrs_[size_t(i)] = def->attrs[i].default_value;
    attrs_[size_t(i)].name = def->attrs[i].name;
  }
}

NodeAttrs::~NodeAttrs() {
  if (state_ != nullptr) state_->release(state_);
}

void NodeAttrs::refuse(const opf_attr_def& a, const std::string& why) const {
  throw RuntimeError(std::string(def_->name) + ": attribute '" + a.name + "' " + why);
}

void NodeAttrs::set_string(opf_attr& out, std::string value) {
  strings_.push_back(std::move(value));
  out.s = strings_.back().c_str();
  out.s_len = int64_t(strings_.back().size());
}

void NodeAttrs::set_strings(opf_attr& out, std::vector<std::string> values) {
  std::vector<int64_t> lens;
  std::vector<const char*> ptrs;
  for (auto& v : values) {
    strings_.push_back(std::move(v));
    ptrs.push_back(strings_.back().c_str());
    lens.push_back(int64_t(strings_.back().size()));
  }
  string_ptrs_.push_back(std::move(ptrs));
  ints_.push_back(std::move(lens));
  out.strings = string_ptrs_.back().data();
  out.string_lens = ints_.back().data();
  out.count = int64_t(values.size());
}

void NodeAttrs::set_tensor(const Runtime& rt, opf_attr& out, OrtValue* value) {
  OrtTensorTypeAndShapeInfo* info = nullptr;
  opf_tensor t{};
  size_t rank = 0;
  void* data = nullptr;
  rt.check(rt.GetTensorTypeAndShape(value, &info), "reading a tensor attribute");
  OrtStatus* st = rt.GetTensorElementType(info, &t.dtype);
  if (st == nullptr) st = rt.GetDimensionsCount(info, &rank);
  if (st == nullptr && rank <= OPF_MAX_DIMS) st = rt.GetDimensions(info, t.shape, rank);
  rt.ReleaseTensorTypeAndShapeInfo(info);
  if (st == nullptr) st = rt.GetTensorMutableData(value, &data);
  rt.check(st, "reading a tensor attribute");
  if (rank > OPF_MAX_DIMS || opforge::dtype_size(t.dtype) == 0)
    throw RuntimeError("a tensor attribute of rank " + std::to_string(rank) + " and dtype " +
                       opforge::dtype_name(t.dtype) + " cannot be handed to an op");
  t.ndim = int32_t(rank);
  opforge_core::set_contiguous(t);
  const int64_t bytes = opforge_core::nbytes(t);
  bytes_.emplace_back(static_cast<unsigned char*>(data), static_cast<unsigned char*>(data) + bytes);
  t.data = bytes_.back().data();
  tensors_.push_back(t);
  out.tensors = &tensors_.back();
  out.count = 1;
}

bool NodeAttrs::read_kind(const Runtime& rt, const OrtKernelInfo* info, const char* name, int32_t kind,
                          opf_attr& out) {
  switch (kind) {
    case OPF_ATTR_FLOAT:
      return ok(rt, rt.KernelInfoGetAttribute_float(info, name, &out.f));
    case OPF_ATTR_INT:
      return ok(rt, rt.KernelInfoGetAttribute_int64(info, name, &out.i));
    case OPF_ATTR_STRING: {
      std::vector<char> text;
      if (!read_array(rt, rt.KernelInfoGetAttribute_string, info, name, text)) return false;
      set_string(out, std::string(text.data(), text.empty() ? 0 : text.size() - 1));
      return true;
    }
    case OPF_ATTR_FLOATS:
      floats_.emplace_back();
      if (!read_array(rt, rt.KernelInfoGetAttributeArray_float, info, name, floats_.back())) return false;
      out.floats = floats_.back().data();
      out.count = int64_t(floats_.back().size());
      return true;
    case OPF_ATTR_INTS:
      ints_.emplace_back();
      if (!read_array(rt, rt.KernelInfoGetAttributeArray_int64, info, name, ints_.back())) return false;
      out.ints = ints_.back().data();
      out.count = int64_t(ints_.back().size());
      return true;
    case OPF_ATTR_TENSOR: {
      OrtAllocator* alloc = nullptr;
      OrtValue* value = nullptr;
      if (!rt.KernelInfoGetAttribute_tensor || !ok(rt, rt.GetAllocatorWithDefaultOptions(&alloc))) return false;
      if (!ok(rt, rt.KernelInfoGetAttribute_tensor(info, name, alloc, &value))) return false;
      try {
        set_tensor(rt, out, value);
      } catch (...) {
        rt.ReleaseValue(value);
        throw;
      }
      rt.ReleaseValue(value);
      return true;
    }
    case OPF_ATTR_STRINGS: {
      OrtAllocator* alloc = nullptr;
      char** items = nullptr;
      size_t n = 0;
      if (!rt.KernelInfoGetAttributeArray_string || !ok(rt, rt.GetAllocatorWithDefaultOptions(&alloc))) return false;
      if (!ok(rt, rt.KernelInfoGetAttributeArray_string(info, name, alloc, &items, &n))) return false;
      std::vector<std::string> values;
      for (size_t k = 0; k < n; ++k) {
        values.emplace_back(items[k]);
        alloc->Free(alloc, items[k]);
      }
      if (items) alloc->Free(alloc, items);
      set_strings(out, std::move(values));
      return true;
    }
    default:
      return false;
  }
}

void NodeAttrs::read(const Runtime& rt, const OrtKernelInfo* info) {
  for (int32_t i = 0; i < def_->num_attrs; ++i) {
    const opf_attr_def& a = def_->attrs[i];
    opf_attr& out = attrs_[size_t(i)];
    // onnxruntime does not tell a kernel its node's opset: an attribute of some versions only is
    // not required, as in an eager call without a version.
    const bool required = a.required && a.since_version <= 1 && a.until_version == 0;
    const int from = readable_from(a.type);
    if (from != 0 && rt.version >= from && read_kind(rt, info, a.name, a.type, out)) {
      out.type = a.type;
      continue;
    }
    opf_attr other{};
    if (a.type == OPF_ATTR_FLOAT && read_kind(rt, info, a.name, OPF_ATTR_INT, other)) {
      out.type = OPF_ATTR_FLOAT;  // an int where a float is declared, as eager calls allow
      out.f = float(other.i);
      continue;
    }
    for (int32_t kind : kProbed)
      if (kind != a.type && read_kind(rt, info, a.name, kind, other))
        refuse(a, std::string("is a ") + kind_name(kind) + " in this node; the op declares a " + kind_name(a.type));
    if (required && from == 0)
      refuse(a, std::string("is a required ") + kind_name(a.type) +
                    ", a kind onnxruntime does not hand to custom ops");
    if (required && rt.version < from)
      refuse(a, std::string("is a required ") + kind_name(a.type) + ", which onnxruntime hands to custom ops " +
                    "from 1." + std::to_string(from) + " (C API " + std::to_string(from) + "); this is " +
                    rt.version_text);
    if (required) refuse(a, std::string("is required (a ") + kind_name(a.type) + "); the node does not give it");
  }
}

namespace {

/// The bytes ReadOpAttr gives for `attr` as `type` (the size asked first), or false.
bool read_bytes(const Runtime& rt, const OrtOpAttr* attr, OrtOpAttrType type, std::vector<unsigned char>& out) {
  size_t n = 0;
  if (!ok(rt, rt.ReadOpAttr(attr, type, nullptr, 0, &n)) && n == 0) return false;
  out.resize(n + sizeof(int64_t));
  if (!ok(rt, rt.ReadOpAttr(attr, type, out.data(), out.size(), &n))) return false;
  out.resize(n);
  return true;
}

template <class T>
bool read_list(const Runtime& rt, const OrtOpAttr* attr, OrtOpAttrType type, std::vector<T>& out) {
  std::vector<unsigned char> bytes;
  if (!read_bytes(rt, attr, type, bytes)) return false;
  out.resize(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return true;
}

}  // namespace

bool NodeAttrs::read_op_attr(const Runtime& rt, const OrtOpAttr* attr, int32_t kind, opf_attr& out) {
  size_t n = 0;
  int64_t i64 = 0;
  std::vector<unsigned char> bytes;
  switch (kind) {
    case OPF_ATTR_FLOAT:
      if (ok(rt, rt.ReadOpAttr(attr, ORT_OP_ATTR_FLOAT, &out.f, sizeof(float), &n))) return true;
      if (!ok(rt, rt.ReadOpAttr(attr, ORT_OP_ATTR_INT, &i64, sizeof(i64), &n))) return false;
      out.f = float(i64);  // an int where a float is declared
      return true;
    case OPF_ATTR_INT:
      return ok(rt, rt.ReadOpAttr(attr, ORT_OP_ATTR_INT, &out.i, sizeof(int64_t), &n));
    case OPF_ATTR_STRING:
      if (!read_bytes(rt, attr, ORT_OP_ATTR_STRING, bytes)) return false;
      set_string(out, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.empty() ? 0 : bytes.size() - 1));
      return true;
    case OPF_ATTR_INTS:
      ints_.emplace_back();
      if (!read_list(rt, attr, ORT_OP_ATTR_INTS, ints_.back())) return false;
      out.ints = ints_.back().data();
      out.count = int64_t(ints_.back().size());
      return true;
    case OPF_ATTR_FLOATS:
      floats_.emplace_back();
      if (!read_list(rt, attr, ORT_OP_ATTR_FLOATS, floats_.back())) return false;
      out.floats = floats_.back().data();
      out.count = int64_t(floats_.back().size());
      return true;
    case OPF_ATTR_STRINGS: {
      if (!read_bytes(rt, attr, ORT_OP_ATTR_STRINGS, bytes)) return false;
      std::vector<std::string> values;
      for (size_t at = 0; at < bytes.size(); at += values.back().size() + 1)  // NUL-separated
        values.emplace_back(reinterpret_cast<const char*>(bytes.data()) + at);
      set_strings(out, std::move(values));
      return true;
    }
    default:
      return false;  // tensors and graphs: shape inference does not see them
  }
}

void NodeAttrs::read(const Runtime& rt, const OrtShapeInferContext* ctx) {
  for (int32_t i = 0; i < def_->num_attrs; ++i) {
    const opf_attr_def& a = def_->attrs[i];
    const OrtOpAttr* attr = nullptr;
    if (!ok(rt, rt.ShapeInferContext_GetAttribute(ctx, a.name, &attr)) || attr == nullptr) continue;
    if (read_op_attr(rt, attr, a.type, attrs_[size_t(i)])) attrs_[size_t(i)].type = a.type;
  }
}

}  // namespace opforge_ort
