"""onnxruntime custom-op libraries in opforge sessions (opforge/interop/ort_library.py and the
host, csrc/ort_host_*.cpp): onnxruntime-extensions' string ops, a tokenizer and a numeric op
match onnxruntime + onnxruntime-extensions; a library built by opforge round-trips; an entry
the host does not implement gives an error naming it."""
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import opforge
from tests.support.numeric import assert_close
from tests.support.onnx_builders import tensor

ext = pytest.importorskip("onnxruntime_extensions")
CONTRIB = "ai.onnx.contrib"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ops"
CSRC = Path(opforge.__file__).parent / "csrc"


def contrib_model(nodes, inputs, outputs) -> bytes:
    graph = helper.make_graph(nodes, "ext", inputs, outputs)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(CONTRIB, 1)])
    proto.ir_version = 8
    return proto.SerializeToString()


def both(model: bytes, feed: dict) -> tuple:
    """(opforge's outputs, onnxruntime's), each session registering onnxruntime-extensions."""
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.register_custom_ops_library(ext.get_library_path())
    want = onnxruntime.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, feed)
    ours = opforge.SessionOptions()
    ours.register_custom_ops_library(ext.get_library_path())
    got = opforge.InferenceSession(model, ours).run(None, feed)
    return got, want


def assert_same(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        assert g.tolist() == w.tolist()


TEXT = np.array(["Hello World", "ONNX Runtime ÄÖ", "a,b,,c", ""], dtype=object)


def test_string_lower():
    model = contrib_model([helper.make_node("StringLower", ["x"], ["y"], domain=CONTRIB)],
                          [tensor("x", [None], T.STRING)], [tensor("y", [None], T.STRING)])
    got, want = both(model, {"x": TEXT})
    assert_same(got, want)
    assert got[0][1] == "onnx runtime äö"


def test_string_regex_replace():
    model = contrib_model([helper.make_node("StringRegexReplace", ["x", "p", "r"], ["y"], domain=CONTRIB,
                                            global_replace=1)],
                          [tensor("x", [None], T.STRING), tensor("p", [1], T.STRING), tensor("r", [1], T.STRING)],
                          [tensor("y", [None], T.STRING)])
    feed = {"x": TEXT, "p": np.array(["[aeiou]+"], dtype=object), "r": np.array(["<\\0>"], dtype=object)}
    got, want = both(model, feed)
    assert_same(got, want)
    assert got[0][0] != TEXT[0]


def test_string_split_three_outputs():
    model = contrib_model([helper.make_node("StringSplit", ["x", "sep", "skip"], ["i", "v", "s"], domain=CONTRIB)],
                          [tensor("x", [None], T.STRING), tensor("sep", [], T.STRING), tensor("skip", [], T.BOOL)],
                          [tensor("i", None, T.INT64), tensor("v", None, T.STRING), tensor("s", None, T.INT64)])
    for skip in (True, False):
        got, want = both(model, {"x": TEXT, "sep": np.array(",", dtype=object), "skip": np.array(skip)})
        assert_same(got, want)


def test_bert_tokenizer_with_a_small_vocabulary():
    vocab = "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "on", "##nx", "run",
                       "##time", "##s", ",", "!"])
    node = helper.make_node("BertTokenizer", ["x"], ["ids", "types", "mask"], domain=CONTRIB, vocab_file=vocab,
                            do_lower_case=1, strip_accents=1)
    model = contrib_model([node], [tensor("x", [None], T.STRING)],
                          [tensor(n, None, T.INT64) for n in ("ids", "types", "mask")])
    got, want = both(model, {"x": np.array(["Hello, world! ONNX runtimes unknownword"], dtype=object)})
    assert_same(got, want)
    assert 1 in got[0].tolist() and 8 in got[0].tolist()   # [UNK] and a word piece were made


def test_numeric_op_neg_pos():
    model = contrib_model([helper.make_node("NegPos", ["x"], ["n", "p"], domain=CONTRIB)],
                          [tensor("x", [None], T.FLOAT)], [tensor("n", None, T.FLOAT), tensor("p", None, T.FLOAT)])
    x = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    got, want = both(model, {"x": x})
    for g, w in zip(got, want):
        assert_close(g, w, 0, 0, "NegPos")
    assert_close(got[0] + got[1], x, 0, 0, "NegPos parts")


def test_extension_ops_mixed_with_standard_ops():
    nodes = [helper.make_node("StringUpper", ["x"], ["u"], domain=CONTRIB),
             helper.make_node("StringLength", ["u"], ["n"], domain=CONTRIB),
             helper.make_node("Cast", ["n"], ["f"], to=T.FLOAT),
             helper.make_node("Mul", ["f", "f"], ["y"])]
    model = contrib_model(nodes, [tensor("x", [None], T.STRING)], [tensor("y", None, T.FLOAT)])
    got, want = both(model, {"x": TEXT})
    assert_same(got, want)


def test_opforge_built_library_round_trips():
    ops = opforge.load_dir(EXAMPLES)
    so = opforge.SessionOptions()
    so.register_custom_ops_library(ops.onnxruntime_library())
    nodes = [helper.make_node("leaky_relu", ["x"], ["a"], domain="com.example", alpha=0.2),
             helper.make_node("softmax_rows", ["a"], ["y"], domain="com.example", temperature=0.5)]
    graph = helper.make_graph(nodes, "rt", [tensor("x", ["N", 7])], [tensor("y", None)])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    session = opforge.InferenceSession(proto.SerializeToString(), so)
    x = np.random.default_rng(1).standard_normal((9, 7)).astype(np.float32)
    got = session.run(None, {"x": x})[0]
    assert_close(got, ops.softmax_rows(ops.leaky_relu(x, alpha=0.2), temperature=0.5), 0, 0, "round trip")
    assert session.get_outputs()[0].type == "tensor(float)"


def test_an_unimplemented_entry_gives_an_error_naming_it(tmp_path):
    library = tmp_path / "libcalls_unimplemented.so"
    subprocess.run(["c++", "-std=c++17", "-shared", "-fPIC", "-fvisibility=hidden", f"-I{CSRC}",
                    str(Path(__file__).parent / "data" / "calls_unimplemented.cpp"), "-o", str(library)], check=True)
    so = opforge.SessionOptions()
    so.register_custom_ops_library(str(library))
    node = helper.make_node("CallsUnimplemented", ["x"], ["y"], domain="test.unimplemented")
    graph = helper.make_graph([node], "u", [tensor("x", [2])], [tensor("y", [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("test.unimplemented", 1)])
    with pytest.raises(Exception, match=r"CallsUnimplemented: opforge does not implement OrtApi::SessionGetInputCount"):
        opforge.InferenceSession(proto.SerializeToString(), so)


def test_a_file_without_register_custom_ops_is_refused(tmp_path):
    plain = tmp_path / "libplain.so"
    source = tmp_path / "plain.cpp"
    source.write_text("extern \"C\" int nothing_here() { return 0; }\n")
    subprocess.run(["c++", "-shared", "-fPIC", str(source), "-o", str(plain)], check=True)
    with pytest.raises(ImportError, match="exports no RegisterCustomOps"):
        opforge.SessionOptions().register_custom_ops_library(str(plain))
