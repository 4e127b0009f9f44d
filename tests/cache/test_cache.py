"""The cache: warm loads without compiling, rebuilds on edits, integrity, and a safe root."""
import json
import os
import shutil
import stat
import textwrap

import numpy as np
import pytest

import opforge
from tests.support.helpers import run_python
from opforge.errors import CacheError

OP = """
#include <opforge/op.h>
#include "scale.h"
static void run(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = x[i] * SCALE + OFFSET;
}
OPFORGE_OP(affine).input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0).compute(run);
"""


def write_op(folder, scale="2.0f", offset="0.0f"):
    folder.mkdir(exist_ok=True)
    (folder / "affine.cpp").write_text(OP.replace("OFFSET", offset))
    (folder / "scale.h").write_text(f"#define SCALE {scale}\n")
    return folder / "affine.cpp"


def load(src):
    return opforge.CustomOpBuilder("affine", [src], extra_include_paths=[src.parent]).load()


def test_warm_load_in_a_fresh_process_does_not_compile(cache_dir, tmp_path):
    src = write_op(tmp_path / "src")
    load(src)
    code = f"""
        import sys
        spawned = []
        sys.addaudithook(lambda event, args: spawned.append(event)
                         if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", "os.system") else None)
        import numpy as np, opforge
        lib = opforge.CustomOpBuilder("affine", [{str(src)!r}], extra_include_paths=[{str(src.parent)!r}]).load()
        print(lib.affine(np.ones(2, np.float32)).tolist(), spawned, "filelock" in sys.modules)
    """
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[2.0, 2.0] [] False"  # no compiler, no subprocess, no lock


def test_source_edit_rebuilds_and_new_code_loads_in_the_same_process(cache_dir, tmp_path, capsys):
    src = write_op(tmp_path / "src")
    x = np.ones(3, np.float32)
    assert load(src).affine(x).tolist() == [2.0] * 3
    write_op(tmp_path / "src", offset="1.0f")
    assert load(src).affine(x).tolist() == [3.0] * 3
    out = capsys.readouterr().out
    assert out.count("opforge: building 'affine'") == 2


def test_header_edit_rebuilds(cache_dir, tmp_path):
    src = write_op(tmp_path / "src")
    x = np.ones(3, np.float32)
    assert load(src).affine(x).tolist() == [2.0] * 3
    (tmp_path / "src" / "scale.h").write_text("#define SCALE 5.0f\n")
    assert load(src).affine(x).tolist() == [5.0] * 3
    (tmp_path / "src" / "scale.h").write_text("#define SCALE 2.0f\n")
    assert load(src).affine(x).tolist() == [2.0] * 3  # the first entry is still there


def test_second_load_hits_the_cache(cache_dir, tmp_path, capsys):
    src = write_op(tmp_path / "src")
    load(src)
    capsys.readouterr()
    load(src)
    assert capsys.readouterr().out == ""


def rewrite(path, data: bytes):
    """Damages a file on disk the way a crash or another process would: a new file in its place.

    (Writing into the old file would corrupt the copy this test process has mapped and crash it.)
    """
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def entry_dirs(cache_dir):
    return [p for p in (cache_dir / "libs").iterdir() if p.is_dir() and not p.name.startswith(".")]


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest"])
def test_corrupted_entry_is_rebuilt(cache_dir, tmp_path, capsys, damage):
    src = write_op(tmp_path / "src")
    load(src)
    (entry,) = entry_dirs(cache_dir)
    manifest = json.loads((entry / "manifest.json").read_text())
    lib_file = entry / manifest["artifact"]
    if damage == "truncate":
        rewrite(lib_file, lib_file.read_bytes()[:1000])
    elif damage == "flip":
        data = bytearray(lib_file.read_bytes())
        data[len(data) // 2] ^= 0xFF
        rewrite(lib_file, bytes(data))
    else:
        (entry / "manifest.json").write_text("{not json")
    capsys.readouterr()
    proc = run_python(f"""
        import numpy as np, opforge
        lib = opforge.CustomOpBuilder("affine", [{str(src)!r}], extra_include_paths=[{str(src.parent)!r}]).load()
        print(lib.affine(np.ones(1, np.float32)).tolist())
    """)
    assert proc.returncode == 0, proc.stderr
    assert "building 'affine'" in proc.stdout and proc.stdout.strip().endswith("[2.0]")


def test_entry_that_fails_to_load_is_rebuilt(cache_dir, tmp_path):
    src = write_op(tmp_path / "src")
    load(src)
    (entry,) = entry_dirs(cache_dir)
    manifest = json.loads((entry / "manifest.json").read_text())
    # a well-formed manifest describing a file that is not a library: integrity passes, dlopen fails
    junk = b"not an ELF file" * 100
    rewrite(entry / manifest["artifact"], junk)
    import hashlib

    manifest.update(size=len(junk), sha256=hashlib.sha256(junk).hexdigest())
    (entry / "manifest.json").write_text(json.dumps(manifest))
    proc = run_python(f"""
        import numpy as np, opforge
        lib = opforge.CustomOpBuilder("affine", [{str(src)!r}], extra_include_paths=[{str(src.parent)!r}]).load()
        print(lib.affine(np.ones(1, np.float32)).tolist())
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("[2.0]")


def test_cache_root_is_created_private(cache_dir, tmp_path):
    load(write_op(tmp_path / "src"))
    assert stat.S_IMODE(cache_dir.stat().st_mode) == 0o700


def test_world_writable_root_is_refused(cache_dir, tmp_path):
    cache_dir.mkdir()
    cache_dir.chmod(0o777)
    with pytest.raises(CacheError, match="writable by other users.*chmod 700"):
        load(write_op(tmp_path / "src"))


def test_foreign_owned_root_is_refused(cache_dir, tmp_path, monkeypatch):
    cache_dir.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(cache_dir, 65534, 65534)
    else:  # not root: pretend to be someone else
        real = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real + 1)
    with pytest.raises(CacheError, match="belongs to uid .* not to you"):
        load(write_op(tmp_path / "src"))


def test_symlinked_root_is_refused(cache_dir, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    cache_dir.symlink_to(target)
    with pytest.raises(CacheError, match="not a plain folder"):
        load(write_op(tmp_path / "src"))


def test_load_inline_and_edit(cache_dir):
    src = textwrap.dedent(OP).replace('#include "scale.h"', "#define SCALE 3.0f").replace("OFFSET", "0.0f")
    lib = opforge.load_inline("inline_affine", src)
    assert lib.affine(np.ones(2, np.float32)).tolist() == [3.0, 3.0]
    lib2 = opforge.load_inline("inline_affine", src.replace("3.0f", "4.0f"))
    assert lib2.affine(np.ones(2, np.float32)).tolist() == [4.0, 4.0]


def test_cli_cache_commands(cache_dir, tmp_path):
    load(write_op(tmp_path / "src"))
    from opforge.cli import main

    assert main(["cache", "ls"]) == 0
    assert main(["cache", "doctor"]) == 0
    (entry,) = entry_dirs(cache_dir)
    (entry / "manifest.json").write_text("{")
    assert main(["cache", "doctor"]) == 1
    assert main(["cache", "doctor", "--fix"]) == 0
    assert entry_dirs(cache_dir) == []
    load(write_op(tmp_path / "src"))
    assert main(["cache", "clean", "--all"]) == 0
    assert entry_dirs(cache_dir) == []


def load_in_fresh_process(src):
    """Loads the affine op in a new interpreter; returns the completed process."""
    return run_python(f"""
        import numpy as np, opforge
        lib = opforge.CustomOpBuilder("affine", [{str(src)!r}], extra_include_paths=[{str(src.parent)!r}]).load()
        print(lib.affine(np.ones(1, np.float32)).tolist())
    """)


def test_doctor_and_load_agree_on_an_unsafe_artifact_which_heals(cache_dir, tmp_path, capsys):
    from opforge.cli import main

    src = write_op(tmp_path / "src")
    load(src)
    (entry,) = entry_dirs(cache_dir)
    artifact = entry / json.loads((entry / "manifest.json").read_text())["artifact"]
    artifact.chmod(0o775)
    assert main(["cache", "doctor"]) == 1
    assert "writable by other users" in capsys.readouterr().out
    proc = load_in_fresh_process(src)
    assert proc.returncode == 0, proc.stderr
    assert "building 'affine'" in proc.stdout and proc.stdout.strip().endswith("[2.0]")
    assert main(["cache", "doctor"]) == 0


def test_a_damaged_object_file_in_the_work_folder_heals(cache_dir, tmp_path):
    src = write_op(tmp_path / "src")
    load(src)
    (obj,) = list((cache_dir / "work").glob("affine-*/obj/*.o"))
    obj.write_bytes(b"\0" * 64)     # newer than the library: ninja relinks with it
    for entry in entry_dirs(cache_dir):
        shutil.rmtree(entry)
    proc = load_in_fresh_process(src)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("[2.0]")


def test_a_rebuilt_entry_loads_from_a_new_path_in_the_same_process(cache_dir, tmp_path):
    """The dynamic loader keeps a library it opened by its path: a rebuilt entry must not reuse
    the discarded one's file name, or the old code would be loaded again."""
    src = write_op(tmp_path / "src")
    first = load(src)
    (entry,) = entry_dirs(cache_dir)
    old_name = json.loads((entry / "manifest.json").read_text())["artifact"]
    shutil.rmtree(entry)
    second = load(src)
    (entry,) = entry_dirs(cache_dir)
    assert json.loads((entry / "manifest.json").read_text())["artifact"] != old_name
    assert second.affine(np.ones(1, np.float32)).tolist() == [2.0]
    assert first is not second


def test_a_manifest_pointing_outside_its_entry_is_not_followed(cache_dir, tmp_path, capsys):
    from opforge.cli import main

    src = write_op(tmp_path / "src")
    load(src)
    (entry,) = entry_dirs(cache_dir)
    manifest = json.loads((entry / "manifest.json").read_text())
    planted = tmp_path / "planted.so"
    planted.write_bytes((entry / manifest["artifact"]).read_bytes())
    manifest["artifact"] = os.path.relpath(planted, entry)
    (entry / "manifest.json").write_text(json.dumps(manifest))
    assert main(["cache", "doctor"]) == 1
    assert "not a file inside the entry" in capsys.readouterr().out
    proc = load_in_fresh_process(src)
    assert proc.returncode == 0, proc.stderr
    assert "building 'affine'" in proc.stdout


def test_a_cache_subfolder_others_can_write_is_refused_until_doctor_mends_it(cache_dir, tmp_path):
    from opforge.cli import main

    cache_dir.mkdir(mode=0o700)
    (cache_dir / "libs").mkdir()
    (cache_dir / "libs").chmod(0o777)
    with pytest.raises(CacheError, match=r"libs is writable by other users.*opforge cache doctor --fix"):
        load(write_op(tmp_path / "src"))
    assert main(["cache", "doctor"]) == 1
    assert main(["cache", "doctor", "--fix"]) == 0
    assert stat.S_IMODE((cache_dir / "libs").stat().st_mode) == 0o700
    assert load(write_op(tmp_path / "src")).affine(np.ones(1, np.float32)).tolist() == [2.0]


def test_a_folder_where_a_lock_file_belongs_is_cleared(cache_dir, tmp_path):
    src = write_op(tmp_path / "src")
    load(src)
    locks = [p for p in (cache_dir / "locks").iterdir() if p.name.startswith("affine-")]
    assert locks
    for lock in locks:
        lock.unlink()
        lock.mkdir()
    for entry in entry_dirs(cache_dir):
        shutil.rmtree(entry)
    proc = load_in_fresh_process(src)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().endswith("[2.0]")
