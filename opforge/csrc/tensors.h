// tensors.h: numpy arrays <-> opf_tensor views, and dtype names.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>

#include "opforge/abi.h"
#include "views.h"

namespace opforge_core {

namespace py = pybind11;

/// The opf_dtype of a numpy dtype, or OPF_UNDEFINED.
int32_t dtype_code(const py::dtype& dt);
/// The numpy dtype of an opf_dtype; throws TypeError for types numpy cannot hold.
py::dtype numpy_dtype(int32_t code);
/// numpy's name for a dtype code ("float32").
const char* dtype_name(int32_t code);

/// Makes `obj` a numpy array without copying when it already is one or speaks DLPack on the CPU.
py::array as_array(const py::handle& obj);

/// A view of a numpy array; the array must outlive the view.
opf_tensor view_of(const py::array& a);

/// view_of(a) written into `t`, whose dims past a's rank are left as they were (no reader
/// looks past ndim): the executor's per-step views, without clearing 280 bytes each time.
void view_into(const py::array& a, opf_tensor& t);

/// A view of a GPU array on `device`, read from its __cuda_array_interface__ (cupy, torch,
/// numba...); the array must outlive the view.
opf_tensor cuda_view_of(const py::handle& array, int device);

/// Shape metadata only (no data), as shape inference sees a value.
opf_tensor meta_of(int32_t dtype, const std::vector<int64_t>& shape);

}  // namespace opforge_core
