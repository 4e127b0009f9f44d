"""A compiled plan measures each step with its pool's workers and on the running thread alone,
and runs alone the steps clearly faster that way (csrc/executor.cpp, Plan::adapt_threads): a step
the workers slow down (a second vCPU that is an SMT sibling or busy elsewhere) runs alone, one
they speed up keeps them, and no result changes meanwhile. Whole runs are compared too: where
they were faster alone, every step runs alone. Sleeps stand in for slow and fast workers, so the
times the plan compares differ by milliseconds whatever the machine's load."""
import numpy as np
import pytest
from onnx import helper, numpy_helper

import opforge
from tests.support.onnx_builders import tensor


def model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.threads", 1)])
    proto.ir_version = 9
    return proto

# Each op splits in two chunks; with workers, the caller's waits for the other to start (so a
# worker must take it). late_workers: a worker sleeps 4 ms in its chunk; run alone (one call over
# both) nothing waits. mild_workers: a worker's chunk sleeps 2.3 ms, the call alone 2 ms: each
# step a little slower with the workers (less than a step needs to run alone), many of them
# clearly. slow_chunks: every chunk sleeps, so two threads halve the step's time; it notes
# whether it ran alone. after_slow: a worker's chunk sleeps 2 ms; alone 0.5 ms after a
# slow_chunks that ran alone, 6 ms after one that did not (its input in the other thread's
# caches): measured with every step alone it looks faster alone, and is not among the others.
OPS = r"""
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <opforge/op.h>

static void two_chunks(opforge::KernelContext& ctx, int alone_us, int worker_us) {
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> second_started{false};
  ctx.parallel_for(2, 1, [&](int64_t b, int64_t e) {
    if (e - b == 2) {  // alone: one call over both
      std::this_thread::sleep_for(std::chrono::microseconds(alone_us));
    } else if (b == 1) {
      second_started = true;
      if (std::this_thread::get_id() != caller) std::this_thread::sleep_for(std::chrono::microseconds(worker_us));
    } else {  // the caller's chunk: a worker must take the other
      const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
      while (!second_started && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
  });
}

static void add(opforge::KernelContext& ctx, float v) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = x[i] + v;
}

static void late_workers(opforge::KernelContext& ctx) {
  two_chunks(ctx, 0, 4000);
  add(ctx, 1.f);
}

static void mild_workers(opforge::KernelContext& ctx) {
  two_chunks(ctx, 2000, 2300);
  add(ctx, -1.f);
}

static std::atomic<bool> slow_ran_alone{false};

static void slow_chunks(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  const int64_t n = ctx.input(0).numel();
  ctx.parallel_for(2, 1, [&](int64_t b, int64_t e) {
    slow_ran_alone = e - b == 2;
    for (int64_t half = b; half < e; ++half) {
      std::this_thread::sleep_for(std::chrono::milliseconds(8));
      for (int64_t i = half * n / 2; i < (half + 1) * n / 2; ++i) y[i] = x[i] * 2.f;
    }
  });
}

static void after_slow(opforge::KernelContext& ctx) {
  two_chunks(ctx, slow_ran_alone ? 500 : 6000, 2000);
  add(ctx, 3.f);
}

OPFORGE_OP(after_slow).domain("com.threads").input("X", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(after_slow);
OPFORGE_OP(late_workers).domain("com.threads").input("X", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(late_workers);
OPFORGE_OP(slow_chunks).domain("com.threads").input("X", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(slow_chunks);
OPFORGE_OP(mild_workers).domain("com.threads").input("X", {opforge::f32}).output("Y")
    .infer(opforge::same_as_input0).compute(mild_workers);
"""


@pytest.fixture(scope="module")
def thread_ops():
    return opforge.load_inline("thread_adaptation_ops", OPS)


def session(m, threads, custom_ops=()):
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    return opforge.InferenceSession(m, options, custom_ops=list(custom_ops))


def test_steps_the_workers_slow_run_alone_and_the_others_keep_them(thread_ops):
    nodes = [helper.make_node("late_workers", ["x"], ["a"], name="late", domain="com.threads"),
             helper.make_node("slow_chunks", ["a"], ["y"], name="slow", domain="com.threads")]
    m = model(nodes, [tensor("x", [64])], [tensor("y", None)])
    sess = session(m, threads=2, custom_ops=[thread_ops])
    x = np.arange(64, dtype=np.float32)
    # the first runs record and warm up; then four runs each way; then four each way with the
    # candidates alone and with none alone
    for _ in range(20):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], (x + 1) * 2)
    plan = sess.memory_plan({"x": x})
    labels = [label for label, _, _ in plan.steps]
    alone = [labels[i] for i in plan.core.alone_steps]
    assert alone == ["late"], plan.dump()
    assert "late" in plan.dump() and "alone" in plan.dump()
    for _ in range(3):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], (x + 1) * 2)


def test_a_plan_whose_runs_were_faster_alone_runs_every_step_alone(thread_ops):
    """Four steps each 1.15x slower with the workers: none alone is slow enough to leave them,
    together the whole run is; after the measurement every step runs alone."""
    names = ["x", "a", "b", "c", "y"]
    nodes = [helper.make_node("mild_workers", [names[i]], [names[i + 1]], name=f"mild{i}", domain="com.threads")
             for i in range(4)]
    sess = session(model(nodes, [tensor("x", [16])], [tensor("y", None)]), threads=2, custom_ops=[thread_ops])
    x = np.arange(16, dtype=np.float32)
    for _ in range(12):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x - 4)
    plan = sess.memory_plan({"x": x})
    assert plan.core.alone_steps == [0, 1, 2, 3], plan.dump()


def test_steps_faster_alone_only_among_steps_alone_keep_the_workers(thread_ops):
    """after_slow measures faster alone in the runs where every step is alone, but runs slower
    alone after a slow_chunks on two threads: whole runs with it alone lose to runs with none
    alone, and it keeps the workers."""
    nodes = [helper.make_node("slow_chunks", ["x"], ["a"], name="slow", domain="com.threads"),
             helper.make_node("after_slow", ["a"], ["y"], name="after", domain="com.threads")]
    sess = session(model(nodes, [tensor("x", [32])], [tensor("y", None)]), threads=2, custom_ops=[thread_ops])
    x = np.arange(32, dtype=np.float32)
    for _ in range(12):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * 2 + 3)
    plan = sess.memory_plan({"x": x})
    assert plan.core.alone_steps == [], plan.dump()   # a candidate only, until whole runs keep it
    for _ in range(8):
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x * 2 + 3)
    plan = sess.memory_plan({"x": x})
    assert plan.core.alone_steps == [], plan.dump()


def test_one_thread_plans_measure_nothing(thread_ops):
    m = model([helper.make_node("late_workers", ["x"], ["y"], name="late", domain="com.threads")],
              [tensor("x", [8])], [tensor("y", None)])
    sess = session(m, threads=1, custom_ops=[thread_ops])
    x = np.ones(8, np.float32)
    for _ in range(12):
        sess.run(None, {"x": x})
    assert sess.memory_plan({"x": x}).core.alone_steps == []


def test_results_are_the_same_bits_while_the_plan_measures_and_after():
    """The conv, pool, gemm and softmax kernels split their work by the thread count, which a
    step run alone keeps: every run's output is the first run's, bit for bit."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((24, 8, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((10, 24 * 8 * 8)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w2"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"])]
    m = model(nodes, [tensor("x", [4, 8, 16, 16])], [tensor("y", None)],
              initializers=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    sess = session(m, threads=2)
    x = rng.standard_normal((4, 8, 16, 16)).astype(np.float32)
    first = sess.run(None, {"x": x})[0]
    for i in range(20):
        assert np.array_equal(sess.run(None, {"x": x})[0], first), f"run {i + 2} differs"
