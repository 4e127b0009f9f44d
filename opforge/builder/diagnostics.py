"""Compiler output -> a BuildError whose message starts with the first error at file:line."""
import re

from opforge.errors import BuildError

_ERROR = re.compile(r"^(?P<where>[^\s:][^:\n]*:\d+(?::\d+)?): (?:fatal )?error: (?P<msg>.*)$")
_LINKER = re.compile(r"(undefined reference to|multiple definition of|cannot find -l|ld returned)")


def first_error(log: str) -> "tuple[str, list] | None":
    """(the first "file:line:col: error: ..." line, the context lines gcc/clang print after it)."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if _ERROR.match(line):
            context = []
            for follow in lines[i + 1:i + 6]:
                if not follow.startswith(" ") or _ERROR.match(follow):
                    break
                context.append(follow)
            return line, context
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
    count = sum(1 for line in log.splitlines() if _ERROR.match(line))
    if found:
        head, context = found
        message = "\n".join([head] + context)
    else:
        tail = [ln for ln in log.splitlines() if ln.strip()][-15:]
        message = "build failed:\n" + "\n".join(tail)
    more = f"{count} error(s); " if count > 1 else ""
    message += f"\n\n(while building '{name}': {more}the full log is in .log, the command in .command)"
    return BuildError(message, log=log, command=command or failed_command(log))
