"""opforge: write an operator in C++, build it in one line, run ONNX models with it."""
from opforge.builder import CustomOpBuilder, load_dir, load_inline
from opforge.errors import BuildError, CacheError, OpError, OpforgeError

__version__ = "0.1.0"

# The runtime imports onnx, which is slow to import: it loads on first use, so building and calling
# ops stays light.
_RUNTIME = {
    "InferenceSession": "opforge.runtime.session",
    "SessionOptions": "opforge.runtime.options",
    "RunOptions": "opforge.runtime.options",
    "GraphOptimizationLevel": "opforge.runtime.options",
    "ExecutionMode": "opforge.runtime.options",
    "custom_op": "opforge.runtime.providers.python_op",
    "PythonOp": "opforge.runtime.providers.python_op",
    "OpMapping": "opforge.runtime.load.mapping",
    "OrtValue": "opforge.runtime.execute.ortvalue",
    "IOBinding": "opforge.runtime.execute.ortvalue",
    "get_available_providers": "opforge.runtime.providers",
    "get_all_providers": "opforge.runtime.providers",
    "get_device": "opforge.runtime.providers",
    "get_version_string": "opforge.runtime.providers",
    "set_default_logger_severity": "opforge.runtime.providers",
    "NodeArg": "opforge.runtime.session",
    "ModelMetadata": "opforge.runtime.session",
}


def __getattr__(name: str):
    import importlib

    if name in _RUNTIME:
        return getattr(importlib.import_module(_RUNTIME[name]), name)
    if name == "testing":   # opforge.testing.check_op(...) after a plain `import opforge`
        return importlib.import_module("opforge.testing")
    raise AttributeError(f"module 'opforge' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_RUNTIME) + ["testing"])


__all__ = ["BuildError", "CacheError", "CustomOpBuilder", "ExecutionMode", "GraphOptimizationLevel",
           "IOBinding", "InferenceSession", "ModelMetadata", "NodeArg", "OpError", "OpMapping",
           "OpforgeError", "OrtValue", "PythonOp", "RunOptions", "SessionOptions", "custom_op",
           "get_all_providers", "get_available_providers", "get_device", "get_version_string", "load_dir",
           "load_inline", "set_default_logger_severity", "__version__"]
