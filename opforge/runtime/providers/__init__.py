"""Execution providers; importing this package registers their kernels."""
from opforge.runtime.providers import reference  # noqa: F401
