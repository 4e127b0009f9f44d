"""Many sessions registering an opforge-built library in one process: no memory or file handles
kept per session (the adapter's domains are made once per load and released at unload)."""
import os
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T

import opforge
from tests.support.ort_interop import one_op_model, ort_session

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ops"


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    pytest.skip("no /proc/self/status")


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_hundred_sessions_leak_neither_memory_nor_files(shared_cache):
    lib = opforge.load_dir(EXAMPLES).onnxruntime_library()
    proto = one_op_model("softmax_rows", [("x", T.FLOAT, [64, 64])], [("y", T.FLOAT, None)])
    x = np.ones((64, 64), np.float32)

    def one():
        session = ort_session(proto, lib)
        assert session.run(None, {"x": x})[0].shape == (64, 64)

    for _ in range(20):   # warm: allocator pools, the runtime's own caches
        one()
    rss, files = rss_kb(), open_files()
    for _ in range(100):
        one()
    grown = rss_kb() - rss
    print(f"\n100 sessions registering {Path(lib).name}: RSS {rss} kB -> {rss + grown} kB "
          f"({grown:+d} kB), open files {files} -> {open_files()}")
    assert open_files() == files
    assert grown < 4096, f"RSS grew {grown} kB over 100 sessions"
