"""The errors the runtime raises: loading, graph structure, kernels, feeds and cancelled runs."""
from opforge.errors import OpError, OpforgeError


def node_label(name: str, op_type: str, domain: str, outputs=()) -> str:
    """How errors name a node: ``node 'conv1' (Conv, domain 'ai.onnx')``.

    An unnamed node is named by what it produces: ``node producing 'y' (Relu, ...)``.
    """
    kind = f"({op_type}, domain {domain or 'ai.onnx'!r})"
    if not name and any(outputs):
        return f"node producing {next(o for o in outputs if o)!r} {kind}"
    return f"node {name!r} {kind}"


class ModelLoadError(OpforgeError, ValueError):
    """A model file, its bytes or its external data cannot be read as a valid ONNX model."""


class GraphError(OpforgeError, ValueError):
    """The graph is malformed: a cycle, a value nobody produces, a value produced twice."""


class KernelNotFoundError(OpforgeError, NotImplementedError):
    """No provider has a kernel for a node's (domain, op type, opset version)."""


class KernelError(OpError):
    """A kernel failed while running a node; the message names the node, the cause is chained."""


class FeedError(OpforgeError, ValueError):
    """An input given to ``run`` is unknown, missing, or of the wrong type or shape."""


class RunCancelledError(OpforgeError, RuntimeError):
    """A run stopped because its ``RunOptions.terminate`` was set."""


class ConfigEntryError(OpforgeError, RuntimeError):
    """A session or run configuration entry was asked for but never set."""
