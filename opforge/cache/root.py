"""The cache root: created private to the user, and refused if anyone else could write to it."""
import os
import stat
from pathlib import Path

from opforge import config
from opforge.errors import CacheError

SUBDIRS = ("libs", "work", "locks", "tmp", "support", "toolchains")
_checked: set = set()


def _check_private(path: Path) -> None:
    """Raises CacheError unless `path` is a folder owned by us that others cannot write."""
    try:
        st = path.lstat()
    except OSError as exc:
        raise CacheError(f"cannot use the opforge cache folder {path}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise CacheError(f"the opforge cache folder {path} is not a plain folder (a link or a file); "
                         "remove it or set OPFORGE_CACHE_DIR to a folder of your own")
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        raise CacheError(f"the opforge cache folder {path} belongs to uid {st.st_uid}, not to you "
                         f"(uid {os.getuid()}): loading libraries from it could run someone else's "
                         "code; set OPFORGE_CACHE_DIR to a folder of your own")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CacheError(f"the opforge cache folder {path} is writable by other users "
                         f"(mode {stat.S_IMODE(st.st_mode):o}); run `chmod 700 {path}` or set "
                         "OPFORGE_CACHE_DIR to a private folder")


def cache_root(create: bool = True) -> Path:
    """The checked cache root ($OPFORGE_CACHE_DIR or the user cache folder).

    Creates it with mode 0700 when missing. Raises CacheError if it is owned by another user,
    writable by others, or not a folder.
    """
    root = config.cache_dir().absolute()
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
    _check_private(root)
    for name in SUBDIRS:
        (root / name).mkdir(mode=0o700, exist_ok=True)
    _checked.add(root)
    return root
