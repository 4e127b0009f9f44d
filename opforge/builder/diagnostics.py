"""Compiler output -> a BuildError whose message starts with the first error at file:line."""
import re

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


def build_error(name: str, log: str, command: str) -> BuildError:
    """The BuildError for a failed build of library `name`."""
    found = first_error(log)
    count = sum(1 for line in log.splitlines() if _error_line(line))
    if _HOST_COMPILER.search(log):
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
    message += f"\n\n(while building '{name}': {more}the full log is in .log, the command in .command)"
    return BuildError(message, log=log, command=command or failed_command(log))
