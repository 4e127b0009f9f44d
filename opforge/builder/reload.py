"""Live reload: a library rebuilt from its edited sources replaces its ops in place, and every
session using it switches to the new kernels at its next run, without being recreated."""
from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass

from opforge.errors import OpforgeError


class ReloadError(OpforgeError):
    """A reload was refused (a session's graph cannot use the new build, or the library has no
    sources to rebuild); the library and its sessions keep their old kernels."""


@dataclass
class ReloadReport:
    """What one reload did: whether the build changed, the library file now in use, how many
    sessions switched, and what becomes of the file it replaced."""

    library: str
    changed: bool
    path: str
    previous: str
    sessions: int
    seconds: float
    old_library: str
    build_seconds: float = 0.0   # of `seconds`, building (or finding in the cache) and loading

    def __str__(self) -> str:
        if not self.changed:
            return f"library '{self.library}': sources unchanged, nothing reloaded ({self.seconds:.2f} s)"
        return (f"library '{self.library}' reloaded in {self.seconds:.2f} s: {self.sessions} session(s) switch at "
                f"their next run; {self.old_library}")

    __repr__ = __str__


class Attachments:
    """The sessions using a library, held weakly (a session that is dropped leaves)."""

    def __init__(self):
        self._sessions = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, session) -> None:
        with self._lock:
            self._sessions.add(session)

    def live(self) -> list:
        with self._lock:
            return list(self._sessions)


def reload_library(library) -> ReloadReport:
    """Rebuilds `library` from its sources as they are now and, if the build changed, makes
    its ops and every session using it run the new kernels.

    Each session first prepares its kernels from the new build (its graph checked, its nodes
    bound); if any session cannot, nothing changes and ReloadError names the session's node.
    A build that fails raises BuildError and nothing changes either. Runs in flight finish on
    the kernels they started with; the old library is unloaded once nothing uses it (see
    OPFORGE_UNLOAD_LIBRARIES), or kept, as the report says.
    """
    if library.builder is None:
        raise ReloadError(f"library '{library.__name__}' was not built from sources by opforge "
                          "(a .so or the built-in kernels): there is nothing to rebuild")
    with library.reload_lock:
        started = time.perf_counter()
        fresh = library.builder.load()
        built = time.perf_counter() - started
        previous = library.__file__
        if fresh.__file__ == previous:
            return ReloadReport(library.__name__, False, previous, previous, 0, built, "", built)
        sessions = library.sessions.live()
        prepared = []
        for session in sessions:
            try:
                prepared.append((session, session._prepare_reload(library, fresh.op_table)))
            except Exception as exc:
                raise ReloadError(f"library '{library.__name__}': the new build ({fresh.__file__}) is refused: a "
                                  f"session using it cannot run it: {type(exc).__name__}: {exc}. The old kernels "
                                  "keep running") from exc
        library.adopt(fresh)
        for session, state in prepared:
            session._install_reload(state)
        return ReloadReport(library.__name__, True, fresh.__file__, previous, len(prepared),
                            time.perf_counter() - started, _old_library_fate(library, previous), built)


def _old_library_fate(library, previous: str) -> str:
    from opforge import config

    if library.op_table and library.op_table[0].is_cuda:
        return f"{os.path.basename(previous)} stays loaded (CUDA libraries are never unloaded)"
    if not config.unload_libraries():
        return f"{os.path.basename(previous)} stays loaded (OPFORGE_UNLOAD_LIBRARIES=0)"
    return f"{os.path.basename(previous)} is unloaded once no run or op object uses it"


class Watcher:
    """Polls a library's sources and the headers they include; when one changes, reloads the
    library (see reload_library). Failures are reported (printed to stderr and kept in
    `last_error`) and the old kernels keep running. Stop it with stop(), or use it as a
    context manager."""

    def __init__(self, library, interval: float = 0.05, on_reload=None, on_error=None):
        self.library, self.interval = library, interval
        self.on_reload, self.on_error = on_reload, on_error
        self.reloads, self.last_error, self.last_report = 0, None, None
        self._stop = threading.Event()
        self._seen = _stamps(library.watched)
        self._thread = threading.Thread(target=self._loop, name=f"opforge-watch-{library.__name__}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            stamps = _stamps(self.library.watched)
            if stamps == self._seen:
                continue
            self._seen = stamps
            self.check_now()
            self._seen = _stamps(self.library.watched)   # a rebuild may read other headers

    def check_now(self) -> None:
        """Reloads the library now (what the watcher does when a file changes)."""
        try:
            report = reload_library(self.library)
        except Exception as exc:   # a failed build or a refused schema: reported, old kernels kept
            self.last_error = exc
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            print(f"opforge: reload of '{self.library.__name__}' failed, the old kernels keep running: {first}",
                  file=sys.stderr)
            if self.on_error is not None:
                self.on_error(exc)
            return
        self.last_error, self.last_report = None, report
        if report.changed:
            self.reloads += 1
            if self.on_reload is not None:
                self.on_reload(report)

    def stop(self) -> None:
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def __enter__(self) -> "Watcher":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _stamps(paths) -> tuple:
    """(path, mtime_ns, size) of each file (None for one that is gone)."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((path, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((path, None, None))
    return tuple(out)
