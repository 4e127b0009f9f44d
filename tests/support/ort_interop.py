"""Models with one custom op, and plain onnxruntime sessions that register a custom-op library:
what the tests of opforge/interop (and its benchmark) share."""
from __future__ import annotations

import subprocess
from pathlib import Path

import onnx
from onnx import helper

from tests.support.onnx_builders import model, tensor

DOMAIN = "com.example"
ROOT = Path(__file__).resolve().parents[2]


def one_op_model(op: str, inputs: list, outputs: list, domain: str = DOMAIN, **attrs) -> onnx.ModelProto:
    """A model of one node `op`; `inputs` and `outputs` are (name, elem type, shape) triples
    (shape None: unknown), the node's attributes given by keyword."""
    node = helper.make_node(op, [i[0] for i in inputs], [o[0] for o in outputs], domain=domain, **attrs)
    proto = model([node], [tensor(n, shape, elem) for n, elem, shape in inputs],
                  [tensor(n, shape, elem) for n, elem, shape in outputs])
    if domain:
        proto.opset_import.append(helper.make_opsetid(domain, 1))
    return proto


def ort_session(proto, library: "str | None", threads: int = 1, **options):
    """A plain onnxruntime session of `proto` with `library` registered (None: no library)."""
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = threads
    for key, value in options.items():
        setattr(so, key, value)
    if library is not None:
        so.register_custom_ops_library(library)
    return onnxruntime.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def hand_written_library(folder: Path) -> str:
    """benchmarks/ort_hand_written_op.cpp (leaky_relu of domain com.hand, written by hand against
    onnxruntime's C API) built into `folder` with the flags of opforge's libraries; its path."""
    out = Path(folder) / "libhand_written_op.so"
    subprocess.run(["c++", "-std=c++17", "-O2", "-fPIC", "-fvisibility=hidden", "-shared",
                    f"-I{ROOT / 'opforge' / 'csrc'}", str(ROOT / "benchmarks" / "ort_hand_written_op.cpp"),
                    "-o", str(out)], check=True)
    return str(out)
