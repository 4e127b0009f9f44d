"""Several processes building one op, and builds killed mid-compile."""
import os
import signal
import subprocess
import sys
import time

import numpy as np

import opforge
from tests.support.helpers import run_python

OP = """
#include <opforge/op.h>
static void run(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = x[i] + 1.0f;
}
OPFORGE_OP(plus_one).input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0).compute(run);
"""

# Constant evaluation that keeps the compiler busy for several seconds.
SLOW = """
constexpr long spin(long n) { long s = 0; for (long i = 0; i < n; ++i) s += i % 7; return s; }
static_assert(spin(SPIN) > 0, "");
"""

LOADER = """
import sys, numpy as np, opforge
lib = opforge.CustomOpBuilder("plus_one", [sys.argv[1]], extra_cflags=sys.argv[2:]).load()
assert lib.plus_one(np.zeros(3, np.float32)).tolist() == [1.0, 1.0, 1.0]
print("OK")
"""


def spawn(src, *flags):
    return subprocess.Popen([sys.executable, "-c", LOADER, str(src), *flags], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ))


def test_eight_processes_compile_once_and_all_load(cache_dir, tmp_path):
    src = tmp_path / "plus_one.cpp"
    src.write_text(OP)
    procs = [spawn(src) for _ in range(8)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    assert all(out.strip().endswith("OK") for out in outputs)
    assert sum(out.count("opforge: building 'plus_one'") for out in outputs) == 1
    entries = [p for p in (cache_dir / "libs").iterdir() if p.is_dir()]
    assert len(entries) == 1


def test_build_killed_mid_compile_leaves_nothing_that_blocks_the_next(cache_dir, tmp_path):
    src = tmp_path / "plus_one.cpp"
    src.write_text(SLOW + OP)
    flags = ["-DSPIN=4000000L", "-fconstexpr-loop-limit=2000000000", "-fconstexpr-ops-limit=100000000000"]
    victim = subprocess.Popen([sys.executable, "-c", LOADER, str(src), *flags], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    line = victim.stdout.readline()
    assert "building 'plus_one'" in line, line
    time.sleep(1.5)  # the compiler is running now
    assert victim.poll() is None
    os.killpg(victim.pid, signal.SIGKILL)  # the builder, ninja and the compiler all die
    victim.wait()
    # nothing was published, and the next build is not blocked by the dead one's lock
    assert not [p for p in (cache_dir / "libs").iterdir() if p.is_dir()]
    src.write_text(SLOW.replace("SPIN", "10") + OP)
    proc = run_python(f"""
        import numpy as np, opforge
        lib = opforge.CustomOpBuilder("plus_one", [{str(src)!r}], extra_cflags={flags!r}).load()
        print(lib.plus_one(np.zeros(2, np.float32)).tolist())
    """, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("[1.0, 1.0]")


def test_waiting_process_reports_it_and_gets_the_module(cache_dir, tmp_path):
    src = tmp_path / "plus_one.cpp"
    src.write_text(SLOW + OP)
    flags = ["-DSPIN=300000L", "-fconstexpr-loop-limit=2000000000", "-fconstexpr-ops-limit=100000000000"]
    first = spawn(src, *flags)
    time.sleep(0.8)
    second = spawn(src, *flags)
    out1, out2 = first.communicate(timeout=300)[0], second.communicate(timeout=300)[0]
    assert first.returncode == 0 and second.returncode == 0, out1 + out2
    assert (out1 + out2).count("opforge: building 'plus_one'") == 1
    assert "waiting for another process building 'plus_one'" in out2


def test_failed_build_is_not_cached(cache_dir, tmp_path):
    src = tmp_path / "plus_one.cpp"
    src.write_text(OP.replace("1.0f;", "1.0f"))
    for _ in range(2):
        try:
            opforge.CustomOpBuilder("plus_one", [src]).load()
        except opforge.BuildError:
            pass
        else:
            raise AssertionError("a broken source built")
    assert not [p for p in (cache_dir / "libs").iterdir() if p.is_dir()]
    src.write_text(OP)
    assert opforge.CustomOpBuilder("plus_one", [src]).load().plus_one(np.zeros(1, np.float32))[0] == 1.0
