"""Loading a published entry: an op library through the C ABI, or a pybind11 extension module."""
import os
import stat

from opforge.cache import Entry
from opforge.errors import CacheError


def _check_owner(entry: Entry) -> None:
    st = os.stat(entry.artifact)
    foreign = hasattr(os, "getuid") and st.st_uid != os.getuid()
    if foreign or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(f"refusing to load {entry.artifact}: it is not owned by you or others can "
                         "write it; run `opforge cache doctor`")


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
    return OpLibrary(name, path, _core.load_library(path))


def _load_extension(module_name: str, path: str):
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.ExtensionFileLoader(module_name, path)
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
