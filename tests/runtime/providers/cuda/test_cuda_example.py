"""examples/cuda: a CUDA op with a CPU twin, and a model using it that runs with or without a GPU."""
import importlib.util

import opforge
from tests.support.cuda_support import requires_nvcc
from tests.support.helpers import EXAMPLES

FOLDER = EXAMPLES / "cuda"


def load_example():
    spec = importlib.util.spec_from_file_location("swish_model", FOLDER / "swish_model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_swish_model_runs_here(capsys):
    load_example().main()   # on the GPU with swish.cu where there is one, else with the CPU twin
    out = capsys.readouterr().out
    assert "Swish" in out and "max |GPU or CPU run - CPU run|" in out


@requires_nvcc
def test_cuda_op_and_its_cpu_twin_declare_the_same_schema(monkeypatch):
    monkeypatch.setenv("OPFORGE_CUDA_ARCH", "80")
    gpu = opforge.CustomOpBuilder("swish_cuda", [FOLDER / "swish.cu"]).load().Swish.schema
    cpu = opforge.CustomOpBuilder("swish_cpu", [FOLDER / "swish_cpu.cpp"]).load().Swish.schema
    assert (gpu["backend"], cpu["backend"]) == ("CUDA", "CPU")
    for key in ("name", "domain", "since_version", "inputs", "outputs", "attributes"):
        assert gpu[key] == cpu[key]
