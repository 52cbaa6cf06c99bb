"""What an ELF file asks of the dynamic loader: its interpreter, the libraries it needs and where
it looks for them (`DT_NEEDED`, `DT_RUNPATH`/`DT_RPATH`).

Why our own reader: the image's base is cut down to the shared libraries its programs need, for
an architecture the build machine may not run (arm64 on amd64), so `ldd` cannot be asked; and
binutils' `readelf` is one more host tool to install and parse. The dynamic section is a few
fixed-size records, read here from the program headers (which stripped files keep), for 32- and
64-bit files of either byte order (s390x is big-endian).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

_MAGIC = b"\x7fELF"
_PT_LOAD, _PT_DYNAMIC, _PT_INTERP = 1, 2, 3
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 15, 29


@dataclass(frozen=True)
class Dynamic:
    """One ELF file's requests: `interpreter` (programs only), `needed` sonames in order, and
    the directories of its RUNPATH (or RPATH), `$ORIGIN` not yet expanded."""

    interpreter: str | None
    needed: tuple[str, ...]
    search: tuple[str, ...]


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) == _MAGIC
    except OSError:
        return False


def read_dynamic(path: Path) -> Dynamic:
    """The file's dynamic requests (empty for a static file); ValueError if it is not ELF."""
    data = path.read_bytes()
    if data[:4] != _MAGIC:
        raise ValueError(f"{path}: not an ELF file")
    wide = data[4] == 2  # ELFCLASS64
    order = ">" if data[5] == 2 else "<"  # ELFDATA2MSB
    if wide:
        phoff, phentsize, phnum = (
            struct.unpack_from(order + "Q", data, 0x20)[0],
            *struct.unpack_from(order + "HH", data, 0x36),
        )
        header, entry = order + "IIQQQQQQ", order + "qQ"
    else:
        phoff, phentsize, phnum = (
            struct.unpack_from(order + "I", data, 0x1C)[0],
            *struct.unpack_from(order + "HH", data, 0x2A),
        )
        header, entry = order + "IIIIIIII", order + "iI"
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, size in file)
    dynamic: tuple[int, int] | None = None
    interpreter = None
    for index in range(phnum):
        fields = struct.unpack_from(header, data, phoff + index * phentsize)
        if wide:
            kind, _flags, offset, vaddr, _paddr, filesz = fields[:6]
        else:
            kind, offset, vaddr, _paddr, filesz = fields[:5]
        if kind == _PT_LOAD:
            loads.append((vaddr, offset, filesz))
        elif kind == _PT_DYNAMIC:
            dynamic = (offset, filesz)
        elif kind == _PT_INTERP:
            interpreter = data[offset : offset + filesz].split(b"\0", 1)[0].decode()
    if dynamic is None:
        return Dynamic(interpreter, (), ())
    tags: list[tuple[int, int]] = []
    step = struct.calcsize(entry)
    start, size = dynamic
    for at in range(start, start + size, step):
        tag, value = struct.unpack_from(entry, data, at)
        if tag == _DT_NULL:
            break
        tags.append((tag, value))
    strtab = next((value for tag, value in tags if tag == _DT_STRTAB), None)
    if strtab is None:
        raise ValueError(f"{path}: a dynamic section without a string table")
    table = next(
        (
            offset + strtab - vaddr
            for vaddr, offset, filesz in loads
            if vaddr <= strtab < vaddr + filesz
        ),
        None,
    )
    if table is None:
        raise ValueError(f"{path}: the string table is outside every loaded segment")

    def text(value: int) -> str:
        return data[table + value : data.index(b"\0", table + value)].decode()

    needed = tuple(text(value) for tag, value in tags if tag == _DT_NEEDED)
    runpath = [text(value) for tag, value in tags if tag == _DT_RUNPATH]
    rpath = [text(value) for tag, value in tags if tag == _DT_RPATH]
    search = tuple(
        directory
        for entry_text in (runpath or rpath)
        for directory in entry_text.split(":")
        if directory
    )
    return Dynamic(interpreter, needed, search)
