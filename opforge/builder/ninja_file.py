"""build.ninja text from a build plan: a pure function, tested as text."""
import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class NinjaPlan:
    """What to compile and link, with every path absolute."""

    cxx: tuple
    cflags: tuple
    ldflags: tuple
    compiles: tuple          # ((object, source), ...) for the host compiler
    extra_objects: tuple     # prebuilt objects to link (the opforge support object)
    output: str
    nvcc: tuple = ()         # CUDA libraries: nvcc, its flags and its ((object, .cu source), ...)
    cuda_flags: tuple = ()
    cuda_compiles: tuple = ()
    device_link: str = ""    # relocatable device code (-rdc=true): the object nvcc -dlink makes


def _quote(args) -> str:
    return " ".join(shlex.quote(str(a)) for a in args)


def _escape_path(path: str) -> str:
    """Ninja path syntax: $, space and colon are escaped with $."""
    return str(path).replace("$", "$$").replace(" ", "$ ").replace(":", "$:")


def ninja_text(plan: NinjaPlan) -> str:
    """The build.ninja for `plan`.

    Each object and the library are written to a temporary name and renamed, so a build killed
    mid-way never leaves a partial file that ninja would take as up to date. The compiler's
    depfile (-MMD; nvcc writes the same format) makes an edited header rebuild what includes it.
    """
    lines = [
        "ninja_required_version = 1.3",
        f"cxx = {_quote(plan.cxx)}",
        f"cflags = {_quote(plan.cflags)}",
        f"ldflags = {_quote(plan.ldflags)}",
        "",
        "rule cxx",
        "  command = $cxx -MMD -MT $out -MF $out.d $cflags -c $in -o $out.tmp && mv -f $out.tmp $out",
        "  depfile = $out.d",
        "  description = compiling $in",
        "",
        *(_nvcc_rule(plan) if plan.cuda_compiles else []),
        "rule link",
        "  command = $cxx $in -o $out.tmp $ldflags && mv -f $out.tmp $out",
        "  description = linking $out",
        "",
    ]
    objects = []
    for rule, compiles in (("cxx", plan.compiles), ("nvcc", plan.cuda_compiles)):
        for obj, src in compiles:
            lines.append(f"build {_escape_path(obj)}: {rule} {_escape_path(src)}")
            objects.append(_escape_path(obj))
    if plan.device_link:
        device_objects = " ".join(_escape_path(obj) for obj, _ in plan.cuda_compiles)
        lines.append(f"build {_escape_path(plan.device_link)}: dlink {device_objects}")
        objects.append(_escape_path(plan.device_link))
    objects += [_escape_path(o) for o in plan.extra_objects]
    lines.append(f"build {_escape_path(plan.output)}: link {' '.join(objects)}")
    lines.append(f"default {_escape_path(plan.output)}")
    return "\n".join(lines) + "\n"


def _nvcc_rule(plan: NinjaPlan) -> list:
    return [
        f"nvcc = {_quote(plan.nvcc)}",
        f"cuda_cflags = {_quote(plan.cuda_flags)}",
        "rule nvcc",
        "  command = $nvcc -MMD -MT $out -MF $out.d $cuda_cflags -c $in -o $out.tmp && mv -f $out.tmp $out",
        "  depfile = $out.d",
        "  description = compiling $in (nvcc)",
        "",
        # relocatable device code: nvcc resolves device calls across the .cu objects before
        # the host linker sees them, else the library has unresolved registration symbols
        *(["rule dlink",
           "  command = $nvcc -dlink $cuda_cflags $in -o $out.tmp && mv -f $out.tmp $out",
           "  description = device-linking $out",
           ""] if plan.device_link else []),
    ]
