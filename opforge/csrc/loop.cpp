// loop.cpp: see loop.h. An iteration costs one Plan::run and no Python frames (the Python Loop
// kernel spent more per iteration around the plan, on signatures, dicts and lists, than in it).
#include "loop.h"

#include <pybind11/numpy.h>

namespace opforge_core {

namespace {

/// Whether `a` and `b` are arrays of the same dtype and shape (the plan's signature for them).
bool same_signature(const py::handle& a, const py::handle& b) {
  if (!py::isinstance<py::array>(a) || !py::isinstance<py::array>(b)) return false;
  const auto x = py::reinterpret_borrow<py::array>(a), y = py::reinterpret_borrow<py::array>(b);
  if (x.ndim() != y.ndim() || !(x.dtype().is(y.dtype()) || x.dtype().equal(y.dtype()))) return false;
  for (py::ssize_t d = 0; d < x.ndim(); ++d)
    if (x.shape(d) != y.shape(d)) return false;
  return true;
}

/// The truth of a body's condition output: its one element (as the Python path reads it).
bool truth(const py::handle& value) {
  if (py::isinstance<py::array>(value)) {
    const auto a = py::reinterpret_borrow<py::array>(value);
    if (a.size() == 1 && a.dtype().kind() == 'b') return *static_cast<const bool*>(a.data());
  }
  return py::bool_(py::module_::import("numpy").attr("asarray")(value).attr("reshape")(-1).attr("__getitem__")(0));
}

/// Slice `index` of `x` along its first axis, as an array (0-d for a 1-D x) viewing x's memory.
py::array slice(const py::array& x, int64_t index) {
  std::vector<py::ssize_t> shape(x.shape() + 1, x.shape() + x.ndim());
  std::vector<py::ssize_t> strides(x.strides() + 1, x.strides() + x.ndim());
  const char* at = static_cast<const char*>(x.data()) + index * x.strides(0);
  return py::array(x.dtype(), shape, strides, at, x);
}

}  // namespace

py::tuple run_loop(Plan& plan, const std::vector<std::pair<int, py::object>>& fixed, int iteration_slot,
                   int condition_slot, const std::vector<int>& carried_slots, py::list carried,
                   const std::vector<int>& scanned_slots, const std::vector<py::array>& scanned,
                   const std::vector<bool>& scanned_reverse, const std::vector<int>& outputs,
                   int64_t start, int64_t limit, bool condition, py::object cancel) {
  const bool is_loop = condition_slot >= 0;   // a Loop body gives its condition first
  const size_t num_carried = carried_slots.size(), head = is_loop ? 1 : 0;
  if (carried.size() != num_carried || scanned.size() != scanned_slots.size() ||
      scanned_reverse.size() != scanned.size() || outputs.size() < head + num_carried)
    throw py::value_error("run_loop: " + std::to_string(carried.size()) + " carried value(s) for " +
                          std::to_string(num_carried) + " slot(s), " + std::to_string(scanned.size()) +
                          " scanned for " + std::to_string(scanned_slots.size()) + ", " +
                          std::to_string(outputs.size()) + " output(s)");
  const size_t num_scans = outputs.size() - head - num_carried;
  py::list scans;
  for (size_t k = 0; k < num_scans; ++k) scans.append(py::list());
  std::vector<std::pair<int, py::object>> feeds(fixed);
  const size_t first = feeds.size();
  const size_t counters = is_loop ? 2 : 0;
  feeds.resize(first + counters + num_carried + scanned.size());
  int64_t iteration = start;
  bool finished = true;
  while (condition && (limit < 0 || iteration < limit)) {
    if (is_loop) {
      py::array_t<int64_t> number(std::vector<py::ssize_t>{});
      *number.mutable_data() = iteration;
      py::array_t<bool> flag(std::vector<py::ssize_t>{});
      *flag.mutable_data() = condition;
      feeds[first] = {iteration_slot, std::move(number)};
      feeds[first + 1] = {condition_slot, std::move(flag)};
    }
    size_t at = first + counters;
    for (size_t k = 0; k < num_carried; ++k) feeds[at++] = {carried_slots[k], carried[k]};
    for (size_t k = 0; k < scanned.size(); ++k) {
      const int64_t length = scanned[k].shape(0);
      feeds[at++] = {scanned_slots[k], slice(scanned[k], scanned_reverse[k] ? length - 1 - iteration : iteration)};
    }
    py::list result = plan.run(feeds, outputs, cancel);
    ++iteration;
    if (is_loop) condition = truth(result[0]);
    py::list next;
    bool same = true;
    for (size_t k = 0; k < num_carried; ++k) {
      next.append(result[head + k]);
      same = same && same_signature(result[head + k], carried[k]);
    }
    carried = next;
    for (size_t k = 0; k < num_scans; ++k) scans[k].cast<py::list>().append(result[head + num_carried + k]);
    if (!same) {
      finished = false;
      break;
    }
  }
  return py::make_tuple(iteration, condition, carried, scans, finished);
}

}  // namespace opforge_core
