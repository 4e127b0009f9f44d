"""A second `pip install` keeps the compiled kernels only when they were built from the same inputs."""
import json
import re
from pathlib import Path

from opforge.builder.toolchain import cpu_identity
from opforge.runtime.providers.cpu import library as native


def test_prebuilt_kernels_are_kept_only_for_the_same_sources_cpu_and_compiler(tmp_path, monkeypatch):
    library, stamp = tmp_path / "libopforge_cpu_kernels.so", tmp_path / "libopforge_cpu_kernels.json"
    monkeypatch.setattr(native, "PREBUILT", library)
    monkeypatch.setattr(native, "STAMP", stamp)
    current = {"inputs": native.inputs_digest(), "cpu": cpu_identity(), "compiler": native._compiler_version()}
    assert current["compiler"], "the compiler's --version banner could not be read"
    stamp.write_text(json.dumps(current))
    assert not native.prebuilt_matches_sources()          # no library yet
    library.write_bytes(b"\x7fELF")
    assert native.prebuilt_matches_sources()
    for key, other in [("inputs", "0" * 64), ("cpu", "another cpu"), ("compiler", "g++ (GCC) 1.0")]:
        stamp.write_text(json.dumps({**current, key: other}))
        assert not native.prebuilt_matches_sources(), key
    stamp.write_text("{not json")
    assert not native.prebuilt_matches_sources()
    monkeypatch.setenv("CXX", "clang++-none-such")
    stamp.write_text(json.dumps(current))
    assert not native.prebuilt_matches_sources()          # $CXX now names another compiler


def test_the_stamp_digests_the_sources_as_the_build_found_them(tmp_path, monkeypatch):
    """A source edited while the kernels compile leaves the library stale: the stamp records the
    sources as they were when compiling began, not when it ended."""
    from opforge.builder import runner

    monkeypatch.setattr(native, "PREBUILT", tmp_path / "libopforge_cpu_kernels.so")
    monkeypatch.setattr(native, "STAMP", tmp_path / "libopforge_cpu_kernels.json")
    sources = {"digest": "sources when compiling began"}
    monkeypatch.setattr(native, "inputs_digest", lambda: sources["digest"])

    real = runner.run_ninja

    def fake_ninja(work, verbose, echo=False, progress=None):
        if "support" in Path(work).name:   # opforge's support object: built for real
            return real(work, verbose, echo, progress)
        sources["digest"] = "sources edited during the build"
        text = (work / "build.ninja").read_text()
        for obj in re.findall(r"^build (\S+\.o): ", text, re.M):   # what the compiler would leave
            Path(obj.replace("$:", ":") + ".d").parent.mkdir(parents=True, exist_ok=True)
            Path(obj.replace("$:", ":") + ".d").write_text("")
        (work / native.PREBUILT.name).write_bytes(b"\x7fELF")
        return True, ""

    monkeypatch.setattr(runner, "run_ninja", fake_ninja)
    native.build_prebuilt(tmp_path / "work")
    assert json.loads(native.STAMP.read_text())["inputs"] == "sources when compiling began"
