"""Many sessions registering an opforge-built library in one process: no memory or file handles
kept per session beyond what onnxruntime keeps for any custom-op library (measured the same way on
a library written by hand against its C API, benchmarks/ort_hand_written_op.cpp); the adapter's
domains are made once per load and released at unload."""
import os
import subprocess
import sys
from pathlib import Path

import opforge
from tests.support.ort_interop import hand_written_library

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ops"
ROOT = Path(__file__).resolve().parents[2]
SESSIONS = 100

# In a fresh process each, so that neither library's figure depends on what the other freed:
# prints RSS growth (kB) and open files before and after SESSIONS sessions registering the
# library, each running leaky_relu once, after 20 to warm onnxruntime's own pools and caches.
MEASURE = r"""
import os, sys
from pathlib import Path
import numpy as np
from onnx import TensorProto as T
from tests.support.ort_interop import one_op_model, ort_session
library, domain, sessions = sys.argv[1], sys.argv[2], int(sys.argv[3])
proto = one_op_model("leaky_relu", [("x", T.FLOAT, [64, 64])], [("y", T.FLOAT, [64, 64])], domain=domain, alpha=0.1)
x = np.ones((64, 64), np.float32)
def rss():
    return int(next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:")).split()[1])
def one():
    assert ort_session(proto, library).run(None, {"x": x})[0].shape == (64, 64)
for _ in range(20):
    one()
before, files = rss(), len(os.listdir("/proc/self/fd"))
for _ in range(sessions):
    one()
print(rss() - before, files, len(os.listdir("/proc/self/fd")))
"""


def growth(library: str, domain: str) -> tuple:
    """(RSS growth in kB, open files before, after) of MEASURE for `library`."""
    done = subprocess.run([sys.executable, "-c", MEASURE, library, domain, str(SESSIONS)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return tuple(int(v) for v in done.stdout.split()[-3:])


def test_hundred_sessions_leak_neither_memory_nor_files(shared_cache, tmp_path):
    lib = opforge.load_dir(EXAMPLES).onnxruntime_library()
    anchor, _, _ = growth(hand_written_library(tmp_path), "com.hand")
    grown, files, files_after = growth(lib, "com.example")
    print(f"\n{SESSIONS} sessions registering {Path(lib).name}: RSS {grown:+d} kB, open files {files} -> "
          f"{files_after}; the same with the hand-written library: RSS {anchor:+d} kB")
    assert files_after == files
    assert grown < max(anchor, 0) + 1024, f"RSS grew {grown} kB over {SESSIONS} sessions ({anchor} kB by hand)"
