"""Compiler output -> a BuildError whose message starts with the first error at file:line."""
import re
from pathlib import Path

from opforge.errors import BuildError

_ERROR = re.compile(r"^(?P<where>[^\s:][^:\n]*:\d+(?::\d+)?): (?:fatal )?error: (?P<msg>.*)$")
# nvcc's front end (EDG) writes "file.cu(12): error: ..."; it is reported as "file.cu:12: error: ...".
_NVCC_ERROR = re.compile(r"^(?P<file>[^\s(][^(\n]*)\((?P<line>\d+)\): (?:catastrophic )?error: (?P<msg>.*)$")
_LINKER = re.compile(r"(undefined reference to|multiple definition of|cannot find -l|ld returned|"
                     r"ptxas (fatal|error))")
# nvcc's check of its host compiler's version (crt/host_config.h in the CUDA headers).
_HOST_COMPILER = re.compile(r"unsupported (GNU|clang|HOS clang) version")


def _error_line(line: str) -> "str | None":
    """A compiler error line as "file:line[:col]: error: message", or None."""
    if _ERROR.match(line):
        return line
    found = _NVCC_ERROR.match(line)
    return f"{found['file']}:{found['line']}: error: {found['msg']}" if found else None


def first_error(log: str) -> "tuple[str, list] | None":
    """(the first "file:line:col: error: ..." line, the context lines the compiler prints after it)."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        head = _error_line(line)
        if head:
            context = []
            for follow in lines[i + 1:i + 6]:
                if not follow.startswith(" ") or _error_line(follow):
                    break
                context.append(follow)
            return head, context
    for line in lines:
        if _LINKER.search(line):
            return line, []
    return None


def failed_command(log: str) -> str:
    """The command ninja reports after its FAILED: line."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("FAILED:") and i + 1 < len(lines):
            return lines[i + 1].strip()
    return ""


# GNU ld: "my_op.cpp:(.text+0x5): undefined reference to `my_helper(float)'", after a line
# "...: in function `run(float)':"; lld: "error: undefined symbol: my_helper(float)" then
# ">>> referenced by my_op.cpp".
_UNDEFINED = re.compile(r"^(?P<where>[^\s:][^:\n]*?):(?:\([^)\n]*\)|\d+): undefined reference to [`'](?P<sym>.+)'$")
_IN_FUNCTION = re.compile(r": in function [`'](?P<fn>.+)':$")
_LLD_UNDEFINED = re.compile(r"error: undefined symbol: (?P<sym>.+)$")
_LLD_WHERE = re.compile(r"^>>> referenced by (?P<where>\S+)")


def undefined_symbols(log: str) -> list:
    """(symbol, file that uses it, function that uses it or "") for each symbol a link could not
    resolve, in the order the linker reported them, once each."""
    found, function, lld = [], "", None
    for line in log.splitlines():
        if (m := _IN_FUNCTION.search(line)) is not None:
            function = m["fn"]
        elif (m := _UNDEFINED.match(line.strip())) is not None:
            found.append((m["sym"], m["where"], function))
        elif (m := _LLD_UNDEFINED.search(line)) is not None:
            lld = m["sym"]
        elif lld is not None and (m := _LLD_WHERE.match(line.strip())) is not None:
            found.append((lld, m["where"], ""))
            lld = None
    return list(dict.fromkeys(found))


def undefined_message(name: str, symbols: list, sources=()) -> str:
    """What to fix when a library uses symbols nothing defines: the first as file: error, then
    the others."""
    by_name = {Path(s).name: str(s) for s in sources}

    def describe(symbol, where, function):
        used = f" (used in {function})" if function else ""
        return f"{by_name.get(Path(where).name, where)}: error: undefined symbol {symbol}{used}"

    lines = [describe(*item) for item in symbols]
    return "\n".join([lines[0], *lines[1:6]] + [
        f"no source of library '{name}' defines {'it' if len(symbols) == 1 else 'them'}: define "
        f"{'it' if len(symbols) == 1 else 'each'} in one of its sources, add the source that does, or link "
        "the library that has it (extra_ldflags=['-L<folder>', '-l<name>'])"])


def unloadable_error(name: str, artifact, plan) -> "BuildError | None":
    """A BuildError when the built library `artifact` cannot be loaded (checked in a fresh
    process, so nothing of it stays loaded here): an undefined symbol named, demangled, with the
    source that uses it; None when it loads."""
    import subprocess
    import sys

    check = ("import ctypes, os, sys\ntry:\n    ctypes.CDLL(sys.argv[1], mode=os.RTLD_NOW | os.RTLD_LOCAL)\n"
             "except OSError as exc:\n    print(exc)\n    sys.exit(1)")
    proc = subprocess.run([sys.executable, "-c", check, str(artifact)], capture_output=True, text=True)
    if proc.returncode == 0:
        return None
    why = (proc.stdout or proc.stderr).strip()
    missing = re.search(r"undefined symbol: (\S+)", why)
    if missing is None:
        return BuildError(f"library '{name}' was built but does not load: {why}", log=why)
    symbol = missing[1]
    users = [src for obj, src in plan.compiles + plan.cuda_compiles
             if Path(obj).is_file() and symbol.encode() in Path(obj).read_bytes()]
    message = undefined_message(name, [(demangle(symbol), users[0] if users else artifact.name, "")])
    return BuildError(message + f"\n\n(the library linked, then failed to load: {why})", log=why)


def demangle(symbol: str) -> str:
    """`symbol` as C++ source writes it (c++filt's reading), or as it is."""
    import shutil
    import subprocess

    tool = shutil.which("c++filt")
    if tool is None:
        return symbol
    out = subprocess.run([tool, symbol], capture_output=True, text=True).stdout.strip()
    return out or symbol


def build_error(name: str, log: str, command: str, plan=None) -> BuildError:
    """The BuildError for a failed build of library `name` (`plan`: its NinjaPlan, whose
    sources a link error is traced back to)."""
    found = first_error(log)
    count = sum(1 for line in log.splitlines() if _error_line(line))
    undefined = undefined_symbols(log) if found is None or not _error_line(found[0]) else []
    if undefined:
        sources = [src for _, src in plan.compiles + plan.cuda_compiles] if plan is not None else []
        message = undefined_message(name, undefined, sources)
    elif _HOST_COMPILER.search(log):
        message = ("nvcc does not accept this host compiler version (it checks it in CUDA's "
                   "crt/host_config.h; CUDA 13.0 takes gcc up to 15 and clang up to 20): set CXX to "
                   "a compiler this nvcc supports, or pass extra_cuda_cflags=['-allow-unsupported-compiler'] "
                   "at your own risk\n" + (found[0] if found else ""))
    elif found:
        head, context = found
        message = "\n".join([head] + context)
    else:
        tail = [ln for ln in log.splitlines() if ln.strip()][-15:]
        message = "build failed:\n" + "\n".join(tail)
    more = f"{count} error(s); " if count > 1 else ""
    return BuildError(message, log=log, command=command or failed_command(log),
                      where=f"while building '{name}': {more}")
