"""Which GPU architectures a CUDA library is compiled for, and nvcc's -gencode flags for them.

$OPFORGE_CUDA_ARCH when set (an explicit request wins, as TORCH_CUDA_ARCH_LIST does for torch);
else the compute capabilities of the GPUs visible here; else DEFAULT_ARCHS, whose newest entry
also gets PTX so that GPUs newer than the list compile it at load time.
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


def target_archs(explicit: "str | None") -> "list[Arch]":
    """The architectures to build for: `explicit` ($OPFORGE_CUDA_ARCH), else the visible GPUs,
    else DEFAULT_ARCHS."""
    if explicit:
        return parse_archs(explicit)
    return visible_archs() or parse_archs(DEFAULT_ARCHS)


def gencode_flags(archs) -> tuple:
    """nvcc flags: SASS for each architecture, plus PTX for those marked +PTX."""
    flags = []
    for arch in archs:
        flags.append(f"-gencode=arch=compute_{arch.name},code=sm_{arch.name}")
        if arch.ptx:
            flags.append(f"-gencode=arch=compute_{arch.name},code=compute_{arch.name}")
    return tuple(flags)
