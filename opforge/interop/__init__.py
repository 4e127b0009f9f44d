"""onnxruntime both ways: opforge libraries as onnxruntime custom-op libraries (the adapter), and
onnxruntime custom-op libraries in opforge sessions (the host)."""
from opforge.interop.ort_build import onnxruntime_library

__all__ = ["onnxruntime_library"]
