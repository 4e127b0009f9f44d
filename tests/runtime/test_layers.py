"""The runtime's imports go downward (shared/DESIGN.md): session -> passes/load -> plan/execute ->
providers -> graph -> errors. A module may import its own layer and those below, never one above;
checked on the source of every module under opforge/runtime, lazy imports inside functions too."""
import ast
from pathlib import Path

import opforge.runtime

RUNTIME = Path(opforge.runtime.__file__).resolve().parent
LAYERS = {
    "errors": 0, "options": 0,
    "graph": 1,
    "providers": 2,
    "plan": 3, "execute": 3,
    "passes": 4, "load": 4,
    "session": 5, "session_extras": 5, "custom_ops": 5, "__init__": 5,
}
"""Each top-level module or folder of opforge/runtime, by layer (higher imports lower)."""


def part_of(path: Path) -> str:
    """The top-level module or folder of opforge/runtime that ``path`` belongs to."""
    return path.relative_to(RUNTIME).parts[0].removesuffix(".py")


def imported_parts(tree: ast.AST):
    """(line, part of opforge/runtime) for each import of the runtime in ``tree``; a name
    imported from the package itself (``from opforge.runtime import X``) counts as the part X
    when X is a module or folder, else as the package's __init__ (which imports the session)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
            if node.module == "opforge.runtime":
                modules = [f"opforge.runtime.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            bits = module.split(".")
            if bits[:2] == ["opforge", "runtime"]:
                part = bits[2] if len(bits) > 2 else "__init__"
                yield node.lineno, part if part in LAYERS else "__init__"


def test_every_runtime_module_has_a_layer():
    unknown = {part_of(p) for p in RUNTIME.rglob("*.py")} - set(LAYERS)
    assert not unknown, f"add these to LAYERS in {__file__}: {sorted(unknown)}"


def test_runtime_imports_go_downward():
    upward = []
    for path in sorted(RUNTIME.rglob("*.py")):
        mine = part_of(path)
        for line, part in imported_parts(ast.parse(path.read_text(), str(path))):
            if LAYERS[part] > LAYERS.get(mine, -1):
                upward.append(f"{path.relative_to(RUNTIME.parent)}:{line}: {mine} imports {part}")
    assert not upward, "imports going up a layer:\n" + "\n".join(upward)


def test_relative_imports_are_not_used():
    """Relative imports would hide a module's layer from the check above."""
    found = [f"{p.relative_to(RUNTIME.parent)}:{n.lineno}" for p in sorted(RUNTIME.rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.ImportFrom) and n.level]
    assert not found, found
