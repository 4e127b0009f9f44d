// loop.h: a Loop or Scan node's iterations driven from C++ over its body's compiled plan.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <utility>
#include <vector>

#include "executor.h"

namespace opforge_core {

/// Runs iterations of a Loop or Scan body through `plan` while the condition holds, the trip
/// count (`limit`, or -1 for none) is not reached and each iteration's carried outputs keep the
/// dtypes and shapes of the values they replace (the plan was compiled for those).
///
/// `fixed` feeds (slot, value) stay the same every iteration (outer-scope values). A Loop feeds
/// the iteration number (int64 scalar) to `iteration_slot` and the condition (bool scalar) to
/// `condition_slot`, and its body's first output is the next condition; a Scan gives -1 for
/// both. The carried values go to `carried_slots`; each `scanned` array (scan axis first) gives
/// its iteration's slice to `scanned_slots`, from the end where `scanned_reverse` says so.
/// `outputs` are the body's output slots: [condition], carried values, then scan outputs.
///
/// Returns (iterations done in all, condition, carried values, scan outputs per iteration as
/// one list per scan output, finished): `finished` is false when a carried value changed its
/// dtype or shape, so the caller goes on with its general path from there.
py::tuple run_loop(Plan& plan, const std::vector<std::pair<int, py::object>>& fixed, int iteration_slot,
                   int condition_slot, const std::vector<int>& carried_slots, py::list carried,
                   const std::vector<int>& scanned_slots, const std::vector<py::array>& scanned,
                   const std::vector<bool>& scanned_reverse, const std::vector<int>& outputs,
                   int64_t start, int64_t limit, bool condition, py::object cancel);

}  // namespace opforge_core
