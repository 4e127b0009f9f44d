"""opforge: write an operator in C++, build it in one line, run ONNX models with it."""
from opforge.builder import CustomOpBuilder, load_dir, load_inline
from opforge.errors import BuildError, CacheError, OpError, OpforgeError

__version__ = "0.1.0"

__all__ = ["BuildError", "CacheError", "CustomOpBuilder", "OpError", "OpforgeError", "load_dir",
           "load_inline", "__version__"]
