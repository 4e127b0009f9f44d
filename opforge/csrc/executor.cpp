// executor.cpp: the tight loop over a plan. Native steps run without the GIL, reading and
// writing planned arena offsets; Python steps get numpy views and hand back arrays.
#include "executor.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "checks.h"
#include "opforge/dtype.h"
#include "tensors.h"

namespace opforge_core {

namespace {

constexpr size_t kAlign = 64;

/// A failure inside the loop, turned into opforge.OpError once the GIL is held again.
struct StepError {
  std::string message;
};

void* aligned_bytes(int64_t n) {
  if (n > PTRDIFF_MAX - int64_t(kAlign)) throw std::bad_alloc();
  size_t size = (size_t(n > 0 ? n : 1) + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

/// Memory for one step: an output or its workspace; a StepError naming it when none is left.
void* step_bytes(int64_t n, const std::string& label, const std::string& what) {
  try {
    return aligned_bytes(n);
  } catch (const std::bad_alloc&) {
    throw StepError{label + ": cannot allocate " + std::to_string(n) + " bytes for " + what};
  }
}

int64_t nbytes_of(const opf_tensor& t) {
  int64_t n = 0;
  checked_nbytes(t, &n);
  return n;
}

void set_contiguous(opf_tensor& t) {
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.strides[d] = stride;
    stride *= t.shape[d] > 0 ? t.shape[d] : 1;
  }
  t.device_type = OPF_CPU;
  t.device_id = 0;
}

/// The message for an exception that is not opforge's escaping a step, named after the step.
std::string step_failure(const PlanStep* step, const std::string& kind, const std::string& what) {
  return (step ? step->label : std::string("the plan")) + " failed: " + kind + ": " + what;
}

}  // namespace

struct Plan::Slot {
  opf_tensor t{};
  py::object owner;       // a Python value: feed, constant, or a Python step's output
  void* heap = nullptr;   // memory allocated for this run (dynamic values and graph outputs)
};

struct Plan::Run {
  std::vector<Slot> slots;
  char* arena = nullptr;
  std::vector<py::object> dead;  // Python values to drop once the GIL is held
  std::vector<opf_tensor> ins, outs;  // per-step views, reused so the loop does not allocate
};

Plan::Plan(int num_slots, int64_t arena_bytes, ThreadPool* pool)
    : slots_(size_t(num_slots)), arena_bytes_(arena_bytes), pool_(pool) {}

Plan::~Plan() {
  for (char* a : free_arenas_) std::free(a);
}

void Plan::set_slot(int slot, int kind, int64_t offset, int64_t planned_bytes) {
  SlotInfo& info = slots_.at(size_t(slot));
  info.kind = SlotKind(kind);
  info.offset = offset;
  info.planned_bytes = planned_bytes;
}

void Plan::set_constant(int slot, py::object value) {
  SlotInfo& info = slots_.at(size_t(slot));
  info.kind = SlotKind::Constant;
  info.constant = std::move(value);
}

void Plan::add_native(const std::string& label, std::shared_ptr<OpHandle> op, py::object attrs,
                      std::vector<int> inputs, std::vector<int> outputs, std::vector<int> release,
                      int64_t workspace_offset, int64_t workspace_bytes) {
  PlanStep s;
  s.label = label;
  s.op = std::move(op);
  s.attrs = attrs.cast<const AttrPack*>();
  s.attrs_owner = std::move(attrs);
  s.inputs = std::move(inputs);
  s.outputs = std::move(outputs);
  s.release = std::move(release);
  s.workspace_offset = workspace_offset;
  s.workspace_bytes = workspace_bytes;
  steps_.push_back(std::move(s));
}

void Plan::add_python(const std::string& label, py::object fn, std::vector<int> inputs,
                      std::vector<int> outputs, std::vector<int> release) {
  PlanStep s;
  s.label = label;
  s.fn = std::move(fn);
  s.inputs = std::move(inputs);
  s.outputs = std::move(outputs);
  s.release = std::move(release);
  steps_.push_back(std::move(s));
}

char* Plan::take_arena() {
  {
    std::lock_guard<std::mutex> lock(arenas_mu_);
    if (!free_arenas_.empty()) {
      char* a = free_arenas_.back();
      free_arenas_.pop_back();
      return a;
    }
  }
  return static_cast<char*>(aligned_bytes(arena_bytes_));
}

void Plan::give_arena(char* arena) {
  std::lock_guard<std::mutex> lock(arenas_mu_);
  free_arenas_.push_back(arena);
}

void Plan::place_output(Run& r, const PlanStep& s, size_t k, opf_tensor& meta) {
  Slot& out = r.slots[size_t(s.outputs[k])];
  const SlotInfo& info = slots_[size_t(s.outputs[k])];
  const std::string problem = declared_problem(meta, false);
  if (!problem.empty()) throw StepError{s.label + ": " + s.op->def()->name + "'s infer gave output #" +
                                        std::to_string(k) + " " + problem};
  set_contiguous(meta);
  int64_t bytes = nbytes_of(meta);
  if (info.kind == SlotKind::Arena && bytes <= info.planned_bytes) {
    meta.data = r.arena + info.offset;
  } else {
    if (out.heap) std::free(out.heap);
    out.heap = nullptr;
    out.heap = step_bytes(bytes, s.label, "output #" + std::to_string(k) + " of shape " + shape_text(meta));
    meta.data = out.heap;
  }
  out.t = meta;
}

void Plan::run_native(Run& r, const PlanStep& s) {
  const opf_op_def* def = s.op->def();
  std::vector<opf_tensor>& ins = r.ins;
  ins.resize(s.inputs.size());
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    int slot = s.inputs[i];
    if (slot < 0) {
      std::memset(&ins[i], 0, sizeof(opf_tensor));
      continue;
    }
    ins[i] = r.slots[size_t(slot)].t;
    if (ins[i].dtype == OPF_UNDEFINED)
      throw StepError{s.label + ": input #" + std::to_string(i) + " is not a tensor this kernel can read"};
  }
  std::vector<opf_tensor>& outs = r.outs;
  outs.resize(s.outputs.size());
  std::memset(outs.data(), 0, sizeof(opf_tensor) * outs.size());
  opf_infer_ctx ic{def, ins.data(), int32_t(ins.size()), s.attrs->data(), s.attrs->size(), outs.data(),
                   int32_t(outs.size())};
  opf_error err;
  err.message[0] = '\0';
  if (def->infer(&ic, &err) != 0) throw StepError{s.label + ": " + err.message};
  for (size_t k = 0; k < outs.size(); ++k) {
    if (s.outputs[k] >= 0) {
      if (outs[k].dtype == OPF_UNDEFINED)
        throw StepError{s.label + ": the node names output #" + std::to_string(k) + ", which " + def->name +
                        " did not produce for these inputs"};
      place_output(r, s, k, outs[k]);
    } else {
      outs[k].data = nullptr;  // an output the node does not ask for
    }
  }
  void* ws = nullptr;
  int64_t ws_bytes = 0;
  void* ws_heap = nullptr;
  if (def->workspace) {
    if (def->workspace(&ic, &ws_bytes, &err) != 0) throw StepError{s.label + ": " + err.message};
    if (ws_bytes > 0 && s.workspace_offset >= 0 && ws_bytes <= s.workspace_bytes) {
      ws = r.arena + s.workspace_offset;
    } else if (ws_bytes > 0) {
      ws = ws_heap = step_bytes(ws_bytes, s.label, "its workspace");
    }
  }
  opf_compute_ctx cc{def, ins.data(), int32_t(ins.size()), s.attrs->data(), s.attrs->size(), outs.data(),
                     int32_t(outs.size()), ws, ws_bytes, nullptr, pool_,
                     pool_ ? &ThreadPool::entry : nullptr, pool_ ? pool_->num_threads() : 1};
  int32_t rc = def->compute(&cc, &err);
  if (ws_heap) std::free(ws_heap);
  if (rc != 0) throw StepError{s.label + ": " + err.message};
}

void Plan::run_python(Run& r, const PlanStep& s) {
  py::list args;
  std::vector<std::pair<const char*, const char*>> borrowed;  // arena/heap ranges lent as views
  py::capsule no_free(&r, [](void*) {});
  for (int slot : s.inputs) {
    if (slot < 0) {
      args.append(py::none());
      continue;
    }
    Slot& in = r.slots[size_t(slot)];
    if (in.owner) {
      args.append(in.owner);
      continue;
    }
    std::vector<py::ssize_t> shape(in.t.shape, in.t.shape + in.t.ndim);
    args.append(py::array(numpy_dtype(in.t.dtype), shape, in.t.data, no_free));
    const char* lo = static_cast<const char*>(in.t.data);
    borrowed.emplace_back(lo, lo + nbytes_of(in.t));
  }
  py::list results = s.fn(args);
  py::module_ np = py::module_::import("numpy");
  for (size_t k = 0; k < s.outputs.size() && k < results.size(); ++k) {
    if (s.outputs[k] < 0) continue;
    py::object value = results[k];
    Slot& out = r.slots[size_t(s.outputs[k])];
    if (py::isinstance<py::array>(value)) {
      py::array a = value.cast<py::array>();
      const char* lo = static_cast<const char*>(a.data());
      bool aliases = false;
      for (auto& range : borrowed) aliases = aliases || (lo < range.second && range.first < lo + a.nbytes());
      if (aliases || !(a.flags() & py::array::c_style))
        a = np.attr("array")(a, py::arg("copy") = true, py::arg("order") = "C");  // native steps read C order
      value = a;
      out.t = dtype_code(a.dtype()) != OPF_UNDEFINED ? view_of(a) : opf_tensor{};
    } else {
      std::memset(&out.t, 0, sizeof(opf_tensor));
    }
    out.owner = value;
  }
}

py::list Plan::run(const std::vector<std::pair<int, py::object>>& feeds, const std::vector<int>& outputs,
                   py::object cancel) {
  Run r;
  r.slots.resize(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].kind == SlotKind::Constant) {
      r.slots[i].owner = slots_[i].constant;
      if (py::isinstance<py::array>(slots_[i].constant)) r.slots[i].t = view_of(slots_[i].constant.cast<py::array>());
    }
  }
  for (auto& feed : feeds) {
    Slot& slot = r.slots.at(size_t(feed.first));
    slot.owner = feed.second;
    if (py::isinstance<py::array>(feed.second)) slot.t = view_of(feed.second.cast<py::array>());
  }
  r.arena = arena_bytes_ > 0 ? take_arena() : nullptr;
  std::string failure;
  const PlanStep* current = nullptr;
  {
    std::unique_ptr<py::gil_scoped_release> nogil;
    try {
      for (const PlanStep& s : steps_) {
        current = &s;
        if (!cancel.is_none()) {
          nogil.reset();
          if (py::bool_(cancel.attr("terminate")))
            throw StepError{"run cancelled (RunOptions.terminate) before " + s.label};
        }
        if (s.op) {
          if (!nogil) nogil.reset(new py::gil_scoped_release());
          run_native(r, s);
        } else {
          nogil.reset();
          r.dead.clear();
          run_python(r, s);
        }
        for (int slot : s.release) {
          Slot& dead = r.slots[size_t(slot)];
          if (dead.heap) std::free(dead.heap);
          dead.heap = nullptr;
          std::memset(&dead.t, 0, sizeof(opf_tensor));
          // moving a handle changes no reference count, so this needs no GIL; the
          // reference is dropped at the next Python step or when the run ends
          if (dead.owner) r.dead.push_back(std::move(dead.owner));
        }
      }
    } catch (StepError& e) {
      failure = e.message;
    } catch (py::error_already_set& e) {
      nogil.reset();
      if (e.matches(py::module_::import("opforge.errors").attr("OpforgeError"))) {
        if (r.arena) give_arena(r.arena);
        for (auto& slot : r.slots)
          if (slot.heap) std::free(slot.heap);
        throw;
      }
      failure = step_failure(current, py::str(e.type().attr("__name__")), py::str(e.value()));
    } catch (const std::exception& e) {
      failure = step_failure(current, "error", e.what());
    }
  }
  if (!failure.empty()) {
    if (r.arena) give_arena(r.arena);
    for (auto& slot : r.slots)
      if (slot.heap) std::free(slot.heap);
    raise_op_error(failure);
  }
  py::list result;
  for (int slot : outputs) {
    Slot& s = r.slots.at(size_t(slot));
    if (s.owner) {
      result.append(s.owner);
    } else if (s.heap) {
      void* heap = s.heap;
      s.heap = nullptr;
      py::capsule owner(heap, [](void* p) { std::free(p); });
      std::vector<py::ssize_t> shape(s.t.shape, s.t.shape + s.t.ndim);
      result.append(py::array(numpy_dtype(s.t.dtype), shape, heap, owner));
    } else if (s.t.data != nullptr) {  // an output left in the arena: hand out a copy
      std::vector<py::ssize_t> shape(s.t.shape, s.t.shape + s.t.ndim);
      py::array view(numpy_dtype(s.t.dtype), shape, s.t.data);
      result.append(view);
    } else {
      result.append(py::none());
    }
  }
  if (r.arena) give_arena(r.arena);  // after the copies above: another run may reuse it now
  for (auto& slot : r.slots)
    if (slot.heap) std::free(slot.heap);
  return result;
}

}  // namespace opforge_core
