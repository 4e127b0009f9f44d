// executor.h: runs a planned graph as a flat list of steps, with no Python between native kernels.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "attrs.h"
#include "library.h"
#include "thread_pool.h"

namespace opforge_core {

namespace py = pybind11;

/// One step of a plan: a native op called through the C ABI, or a Python callable
/// (reference fallback, control flow, Python ops) called with the GIL held.
struct PlanStep {
  std::string label;                    // for error messages: "node 'x' (Relu, ...)"
  std::shared_ptr<OpHandle> op;         // null for a Python step
  py::object attrs_owner;               // keeps the AttrPack alive
  const AttrPack* attrs = nullptr;
  AttrView attrs_view;                  // what the call reads of `attrs`
  std::vector<Need> need;               // per output: read by the plan (a slot) or not
  py::object fn;                        // Python step: fn(list of inputs) -> list of outputs
  std::vector<int> inputs, outputs;     // slot indices, -1 for absent
  std::vector<int> release;             // slots dead after this step
  int64_t workspace_offset = -1;        // planned workspace in the arena, or -1
  int64_t workspace_bytes = 0;
  int core = 0;                         // a CoreStep the core runs itself, or 0
  py::object table;                     // what that core step reads (see CoreStep)
  int64_t table_size = 0;
};

/// Python kernels of the ML string and map ops whose usual inputs the core runs itself, with
/// the GIL held and no Python frame (a batch-1 pipeline is a few of these and little else).
/// Any input one cannot take goes to the node's Python kernel.
enum class CoreStep : int {
  None = 0,
  StringOneHot = 1,   // OneHotEncoder of strings: table {str: index}, size categories
  IndexToString = 2,  // CategoryMapper of 0..n-1: table [default, strings..., default], size n + 2
  ZipMap = 3,         // ZipMap: table (keys, columns or None), size classes
};

/// Where a slot's memory comes from.
enum class SlotKind : int { Dynamic = 0, Arena = 1, Output = 2, Constant = 3, Feed = 4 };

/// A compiled plan: steps, slots, and the arena layout for one input-shape signature.
/// Immutable once built; several threads may run it at once (each run takes its own arena).
class Plan {
 public:
  Plan(int num_slots, int64_t arena_bytes, ThreadPool* pool);
  ~Plan();

  void set_slot(int slot, int kind, int64_t offset, int64_t planned_bytes);
  void set_constant(int slot, py::object value);
  void add_native(const std::string& label, std::shared_ptr<OpHandle> op, py::object attrs,
                  std::vector<int> inputs, std::vector<int> outputs, std::vector<int> release,
                  int64_t workspace_offset, int64_t workspace_bytes);
  void add_python(const std::string& label, py::object fn, std::vector<int> inputs,
                  std::vector<int> outputs, std::vector<int> release);
  /// A Python step (`fn`, as add_python) of one input and one output that the core runs itself
  /// as `kind` (a CoreStep) when it can take the input.
  void add_core_step(const std::string& label, py::object fn, int kind, py::object table, int64_t size,
                     int input, int output, std::vector<int> release);

  /// Runs with feeds (slot, array) and returns the values of `outputs` (slots).
  /// `cancel` is an object whose `terminate` attribute is checked between steps (or None).
  /// `observe` (a dict {slot: callable}, or None) calls each callable with its slot's value
  /// right after the step that makes it: a numpy view of the plan's memory, valid only during
  /// the call, which the callable may copy or edit in place (later steps read the edit).
  py::list run(const std::vector<std::pair<int, py::object>>& feeds, const std::vector<int>& outputs,
               py::object cancel, py::object observe = py::none());

  /// Names the value fed into `slot`, for run_env.
  void set_feed(int slot, py::str name) { feed_names_.emplace_back(slot, std::move(name)); }
  /// The slots run_env hands back.
  void set_outputs(std::vector<int> outputs) { env_outputs_ = std::move(outputs); }
  /// `run` with the feeds read from `env` (name -> value) by the names set_feed gave: a batch-1
  /// model's whole run is a few microseconds, and building (slot, value) pairs in Python is ~1.
  py::list run_env(const py::dict& env, py::object cancel, py::object observe = py::none());

  /// With `on`, later runs time every step; take_profile() hands back and forgets the
  /// (step index, start, seconds) of each, start on the clock of Python's time.perf_counter.
  void set_profiling(bool on) { profiling_ = on; }
  py::list take_profile();

  /// The steps that run on the calling thread alone, as the last measurement decided (see
  /// adapt_threads); empty before it, and for a plan without workers.
  std::vector<int> alone_steps() const;

  int64_t arena_bytes() const { return arena_bytes_; }
  size_t num_steps() const { return steps_.size(); }

 private:
  struct Slot;
  struct Run;
  struct RunBuffers;
  struct ArenaHost;
  struct SlotInfo {
    SlotKind kind = SlotKind::Dynamic;
    int64_t offset = -1, planned_bytes = 0;
    py::object constant;
    opf_tensor view{};        // a constant array's view, made once (not on every run)
    bool has_view = false;
  };

  void run_native(Run& r, const PlanStep& s);
  void run_python(Run& r, const PlanStep& s);
  bool run_core_step(Run& r, const PlanStep& s);
  bool run_string_onehot(Run& r, const PlanStep& s);
  bool run_index_to_string(Run& r, const PlanStep& s);
  bool run_zipmap(Run& r, const PlanStep& s);
  void release(Run& r, const PlanStep& s);
  void observe_outputs(Run& r, const PlanStep& s, const std::vector<py::object>& hooks);
  py::list collect_outputs(Run& r, const std::vector<int>& outputs);
  void place_output(Run& r, int slot, opf_tensor& meta);
  char* take_arena();
  void give_arena(char* arena);
  void take_buffers(Run& r);
  void give_buffers(Run& r);

  /// Thread adaptation: every kAdaptPeriod runs a plan times each native step kAdaptTrials
  /// times with its pool's workers and as many times on the running thread alone
  /// (ThreadPool::Solo), runs alternating, and from then on runs alone the steps that were
  /// clearly faster that way at their best. Where a second vCPU does not add speed (an SMT
  /// sibling, a core another process holds), the steps it slowed run alone; nothing else
  /// changes, results included. The measuring runs are timed whole too (an alone one wakes no
  /// worker): where the runs alone were faster at their best, every step runs alone and no
  /// worker is woken at all. A plan of many small steps (an If or Loop body of a batch-1 model)
  /// lost more to waking the worker, a syscall and an interrupt to another vCPU for each step
  /// that found it asleep, than its steps gained from it. Otherwise the steps found faster alone
  /// are only candidates: kAdaptTrials more runs with them alone, alternating with as many with
  /// every step on the workers, keep them where those runs were at least as fast at their best.
  /// A step measured alone after steps run alone reads its input from its own thread's caches;
  /// among steps on two threads it does not, so the first round alone cannot tell what a mix
  /// costs (mobile_se_cnn's first rounds put 0 to 43 of its 83 steps alone from one process to
  /// the next).
  struct StepThreads;
  void adapt_threads(uint64_t phase, bool ok);

  std::vector<SlotInfo> slots_;
  std::vector<PlanStep> steps_;
  std::vector<std::pair<int, py::str>> feed_names_;
  std::vector<int> env_outputs_;
  int64_t arena_bytes_;
  ThreadPool* pool_;
  std::mutex arenas_mu_;
  std::vector<char*> free_arenas_;
  std::vector<std::unique_ptr<RunBuffers>> free_buffers_;  // finished runs' vectors, for the next
  std::once_flag threads_once_;
  std::unique_ptr<StepThreads[]> step_threads_;  // per step, made at the first run
  std::atomic<bool> threads_ready_{false};       // step_threads_ is made
  std::atomic<uint64_t> runs_{0};
  std::atomic<bool> all_solo_{false};             // no step uses the workers: none is woken
  /// measuring runs' best ns: first with workers / alone, then with workers / the candidates alone
  std::atomic<int64_t> run_best_[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
  std::atomic<bool> check_candidates_{false};  // this period's second round of measuring runs is on
  bool profiling_ = false;
  std::mutex profile_mu_;
  std::vector<std::tuple<int, double, double>> profile_;
};

}  // namespace opforge_core
