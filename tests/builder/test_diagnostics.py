"""Compile errors, bad arguments, and the build plan as text."""

import numpy as np
import pytest

import opforge
from tests.support.helpers import EXAMPLES
from opforge.builder.depfile import read_depfile
from opforge.builder.diagnostics import build_error
from opforge.builder.ninja_file import NinjaPlan, ninja_text

BROKEN = """#include <opforge/op.h>

static void run(opforge::KernelContext& ctx) {
  float* y = ctx.output(0).data<float>();
  y[0] = undefined_name;
}
OPFORGE_OP(broken).input("X").output("Y").infer(opforge::same_as_input0).compute(run);
"""


@pytest.mark.parametrize("verbose", [False, True])
def test_compile_error_starts_with_the_users_file_and_line(cache_dir, tmp_path, verbose):
    """Whatever the build printed before (progress, with verbose every command), the error's
    message starts with the compiler's first error at the user's file:line."""
    src = tmp_path / "broken.cpp"
    src.write_text(BROKEN)
    with pytest.raises(opforge.BuildError) as info:
        opforge.CustomOpBuilder("broken", [src], verbose=verbose).load()
    err = info.value
    first = str(err).splitlines()[0]
    assert first.startswith(f"{src}:5:")
    assert "error:" in first and "undefined_name" in first
    assert "undefined_name" in err.log
    assert str(src) in err.command and "-c" in err.command
    assert "the full log is in .log" in str(err)


def test_link_error_is_reported(cache_dir, tmp_path):
    src = tmp_path / "unlinked.cpp"
    src.write_text(BROKEN.replace("y[0] = undefined_name;", "y[0] = missing_function();")
                   .replace("static void run", "float missing_function();\nstatic void run"))
    with pytest.raises(opforge.BuildError, match=f"^{src}: error: undefined symbol missing_function"):
        opforge.CustomOpBuilder("unlinked", [src]).load()


def test_incomplete_op_definition_is_reported_at_load(cache_dir, tmp_path):
    src = tmp_path / "noinfer.cpp"
    src.write_text('#include <opforge/op.h>\nstatic void run(opforge::KernelContext&) {}\n'
                   'OPFORGE_OP(noinfer).input("X").output("Y").compute(run);\n')
    with pytest.raises(ValueError, match=r"op 'noinfer' is not fully defined: no \.infer"):
        opforge.CustomOpBuilder("noinfer", [src]).load()


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(name="bad-name", sources=["x.cpp"]), ValueError, "must be a Python identifier"),
    (dict(name="ok", sources=["/nonexistent/x.cpp"]), FileNotFoundError, "not found: /nonexistent/x.cpp"),
    (dict(name="ok", sources=["x.cpp"], backend="TPU"), ValueError, "backend 'TPU' is not one of"),
    (dict(name="ok", sources=["x.cu"], backend="CPU"), ValueError, "x.cu need nvcc; pass backend='CUDA'"),
])
def test_bad_builder_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        opforge.CustomOpBuilder(**kwargs)


def test_missing_compiler_is_named(cache_dir, tmp_path, monkeypatch):
    src = tmp_path / "a.cpp"
    src.write_text("int x;")
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(opforge.BuildError, match="'no-such-compiler-xyz' not found.*set CXX"):
        opforge.CustomOpBuilder("a", [src]).load()


def test_cxx_environment_variable_is_honored(cache_dir, tmp_path, monkeypatch, capsys):
    wrapper = tmp_path / "my-cxx"
    log = tmp_path / "calls.txt"
    wrapper.write_text(f"#!/bin/sh\necho called >> {log}\nexec g++ \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("CXX", str(wrapper))
    lib = opforge.load_dir(EXAMPLES / "ops")
    assert lib.add_n(np.ones(2)).tolist() == [1.0, 1.0]
    assert log.read_text().count("called") >= 2  # version probe + compiles


def test_pybind11_module_builds_and_loads(shared_cache):
    mod = opforge.CustomOpBuilder("hello", [EXAMPLES / "pybind" / "hello_pybind.cpp"]).load()
    assert mod.greet("opforge") == "hello, opforge"
    np.testing.assert_array_equal(mod.scale(np.arange(3, dtype=np.float32), 3.0), [0.0, 3.0, 6.0])
    assert mod.__name__.startswith("hello_")


def test_ninja_text_uses_depfiles_and_atomic_outputs():
    plan = NinjaPlan(("g++",), ("-O2", "-Ia b"), ("-shared",), (("/w/obj/a.o", "/src/a.cpp"),),
                     ("/s/support.o",), "/w/liba.so")
    text = ninja_text(plan)
    assert "depfile = $out.d" in text
    assert "-MMD -MT $out -MF $out.d" in text
    assert "-o $out.tmp && mv -f $out.tmp $out" in text
    assert "build /w/obj/a.o: cxx /src/a.cpp" in text
    assert "build /w/liba.so: link /w/obj/a.o /s/support.o" in text
    assert "cflags = -O2 '-Ia b'" in text


def test_depfile_parsing(tmp_path):
    d = tmp_path / "a.o.d"
    d.write_text("/w/a.o: /src/a.cpp /inc/x.h \\\n /inc/with\\ space.h\n")
    assert read_depfile(d) == ["/src/a.cpp", "/inc/x.h", "/inc/with space.h"]


def test_build_error_falls_back_to_the_log_tail():
    err = build_error("lib", "ninja: something odd happened\n", "cmd")
    assert "something odd happened" in str(err) and err.command == "cmd"


def test_opforge_verbose_prints_the_compiler_commands(cache_dir, tmp_path, capsys, monkeypatch):
    src = tmp_path / "quiet.cpp"
    src.write_text(BROKEN.replace("undefined_name", "1.0f"))
    monkeypatch.setenv("OPFORGE_VERBOSE", "1")
    opforge.CustomOpBuilder("quiet", [src]).load()
    out = capsys.readouterr().out
    assert f"-c {src}" in out and "-shared" in out   # ninja -v: every command as run
