"""opforge's ONNX runtime: model -> graph -> shapes -> passes -> kernels -> execute."""
from opforge.runtime.errors import (FeedError, GraphError, KernelError, KernelNotFoundError,
                                    ModelLoadError, RunCancelledError)
from opforge.runtime.options import (ExecutionMode, GraphOptimizationLevel, RunOptions,
                                     SessionOptions)
from opforge.runtime.providers.registry import KernelRegistry, default_registry, kernel
from opforge.runtime.session import InferenceSession, ModelMetadata, NodeArg

__all__ = ["ExecutionMode", "FeedError", "GraphError", "GraphOptimizationLevel", "InferenceSession",
           "KernelError", "KernelNotFoundError", "KernelRegistry", "ModelLoadError",
           "ModelMetadata", "NodeArg", "RunCancelledError", "RunOptions", "SessionOptions",
           "default_registry", "kernel"]
