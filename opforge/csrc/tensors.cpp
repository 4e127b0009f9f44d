// tensors.cpp: numpy arrays <-> opf_tensor views.
#include "tensors.h"

#include <cstring>

#include "opforge/dtype.h"

namespace opforge_core {

namespace {

/// Whether `code` is a type numpy itself lacks, which ml_dtypes provides (bfloat16, float8...).
bool from_ml_dtypes(int32_t code) { return code == OPF_BFLOAT16 || opforge::is_narrow_dtype(code); }

/// The ml_dtypes type whose numpy name is `name` and whose size is `size`; OPF_UNDEFINED if none.
int32_t ml_dtypes_code(const std::string& name, int64_t size) {
  for (int32_t code = OPF_BFLOAT16; code <= OPF_INT2; ++code)
    if (from_ml_dtypes(code) && name == opforge::dtype_name(code) && size == opforge::dtype_size(code))
      return code;
  return OPF_UNDEFINED;
}

}  // namespace

int32_t dtype_code(const py::dtype& dt) {
  char kind = dt.kind();
  auto size = dt.itemsize();
  switch (kind) {
    case 'f':
      if (size == 1) return ml_dtypes_code(py::str(dt.attr("name")), size);  // float8_e5m2
      return size == 4 ? OPF_FLOAT32 : size == 8 ? OPF_FLOAT64 : size == 2 ? OPF_FLOAT16 : OPF_UNDEFINED;
    case 'i':
      return size == 1 ? OPF_INT8 : size == 2 ? OPF_INT16 : size == 4 ? OPF_INT32 : size == 8 ? OPF_INT64 : OPF_UNDEFINED;
    case 'u':
      return size == 1 ? OPF_UINT8 : size == 2 ? OPF_UINT16 : size == 4 ? OPF_UINT32 : size == 8 ? OPF_UINT64 : OPF_UNDEFINED;
    case 'b':
      return OPF_BOOL;
    case 'V':
      return ml_dtypes_code(py::str(dt.attr("name")), size);
    default:
      return OPF_UNDEFINED;
  }
}

const char* dtype_name(int32_t code) { return opforge::dtype_name(code); }

py::dtype numpy_dtype(int32_t code) {
  if (from_ml_dtypes(code)) {
    try {
      return py::dtype::from_args(py::module_::import("ml_dtypes").attr(dtype_name(code)));
    } catch (py::error_already_set&) {
      throw py::type_error(std::string(dtype_name(code)) +
                           " arrays need the ml_dtypes package (pip install ml_dtypes)");
    }
  }
  switch (code) {  // numpy's own descriptors: parsing a name costs ~0.3 us on every Python step
    case OPF_FLOAT32: return py::dtype::of<float>();
    case OPF_FLOAT64: return py::dtype::of<double>();
    case OPF_INT8: return py::dtype::of<int8_t>();
    case OPF_INT16: return py::dtype::of<int16_t>();
    case OPF_INT32: return py::dtype::of<int32_t>();
    case OPF_INT64: return py::dtype::of<int64_t>();
    case OPF_UINT8: return py::dtype::of<uint8_t>();
    case OPF_UINT16: return py::dtype::of<uint16_t>();
    case OPF_UINT32: return py::dtype::of<uint32_t>();
    case OPF_UINT64: return py::dtype::of<uint64_t>();
    case OPF_BOOL: return py::dtype::of<bool>();
    default: break;
  }
  if (code == OPF_STRING || code == OPF_UNDEFINED)
    throw py::type_error(std::string("no numpy dtype for ") + dtype_name(code) + " tensors");
  return py::dtype(dtype_name(code));
}

py::array as_array(const py::handle& obj) {
  if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj);
  py::module_ np = py::module_::import("numpy");
  if (py::hasattr(obj, "__dlpack__")) return np.attr("from_dlpack")(obj);
  return np.attr("asarray")(obj);
}

opf_tensor view_of(const py::array& a) {
  opf_tensor t;
  std::memset(&t, 0, sizeof t);
  view_into(a, t);
  return t;
}

void view_into(const py::array& a, opf_tensor& t) {
  const int32_t ndim = int32_t(a.ndim());
  if (ndim > OPF_MAX_DIMS)
    throw py::value_error("arrays of more than " + std::to_string(OPF_MAX_DIMS) + " dimensions are not supported");
  t.data = const_cast<void*>(a.data());
  t.dtype = dtype_code(a.dtype());
  t.ndim = ndim;
  auto item = a.itemsize();
  for (int i = 0; i < ndim; ++i) {
    t.shape[i] = a.shape(i);
    t.strides[i] = item ? a.strides(i) / item : 0;
  }
  t.device_type = OPF_CPU;
  t.device_id = 0;
}

opf_tensor cuda_view_of(const py::handle& array, int device) {
  py::dict cai = array.attr("__cuda_array_interface__");
  py::tuple shape = cai["shape"];
  opf_tensor t;
  std::memset(&t, 0, sizeof t);
  t.ndim = int32_t(shape.size());
  if (t.ndim > OPF_MAX_DIMS)
    throw py::value_error("arrays of more than " + std::to_string(OPF_MAX_DIMS) + " dimensions are not supported");
  py::dtype dt = py::dtype::from_args(cai["typestr"]);  // numpy reads the typestr ("<f4")
  t.dtype = dtype_code(dt);
  t.data = reinterpret_cast<void*>(cai["data"].cast<py::tuple>()[0].cast<uintptr_t>());
  py::object strides = cai.contains("strides") ? py::object(cai["strides"]) : py::none();
  int64_t item = dt.itemsize(), expect = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[size_t(i)].cast<int64_t>();
    t.strides[i] = strides.is_none() ? expect : strides.cast<py::tuple>()[size_t(i)].cast<int64_t>() / item;
    expect *= t.shape[i];
  }
  t.device_type = OPF_CUDA;
  t.device_id = device;
  return t;
}

opf_tensor meta_of(int32_t dtype, const std::vector<int64_t>& shape) {
  opf_tensor t;
  std::memset(&t, 0, sizeof t);
  if (shape.size() > OPF_MAX_DIMS)
    throw py::value_error("a shape of " + std::to_string(shape.size()) + " dimensions; opforge's limit is " +
                          std::to_string(OPF_MAX_DIMS));
  t.dtype = dtype;
  t.ndim = int32_t(shape.size());
  int64_t stride = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    t.shape[i] = shape[size_t(i)];
    t.strides[i] = stride;
    stride *= shape[size_t(i)] > 0 ? shape[size_t(i)] : 1;
  }
  t.device_type = OPF_CPU;
  return t;
}

}  // namespace opforge_core
