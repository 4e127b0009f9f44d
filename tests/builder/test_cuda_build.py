"""CUDA builds on any machine with nvcc (no GPU needed): compile, link, load, read the op table,
header edits, compile errors, architectures and cache keys, and a missing toolchain."""
import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import opforge
from tests.support.cuda_support import CUDA_OPS, build_test_library, gpu_unavailable, requires_nvcc
from opforge.builder import cuda_arch, cuda_driver
from opforge.builder.build import config_key
from opforge.builder.cuda_toolchain import CudaToolchain
from opforge.builder.diagnostics import build_error
from opforge.builder.ninja_file import NinjaPlan, ninja_text
from opforge.builder.spec import make_spec
from opforge.builder.toolchain import Toolchain

def copy_ops(folder: Path) -> Path:
    shutil.copytree(CUDA_OPS, folder)
    return folder


def build(folder: Path, **kwargs):
    return build_test_library(folder, **kwargs)


@pytest.fixture
def one_arch(monkeypatch):
    """Builds for one architecture only: the tests check the build, not every GPU."""
    monkeypatch.setenv("OPFORGE_CUDA_ARCH", "80")


@requires_nvcc
def test_cuda_library_builds_loads_and_lists_its_ops(cache_dir, tmp_path, one_arch):
    lib = build(copy_ops(tmp_path / "ops"))
    backends = {h.name: h.schema()["backend"] for h in lib.op_table}
    assert backends == {"scale": "CUDA", "add_via_workspace": "CUDA", "bad_launch": "CUDA",
                        "bad_call": "CUDA", "tiled": "CUDA", "negate": "CUDA", "numel": "CPU"}
    assert lib.scale.schema["domain"] == "com.example"
    assert [a["name"] for a in lib.scale.schema["attributes"]] == ["alpha"]
    assert lib.add_via_workspace.schema["has_workspace"]
    assert lib.numel(np.ones((2, 3), np.float32)).tolist() == [6]  # a CPU op of a CUDA library


@requires_nvcc
def test_cuda_runtime_is_linked_statically(cache_dir, tmp_path, one_arch):
    lib = build(copy_ops(tmp_path / "ops"))
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("needs readelf")
    dynamic = subprocess.run([readelf, "-d", lib.__file__], capture_output=True, text=True).stdout
    assert "NEEDED" in dynamic and "libcudart" not in dynamic and "libcuda." not in dynamic


@requires_nvcc
@pytest.mark.skipif(not gpu_unavailable(), reason="this machine has a GPU")
def test_calling_a_cuda_op_without_a_device_says_so(cache_dir, tmp_path, one_arch):
    lib = build(copy_ops(tmp_path / "ops"))
    handle = lib.scale.handle
    x = np.ones(4, np.float32)
    with pytest.raises(opforge.OpError, match="^scale: no CUDA device is available"):
        handle.run([x], [np.empty_like(x)], handle.attrs({}))


# Records every attempt to import cupy (whether or not it is installed), then runs `code`.
NO_CUPY_PROBE = """
import sys
attempts = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("cupy", "cupyx"):
            attempts.append(name)
        return None
sys.meta_path.insert(0, Watch())
"""


@requires_nvcc
def test_cupy_is_imported_only_by_a_cuda_call(cache_dir, tmp_path, one_arch):
    """import opforge, loading a CUDA library, reading its op table, calling its CPU op and a
    CPU session with it import no cupy; calling a CUDA op does (or says why it cannot)."""
    lib = build(copy_ops(tmp_path / "ops"))   # built here; the child loads it from the cache
    code = NO_CUPY_PROBE + f"""
import numpy as np, opforge
sys.path.insert(0, {str(Path(__file__).parents[2])!r})
from tests.support.cuda_support import build_test_library
from pathlib import Path
lib = build_test_library(Path({str(tmp_path / "ops")!r}))
assert lib.__file__ == {lib.__file__!r}
names = [h.name for h in lib.op_table]
lib.numel(np.ones(3, np.float32))
from onnx import helper, TensorProto
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
sess = opforge.InferenceSession(helper.make_model(graph).SerializeToString(), custom_ops=[lib])
sess.run(None, {{"x": np.ones(2, np.float32)}})
opforge.get_available_providers()
print("before", attempts)
try:
    lib.scale(np.ones(3, np.float32))
except Exception as exc:
    print(type(exc).__name__, exc)
"""
    env = {**os.environ, "OPFORGE_CACHE_DIR": str(cache_dir), "OPFORGE_CUDA_ARCH": "80",
           "PYTHONPATH": os.pathsep.join([str(Path(opforge.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "before []" in out.stdout, out.stdout
    assert "CUDA" in out.stdout.splitlines()[-1]   # the call refuses, naming CUDA


# A libcuda.so.1 of a driver that supports CUDA 12.4 and sees one sm_80 GPU: what the static
# CUDA runtime asks of it (cuGetProcAddress_v2) and what opforge's driver probe calls directly.
OLD_DRIVER = r"""
#include <string.h>
static int driver_get_version(int* v) { *v = 12040; return 0; }
int cuInit(unsigned flags) { return 0; }
int cuDriverGetVersion(int* v) { return driver_get_version(v); }
int cuDeviceGetCount(int* n) { *n = 1; return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDeviceGetAttribute(int* v, int attr, int d) { *v = attr == 75 ? 8 : 0; return 0; }
int cuGetErrorName(int e, const char** s) { *s = "CUDA_ERROR"; return 0; }
int cuGetProcAddress_v2(const char* s, void** p, int v, unsigned long long f, int* found) {
  void* fn = 0;
  if (!strcmp(s, "cuDriverGetVersion")) fn = (void*)driver_get_version;
  if (!strcmp(s, "cuInit")) fn = (void*)cuInit;
  if (!strcmp(s, "cuGetProcAddress")) fn = (void*)cuGetProcAddress_v2;
  *p = fn;
  if (found) *found = fn ? 0 : 1;
  return fn ? 0 : 500;
}
"""


@requires_nvcc
def test_too_old_driver_is_named_with_both_versions(cache_dir, tmp_path, one_arch):
    """A driver older than the library's CUDA runtime: the call says so with both versions."""
    lib = build(copy_ops(tmp_path / "ops"))
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.c").write_text(OLD_DRIVER)
    subprocess.run([shutil.which("cc") or "gcc", "-shared", "-fPIC", "-o", str(driver / "libcuda.so.1"),
                    str(driver / "libcuda.c")], check=True)
    code = f"""
import numpy as np, opforge
from opforge.builder.cuda_driver import driver_info
print("driver sees", driver_info().capabilities)
lib = opforge.CustomOpBuilder("cuda_test_ops", {[str(tmp_path / "ops" / s) for s in ("elementwise.cu", "launch.cu", "host_ops.cpp")]!r},
                              extra_include_paths=[{str(tmp_path / "ops")!r}]).load()
assert lib.__file__ == {lib.__file__!r}
handle = lib.scale.handle
x = np.ones(4, np.float32)
try:
    handle.run([x], [np.empty_like(x)], handle.attrs({{}}))
except opforge.OpError as exc:
    print(exc)
"""
    env = {**os.environ, "OPFORGE_CACHE_DIR": str(cache_dir), "OPFORGE_CUDA_ARCH": "80",
           "LD_LIBRARY_PATH": str(driver),
           "PYTHONPATH": os.pathsep.join([str(Path(opforge.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    seen, message = out.stdout.strip().splitlines()[-2:]
    assert seen == "driver sees ('80',)"   # the driver itself answers: only the runtime finds it too old
    release = ".".join(build_nvcc_release().split(".")[:2])
    assert message == (f"scale: the NVIDIA driver is too old: it supports CUDA 12.4, but this library was "
                       f"built with the CUDA {release} runtime; update the driver, or build with an nvcc of "
                       f"CUDA 12.4 or older (set NVCC)")


def build_nvcc_release() -> str:
    from opforge.builder.cuda_toolchain import probe
    from tests.support.cuda_support import nvcc_path

    return probe(nvcc_path())["release"]


@requires_nvcc
def test_edited_cuh_rebuilds_in_the_same_process(cache_dir, tmp_path, one_arch, capsys):
    folder = copy_ops(tmp_path / "ops")
    first = build(folder)
    assert build(folder).__file__ == first.__file__
    capsys.readouterr()
    header = folder / "factor.cuh"
    header.write_text(header.read_text().replace("1.0f", "3.0f"))
    second = build(folder)
    assert second.__file__ != first.__file__
    assert "building 'cuda_test_ops'" in capsys.readouterr().out


@requires_nvcc
def test_cuda_compile_error_starts_with_the_users_cu_line(cache_dir, tmp_path, one_arch):
    src = tmp_path / "broken.cu"
    src.write_text("#include <opforge/cuda.h>\n\n__global__ void k(float* y) {\n  y[0] = undefined_name;\n}\n")
    with pytest.raises(opforge.BuildError) as info:
        opforge.CustomOpBuilder("broken", [src]).load()
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"{src}:4: error:") and "undefined_name" in first
    assert "nvcc" in info.value.command and str(src) in info.value.command


RDC_OP = """#include <opforge/cuda.h>

__device__ float twice(float x);  // defined in twice.cu: a call across files needs -rdc=true

__global__ void double_kernel(float* y, const float* x, int64_t n) {
  int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) y[i] = twice(x[i]);
}

static void doubled(opforge::KernelContext& ctx) {
  int64_t n = ctx.input(0).numel();
  double_kernel<<<unsigned((n + 255) / 256 + 1), 256, 0, ctx.stream()>>>(
      ctx.output(0).data<float>(), ctx.input(0).data<float>(), n);
}

OPFORGE_OP(doubled).input("X", {opforge::f32}).output("Y").infer(opforge::same_as_input0).compute(doubled);
"""


@requires_nvcc
@pytest.mark.parametrize("flag", [["-rdc=true"], ["--relocatable-device-code", "true"]])
def test_relocatable_device_code_is_device_linked(cache_dir, tmp_path, one_arch, flag):
    """A device function called from another .cu file (-rdc=true) links: nvcc -dlink runs before
    the host linker, which otherwise finds the device code's registration unresolved."""
    (tmp_path / "op.cu").write_text(RDC_OP)
    (tmp_path / "twice.cu").write_text("__device__ float twice(float x) { return 2.0f * x; }\n")
    lib = opforge.CustomOpBuilder("rdc_ops", [tmp_path / "op.cu", tmp_path / "twice.cu"],
                                  extra_cuda_cflags=flag).load()
    assert lib.doubled.schema["backend"] == "CUDA"
    if not gpu_unavailable():
        import cupy as cp

        np.testing.assert_array_equal(cp.asnumpy(lib.doubled(cp.arange(5, dtype=cp.float32))),
                                      2 * np.arange(5))


@requires_nvcc
def test_gpu_newer_than_nvcc_gets_ptx_of_the_newest_it_knows(cache_dir, tmp_path, monkeypatch, capsys):
    """A GPU whose architecture the installed nvcc does not know (here a made-up sm_999) is built
    for as PTX of nvcc's newest architecture, and the build says so."""
    from opforge.builder.cuda_toolchain import detect_cuda

    monkeypatch.delenv("OPFORGE_CUDA_ARCH", raising=False)
    monkeypatch.setattr(cuda_driver, "_found", cuda_driver.DriverInfo(("999",), ""))
    (tmp_path / "probe" / "toolchains").mkdir(parents=True)
    codes = detect_cuda(tmp_path / "probe").gpu_codes
    newest = max((code for code in codes if code.isdigit()), key=int)
    src = tmp_path / "one.cu"
    src.write_text((CUDA_OPS / "elementwise.cu").read_text().replace('#include "factor.cuh"',
                                                                    "#define OPF_TEST_FACTOR 1.0f"))
    lib = opforge.CustomOpBuilder("newer_gpu", [src]).load()
    assert "scale" in lib.op_names
    out = capsys.readouterr().out
    assert f"this nvcc does not know sm_999 (a GPU here): building PTX for compute_{newest}" in out


@requires_nvcc
def test_load_inline_builds_cuda_source(cache_dir, one_arch):
    source = (CUDA_OPS / "elementwise.cu").read_text().replace('#include "factor.cuh"',
                                                               "#define OPF_TEST_FACTOR 1.0f")
    lib = opforge.load_inline("inline_cuda", cuda_source=source)
    assert "scale" in lib.op_names and lib.scale.schema["backend"] == "CUDA"


@requires_nvcc
def test_nvcc_environment_variable_is_honored(cache_dir, tmp_path, one_arch, monkeypatch):
    from tests.support.cuda_support import nvcc_path

    log = tmp_path / "calls.txt"
    wrapper = tmp_path / "my-nvcc"
    wrapper.write_text(f"#!/bin/sh\necho called >> {log}\nexec {nvcc_path()} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("NVCC", str(wrapper))
    src = tmp_path / "one.cu"
    src.write_text((CUDA_OPS / "elementwise.cu").read_text().replace('#include "factor.cuh"',
                                                                    "#define OPF_TEST_FACTOR 1.0f"))
    opforge.CustomOpBuilder("one", [src]).load()
    assert log.read_text().count("called") >= 3  # version, dry run, compile


def test_missing_nvcc_says_what_to_install(cache_dir, tmp_path, monkeypatch):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() {}\n")
    monkeypatch.delenv("NVCC", raising=False)
    monkeypatch.setenv("CXX", shutil.which("c++") or "c++")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p or ".") / "nvidia").is_dir()])
    with pytest.raises(opforge.BuildError) as info:
        opforge.CustomOpBuilder("k", [src]).load()
    message = str(info.value)
    assert "no CUDA compiler (nvcc) found" in message
    assert 'pip install "opforge[cuda]"' in message and "nvidia-cuda-nvcc" in message
    assert "set NVCC" in message


def test_nvcc_variable_naming_nothing_is_reported(cache_dir, tmp_path, monkeypatch):
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k() {}\n")
    monkeypatch.setenv("NVCC", str(tmp_path / "no-such-nvcc"))
    with pytest.raises(opforge.BuildError, match="NVCC=.*no-such-nvcc.* is not an executable"):
        opforge.CustomOpBuilder("k", [src]).load()


def test_wheel_nvcc_is_found_in_site_packages(tmp_path, monkeypatch):
    from opforge.builder.cuda_toolchain import wheel_nvcc

    nvcc = tmp_path / "site" / "nvidia" / "cu13" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    assert wheel_nvcc() == str(nvcc)


@pytest.mark.parametrize("kwargs, message", [
    (dict(sources=["x.cu"], backend="CPU"), "x.cu need nvcc; pass backend='CUDA'"),
    (dict(sources=["x.cpp"], extra_cuda_cflags=["-lineinfo"]), "extra_cuda_cflags given to a CPU library"),
])
def test_bad_cuda_builder_arguments(tmp_path, kwargs, message):
    for name in kwargs["sources"]:
        (tmp_path / name).write_text("")
    kwargs["sources"] = [tmp_path / s for s in kwargs["sources"]]
    with pytest.raises(ValueError, match=message):
        opforge.CustomOpBuilder("ok", **kwargs)


def test_cu_sources_make_a_cuda_library(tmp_path):
    (tmp_path / "a.cu").write_text("")
    (tmp_path / "b.cpp").write_text("")
    assert make_spec("lib", [tmp_path / "a.cu", tmp_path / "b.cpp"]).backend == "CUDA"
    assert make_spec("lib", [tmp_path / "b.cpp"]).backend == "CPU"
    assert make_spec("lib", [tmp_path / "b.cpp"], backend="cuda").backend == "CUDA"


@pytest.mark.parametrize("text, expected", [
    ("80;90", [("80", False), ("90", False)]),
    ("8.6 9.0+PTX", [("86", False), ("90", True)]),
    ("sm_90a,compute_100", [("90a", False), ("100", False)]),
])
def test_arch_lists_are_parsed(text, expected):
    assert cuda_arch.parse_archs(text) == expected


@pytest.mark.parametrize("text", ["ampere", "8", "90;x"])
def test_bad_arch_list_is_refused(text):
    with pytest.raises(ValueError, match="OPFORGE_CUDA_ARCH"):
        cuda_arch.parse_archs(text)


def test_gencode_flags_give_sass_and_ptx():
    flags = cuda_arch.gencode_flags(cuda_arch.parse_archs("80;90+PTX"))
    assert flags == ("-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90",
                     "-gencode=arch=compute_90,code=compute_90")


def test_target_archs_env_then_gpu_then_default(monkeypatch):
    monkeypatch.setattr(cuda_driver, "_found", cuda_driver.DriverInfo(("89",), ""))
    assert cuda_arch.target_archs("80") == [("80", False)]
    assert cuda_arch.target_archs(None) == [("89", False)]
    monkeypatch.setattr(cuda_driver, "_found", cuda_driver.DriverInfo((), "no driver"))
    default = cuda_arch.target_archs(None)
    assert default == cuda_arch.parse_archs(cuda_arch.DEFAULT_ARCHS) and default[-1].ptx


def test_archs_nvcc_does_not_know_become_ptx_of_the_newest_below():
    known = ("75", "80", "86", "90", "100")
    archs, notes = cuda_arch.fit_to_nvcc(cuda_arch.parse_archs("80;90;120;121"), known)
    assert archs == [("80", False), ("90", False), ("100", True)]
    assert len(notes) == 2 and "sm_120" in notes[0] and "PTX for compute_100" in notes[0]
    assert cuda_arch.fit_to_nvcc(cuda_arch.parse_archs("120"), ())[0] == [("120", False)]  # not known
    assert cuda_arch.fit_to_nvcc(cuda_arch.parse_archs("70"), known)[0] == [("70", False)]  # none below


def test_target_archs_fit_the_visible_gpu_not_an_explicit_list(monkeypatch):
    monkeypatch.setattr(cuda_driver, "_found", cuda_driver.DriverInfo(("120",), ""))
    assert cuda_arch.target_archs(None, ("80", "90")) == [("90", True)]
    assert cuda_arch.target_archs("120", ("80", "90")) == [("120", False)]


@pytest.mark.parametrize("flags, relocatable", [
    (["-O2"], False), (["-rdc=true"], True), (["-rdc=false"], False), (["-rdc", "true"], True),
    (["--relocatable-device-code=true"], True), (["-dc"], True), (["-rdc=true", "-rdc=false"], False)])
def test_relocatable_device_code_flags_are_recognised(flags, relocatable):
    from opforge.builder.build import relocatable_device_code

    assert relocatable_device_code(flags) is relocatable


FAKE_CXX = Toolchain(("/usr/bin/g++",), "/usr/bin/g++", "g++ 12", "gcc")


def fake_nvcc(version="release 13.0, V13.0.88") -> CudaToolchain:
    return CudaToolchain(("/opt/cuda/bin/nvcc",), "/opt/cuda/bin/nvcc", "13.0", version,
                         ("/opt/cuda/include",), ("/opt/cuda/lib64",), "/opt/cuda")


def test_cache_key_covers_nvcc_archs_and_cuda_flags(tmp_path):
    (tmp_path / "k.cu").write_text("")
    spec = make_spec("k", [tmp_path / "k.cu"])
    a80, a90 = cuda_arch.parse_archs("80"), cuda_arch.parse_archs("90")
    base = config_key(spec, FAKE_CXX, fake_nvcc(), a80)
    assert config_key(spec, FAKE_CXX, fake_nvcc(), a80) == base
    assert config_key(spec, FAKE_CXX, fake_nvcc(), a90) != base
    assert config_key(spec, FAKE_CXX, fake_nvcc("release 13.1, V13.1.0"), a80) != base
    flagged = make_spec("k", [tmp_path / "k.cu"], extra_cuda_cflags=["-lineinfo"])
    assert config_key(flagged, FAKE_CXX, fake_nvcc(), a80) != base


def test_ninja_file_compiles_cu_with_nvcc_depfiles():
    plan = NinjaPlan(("g++",), ("-O2",), ("-shared", "-lcudart_static"), (("/w/h.o", "/s/h.cpp"),),
                     ("/sup/opforge_support.o",), "/w/libk.so", ("/opt/cuda/bin/nvcc",),
                     ("-gencode=arch=compute_80,code=sm_80",), (("/w/k.o", "/s/k.cu"),))
    text = ninja_text(plan)
    assert "rule nvcc\n  command = $nvcc -MMD -MT $out -MF $out.d $cuda_cflags -c $in" in text
    assert "build /w/k.o: nvcc /s/k.cu" in text and "build /w/h.o: cxx /s/h.cpp" in text
    assert "build /w/libk.so: link /w/h.o /w/k.o /sup/opforge_support.o" in text
    nvcc_rule = text[text.index("rule nvcc"):]
    assert nvcc_rule.splitlines()[2] == "  depfile = $out.d"


def test_ninja_file_device_links_relocatable_device_code():
    plan = NinjaPlan(("g++",), ("-O2",), ("-shared",), (), ("/sup/opforge_support.o",), "/w/libk.so",
                     ("nvcc",), ("-rdc=true",), (("/w/a.o", "/s/a.cu"), ("/w/b.o", "/s/b.cu")), "/w/dlink.o")
    text = ninja_text(plan)
    assert "rule dlink\n  command = $nvcc -dlink $cuda_cflags $in -o $out.tmp" in text
    assert "build /w/dlink.o: dlink /w/a.o /w/b.o" in text
    assert "build /w/libk.so: link /w/a.o /w/b.o /w/dlink.o /sup/opforge_support.o" in text
    assert "dlink" not in ninja_text(dataclasses.replace(plan, device_link=""))


def test_nvcc_front_end_errors_are_reported_as_file_and_line():
    log = ("FAILED: /w/k.o\nnvcc -c /src/k.cu -o /w/k.o\n"
           '/src/k.cu(12): error: identifier "nope" is undefined\n      y[0] = nope;\n             ^\n\n'
           '1 error detected in the compilation of "/src/k.cu".\n')
    err = build_error("k", log, "")
    assert str(err).splitlines()[:2] == ['/src/k.cu:12: error: identifier "nope" is undefined',
                                         "      y[0] = nope;"]
    assert err.command == "nvcc -c /src/k.cu -o /w/k.o"


def test_unsupported_host_compiler_names_the_fix():
    log = ("/opt/cuda/include/crt/host_config.h:137:2: error: #error -- unsupported GNU version! "
           "gcc versions later than 15 are not supported!\n")
    message = str(build_error("k", log, ""))
    assert message.startswith("nvcc does not accept this host compiler version")
    assert "set CXX" in message and "-allow-unsupported-compiler" in message
