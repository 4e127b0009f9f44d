"""Cache entries: a folder per key holding an artifact and its manifest, published atomically."""
import json
import os
import stat
from pathlib import Path
from typing import NamedTuple

from opforge.cache.keys import file_digest

MANIFEST = "manifest.json"
FORMAT = 1


class Entry(NamedTuple):
    """A published, verified cache entry."""

    path: Path
    manifest: dict

    @property
    def artifact(self) -> Path:
        return self.path / self.manifest["artifact"]


def write_atomic(path: Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file and one rename."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def find_entry(path: Path, verify: bool = True) -> "Entry | None":
    """The entry at `path` if it is complete, safe to load and its artifact matches the recorded
    digest. A missing, half-written, corrupted or unsafe entry gives None, so the caller
    rebuilds it (see `entry_problem` for why)."""
    try:
        manifest = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return None if entry_problem(path, manifest, verify) else Entry(path, manifest)


def entry_problem(path: Path, manifest: "dict | None" = None, verify: bool = True) -> "str | None":
    """Why the entry at `path` cannot be loaded, or None when it can. The loader, the lookup and
    `opforge cache doctor` all judge entries by this one function."""
    try:
        manifest = manifest if manifest is not None else json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return "its manifest is missing or unreadable (an interrupted build?)"
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        return "its manifest is of an unknown format"
    name = manifest.get("artifact")
    if not isinstance(name, str) or name in ("", ".", "..") or "/" in name or "\\" in name:
        return f"its manifest names the artifact {name!r}, which is not a file inside the entry"
    try:
        st = (path / name).lstat()
    except OSError:
        return f"its artifact {name} is missing"
    unsafe = file_problem(st)
    if unsafe:
        return f"its artifact {name} {unsafe}"
    if st.st_size != manifest.get("size"):
        return f"its artifact {name} is {st.st_size} bytes, the manifest says {manifest.get('size')}"
    if verify and file_digest(path / name) != manifest.get("sha256"):
        return f"its artifact {name} does not match the recorded sha256 (corrupted)"
    return None


def file_problem(st: os.stat_result) -> "str | None":
    """Why a file with this lstat may not be loaded: not a regular file, someone else's, or
    writable by others (a library anyone could replace runs their code). None when it is fine."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a link or a folder)"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to you"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def publish(staging: Path, final: Path) -> Path:
    """Moves a fully written staging folder to `final` with one rename.

    A valid entry already at `final` wins and the staging folder is discarded; an invalid one
    is moved aside first. Call with the entry's key lock held.
    """
    try:
        os.rename(staging, final)
        return final
    except OSError:
        if find_entry(final) is not None:
            discard(staging)
            return final
    discard(final)
    os.rename(staging, final)
    return final


def discard(path: Path) -> None:
    """Removes a folder: renamed aside first, so no reader sees it half deleted."""
    if not path.exists():
        return
    aside = path.parent / f".trash-{path.name}-{os.getpid()}"
    try:
        os.rename(path, aside)
    except OSError:
        aside = path
    import shutil

    shutil.rmtree(aside, ignore_errors=True)


def key_lock(lock_path: Path, timeout: float = 1800.0):
    """An inter-process lock (flock: released by the OS if the holder dies). Something other
    than a file at the lock's path (a folder left by a crash or a hand) is cleared first."""
    import filelock  # imported on a cache miss only: it costs ~50 ms at startup

    if lock_path.is_dir() or lock_path.is_symlink():
        if lock_path.is_symlink():
            _unlink(lock_path)
        else:
            discard(lock_path)
    return filelock.FileLock(str(lock_path), timeout=timeout)


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
