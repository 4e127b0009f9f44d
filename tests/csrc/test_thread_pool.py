"""The host thread pool (opforge/csrc/thread_pool.cpp) under back-to-back and concurrent jobs, and
its idle cost: workers poll for a bounded time after a job, then sleep."""
import resource
import threading
import time

import numpy as np
import pytest

from opforge import _core

SIZE = 100_000   # above the elementwise grain: every call splits across the pool's threads


def relu(kernels, x, pool):
    out = np.empty_like(x)
    op = kernels.op("Relu", version=14)
    op.handle.run([x], [out], op.handle.attrs({}), pool)
    return out


def test_back_to_back_jobs_are_all_complete(kernels):
    pool = _core.ThreadPool(2)
    rng = np.random.default_rng(0)
    for i in range(300):
        x = rng.standard_normal(SIZE).astype(np.float32)
        np.testing.assert_array_equal(relu(kernels, x, pool), np.maximum(x, 0), err_msg=f"call {i}")


@pytest.mark.parametrize("threads", [2, 3, 4, 7])
def test_every_chunk_runs_once_whatever_the_thread_count_and_size(kernels, threads):
    # each thread owns a share of a call's chunks and then takes what the others left: every
    # element must still be written, once, for sizes that leave the shares and chunks uneven
    pool = _core.ThreadPool(threads)
    rng = np.random.default_rng(threads)
    op = kernels.op("Relu", version=14)
    for size in (SIZE, SIZE + 13, 3 * SIZE + 5, 7 * SIZE + 1):
        for _ in range(5):
            x = rng.standard_normal(size).astype(np.float32)
            out = np.full_like(x, np.nan)
            op.handle.run([x], [out], op.handle.attrs({}), pool)
            np.testing.assert_array_equal(out, np.maximum(x, 0), err_msg=f"{threads} threads, {size} elements")


def test_callers_on_several_threads_share_one_pool(kernels):
    pool = _core.ThreadPool(2)
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(100):
                x = rng.standard_normal(SIZE).astype(np.float32)
                np.testing.assert_array_equal(relu(kernels, x, pool), np.maximum(x, 0))
        except AssertionError as exc:  # re-raised on the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def test_an_idle_pool_sleeps(kernels):
    # After its last job a worker polls for at most ThreadPool::kSpinMicros (2 ms); a pool that
    # kept spinning would use about one core for the whole second.
    pool = _core.ThreadPool(4)
    x = np.ones(SIZE, np.float32)
    for _ in range(20):
        relu(kernels, x, pool)
    before = cpu_seconds()
    time.sleep(1.0)
    assert cpu_seconds() - before < 0.1


def test_prewoken_workers_take_the_next_jobs_and_sleep_again(kernels):
    # A plan wakes its pool's sleeping workers as a run starts (ThreadPool::prewake), from any
    # thread and while other callers' jobs run: jobs stay complete, and workers woken with no
    # job poll for a bounded time, then sleep again.
    pool = _core.ThreadPool(4)
    rng = np.random.default_rng(1)
    stop = threading.Event()

    def alarms():
        while not stop.is_set():
            pool.prewake()
            time.sleep(0.0002)

    waker = threading.Thread(target=alarms)
    waker.start()
    try:
        for i in range(200):
            if i % 20 == 0:
                time.sleep(0.002)   # the workers go to sleep
                pool.prewake()
            x = rng.standard_normal(SIZE + i).astype(np.float32)
            np.testing.assert_array_equal(relu(kernels, x, pool), np.maximum(x, 0), err_msg=f"call {i}")
    finally:
        stop.set()
        waker.join()
    time.sleep(0.01)
    pool.prewake()
    before = cpu_seconds()
    time.sleep(1.0)
    assert cpu_seconds() - before < 0.1
