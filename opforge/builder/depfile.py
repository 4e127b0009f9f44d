"""Make-style dependency files written by the compiler (-MMD): which headers a source read."""
from pathlib import Path


def read_depfile(path: Path) -> list:
    """The prerequisites listed in a depfile, in order, without the target."""
    text = path.read_text().replace("\\\n", " ")
    _, _, deps = text.partition(": ")
    if not deps:
        _, _, deps = text.partition(":\n")
    out, token, i = [], "", 0
    while i < len(deps):
        ch = deps[i]
        if ch == "\\" and i + 1 < len(deps) and deps[i + 1] in " #\\":
            token += deps[i + 1]
            i += 2
            continue
        if ch.isspace():
            if token:
                out.append(token)
            token = ""
        else:
            token += ch
        i += 1
    if token:
        out.append(token)
    return out
