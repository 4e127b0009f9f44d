"""Which GPU architectures a CUDA library is compiled for, and nvcc's -gencode flags for them.

$OPFORGE_CUDA_ARCH when set (an explicit request wins, as TORCH_CUDA_ARCH_LIST does for torch);
else the compute capabilities of the GPUs visible here, each as the installed nvcc can build it
(a GPU newer than nvcc gets PTX of the newest architecture nvcc knows); else DEFAULT_ARCHS, whose
newest entry also gets PTX so that GPUs newer than the list compile it at load time.
"""
import re
from typing import NamedTuple

# Turing, Ampere (A100; sm_80 code also runs on sm_86/87/89), Ampere consumer, Hopper (+PTX).
DEFAULT_ARCHS = "75;80;86;90+PTX"


class Arch(NamedTuple):
    """One target: name as nvcc spells it after sm_/compute_ ("80", "90a"); ptx adds PTX."""

    name: str
    ptx: bool = False


def parse_archs(text: str) -> "list[Arch]":
    """"80;90", "8.6 9.0+PTX", "sm_90a,compute_90" -> Arch list. Raises ValueError on a bad entry."""
    out = []
    for item in re.split(r"[;,\s]+", text.strip()):
        if not item:
            continue
        ptx = item.upper().endswith("+PTX")
        core = item[:-4] if ptx else item
        core = re.sub(r"^(sm_|compute_)", "", core).replace(".", "")
        if not re.fullmatch(r"\d{2,3}[af]?", core):
            raise ValueError(f"GPU architecture {item!r} is not like 80, 8.6, 90a or 9.0+PTX "
                             "(set OPFORGE_CUDA_ARCH to a list such as \"80;90\")")
        out.append(Arch(core, ptx))
    if not out:
        raise ValueError("OPFORGE_CUDA_ARCH is empty: give a list such as \"80;90\"")
    return out


def visible_archs() -> "list[Arch]":
    """The compute capabilities of the visible GPUs (none: an empty list)."""
    from opforge.builder.cuda_driver import driver_info

    return [Arch(c) for c in driver_info().capabilities]


def target_archs(explicit: "str | None", known: tuple = ()) -> "list[Arch]":
    """The architectures to build for: `explicit` ($OPFORGE_CUDA_ARCH), else the visible GPUs
    (fitted to `known`, see fit_to_nvcc), else DEFAULT_ARCHS."""
    if explicit:
        return parse_archs(explicit)
    return fit_to_nvcc(visible_archs(), known)[0] or parse_archs(DEFAULT_ARCHS)


def fit_to_nvcc(archs, known: tuple) -> "tuple[list[Arch], list[str]]":
    """(archs, notes): each architecture nvcc does not know (a GPU newer than the installed CUDA)
    replaced by PTX for the newest one it knows below it, which the driver compiles for the GPU
    when the library loads; a note per replacement says so. `known`: the names nvcc lists
    (`nvcc --list-gpu-code`, as "80", "120"); empty when not known, and nothing is replaced."""
    out, notes = [], []
    numbered = sorted((int(k), k) for k in known if k.isdigit())
    for arch in archs:
        below = [name for number, name in numbered if number <= _number(arch.name)]
        if not known or arch.name in known or not below:
            fitted = arch
        else:
            fitted = Arch(below[-1], True)
            notes.append(f"this nvcc does not know sm_{arch.name} (a GPU here): building PTX for "
                         f"compute_{fitted.name} instead, which the driver compiles for the GPU when the "
                         "library loads (slower to load; a newer CUDA toolkit builds for it directly)")
        if fitted not in out:
            out.append(fitted)
    return out, notes


def _number(name: str) -> int:
    return int(re.match(r"\d+", name)[0])


def gencode_flags(archs) -> tuple:
    """nvcc flags: SASS for each architecture, plus PTX for those marked +PTX."""
    flags = []
    for arch in archs:
        flags.append(f"-gencode=arch=compute_{arch.name},code=sm_{arch.name}")
        if arch.ptx:
            flags.append(f"-gencode=arch=compute_{arch.name},code=compute_{arch.name}")
    return tuple(flags)
