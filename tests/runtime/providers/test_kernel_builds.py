"""The kernel and model tests against the built-in kernels compiled for instruction sets below
this machine's, so that CI tests the paths an AVX2-only CPU, and one without AVX at all, runs
whatever CPU it lands on.

The main run tests the library `pip install` built with -march=native. Where -march=haswell
(AVX2 + FMA) would choose other hand-written paths (an AVX-512 machine), the kernel and model
tests run again in a fresh process against a haswell build (OPFORGE_KERNEL_MARCH, built into the
test cache); likewise the conv, pool and gemm tests against an x86-64-v2 build (SSE4.2: the
portable fallbacks) of those families alone, layered over the native library for every other op
(OPFORGE_KERNEL_FAMILIES: a tenth of the compiling). Where a target would choose the same paths as the native build, the native
build is that build: the test says so and skips, and the main run's list of kernel paths shows
what it tested.
"""
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import ROOT
from opforge.runtime.providers.cpu import library as native

# what runs again against a lower build: every kernel test and the whole-model tests (haswell);
# the conv and pool tests (x86-64-v2: the portable fallbacks of the paths AVX2 and AVX-512 have)
SUITES = {
    "haswell": ["tests/runtime/providers/cpu", "tests/runtime/test_models.py",
                "tests/runtime/passes/test_fusions_conv.py", "tests/runtime/passes/test_packed_conv.py",
                "tests/runtime/passes/test_packed_matmul.py", "tests/runtime/test_quantized_models.py",
                "tests/runtime/test_transformers.py"],
    "x86-64-v2": ["tests/runtime/providers/cpu/test_kernels_nn.py", "tests/runtime/passes/test_fusions_conv.py",
                  "tests/runtime/passes/test_packed_conv.py"],
}
# the kernel families compiled for the target (the rest of the ops run on the native library);
# all of them where none are named. The x86-64-v2 suite tests conv, pool and gemm ops alone.
FAMILIES = {"haswell": [], "x86-64-v2": ["common", "conv", "gemm", "pool"]}
# instruction sets a build for the target must not report
ABSENT = {"haswell": ["avx512f"], "x86-64-v2": ["avx512f", "avx2", "fma"]}


def isa_macros_tested() -> set:
    """The predefined instruction-set macros the kernel sources choose paths by (__AVX512F__ ...)."""
    found = set()
    for path in [*native.KERNEL_DIR.glob("*/*.cpp"), *native.KERNEL_DIR.glob("*/*.h")]:
        found.update(re.findall(r"\b(__(?:AVX|FMA|F16C|SSE|ARM_NEON|aarch64)\w*__)", path.read_text()))
    return found


def defined_for(march: str, macros: set) -> set:
    """Those of ``macros`` the compiler predefines for -march=``march``."""
    out = subprocess.run([os.environ.get("CXX", "c++"), f"-march={march}", "-dM", "-E", "-x", "c++", "-"],
                         input="", capture_output=True, text=True, check=True).stdout
    return {m for m in macros if f"#define {m} " in out or out.endswith(f"#define {m}")}


@pytest.mark.slow
@pytest.mark.parametrize("march", list(SUITES))
def test_kernel_and_model_tests_pass_on_a_lower_build(march):
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"-march={march} is an x86 target; this machine is {platform.machine()}")
    macros = isa_macros_tested()
    here, there = defined_for("native", macros), defined_for(march, macros)
    if here == there:
        pytest.skip(f"this machine's native build chooses the paths a -march={march} build does (the "
                    f"kernels test {sorted(macros)}; both define {sorted(here)}): the main run tested them")
    env = dict(os.environ, OPFORGE_KERNEL_MARCH=march, OPFORGE_KERNEL_FAMILIES=",".join(FAMILIES[march]))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SUITES[march]],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    tail = "\n".join(proc.stdout.splitlines()[-60:])
    print(f"\n-march={march} run of {' '.join(SUITES[march])}:\n{tail}")
    assert proc.returncode == 0, f"the -march={march} build fails its tests:\n{tail}\n{proc.stderr[-2000:]}"
    assert f"build -march={march}:" in proc.stdout
    isa = proc.stdout.split(f"-march={march}:")[1].split(")")[0].split()
    assert not set(ABSENT[march]) & set(isa), isa


def test_the_lower_build_is_found_by_the_macros_the_kernels_test():
    """The check above compares the macros the sources test: it must see AVX-512 and AVX2."""
    macros = isa_macros_tested()
    assert {"__AVX512F__", "__AVX2__"} <= macros, sorted(macros)
    if platform.machine() in ("x86_64", "AMD64"):
        assert defined_for("haswell", macros) >= {"__AVX2__", "__FMA__"}
        assert "__AVX512F__" not in defined_for("haswell", macros)
        assert "__AVX512F__" in defined_for("skylake-avx512", macros)
        assert not {"__AVX2__", "__FMA__", "__AVX512F__"} & defined_for("x86-64-v2", macros)


def test_kernel_families_name_their_folders():
    files = native.family_files(["conv", "pool"])
    assert "conv/conv_packed.cpp" in files and "pool/pool_avx2.cpp" in files
    assert all(f.split("/")[0] in ("conv", "pool") for f in files)
    assert {p.name for p in native.kernel_sources(files)} == {f.split("/")[1] for f in files}
    with pytest.raises(ValueError, match=r"convolution.*the kernel families are .*conv"):
        native.family_files(["convolution"])


def test_an_unknown_target_fails_the_build_with_the_compilers_word(monkeypatch, tmp_path):
    monkeypatch.setenv("OPFORGE_KERNEL_MARCH", "no-such-cpu")
    monkeypatch.setenv("OPFORGE_CACHE_DIR", str(tmp_path / "cache"))
    import opforge

    with pytest.raises(opforge.BuildError, match="no-such-cpu"):
        native.cpu_kernels(["elementwise_unary.cpp"])


def test_the_native_library_reports_its_instruction_sets():
    isa = set(native.kernel_isa())
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    if " avx2" in flags:
        assert {"avx2", "fma"} <= isa
    assert ("avx512f" in isa) == (" avx512f" in flags)
