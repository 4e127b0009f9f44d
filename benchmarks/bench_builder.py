"""Build speed, side by side in one run: opforge, plain pybind11 + g++, torch.utils.cpp_extension.

    python -m benchmarks.bench_builder [--repeat 3]

Measures, for the same leaky_relu kernel written three ways:
  cold build        a library never built before (opforge: the per-toolchain support object and
                    precompiled header already cached, as after the first op; "first ever" row
                    starts from an empty cache)
  edit + rebuild    change one constant in the op's source, build and load again
  fresh process     a new Python process: import, load from cache, first call on numpy
  new folder        load_dir() of a folder never built before, holding one op (its include path
                    differs from every earlier library's; the support build is shared)
and then builds --folders libraries of one op, each in its own folder, and prints the cache's
size by kind. It prints medians, the ratio of opforge to each anchor and the load average. Every cold sample
builds a source text no earlier sample built (a cache hit is not a cold build). Targets
(DESIGN.md): cold <= 0.25 s, first ever <= 3 s, fresh process <= `import numpy` alone + 15 ms,
measured in the same run; edit-rebuild <= 0.5 s; new folder <= 0.5 s.
"""
import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

OPFORGE_OP = """
#include <opforge/op.h>
static void run(opforge::KernelContext& ctx) {
  const float* x = ctx.input(0).data<float>();
  float* y = ctx.output(0).data<float>();
  const float alpha = ctx.attr<float>("alpha");
  for (int64_t i = 0; i < ctx.input(0).numel(); ++i) y[i] = x[i] > 0 ? x[i] : alpha * x[i] + BIAS;
}
OPFORGE_OP(leaky_relu).input("X", {opforge::f32}).output("Y").attr("alpha", 0.01f)
    .infer(opforge::same_as_input0).compute(run);
"""

PYBIND_OP = """
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
namespace py = pybind11;
static py::array_t<float> leaky_relu(py::array_t<float, py::array::c_style> x, float alpha) {
  py::array_t<float> y(x.request().shape);
  const float* in = x.data(); float* out = y.mutable_data();
  for (py::ssize_t i = 0; i < x.size(); ++i) out[i] = in[i] > 0 ? in[i] : alpha * in[i] + BIAS;
  return y;
}
PYBIND11_MODULE(MODNAME, m) { m.def("leaky_relu", &leaky_relu, py::arg("x"), py::arg("alpha") = 0.01f); }
"""

TORCH_OP = """
#include <torch/extension.h>
torch::Tensor leaky_relu(torch::Tensor x, double alpha) {
  auto y = torch::empty_like(x);
  const float* in = x.data_ptr<float>(); float* out = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > 0 ? in[i] : float(alpha) * in[i] + BIAS;
  return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("leaky_relu", &leaky_relu); }
"""


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fresh_process(code: str, env=None) -> float:
    """Wall time of a new interpreter running `code` (which must succeed)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, **(env or {})},
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


class Opforge:
    name = "opforge"

    def __init__(self, work: Path):
        self.work, self.cache = work, work / "cache"
        os.environ["OPFORGE_CACHE_DIR"] = str(self.cache)
        import opforge

        self.opforge = opforge
        self.src = work / "leaky_relu.cpp"

    def build(self, bias: str):
        self.src.write_text(OPFORGE_OP.replace("BIAS", bias))
        lib = self.opforge.CustomOpBuilder("leaky_relu", [self.src]).load()
        assert lib.leaky_relu is not None

    def first_ever(self) -> float:
        # a constant `measure` never writes (it writes i.0f and i.5f), so no cold sample reuses it
        self.src.write_text(OPFORGE_OP.replace("BIAS", "0.25f"))
        return timed(lambda: self.opforge.CustomOpBuilder("leaky_relu", [self.src]).load())

    def fresh(self) -> float:
        return fresh_process(
            "import numpy as np, opforge\n"
            f"lib = opforge.CustomOpBuilder('leaky_relu', [{str(self.src)!r}]).load()\n"
            "lib.leaky_relu(np.ones(16, np.float32), alpha=0.1)\n",
            {"OPFORGE_CACHE_DIR": str(self.cache)})

    def new_folder(self, index: int) -> float:
        """load_dir() of a new folder holding one op no earlier sample built."""
        folder = self.work / f"ops_{index}"
        folder.mkdir()
        (folder / "op.cpp").write_text(OPFORGE_OP.replace("BIAS", f"{index}.125f"))
        return timed(lambda: self.opforge.load_dir(folder))

    def cache_usage(self) -> dict:
        from opforge.cache import evict

        return evict.usage(self.cache)


class PlainPybind:
    name = "g++ -O2 pybind11"

    def __init__(self, work: Path):
        import pybind11

        self.work = work
        self.flags = ["-O2", "-shared", "-fPIC", "-std=c++17", f"-I{pybind11.get_include()}",
                      f"-I{sysconfig.get_paths()['include']}"]
        self.ext = sysconfig.get_config_var("EXT_SUFFIX")
        self.count = 0

    def build(self, bias: str):
        self.count += 1
        self.mod = f"plain_{self.count}"
        src = self.work / f"{self.mod}.cpp"
        src.write_text(PYBIND_OP.replace("BIAS", bias).replace("MODNAME", self.mod))
        subprocess.run(["g++", *self.flags, str(src), "-o", str(self.work / f"{self.mod}{self.ext}")],
                       check=True)

    def fresh(self) -> float:
        return fresh_process(f"import sys; sys.path.insert(0, {str(self.work)!r})\n"
                             f"import numpy as np, {self.mod}\n"
                             f"{self.mod}.leaky_relu(np.ones(16, np.float32), 0.1)\n")


class TorchExtension:
    name = "torch cpp_extension"

    def __init__(self, work: Path):
        from torch.utils import cpp_extension

        self.cpp_extension, self.work = cpp_extension, work
        self.src = work / "torch_op.cpp"
        self.build_dir = work / "torch_build"
        self.build_dir.mkdir()

    def build(self, bias: str):
        self.src.write_text(TORCH_OP.replace("BIAS", bias))
        self.cpp_extension.load("torch_leaky", [str(self.src)], build_directory=str(self.build_dir),
                                extra_cflags=["-O2"], verbose=False)

    def fresh(self) -> float:
        return fresh_process(
            "import torch\nfrom torch.utils import cpp_extension\n"
            f"m = cpp_extension.load('torch_leaky', [{str(self.src)!r}], "
            f"build_directory={str(self.build_dir)!r}, extra_cflags=['-O2'])\n"
            "m.leaky_relu(torch.ones(16), 0.1)\n")


def measure(tool, repeat: int) -> dict:
    cold, edit, fresh = [], [], []
    for i in range(repeat):
        cold.append(timed(lambda: tool.build(f"{i}.0f")))          # new source text
        edit.append(timed(lambda: tool.build(f"{i}.5f")))          # one constant edited
        fresh.append(tool.fresh())
    return {"cold build": statistics.median(cold), "edit + rebuild": statistics.median(edit),
            "fresh process": statistics.median(fresh)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true", help="skip torch's cpp_extension (slow)")
    parser.add_argument("--folders", type=int, default=13, help="one-op libraries built in folders of their own")
    args = parser.parse_args()
    numpy_alone = statistics.median(fresh_process("import numpy") for _ in range(max(args.repeat, 3)))
    targets = {"cold build": 0.25, "edit + rebuild": 0.5, "fresh process": numpy_alone + 0.015}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tools = {}
        for cls in (Opforge, PlainPybind) + (() if args.no_torch else (TorchExtension,)):
            work = tmp / cls.__name__
            work.mkdir()
            try:
                tools[cls.name] = cls(work)
            except ImportError:
                print(f"({cls.name}: not installed, skipped)")
        first = tools["opforge"].first_ever()
        results = {name: measure(tool, args.repeat) for name, tool in tools.items()}
        folders = [tools["opforge"].new_folder(i) for i in range(args.folders)]
        usage = tools["opforge"].cache_usage()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nbuild benchmark, median of {args.repeat}, seconds ({os.cpu_count()} cores, load average {load})")
    if os.getloadavg()[0] >= 0.5:
        print("warning: the machine is busy (load >= 0.5); ratios measured now are not quiet-machine figures")
    print(f"fresh `python -c 'import numpy'`: {numpy_alone:.3f} s\n")
    anchors = [n for n in results if n != "opforge"]
    head = f"{'':<16}{'opforge':>10}" + "".join(f"{n:>22}" for n in anchors)
    head += "".join(f"{'vs ' + n.split()[0]:>14}" for n in anchors) + f"{'target':>9}"
    print(head)
    for metric, target in targets.items():
        ours = results["opforge"][metric]
        row = f"{metric:<16}{ours:>10.3f}" + "".join(f"{results[n][metric]:>22.3f}" for n in anchors)
        row += "".join(f"{ours / results[n][metric]:>13.2f}x" for n in anchors)
        row += f"{'<= ' + format(target, '.3g'):>9}" + ("  ok" if ours <= target else "  MISSED")
        print(row)
    print(f"{'first ever':<16}{first:>10.3f}   (empty cache: support object + precompiled header too; "
          f"target <= 3){'  ok' if first <= 3 else '  MISSED'}")
    new_folder = statistics.median(folders) if folders else float("nan")
    print(f"{'new folder':<16}{new_folder:>10.3f}   (load_dir of a one-op folder, median of {len(folders)}; "
          f"target <= 0.5){'  ok' if new_folder <= 0.5 else '  MISSED'}")
    libraries = 1 + 2 * args.repeat + len(folders)
    print(f"\ncache after {libraries} one-op libraries ({len(folders)} in folders of their own): "
          f"{sum(usage.values()) / 2**20:.1f} MiB; by kind: "
          + ", ".join(f"{kind} {n / 2**20:.1f} MiB" for kind, n in usage.items() if n))
    print("\nratio < 1 means opforge is faster than the anchor.")


if __name__ == "__main__":
    main()
