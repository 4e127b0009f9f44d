"""The cache root: created private to the user, and refused if anyone else could write to it."""
import os
import stat
from pathlib import Path

from opforge import config
from opforge.errors import CacheError

SUBDIRS = ("libs", "work", "locks", "tmp", "support", "toolchains")
_checked: set = set()


def folder_problem(path: Path) -> "str | None":
    """Why `path` is not a folder owned by us that others cannot write, or None."""
    try:
        st = path.lstat()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        return "is not a plain folder (a link or a file)"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _check_private(path: Path, root: Path) -> None:
    """Raises CacheError unless `path` (the root or one of its folders) is private to us:
    loading libraries from a folder others can write could run their code."""
    problem = folder_problem(path)
    if problem is None:
        return
    fix = (f"run `chmod 700 {path}` if it is yours, or set OPFORGE_CACHE_DIR to a folder of your own"
           if path == root else f"run `opforge cache doctor --fix` (or remove {path})")
    raise CacheError(f"the opforge cache folder {path} {problem}: loading libraries from it "
                     f"could run someone else's code; {fix}")


def cache_root(create: bool = True) -> Path:
    """The checked cache root ($OPFORGE_CACHE_DIR or the user cache folder).

    Creates it with mode 0700 when missing. Raises CacheError if it is owned by another user,
    writable by others, or not a folder.
    """
    return checked_root(config.cache_dir().absolute(), create)


def checked_root(root: Path, create: bool = True) -> Path:
    """`root` as a cache root: created private with its folders, and checked (cache_root)."""
    if root in _checked and root.is_dir():
        return root
    if not root.exists():
        if not create:
            return root
        try:
            root.parent.mkdir(parents=True, exist_ok=True)
            root.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise CacheError(f"cannot create the opforge cache folder {root}: {exc.strerror}; "
                             "set OPFORGE_CACHE_DIR to a writable folder") from None
    _check_private(root, root)
    for name in SUBDIRS:
        try:
            (root / name).mkdir(mode=0o700, exist_ok=True)
        except OSError:
            pass   # a file or link in its place: reported just below
        _check_private(root / name, root)
    _checked.add(root)
    return root
