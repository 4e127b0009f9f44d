"""Built-in Python kernels, one op family per file; importing this package registers them."""
from opforge.runtime.ops import optional, sequence, strings  # noqa: F401
