"""Loading a published entry: an op library through the C ABI, or a pybind11 extension module."""
import os

from opforge.cache import Entry
from opforge.cache.entry import file_problem
from opforge.errors import BuildError, CacheError


def _check_owner(entry: Entry) -> None:
    """Checked again right before loading (the lookup checked it too, a moment earlier)."""
    try:
        problem = file_problem(os.lstat(entry.artifact))
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror})"
    if problem:
        raise CacheError(f"refusing to load {entry.artifact}: it {problem}")


def load_entry(entry: Entry, name: str):
    """The loaded library: an OpLibrary, or the extension module for pybind11 sources.

    Raises ImportError (or ValueError for a bad op table) if the binary cannot be loaded.
    """
    _check_owner(entry)
    path = str(entry.artifact)
    if entry.manifest["kind"] == "extension":
        return _load_extension(entry.manifest["module_name"], path)
    from opforge import _core, config
    from opforge.builder.ops import OpLibrary

    _core.set_default_threads(config.num_threads())  # sizes the eager pool once per process
    keep = entry.manifest.get("backend") == "CUDA" or not config.unload_libraries()
    handles = _core.load_library(path, keep)
    if not handles:
        raise BuildError(f"library '{name}' defines no ops: its sources ({', '.join(entry.manifest.get('sources', []))}) "
                         "hold no OPFORGE_OP(name) definition (see opforge/op.h), nor a "
                         "PYBIND11_MODULE(OPFORGE_EXTENSION_NAME, m) for a Python extension")
    return OpLibrary(name, path, handles, watched=_watched_files(entry))


def _watched_files(entry: Entry) -> tuple:
    """The sources and the user's headers a library was compiled from (what a watcher stats)."""
    return tuple(entry.manifest.get("sources", [])) + tuple(entry.manifest.get("headers", []))


def _load_extension(module_name: str, path: str):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
