"""Cache entries: a folder per key holding an artifact and its manifest, published atomically."""
import json
import os
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
    """The entry at `path` if it is complete and its artifact matches the recorded digest.

    A missing, half-written or corrupted entry gives None, so the caller rebuilds it.
    """
    try:
        manifest = json.loads((path / MANIFEST).read_text())
        if manifest.get("format") != FORMAT:
            return None
        entry = Entry(path, manifest)
        st = entry.artifact.stat()
        if st.st_size != manifest["size"]:
            return None
        if verify and file_digest(entry.artifact) != manifest["sha256"]:
            return None
        return entry
    except (OSError, ValueError, KeyError, TypeError):
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
    """An inter-process lock (flock: released by the OS if the holder dies)."""
    import filelock  # imported on a cache miss only: it costs ~50 ms at startup

    return filelock.FileLock(str(lock_path), timeout=timeout)


def _unlink(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
