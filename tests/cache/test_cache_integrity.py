"""A cache entry holds exactly the code its key names: builders reused across edits, edits made
while a build runs, and libraries that link but would not load never reach the cache."""
import json

import numpy as np
import pytest

import opforge
from tests.support.helpers import run_python
from opforge.builder import runner

OP = """
#include <opforge/op.h>
#include "value.h"
static void run(opforge::KernelContext& ctx) {
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.output(0).numel(); ++i) y[i] = VALUE + ADD;
}
OPFORGE_OP(value).input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0).compute(run);
"""


def write(folder, add=0, value=20):
    folder.mkdir(exist_ok=True)
    (folder / "op.cpp").write_text(OP.replace("ADD", str(add)))
    (folder / "value.h").write_text(f"#define VALUE {value}\n")
    return folder / "op.cpp"


def builder(src):
    return opforge.CustomOpBuilder("value_op", [src], extra_include_paths=[src.parent])


def value(lib) -> float:
    return float(lib.value(np.zeros(1, np.float32))[0])


def value_in_a_new_process(src) -> float:
    proc = run_python(f"""
        import numpy as np, opforge
        lib = opforge.CustomOpBuilder("value_op", [{str(src)!r}], extra_include_paths=[{str(src.parent)!r}]).load()
        print(float(lib.value(np.zeros(1, np.float32))[0]))
    """)
    assert proc.returncode == 0, proc.stderr
    return float(proc.stdout.split()[-1])


def test_a_builder_loads_the_sources_as_they_are_when_load_is_called(cache_dir, tmp_path):
    src = write(tmp_path / "src")
    b = builder(src)
    assert value(b.load()) == 20
    write(tmp_path / "src", add=2)
    assert value(b.load()) == 22
    (tmp_path / "src" / "value.h").write_text("#define VALUE 30\n")
    assert value(b.load()) == 32


def test_an_edit_between_creating_a_builder_and_its_first_load_is_keyed_by_what_was_compiled(cache_dir, tmp_path):
    src = write(tmp_path / "src")
    b = builder(src)                      # reads the sources as they are: add 0
    write(tmp_path / "src", add=6)        # edited before the first load
    assert value(b.load()) == 26
    write(tmp_path / "src", add=0)        # reverted: a new process must get the original code
    assert value_in_a_new_process(src) == 20
    write(tmp_path / "src", add=6)
    assert value_in_a_new_process(src) == 26


@pytest.mark.parametrize("what", ["source", "header"])
@pytest.mark.parametrize("when", ["kept", "reverted"])
def test_an_edit_while_the_compiler_runs_is_not_cached_under_the_old_key(cache_dir, tmp_path, monkeypatch, what, when):
    """The first build compiles an edited file (as a save landing while ninja runs would), which
    is then kept or put back: either way no entry may hold code other than its key says."""
    src = write(tmp_path / "src")
    b = builder(src)
    real, calls = runner.run_ninja, []

    def racing(workdir, verbose, echo=None, progress=None):
        calls.append(workdir)
        if len(calls) == 1 and "support" not in str(workdir):
            edited = (dict(add=4) if what == "source" else dict(value=50))
            write(tmp_path / "src", **edited)
            result = real(workdir, verbose, echo, progress)
            if when == "reverted":
                write(tmp_path / "src")
            return result
        return real(workdir, verbose, echo, progress)

    monkeypatch.setattr(runner, "run_ninja", racing)
    want = 20 if when == "reverted" else (24 if what == "source" else 50)
    assert value(b.load()) == want
    monkeypatch.setattr(runner, "run_ninja", real)
    assert value_in_a_new_process(src) == want
    write(tmp_path / "src")
    assert value_in_a_new_process(src) == 20


UNDEFINED = """
#include <opforge/op.h>
float my_helper(float x);
static void run(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = my_helper(x[i]);
}
OPFORGE_OP(helped).input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0).compute(run);
"""


def test_an_undefined_symbol_fails_the_build_naming_it_and_its_source(cache_dir, tmp_path):
    src = tmp_path / "helped.cpp"
    src.write_text(UNDEFINED)
    with pytest.raises(opforge.BuildError) as caught:
        opforge.CustomOpBuilder("helped", [src]).load()
    message = str(caught.value)
    assert message.startswith(f"{src}: error: undefined symbol my_helper(float)"), message
    assert "Traceback" not in message and "undefined reference" in caught.value.log
    assert not list((cache_dir / "libs").glob("helped-*")), "a library that does not link was cached"
    proc = run_python("from opforge.cli import main; main(['cache', 'doctor'])",
                      env={"OPFORGE_CACHE_DIR": str(cache_dir)})
    assert proc.returncode == 0 and "helped" not in proc.stdout, proc.stdout + proc.stderr


PYBIND_UNDEFINED = """
#include <pybind11/pybind11.h>
float my_helper(float x);
PYBIND11_MODULE(OPFORGE_EXTENSION_NAME, m) { m.def("helped", [](float x) { return my_helper(x); }); }
"""


def test_an_extension_module_with_an_undefined_symbol_is_refused_before_it_is_cached(cache_dir, tmp_path):
    src = tmp_path / "ext.cpp"
    src.write_text(PYBIND_UNDEFINED)
    with pytest.raises(opforge.BuildError) as caught:
        opforge.CustomOpBuilder("ext_helped", [src]).load()
    assert str(caught.value).startswith(f"{src}: error: undefined symbol my_helper(float)"), str(caught.value)
    assert not list((cache_dir / "libs").glob("ext_helped-*"))


def test_doctor_finds_an_entry_that_does_not_load(cache_dir, tmp_path):
    """An entry that passes its integrity check but whose library cannot be loaded (made by an
    older opforge, or a library it needs went away) is reported and removed by --fix."""
    src = write(tmp_path / "src")
    builder(src).load()
    (entry,) = [p for p in (cache_dir / "libs").iterdir() if p.is_dir()]
    manifest = json.loads((entry / "manifest.json").read_text())
    manifest["needs_check"] = True
    other = tmp_path / "needs.cpp"
    other.write_text("float gone(float); float use(float x) { return gone(x); }\n")
    import subprocess

    lib = entry / manifest["artifact"]
    subprocess.run(["c++", "-shared", "-fPIC", str(other), "-o", str(lib)], check=True)
    import hashlib

    manifest.update(size=lib.stat().st_size, sha256=hashlib.sha256(lib.read_bytes()).hexdigest())
    (entry / "manifest.json").write_text(json.dumps(manifest))
    lib.chmod(0o700)
    from opforge.cli import main

    env = {"OPFORGE_CACHE_DIR": str(cache_dir)}
    found = run_python("from opforge.cli import main; main(['cache', 'doctor'])", env=env)
    assert "does not load" in found.stdout and "gone" in found.stdout, found.stdout + found.stderr
    fixed = run_python("from opforge.cli import main; main(['cache', 'doctor', '--fix'])", env=env)
    assert fixed.returncode == 0, fixed.stderr
    assert not entry.exists()
    del main


def test_libraries_in_folders_of_their_own_share_one_support_build(cache_dir, tmp_path):
    """The support object and precompiled header depend on the flags, not on a library's own
    include folders: a new op folder costs its own sources only."""
    for index in range(3):
        folder = tmp_path / f"ops{index}"
        write(folder, add=index)
        assert value(opforge.load_dir(folder)) == 20 + index
    support = [p for p in (cache_dir / "support").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert len(support) == 1, support
