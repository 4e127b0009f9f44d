// executor.cpp: the tight loop over a plan. Native steps run without the GIL, reading and
// writing planned arena offsets; Python steps get numpy views and hand back arrays.
#include "executor.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <optional>

#include "invoke.h"
#include "opforge/dtype.h"
#include "tensors.h"

namespace opforge_core {

namespace {

constexpr size_t kAlign = 64;

/// n bytes (at least one) at a kAlign-aligned address, from malloc: the block's own start is
/// kept in the word before that address, for free_aligned. aligned_alloc (glibc's memalign)
/// split a chunk for each call and left the pieces to malloc_consolidate; a Loop body, whose
/// outputs take memory of their own at every iteration, spent 5-6% of its time there (a greedy
/// decoder of 1 thread ran in 0.926-0.941 of its time with malloc, in-process alternation).
void* aligned_bytes(int64_t n) {
  if (n > PTRDIFF_MAX - 2 * int64_t(kAlign)) throw std::bad_alloc();  // rounding up would wrap
  const size_t size = (size_t(n > 0 ? n : 1) + kAlign - 1) / kAlign * kAlign;
  char* raw = static_cast<char*>(std::malloc(size + kAlign));
  if (raw == nullptr) throw std::bad_alloc();
  // malloc's blocks are 16-byte aligned: the aligned address is 16 to 64 bytes on
  char* p = raw + (kAlign - reinterpret_cast<uintptr_t>(raw) % kAlign);
  reinterpret_cast<void**>(p)[-1] = raw;
  return p;
}

/// Frees memory from aligned_bytes (null: nothing).
void free_aligned(void* p) {
  if (p != nullptr) std::free(static_cast<void**>(p)[-1]);
}

/// Seconds on the steady clock, which is CLOCK_MONOTONIC as Python's time.perf_counter on Linux.
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// A failure inside the loop, raised as an opforge error once the GIL is held again.
struct StepError {
  std::string message;
  bool bad_argument = false;
  bool too_big = false;
  bool cancelled = false;  // RunOptions.terminate: RunCancelledError, not a failing op
};

}  // namespace

struct Plan::Slot {
  opf_tensor t{};
  py::object owner;       // a Python value: feed, constant, or a Python step's output
  void* heap = nullptr;   // memory allocated for this run (dynamic values and graph outputs)
};

/// One run's state. Whatever way the run ends, its destructor frees the memory it took and gives
/// the arena back, so an error at any step leaves the plan ready for the next run. It is
/// destroyed with the GIL held (it owns Python references).
struct Plan::Run {
  explicit Run(Plan& plan) : plan(plan) { plan.take_buffers(*this); }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;
  ~Run();
  /// Memory for a step's required output that the graph does not read; freed after the step.
  void* scratch_bytes(int64_t n) {
    scratch.push_back(nullptr);
    scratch.back() = aligned_bytes(n);
    return scratch.back();
  }
  void free_scratch() {
    for (void* p : scratch) free_aligned(p);
    scratch.clear();
  }

  Plan& plan;
  std::unique_ptr<RunBuffers> buffers;  // where the vectors below go back to when the run ends
  std::vector<Slot> slots;
  char* arena = nullptr;
  std::vector<void*> scratch;
  std::vector<py::object> dead;  // Python values to drop once the GIL is held
  std::vector<std::tuple<int, double, double>> times;  // when profiling: (step, start, seconds)
  std::vector<opf_tensor> ins, outs;  // per-step views, reused so the loop does not allocate
};

/// A finished run's vectors, kept for the next run of the plan: allocating the slots (~300
/// bytes each) on every run took malloc and free of a large chunk, with fastbin consolidation,
/// about a tenth of a small model's run.
struct Plan::RunBuffers {
  std::vector<Slot> slots;
  std::vector<void*> scratch;
  std::vector<py::object> dead;
  std::vector<std::tuple<int, double, double>> times;
  std::vector<opf_tensor> ins, outs;

  void swap(Run& r) {
    slots.swap(r.slots);
    scratch.swap(r.scratch);
    dead.swap(r.dead);
    times.swap(r.times);
    ins.swap(r.ins);
    outs.swap(r.outs);
  }
};

Plan::Run::~Run() {
  for (auto& slot : slots) {  // left as a fresh run finds them: no memory, no value, no view
    free_aligned(slot.heap);
    slot.heap = nullptr;
    slot.owner = py::object();
    clear_view(slot.t);
  }
  for (void* p : scratch) free_aligned(p);
  scratch.clear();
  dead.clear();
  times.clear();
  if (arena) plan.give_arena(arena);
  plan.give_buffers(*this);
}

Plan::Plan(int num_slots, int64_t arena_bytes, ThreadPool* pool)
    : slots_(size_t(num_slots)), arena_bytes_(arena_bytes), pool_(pool) {}

Plan::~Plan() {
  for (char* a : free_arenas_) free_aligned(a);
}

void Plan::take_buffers(Run& r) {
  {
    std::lock_guard<std::mutex> lock(arenas_mu_);
    if (!free_buffers_.empty()) {
      r.buffers = std::move(free_buffers_.back());
      free_buffers_.pop_back();
    }
  }
  if (r.buffers) {
    r.buffers->swap(r);
  } else {
    r.buffers = std::make_unique<RunBuffers>();
  }
  r.slots.resize(slots_.size());
}

void Plan::give_buffers(Run& r) {
  r.buffers->swap(r);
  std::lock_guard<std::mutex> lock(arenas_mu_);
  free_buffers_.push_back(std::move(r.buffers));
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
  info.has_view = py::isinstance<py::array>(value);
  if (info.has_view) info.view = view_of(value.cast<py::array>());
  info.constant = std::move(value);
}

void Plan::add_native(const std::string& label, std::shared_ptr<OpHandle> op, py::object attrs,
                      std::vector<int> inputs, std::vector<int> outputs, std::vector<int> release,
                      int64_t workspace_offset, int64_t workspace_bytes) {
  PlanStep s;
  s.label = label;
  s.op = std::move(op);
  s.attrs = attrs.cast<const AttrPack*>();
  s.attrs_view = s.attrs->view();
  s.attrs_owner = std::move(attrs);
  s.inputs = std::move(inputs);
  s.outputs = std::move(outputs);
  s.release = std::move(release);
  s.workspace_offset = workspace_offset;
  s.workspace_bytes = workspace_bytes;
  for (int slot : s.outputs) s.need.push_back(slot >= 0 ? Need::Required : Need::None);
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

void Plan::add_core_step(const std::string& label, py::object fn, int kind, py::object table, int64_t size,
                         int input, int output, std::vector<int> release) {
  add_python(label, std::move(fn), {input}, {output}, std::move(release));
  steps_.back().core = kind;
  steps_.back().table = std::move(table);
  steps_.back().table_size = size;
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

void Plan::place_output(Run& r, int slot, opf_tensor& meta) {
  Slot& out = r.slots[size_t(slot)];
  const SlotInfo& info = slots_[size_t(slot)];
  set_contiguous(meta);
  int64_t bytes = nbytes(meta);
  if (info.kind == SlotKind::Arena && bytes <= info.planned_bytes) {
    meta.data = r.arena + info.offset;
  } else {
    free_aligned(out.heap);
    out.heap = aligned_bytes(bytes);
    meta.data = out.heap;
  }
  copy_view(out.t, meta);
}

/// A compiled plan's memory for one step: outputs at their planned arena offsets (or memory of
/// their own where a data-dependent size outgrows the plan), unread required outputs and the
/// workspace as scratch freed after the step (the workspace at its planned offset when it fits).
/// The loop already runs without the GIL, so compute is entered as it is.
struct Plan::ArenaHost {
  Plan& plan;
  Run& r;
  const PlanStep& s;

  void place_output(int32_t k, opf_tensor& t, bool read) {
    if (read) return plan.place_output(r, s.outputs[size_t(k)], t);
    set_contiguous(t);
    t.data = r.scratch_bytes(nbytes(t));
  }

  void* workspace(int64_t bytes) {
    if (s.workspace_offset >= 0 && bytes <= s.workspace_bytes) return r.arena + s.workspace_offset;
    return r.scratch_bytes(bytes);
  }

  template <class F>
  void enter_compute(F&& compute) {
    compute();
  }
};

void Plan::run_native(Run& r, const PlanStep& s) {
  std::vector<opf_tensor>& ins = r.ins;
  ins.resize(s.inputs.size());
  for (size_t i = 0; i < s.inputs.size(); ++i) {
    int slot = s.inputs[i];
    if (slot < 0) {
      std::memset(&ins[i], 0, sizeof(opf_tensor));
      continue;
    }
    copy_view(ins[i], r.slots[size_t(slot)].t);
    if (ins[i].dtype == OPF_UNDEFINED)
      throw StepError{s.label + ": input #" + std::to_string(i) + " is not a tensor this kernel can read"};
  }
  std::vector<opf_tensor>& outs = r.outs;
  outs.resize(s.outputs.size());
  ArenaHost host{*this, r, s};
  CallOptions options;
  options.pool = pool_;
  options.checked = true;   // the run that recorded this plan checked these inputs' dtypes and counts
  call_op(s.op->def(), ins.data(), int32_t(ins.size()), s.attrs_view, outs.data(), int32_t(outs.size()),
          s.need.data(), host, options);
  r.free_scratch();
}

namespace {

using Ranges = std::vector<std::pair<const char*, const char*>>;

bool aliases(const py::array& a, const Ranges& borrowed) {
  const char* lo = static_cast<const char*>(a.data());
  for (auto& range : borrowed)
    if (lo < range.second && range.first < lo + a.nbytes()) return true;
  return false;
}

/// A Python step's sequence result with the arena views it holds copied out: SequenceInsert and
/// SequenceConstruct keep their inputs, whose arena blocks later steps (or the next run of a
/// loop body's plan) reuse.
py::object owned_items(const py::object& value, const Ranges& borrowed) {
  if (borrowed.empty() || !py::isinstance<py::list>(value)) return value;
  py::list out;
  bool copied = false;
  for (auto item : value.cast<py::list>()) {
    py::object v = py::reinterpret_borrow<py::object>(item);
    if (py::isinstance<py::array>(v) && aliases(v.cast<py::array>(), borrowed)) {
      v = py::module_::import("numpy").attr("array")(v, py::arg("copy") = true);
      copied = true;
    } else if (py::isinstance<py::list>(v)) {
      py::object inner = owned_items(v, borrowed);
      copied = copied || !inner.is(v);
      v = inner;
    }
    out.append(v);
  }
  return copied ? py::object(out) : value;
}

}  // namespace

void Plan::run_python(Run& r, const PlanStep& s) {
  py::list args;
  Ranges borrowed;  // arena/heap ranges lent as views
  py::object no_free;  // the views' base, made for the first (a step fed only Python values lends none)
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
    if (!no_free) no_free = py::capsule(&r, [](void*) {});
    args.append(py::array(numpy_dtype(in.t.dtype), shape, in.t.data, no_free));
    const char* lo = static_cast<const char*>(in.t.data);
    borrowed.emplace_back(lo, lo + nbytes(in.t));
  }
  py::list results = s.fn(args);
  for (size_t k = 0; k < s.outputs.size() && k < results.size(); ++k) {
    if (s.outputs[k] < 0) continue;
    py::object value = results[k];
    Slot& out = r.slots[size_t(s.outputs[k])];
    if (py::isinstance<py::array>(value)) {
      py::array a = value.cast<py::array>();
      if (aliases(a, borrowed) || !(a.flags() & py::array::c_style))
        a = py::module_::import("numpy").attr("array")(a, py::arg("copy") = true, py::arg("order") = "C");  // native steps read C order
      value = a;
      if (dtype_code(a.dtype()) != OPF_UNDEFINED)
        view_into(a, out.t);
      else
        clear_view(out.t);
    } else {
      value = owned_items(value, borrowed);
      std::memset(&out.t, 0, sizeof(opf_tensor));
    }
    out.owner = value;
  }
}

bool Plan::run_string_onehot(Run& r, const PlanStep& s) {
  Slot& in = r.slots[size_t(s.inputs[0])];
  if (s.outputs[0] < 0 || !in.owner || !py::isinstance<py::array>(in.owner)) return false;
  py::array x = py::reinterpret_borrow<py::array>(in.owner);
  if (x.dtype().kind() != 'O' || !(x.flags() & py::array::c_style) || x.ndim() + 1 > OPF_MAX_DIMS) return false;
  const int64_t n = x.size(), size = s.table_size;
  std::vector<int64_t> at(size_t(n), -1);
  PyObject* const* keys = static_cast<PyObject* const*>(x.data());
  for (int64_t i = 0; i < n; ++i) {
    PyObject* index = keys[i] ? PyDict_GetItemWithError(s.table.ptr(), keys[i]) : nullptr;
    if (index != nullptr) {
      at[size_t(i)] = PyLong_AsLongLong(index);
    } else if (PyErr_Occurred()) {  // an unhashable element: the Python kernel says what is wrong
      PyErr_Clear();
      return false;
    }
  }
  opf_tensor t{};
  t.dtype = OPF_FLOAT32;
  t.ndim = int32_t(x.ndim()) + 1;
  for (int d = 0; d < x.ndim(); ++d) t.shape[d] = x.shape(d);
  t.shape[x.ndim()] = size;
  place_output(r, s.outputs[0], t);
  float* y = static_cast<float*>(t.data);
  std::memset(y, 0, size_t(nbytes(t)));
  for (int64_t i = 0; i < n; ++i)
    if (at[size_t(i)] >= 0 && at[size_t(i)] < size) y[i * size + at[size_t(i)]] = 1.0f;
  r.slots[size_t(s.outputs[0])].owner = py::object();
  return true;
}

namespace {

/// The int64 or float32 tensor a step reads, if it is one laid out in C order.
bool c_ordered(const opf_tensor& t, int32_t dtype) {
  if (t.dtype != dtype || t.data == nullptr) return false;
  int64_t expect = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != expect) return false;
    expect *= t.shape[d];
  }
  return true;
}

}  // namespace

bool Plan::run_index_to_string(Run& r, const PlanStep& s) {
  const opf_tensor& x = r.slots[size_t(s.inputs[0])].t;
  if (s.outputs[0] < 0 || !c_ordered(x, OPF_INT64)) return false;
  std::vector<py::ssize_t> shape(x.shape, x.shape + x.ndim);
  py::array y(py::dtype("O"), shape);
  PyObject** out = static_cast<PyObject**>(y.mutable_data());
  const int64_t* at = static_cast<const int64_t*>(x.data);
  PyObject* const* table = PySequence_Fast_ITEMS(s.table.ptr());  // a list of table_size strings
  const int64_t last = s.table_size - 1, n = nbytes(x) / int64_t(sizeof(int64_t));
  for (int64_t i = 0; i < n; ++i) {  // index + 1 clipped to the table: the default out of range
    int64_t k = at[i] < 0 ? 0 : at[i] >= last ? last : at[i] + 1;
    PyObject* old = out[i];
    Py_INCREF(table[k]);
    out[i] = table[k];
    Py_XDECREF(old);
  }
  Slot& o = r.slots[size_t(s.outputs[0])];
  std::memset(&o.t, 0, sizeof(opf_tensor));
  o.owner = std::move(y);
  return true;
}

bool Plan::run_zipmap(Run& r, const PlanStep& s) {
  const opf_tensor& x = r.slots[size_t(s.inputs[0])].t;
  const int64_t classes = s.table_size;
  if (s.outputs[0] < 0 || !c_ordered(x, OPF_FLOAT32) || x.ndim < 1 || x.ndim > 2 || x.shape[x.ndim - 1] != classes)
    return false;
  py::tuple spec = py::reinterpret_borrow<py::tuple>(s.table);
  py::list keys = spec[0];
  py::object columns = spec[1];  // None: the scores in their own order
  const int64_t rows = x.ndim == 2 ? x.shape[0] : 1;
  const float* scores = static_cast<const float*>(x.data);
  py::list maps(rows);
  for (int64_t i = 0; i < rows; ++i) {
    py::dict row;
    for (int64_t j = 0; j < int64_t(keys.size()); ++j) {
      int64_t c = columns.is_none() ? j : PyLong_AsLongLong(PyList_GET_ITEM(columns.ptr(), j));
      row[keys[size_t(j)]] = py::float_(double(scores[i * classes + c]));
    }
    PyList_SET_ITEM(maps.ptr(), i, row.release().ptr());
  }
  Slot& o = r.slots[size_t(s.outputs[0])];
  std::memset(&o.t, 0, sizeof(opf_tensor));
  o.owner = std::move(maps);
  return true;
}

bool Plan::run_core_step(Run& r, const PlanStep& s) {
  switch (CoreStep(s.core)) {
    case CoreStep::StringOneHot: return run_string_onehot(r, s);
    case CoreStep::IndexToString: return run_index_to_string(r, s);
    case CoreStep::ZipMap: return run_zipmap(r, s);
    default: return false;
  }
}

void Plan::observe_outputs(Run& r, const PlanStep& s, const std::vector<py::object>& hooks) {
  for (int slot : s.outputs) {
    if (slot < 0 || !hooks[size_t(slot)]) continue;
    Slot& out = r.slots[size_t(slot)];
    if (out.owner) {
      hooks[size_t(slot)](out.owner);
    } else if (out.t.data != nullptr) {
      std::vector<py::ssize_t> shape(out.t.shape, out.t.shape + out.t.ndim);
      py::capsule no_free(&r, [](void*) {});
      hooks[size_t(slot)](py::array(numpy_dtype(out.t.dtype), shape, out.t.data, no_free));
    }
  }
}

namespace {
constexpr uint64_t kAdaptPeriod = 1024;  // runs from one measurement of the steps to the next
constexpr uint64_t kAdaptFirst = 2;      // the first runs warm the caches: not measured
constexpr uint64_t kAdaptTrials = 4;     // measured runs each way (with workers, alone)
constexpr int64_t kNever = INT64_MAX;
constexpr double kAloneMargin = 1.25;    // a step runs alone where that is this much faster
constexpr double kAloneRunMargin = 1.05; // every step runs alone where whole runs were this much faster

/// best = min(best, the nanoseconds since t0), for runs measured at once on several threads.
void keep_best(std::atomic<int64_t>& best, std::chrono::steady_clock::time_point t0) {
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  for (int64_t seen = best.load(std::memory_order_relaxed); ns < seen && !best.compare_exchange_weak(seen, ns);) {
  }
}
}  // namespace

struct Plan::StepThreads {
  std::atomic<int64_t> best[2];  // nanoseconds at best with the workers [0] / alone [1]
  std::atomic<bool> solo{false};
  std::atomic<bool> candidate{false};  // faster alone in the first round: tried in the second
  StepThreads() { best[0] = best[1] = kNever; }
};

/// After a run in phase `phase` of its period (`ok`: the run finished, its times are whole).
/// The run that ends the first round of measuring runs (with workers / alone) decides: every
/// step alone, or none, or candidates for the second round (candidates alone / none alone),
/// whose last run keeps them or not.
void Plan::adapt_threads(uint64_t phase, bool ok) {
  if (!ok) return;
  auto best = [&](int i) { return run_best_[i].load(std::memory_order_relaxed); };
  auto decide = [&](auto&& solo_of) {
    bool all_solo = true;
    for (size_t i = 0; i < steps_.size(); ++i) {
      const bool solo = solo_of(step_threads_[i]);
      step_threads_[i].solo.store(solo, std::memory_order_relaxed);
      all_solo = all_solo && (solo || !steps_[i].op);
    }
    all_solo_.store(all_solo, std::memory_order_relaxed);
  };
  if (phase + 1 == kAdaptFirst + 2 * kAdaptTrials) {
    const bool plan_solo = best(1) < kNever && best(0) < kNever && double(best(1)) * kAloneRunMargin < double(best(0));
    bool any = false;
    for (size_t i = 0; i < steps_.size(); ++i) {
      StepThreads& t = step_threads_[i];
      const int64_t with = t.best[0].load(std::memory_order_relaxed), alone = t.best[1].load(std::memory_order_relaxed);
      // alone only when clearly faster: 4 runs each way on a quiet machine still leave steps
      // that gain from the workers measured a little faster without them now and then
      const bool candidate = steps_[i].op && alone < kNever && alone * kAloneMargin < with;
      t.candidate.store(candidate, std::memory_order_relaxed);
      any = any || candidate;
    }
    if (plan_solo) return decide([](StepThreads&) { return true; });
    decide([](StepThreads&) { return false; });  // until the second round keeps the candidates
    check_candidates_.store(any, std::memory_order_relaxed);
  } else if (phase + 1 == kAdaptFirst + 4 * kAdaptTrials && check_candidates_.load(std::memory_order_relaxed)) {
    check_candidates_.store(false, std::memory_order_relaxed);
    const bool keep = best(3) < kNever && best(2) < kNever && best(3) <= best(2);
    decide([keep](StepThreads& t) { return keep && t.candidate.load(std::memory_order_relaxed); });
  }
}

std::vector<int> Plan::alone_steps() const {
  std::vector<int> out;
  if (threads_ready_.load(std::memory_order_acquire))
    for (size_t i = 0; i < steps_.size(); ++i)
      if (steps_[i].op && step_threads_[i].solo.load(std::memory_order_relaxed)) out.push_back(int(i));
  return out;
}

py::list Plan::run(const std::vector<std::pair<int, py::object>>& feeds, const std::vector<int>& outputs,
                   py::object cancel, py::object observe) {
  const bool adapt = pool_ != nullptr && pool_->num_threads() > 1;
  uint64_t phase = 0;
  if (adapt) {
    std::call_once(threads_once_, [&] {
      step_threads_.reset(new StepThreads[steps_.size()]);
      threads_ready_.store(true, std::memory_order_release);
    });
    phase = runs_.fetch_add(1, std::memory_order_relaxed) % kAdaptPeriod;
    if (phase == kAdaptFirst) {
      for (size_t i = 0; i < steps_.size(); ++i) step_threads_[i].best[0] = step_threads_[i].best[1] = kNever;
      for (auto& b : run_best_) b = kNever;
      check_candidates_ = false;
    }
  }
  // First round: every step with the workers / alone, each step timed. Second round (where the
  // first found candidates): every step with the workers / the candidates alone.
  const bool measuring = adapt && phase >= kAdaptFirst && phase < kAdaptFirst + 2 * kAdaptTrials;
  const bool checking = adapt && !measuring && phase >= kAdaptFirst && phase < kAdaptFirst + 4 * kAdaptTrials &&
                        check_candidates_.load(std::memory_order_relaxed);
  const bool alone = (phase & 1) != 0;  // how a measuring run runs its steps; a checking run, its candidates
  const int timed = measuring ? (alone ? 1 : 0) : checking ? (alone ? 3 : 2) : -1;  // its run_best_
  const auto run_started = timed >= 0 ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (pool_ && (measuring ? !alone : !all_solo_.load(std::memory_order_relaxed) || checking))
    pool_->prewake();  // the workers wake while the feeds are bound
  std::vector<py::object> hooks;  // per slot: the callable observing it, when any
  if (!observe.is_none()) {
    hooks.resize(slots_.size());
    for (auto item : observe.cast<py::dict>()) hooks.at(item.first.cast<size_t>()) = py::reinterpret_borrow<py::object>(item.second);
  }
  Run r(*this);
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].kind == SlotKind::Constant) {
      r.slots[i].owner = slots_[i].constant;
      if (slots_[i].has_view) copy_view(r.slots[i].t, slots_[i].view);
    }
  }
  for (auto& feed : feeds) {
    Slot& slot = r.slots.at(size_t(feed.first));
    slot.owner = feed.second;
    if (!py::isinstance<py::array>(feed.second)) continue;
    py::array a = py::reinterpret_borrow<py::array>(feed.second);
    if (!(a.flags() & py::array::c_style)) {  // native steps read C order
      a = py::array::ensure(a, py::array::c_style);
      if (!a) throw py::error_already_set();
      slot.owner = a;
    }
    view_into(a, slot.t);
  }
  r.arena = arena_bytes_ > 0 ? take_arena() : nullptr;
  StepError failure;
  {
    std::optional<py::gil_scoped_release> nogil;  // destroyed before `r`: the GIL is back then
    const PlanStep* step = nullptr;
    try {
      for (const PlanStep& s : steps_) {
        step = &s;
        if (!cancel.is_none()) {
          nogil.reset();
          if (py::bool_(cancel.attr("terminate")))
            throw StepError{"run cancelled (RunOptions.terminate) before " + s.label, false, false, true};
        }
        const double started = profiling_ ? now_seconds() : 0.0;
        if (s.op) {
          if (!nogil) nogil.emplace();
          if (!adapt) {
            run_native(r, s);
          } else {
            StepThreads& t = step_threads_[size_t(step - steps_.data())];
            const auto t0 = measuring ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
            {
              const bool solo = measuring ? alone
                                : checking ? alone && t.candidate.load(std::memory_order_relaxed)
                                           : t.solo.load(std::memory_order_relaxed);
              ThreadPool::Solo on_caller(solo);
              run_native(r, s);
            }
            if (measuring) keep_best(t.best[alone ? 1 : 0], t0);
          }
        } else {
          nogil.reset();
          r.dead.clear();
          if (!s.core || !run_core_step(r, s)) run_python(r, s);
        }
        if (profiling_) r.times.emplace_back(int(step - steps_.data()), started, now_seconds() - started);
        if (!hooks.empty()) {
          nogil.reset();
          observe_outputs(r, s, hooks);
        }
        release(r, s);
      }
    } catch (StepError& e) {
      failure = std::move(e);
    } catch (const CallError& e) {
      failure = StepError{step->label + ": " + e.what(), e.bad_argument, e.too_big};
    } catch (const std::bad_alloc&) {
      failure = StepError{step->label + ": out of memory", false, true};
    } catch (py::error_already_set& e) {  // a Python step's error: opforge's own pass unchanged
      nogil.reset();
      if (e.matches(py::module_::import("opforge.errors").attr("OpforgeError"))) throw;
      failure = StepError{(step ? step->label : std::string("the plan")) + " failed: " +
                          std::string(py::str(e.type().attr("__name__"))) + ": " + std::string(py::str(e.value()))};
    } catch (const std::exception& e) {
      failure = StepError{(step ? step->label : std::string("the plan")) + " failed: " + e.what()};
    }
  }
  if (!r.times.empty()) {
    std::lock_guard<std::mutex> lock(profile_mu_);
    profile_.insert(profile_.end(), r.times.begin(), r.times.end());
  }
  if (timed >= 0 && failure.message.empty()) keep_best(run_best_[timed], run_started);
  if (adapt) adapt_threads(phase, failure.message.empty());
  if (failure.cancelled)
    raise_error(py::module_::import("opforge.runtime.errors").attr("RunCancelledError"), failure.message);
  if (!failure.message.empty())
    raise_call_error(CallError(failure.message, failure.bad_argument, failure.too_big));
  return collect_outputs(r, outputs);
}

py::list Plan::run_env(const py::dict& env, py::object cancel, py::object observe) {
  std::vector<std::pair<int, py::object>> feeds;
  feeds.reserve(feed_names_.size());
  for (auto& [slot, name] : feed_names_) {
    PyObject* value = PyDict_GetItemWithError(env.ptr(), name.ptr());  // borrowed
    if (value != nullptr) {
      feeds.emplace_back(slot, py::reinterpret_borrow<py::object>(value));
    } else if (PyErr_Occurred()) {
      throw py::error_already_set();
    }
  }
  return run(feeds, env_outputs_, std::move(cancel), std::move(observe));
}

py::list Plan::take_profile() {
  std::vector<std::tuple<int, double, double>> taken;
  {
    std::lock_guard<std::mutex> lock(profile_mu_);
    taken.swap(profile_);
  }
  py::list out;
  for (auto& t : taken) out.append(py::make_tuple(std::get<0>(t), std::get<1>(t), std::get<2>(t)));
  return out;
}

void Plan::release(Run& r, const PlanStep& s) {
  for (int slot : s.release) {
    Slot& dead = r.slots[size_t(slot)];
    free_aligned(dead.heap);
    dead.heap = nullptr;
    clear_view(dead.t);
    // moving a handle changes no reference count, so this needs no GIL; the
    // reference is dropped at the next Python step or when the run ends
    if (dead.owner) r.dead.push_back(std::move(dead.owner));
  }
}

py::list Plan::collect_outputs(Run& r, const std::vector<int>& outputs) {
  py::list result;
  for (int slot : outputs) {
    Slot& s = r.slots.at(size_t(slot));
    if (s.owner) {
      result.append(s.owner);
    } else if (s.heap) {
      void* heap = s.heap;
      s.heap = nullptr;
      py::capsule owner(heap, [](void* p) { free_aligned(p); });
      std::vector<py::ssize_t> shape(s.t.shape, s.t.shape + s.t.ndim);
      result.append(py::array(numpy_dtype(s.t.dtype), shape, heap, owner));
    } else if (s.t.data != nullptr) {  // an output left in the arena: hand out a copy
      std::vector<py::ssize_t> shape(s.t.shape, s.t.shape + s.t.ndim);
      result.append(py::array(numpy_dtype(s.t.dtype), shape, s.t.data));
    } else {
      result.append(py::none());
    }
  }
  return result;  // the arena goes back when `r` ends, after the copies above
}

}  // namespace opforge_core
