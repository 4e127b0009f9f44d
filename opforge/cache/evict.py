"""Listing, cleaning and checking the cache (`opforge cache ls | clean | doctor`)."""
import json
import os
import stat
import time
from pathlib import Path

from opforge.cache.entry import MANIFEST, discard, entry_problem
from opforge.cache.root import SUBDIRS, folder_problem

STALE_SECONDS = 3600  # temporary build folders older than this belong to dead builds


def folder_bytes(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def list_entries(root: Path) -> list:
    """Every library entry: dicts with name, path, bytes, created, last_used, valid."""
    out = []
    libs = root / "libs"
    for path in sorted(libs.iterdir()) if libs.is_dir() else []:
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            manifest = json.loads((path / MANIFEST).read_text())
        except (OSError, ValueError):
            manifest = {}
        problem = entry_problem(path)
        out.append({"name": manifest.get("name", path.name), "path": path, "manifest": manifest,
                    "bytes": folder_bytes(path), "created": manifest.get("created", 0.0),
                    "last_used": path.stat().st_atime, "valid": problem is None, "problem": problem})
    return out


# What each cache folder holds, for `opforge cache ls`; items of the evictable ones are removed
# by `clean --older-than / --max-size` like library entries (each is rebuilt when needed again).
KINDS = {"libs": "libraries", "work": "build folders", "support": "support objects and precompiled headers",
         "inline": "inline sources", "toolchains": "compiler identities", "locks": "locks", "tmp": "builds in progress",
         "logs": "the last failed build's log (opforge build)"}
EVICTABLE = ("work", "support", "inline")


def usage(root: Path) -> dict:
    """Bytes by kind of content ({kind: bytes}), accounting for every file under `root`."""
    found = {kind: folder_bytes(root / name) for name, kind in KINDS.items()}
    listed = sum(found.values())
    found["other"] = max(0, folder_bytes(root) - listed)
    return found


def _items(root: Path) -> list:
    """Everything `clean` may remove: library entries and the evictable folders' items."""
    items = [{"path": e["path"], "bytes": e["bytes"], "last_used": e["last_used"]} for e in list_entries(root)]
    for name in EVICTABLE:
        folder = root / name
        for child in folder.iterdir() if folder.is_dir() else []:
            if not child.name.startswith("."):
                st = child.stat()
                items.append({"path": child, "bytes": folder_bytes(child),
                              "last_used": max(st.st_atime, st.st_mtime)})
    return sorted(items, key=lambda item: item["last_used"])


def clean(root: Path, older_than_days: "float | None" = None, max_bytes: "int | None" = None,
          everything: bool = False) -> list:
    """Removes library entries, build folders, support objects (with their precompiled headers)
    and inline sources: all of them, those unused for `older_than_days`, or the least recently
    used above `max_bytes` in all. Stale temporary folders go too. Returns the removed paths."""
    items = _items(root)
    now = time.time()
    if everything:
        doomed = [i["path"] for i in items]
    else:
        doomed = []
        if older_than_days is not None:
            doomed += [i["path"] for i in items if now - i["last_used"] > older_than_days * 86400]
        if max_bytes is not None:
            total = sum(usage(root).values()) - sum(i["bytes"] for i in items if i["path"] in doomed)
            for i in items:
                if total <= max_bytes:
                    break
                if i["path"] not in doomed:
                    doomed.append(i["path"])
                    total -= i["bytes"]
    for path in doomed:
        discard(path)
    return doomed + remove_stale_temporaries(root)


def remove_stale_temporaries(root: Path, age: float = STALE_SECONDS) -> list:
    """Removes temporary build folders left by builds that died over `age` seconds ago."""
    removed = []
    for folder in (root / "tmp", root / "libs"):
        for child in folder.iterdir() if folder.is_dir() else []:
            stale = time.time() - child.stat().st_mtime > age
            if (folder.name == "tmp" or child.name.startswith(".trash-")) and stale:
                discard(child)
                removed.append(child)
    return removed


def doctor(root: Path, fix: bool = False) -> list:
    """Problems found in the cache, as sentences, judged as loading judges them; with fix,
    folders of ours are made private again and entries that cannot load are removed (the next
    load rebuilds them)."""
    problems = []
    for folder in [root] + [root / name for name in SUBDIRS if (root / name).exists()]:
        problem = folder_problem(folder)
        if problem is None:
            continue
        mended = fix and folder != root and _make_private(folder)
        problems.append(f"{folder} {problem}" + (" (made private)" if mended else ""))
    entries = list_entries(root)
    for e in entries:
        if not e["valid"]:
            problems.append(f"entry {e['path']} cannot be loaded: {e['problem']}" + (" (removed)" if fix else ""))
            if fix:
                discard(e["path"])
    for path, why in unloadable([e for e in entries if e["valid"]]).items():
        problems.append(f"entry {path} does not load: {why}" + (" (removed)" if fix else ""))
        if fix:
            discard(path)
    tmp = root / "tmp"
    leftovers = list(tmp.iterdir()) if tmp.is_dir() else []
    if leftovers:
        problems.append(f"{len(leftovers)} temporary build folder(s) in {tmp}" +
                        (" (stale ones removed)" if fix else ""))
        if fix:
            remove_stale_temporaries(root)
    return problems


_LOAD_CHECK = """
import ctypes, json, os, sys
for path in json.loads(sys.stdin.read()):
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as exc:
        print(json.dumps([path, str(exc)]), flush=True)
"""


def unloadable(entries: list) -> dict:
    """{entry folder: why} for the entries whose library the dynamic loader refuses (a symbol
    nothing defines, a library it needs gone), tried in one fresh process so nothing stays
    loaded here and a crash costs only that process."""
    import json
    import subprocess
    import sys

    artifacts = {str(e["path"] / e["manifest"]["artifact"]): e["path"] for e in entries
                 if e.get("manifest", {}).get("kind") in ("ops", "extension")}
    if not artifacts:
        return {}
    proc = subprocess.run([sys.executable, "-c", _LOAD_CHECK], input=json.dumps(list(artifacts)),
                          capture_output=True, text=True)
    found = {}
    for line in proc.stdout.splitlines():
        artifact, why = json.loads(line)
        found[artifacts[artifact]] = why
    if proc.returncode != 0 and not found:   # the check died on an entry: say so on each
        found = {path: f"loading the entries crashed a process ({proc.stderr.strip()[-200:]})"
                 for path in artifacts.values()}
    return found


def _make_private(folder: Path) -> bool:
    """chmod 700 a plain folder of ours; False when it is not ours or not a folder."""
    st = folder.lstat()
    if not stat.S_ISDIR(st.st_mode) or (hasattr(os, "getuid") and st.st_uid != os.getuid()):
        return False
    os.chmod(folder, 0o700)
    return True
