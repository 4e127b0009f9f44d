"""A private copy of a shared library, so that a second load of it in one process has state of
its own: GNU "unique" symbols (function-local statics of inline C++ code, such as the API table a
custom-op library keeps) are shared by every copy of a library in a process, even when each is
loaded with RTLD_LOCAL; the copy gets them as ordinary global symbols, which it binds to itself."""
import os
import struct
import tempfile
from pathlib import Path

SHT_DYNSYM = 11
STB_GLOBAL, STB_GNU_UNIQUE = 1, 10


def private_copy(path: Path, folder: Path) -> Path:
    """`path` copied into `folder` under a name of its content (made once, written whole, then
    renamed), its unique symbols made global. Raises ValueError for a file that is not a
    64-bit little-endian ELF shared library."""
    from opforge.cache import file_digest

    target = folder / f"{path.stem}-{file_digest(path)[:16]}{path.suffix}"
    if target.is_file():
        return target
    data = bytearray(path.read_bytes())
    unshare_unique_symbols(data, str(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o700)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def unshare_unique_symbols(elf: bytearray, name: str = "library") -> int:
    """Rewrites the binding of every STB_GNU_UNIQUE symbol of `elf`'s dynamic symbol table to
    STB_GLOBAL, in place; returns how many."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError(f"{name} is not a 64-bit little-endian ELF shared library")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    changed = 0
    for s in range(shnum):
        header = shoff + s * shentsize
        sh_type, = struct.unpack_from("<I", elf, header + 4)
        if sh_type != SHT_DYNSYM:
            continue
        offset, size = struct.unpack_from("<QQ", elf, header + 24)
        entsize, = struct.unpack_from("<Q", elf, header + 56)
        for at in range(offset, offset + size, entsize or 24):
            info = elf[at + 4]
            if info >> 4 == STB_GNU_UNIQUE:
                elf[at + 4] = (STB_GLOBAL << 4) | (info & 0xF)
                changed += 1
    return changed
