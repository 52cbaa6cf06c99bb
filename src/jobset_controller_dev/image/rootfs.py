"""The controller image's base: Python and nothing else a controller does not use, as a tar.

Why: the image's old base was a Debian system (apt, dpkg, a shell, perl, coreutils) of 225 MB
for a process that runs one Python program. Distroless images hold the program's runtime only;
there is no registry here to pull one from, so the same is cut from Debian's own packages:
`hack/image.sh` unpacks them for the target architecture with `mmdebstrap --variant=extract`
(no maintainer script runs, so no emulation is needed for arm64), and `build_rootfs` keeps:

- `/usr/bin/python3.11` and the standard library, less the parts listed in `DROPPED` (tests,
  terminals, databases, GUI and teaching modules) with the reason for each;
- the shared libraries those need, found by following the loader's rules from the ELF headers
  (`elf.py`), plus the manylinux system libraries (`MANYLINUX_LIBRARIES`) that the dependencies'
  wheels may link: nothing else from glibc (no gconv, no NSS plugins: glibc 2.34 and later has
  `files` and `dns` built in);
- CA certificates (Mozilla's, joined into `/etc/ssl/certs/ca-certificates.crt` as
  `update-ca-certificates` would, where OpenSSL's default paths look) and OpenSSL's Debian
  configuration (its TLS floor);
- `/etc/passwd` and `/etc/group` naming root, `nonroot` (65532, the user the image runs as) and
  nobody; `/etc/nsswitch.conf`; `/etc/os-release` (what scanners read); `/tmp`; and each unpacked
  package's copyright file.

No shell, package manager or coreutils: the product runs as `/opt/jobset-controller/bin/...`
executables whose `#!` line is the venv's Python, which the kernel starts without a shell.
"""

from __future__ import annotations

import argparse
import io
import os
import stat
import sys
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from jobset_controller_dev.image.elf import is_elf, read_dynamic

# Debian's multiarch directory per Go architecture name (the names images and nodes use).
TRIPLETS = {"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "s390x": "s390x-linux-gnu"}

# What of Debian's python3.11 (libpython3.11-minimal, libpython3.11-stdlib) the image leaves out,
# and why. Top-level names of the standard library: a package, a module, or (with no dot in the
# name of a lib-dynload file) an extension module's stem. The image tests run every command of
# the product in the image, so a module still needed would fail them.
DROPPED: dict[str, str] = {
    "test": "CPython's own test support",
    "_testbuffer": "CPython's own tests",
    "_testcapi": "CPython's own tests",
    "_testclinic": "CPython's own tests",
    "_testimportmultiple": "CPython's own tests",
    "_testinternalcapi": "CPython's own tests",
    "_testmultiphase": "CPython's own tests",
    "_ctypes_test": "CPython's own tests",
    "_xxtestfuzz": "CPython's own tests",
    "_xxsubinterpreters": "an experimental API for tests",
    "xxlimited": "an example extension",
    "xxlimited_35": "an example extension",
    "curses": "terminal UI (and ncurses)",
    "_curses": "terminal UI (and ncurses)",
    "_curses_panel": "terminal UI (and ncurses)",
    "readline": "interactive line editing (and libreadline)",
    "rlcompleter": "interactive completion",
    "dbm": "key-value databases (and Berkeley DB)",
    "_dbm": "key-value databases (and Berkeley DB)",
    "sqlite3": "SQL database (and libsqlite3)",
    "_sqlite3": "SQL database (and libsqlite3)",
    "nis": "NIS lookups (and libnsl, libtirpc, Kerberos)",
    "crypt": "Unix password hashing, deprecated (and libcrypt)",
    "_crypt": "Unix password hashing, deprecated (and libcrypt)",
    "ossaudiodev": "sound",
    "audioop": "sound",
    "pydoc_data": "help() texts",
    "turtle": "teaching graphics",
    "antigravity": "an easter egg",
    "this": "an easter egg",
    "__hello__": "a frozen-module example",
    "__phello__": "a frozen-module example",
    "sitecustomize": "Debian's hook for apport, which is not in the image",
    "EXTERNALLY-MANAGED": "pip's marker; the image has no pip",
}

# Libraries the manylinux policies let a wheel link without bundling (glibc's, libgcc_s,
# libstdc++, zlib): kept whether or not the standard library needs them, because the product's
# wheels do (re2 and frozenlist are C++) and glibc loads libgcc_s itself to unwind a thread.
MANYLINUX_LIBRARIES = (
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "librt.so.1",
    "libpthread.so.0",
    "libutil.so.1",
    "libresolv.so.2",
    "libgcc_s.so.1",
    "libstdc++.so.6",
    "libz.so.1",
)

NONROOT = 65532
ETC_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n",
    "etc/group": f"root:x:0:\nnogroup:x:65534:\nnonroot:x:{NONROOT}:\n",
    "etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
}
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"
# OpenSSL's directory in Debian's build (OPENSSLDIR): Python's default verify paths point here.
SYMLINKS = {
    "usr/lib/ssl/certs": "/etc/ssl/certs",
    "usr/lib/ssl/cert.pem": f"/{CA_BUNDLE}",
    "usr/lib/ssl/openssl.cnf": "/etc/ssl/openssl.cnf",
}


@dataclass
class Selection:
    """Paths (relative to the unpacked tree) to copy, and what to write that the tree lacks."""

    paths: set[str] = field(default_factory=set)
    generated: dict[str, bytes] = field(default_factory=dict)
    symlinks: dict[str, str] = field(default_factory=dict)
    directories: dict[str, tuple[int, int]] = field(default_factory=dict)  # path: (mode, uid)


def _python(tree: Path) -> tuple[str, str]:
    """(`usr/bin/python3.X`, `usr/lib/python3.X`) of the one Python in the tree."""
    found = sorted(tree.glob("usr/lib/python3.*/os.py"))
    if len(found) != 1:
        raise SystemExit(f"{tree}: expected one usr/lib/python3.X, found {found}")
    version = found[0].parent.name
    return f"usr/bin/{version}", f"usr/lib/{version}"


def _dropped(relative: PurePosixPath) -> bool:
    """Whether a path below the standard library's directory is in `DROPPED`."""
    top = relative.parts[0]
    if top == "lib-dynload" and len(relative.parts) == 2:
        return relative.name.split(".", 1)[0] in DROPPED
    return top.removesuffix(".py") in DROPPED


def _walk(tree: Path, start: str) -> Iterator[str]:
    for directory, dirs, files in os.walk(tree / start):
        dirs.sort()
        for name in sorted(files):
            yield str((Path(directory) / name).relative_to(tree))


def _with_links(tree: Path, path: str, into: set[str]) -> str:
    """Add `path` and, if it or a directory above it is a symlink, what it points to (inside
    the tree); return the real path's relative name."""
    current = PurePosixPath(path)
    for _ in range(40):
        walked = PurePosixPath()
        for part in current.parts:
            candidate = walked / part
            full = tree / candidate
            if full.is_symlink():
                into.add(str(candidate))
                target = PurePosixPath(os.readlink(full))
                rest = current.relative_to(candidate)
                base = PurePosixPath("/") if target.is_absolute() else walked
                joined = (base / target / rest).as_posix().lstrip("/")
                current = PurePosixPath(os.path.normpath(joined))
                break
            walked = candidate
        else:
            into.add(str(current))
            return str(current)
    raise SystemExit(f"{path}: too many symbolic links")


def _resolve(tree: Path, soname: str, origin: str, search: Iterable[str], triplet: str) -> str:
    directories = [
        *(
            entry.replace("$ORIGIN", "/" + origin).replace("${ORIGIN}", "/" + origin)
            for entry in search
        ),
        f"/lib/{triplet}",
        f"/usr/lib/{triplet}",
        "/lib",
        "/usr/lib",
    ]
    for directory in directories:
        candidate = os.path.normpath(f"{directory}/{soname}").lstrip("/")
        if (tree / candidate).exists():
            return candidate
    raise SystemExit(f"{soname} (needed by {origin}): not in the unpacked packages")


def library_closure(tree: Path, roots: Iterable[str], triplet: str) -> set[str]:
    """Every path the loader opens to start `roots` (relative paths of ELF files in `tree`),
    symlinks included; `roots` themselves too."""
    kept: set[str] = set()
    pending = [_with_links(tree, root, kept) for root in roots]
    seen: set[str] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        dynamic = read_dynamic(tree / path)
        if dynamic.interpreter:
            pending.append(_with_links(tree, dynamic.interpreter.lstrip("/"), kept))
        origin = str(PurePosixPath(path).parent)
        for soname in dynamic.needed:
            found = _resolve(tree, soname, origin, dynamic.search, triplet)
            pending.append(_with_links(tree, found, kept))
    return kept


def ca_bundle(tree: Path) -> bytes:
    """Mozilla's certificates as Debian ships them, joined in name order (what
    `update-ca-certificates` writes from the default configuration)."""
    certificates = sorted((tree / "usr/share/ca-certificates/mozilla").glob("*.crt"))
    if not certificates:
        raise SystemExit(f"{tree}: no CA certificates (is ca-certificates unpacked?)")
    return b"".join(
        path.read_bytes() if path.read_bytes().endswith(b"\n") else path.read_bytes() + b"\n"
        for path in certificates
    )


def select(tree: Path, arch: str) -> Selection:
    """What of the unpacked tree the base keeps (module docstring)."""
    triplet = TRIPLETS[arch]
    python, stdlib = _python(tree)
    chosen = Selection()
    for path in _walk(tree, stdlib):
        relative = PurePosixPath(path).relative_to(stdlib)
        if not _dropped(relative) and "__pycache__" not in relative.parts:
            chosen.paths.add(path)
    roots = [python] + [
        path
        for path in chosen.paths
        if path.startswith(f"{stdlib}/lib-dynload/") and is_elf(tree / path)
    ]
    roots += [_resolve(tree, soname, "", (), triplet) for soname in MANYLINUX_LIBRARIES]
    chosen.paths |= library_closure(tree, roots, triplet)
    chosen.symlinks["usr/bin/python3"] = PurePosixPath(python).name
    chosen.generated[CA_BUNDLE] = ca_bundle(tree)
    chosen.generated.update({path: text.encode() for path, text in ETC_FILES.items()})
    chosen.symlinks.update(SYMLINKS)
    for path in (
        "etc/ssl/openssl.cnf",
        "usr/lib/os-release",
        "etc/os-release",
        "etc/debian_version",
    ):
        _with_links(tree, path, chosen.paths)
    chosen.paths |= {str(p.relative_to(tree)) for p in tree.glob("usr/share/doc/*/copyright")}
    chosen.directories.update(
        {"tmp": (0o1777, 0), "root": (0o700, 0), "home/nonroot": (0o700, NONROOT)}
    )
    return chosen


def _parents(paths: Iterable[str]) -> set[str]:
    return {
        str(parent)
        for path in paths
        for parent in PurePosixPath(path).parents
        if str(parent) != "."
    }


def write_tar(tree: Path, chosen: Selection, out: Path) -> None:
    """The selection as a tar, every entry owned by root (but /home/nonroot), in name order,
    with the packages' modification times (the generated files take the newest of them), so the
    same packages give the same bytes."""
    everything = (
        chosen.paths | set(chosen.generated) | set(chosen.symlinks) | set(chosen.directories)
    )
    newest = max(int((tree / path).lstat().st_mtime) for path in chosen.paths)
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as archive:
        for path in sorted(_parents(everything) | everything):
            info = tarfile.TarInfo(path)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = newest
            if path in chosen.generated:
                data = chosen.generated[path]
                info.size, info.mode = len(data), 0o644
                archive.addfile(info, io.BytesIO(data))
            elif path in chosen.symlinks:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, chosen.symlinks[path], 0o777
                archive.addfile(info)
            elif path in chosen.directories or path not in chosen.paths:
                mode, owner = chosen.directories.get(path, (0o755, 0))
                info.type, info.mode = tarfile.DIRTYPE, mode
                if owner:
                    info.uid = info.gid = owner
                    info.uname = info.gname = "nonroot"
                archive.addfile(info)
            else:
                full = tree / path
                status = full.lstat()
                info.mtime = int(status.st_mtime)
                info.mode = stat.S_IMODE(status.st_mode)
                if stat.S_ISLNK(status.st_mode):
                    info.type, info.linkname = tarfile.SYMTYPE, os.readlink(full)
                    archive.addfile(info)
                elif stat.S_ISDIR(status.st_mode):
                    info.type = tarfile.DIRTYPE
                    archive.addfile(info)
                else:
                    info.size = status.st_size
                    with full.open("rb") as handle:
                        archive.addfile(info, handle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("tree", type=Path, help="packages unpacked by mmdebstrap --variant=extract")
    parser.add_argument("--arch", required=True, choices=sorted(TRIPLETS))
    parser.add_argument("--out", required=True, type=Path, help="the tar to write")
    args = parser.parse_args(argv)
    chosen = select(args.tree, args.arch)
    write_tar(args.tree, chosen, args.out)
    size = sum((args.tree / p).lstat().st_size for p in chosen.paths)
    print(f"[rootfs] {args.arch}: {len(chosen.paths)} files, {size / 1e6:.1f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
