// A plain pybind11 module, as torch and MindSpore extensions are written: opforge builds it and
// .load() returns the module.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

namespace py = pybind11;

static py::array_t<float> scale(py::array_t<float, py::array::c_style | py::array::forcecast> x,
                                float factor) {
  py::array_t<float> out(x.request().shape);
  const float* in = x.data();
  float* o = out.mutable_data();
  for (py::ssize_t i = 0; i < x.size(); ++i) o[i] = in[i] * factor;
  return out;
}

PYBIND11_MODULE(OPFORGE_EXTENSION_NAME, m) {
  m.doc() = "example pybind11 module built by opforge";
  m.def("scale", &scale, py::arg("x"), py::arg("factor") = 2.0f);
  m.def("greet", [](const std::string& who) { return "hello, " + who; });
}
