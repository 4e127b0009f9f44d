"""Execution providers; importing this package registers their kernels."""
from opforge.runtime.providers import reference  # noqa: F401
from opforge.runtime.providers.registry import CPU, CUDA, REFERENCE


def get_available_providers() -> list:
    """The providers that can run here, in priority order (as onnxruntime's function of that
    name): CUDAExecutionProvider only when cupy imports and a GPU is visible."""
    from opforge.runtime.providers.cuda import available

    return ([CUDA] if available() else []) + [CPU, REFERENCE]


def get_all_providers() -> list:
    """Every provider this build of opforge knows, available here or not (onnxruntime's
    get_all_providers)."""
    return [CUDA, CPU, REFERENCE]


def get_device() -> str:
    """'GPU' when the CUDA provider can run here, else 'CPU' (onnxruntime's get_device names the
    device its build targets; opforge's one build targets both, so it names what is usable)."""
    from opforge.runtime.providers.cuda import available

    return "GPU" if available() else "CPU"


# onnxruntime's severities (0 verbose .. 4 fatal) as Python logging levels.
_SEVERITY_LEVELS = {0: 10, 1: 20, 2: 30, 3: 40, 4: 50}


def set_default_logger_severity(level: int) -> None:
    """Which of opforge's runtime messages are shown, in onnxruntime's scale: 0 verbose, 1 info,
    2 warning (the default), 3 error, 4 fatal. It sets the level of the 'opforge.runtime' logger."""
    import logging

    if isinstance(level, bool) or level not in _SEVERITY_LEVELS:
        raise ValueError(f"logger severity must be 0 (verbose) to 4 (fatal), got {level!r}")
    logging.getLogger("opforge.runtime").setLevel(_SEVERITY_LEVELS[level])


def get_version_string() -> str:
    """opforge's version (onnxruntime's get_version_string)."""
    from opforge import __version__

    return __version__
