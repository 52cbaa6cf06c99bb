"""The image's virtual environment, made without running the target architecture's code: the
wheels installed, the files a controller never reads removed, and bytecode written for the
modules it imports in a cluster. The Dockerfile copies the tree it writes onto the base.

Why this way: hack/image.sh runs it in a container of the build machine's own runtime base (the
same Debian Python 3.11 as the target's), so an arm64 image is assembled at native speed and
nothing is emulated. (A `FROM --platform=$BUILDPLATFORM` build stage would do the same, but
podman 4.3 then looks the final stage's base up for the build platform and does not find it.)
Installing a wheel is unpacking it (PyPA's `installer` does that and writes the console scripts,
whose `#!` line names the venv's Python: the kernel starts them, no shell), and bytecode does
not depend on the architecture, only on the Python version (checked).

Runs as a plain script (`python3.11 assemble.py ...`) with the standard library and `installer`
(a wheel on `PYTHONPATH`): it imports nothing else, from the project or elsewhere.

Bytecode is written only for the modules listed in `hack/image/cluster-modules.txt` (measured:
what `run` and the in-place restart agent import in a cluster; the image tests fail when a module
they import has none), as unchecked-hash .pyc files (an image's sources never change; the bytes
do not depend on file times). The root filesystem is read-only in a pod, so the other modules
(the offline tools, the exec-credential path) are compiled in memory when imported, as before.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import py_compile
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

VENV = "/opt/jobset-controller"

# Files no import reads: tests shipped inside packages, type stubs and markers, C sources.
PRUNED_DIRECTORIES = frozenset({"tests", "test"})
PRUNED_SUFFIXES = (".pyi", ".pyx", ".pxd", ".c", ".h")
PRUNED_NAMES = frozenset({"py.typed"})
# The `kubernetes` client's generated code: one module per API group and per type (about 1,700
# modules, 73 MB), each loaded only when its name is asked for (the packages' `__getattr__`).
# The product uses the client for one thing, the official kubeconfig loader for exec and
# auth-provider users (runtime/kubeconfig.py), which asks for none of them. The packages'
# `__init__.py` stay, so `kubernetes.client` still imports.
GENERATED = (
    "kubernetes/client/api",
    "kubernetes/client/models",
    "kubernetes/aio/client/api",
    "kubernetes/aio/client/models",
)


def make_venv(out: Path, version: str) -> Path:
    """The venv's layout under `out`: `bin/python*` pointing at the base's interpreter and a
    `pyvenv.cfg`; returns its site-packages directory."""
    venv = out / VENV.lstrip("/")
    (venv / "bin").mkdir(parents=True)
    for name in ("python", "python3", f"python{version}"):
        (venv / "bin" / name).symlink_to(f"/usr/bin/python{version}")
    (venv / "pyvenv.cfg").write_text(
        f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {version}\n"
    )
    site = venv / "lib" / f"python{version}" / "site-packages"
    site.mkdir(parents=True)
    (venv / "lib64").symlink_to("lib")
    return site


def install_wheels(wheels: Iterable[Path], out: Path, version: str) -> None:
    """Unpack each wheel into the venv as pip would, scripts started by the venv's Python."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    site = f"{VENV}/lib/python{version}/site-packages"
    destination = SchemeDictionaryDestination(
        {
            "purelib": site,
            "platlib": site,
            "headers": f"{VENV}/include/site/python{version}",
            "scripts": f"{VENV}/bin",
            "data": VENV,
        },
        interpreter=f"{VENV}/bin/python",
        script_kind="posix",
        destdir=str(out),
    )
    for wheel in sorted(wheels):
        with WheelFile.open(wheel) as source:
            install(source, destination, {"INSTALLER": b"jobset-controller image build\n"})


def prune(site: Path) -> int:
    """Remove what no import reads (`PRUNED_*`, `GENERATED`); returns the bytes removed."""
    removed = 0

    def drop(path: Path) -> None:
        nonlocal removed
        if path.is_dir():
            removed += sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
            shutil.rmtree(path)
        else:
            removed += path.stat().st_size
            path.unlink()

    for package in GENERATED:
        for module in sorted((site / package).glob("*.py")):
            if module.name != "__init__.py":
                drop(module)
    for directory, dirs, files in os.walk(site, topdown=True):
        here = Path(directory)
        if here.name.endswith(".dist-info"):
            dirs[:] = []
            continue
        for name in sorted(dirs):
            if name in PRUNED_DIRECTORIES:
                drop(here / name)
                dirs.remove(name)
        for name in files:
            if name in PRUNED_NAMES or name.endswith(PRUNED_SUFFIXES):
                drop(here / name)
    return removed


def module_files(name: str, roots: Iterable[Path]) -> Iterator[Path]:
    """The source file of module `name` (`a.b` is `a/b.py` or `a/b/__init__.py`) under the
    first root that has it; nothing for a built-in or an extension module. A top-level name
    with `*` is a pattern: every module file of a root it matches."""
    if "*" in name:
        for root in roots:
            yield from sorted(root.glob(f"{name}.py"))
        return
    relative = Path(*name.split("."))
    for root in roots:
        for candidate in (root / relative.with_suffix(".py"), root / relative / "__init__.py"):
            if candidate.is_file():
                yield candidate
                return


def write_bytecode(
    modules: Iterable[str], roots: list[tuple[Path, Path, Path]]
) -> tuple[int, list[str]]:
    """Compile each module found under a root. `roots` holds (where to read the source, where
    the source will be in the image, where to write the cache in the output tree); returns the
    number compiled and the names found nowhere."""
    compiled, missing = 0, []
    for name in modules:
        found = False
        for source_root, image_root, cache_root in roots:
            for source in module_files(name, [source_root]):
                relative = source.relative_to(source_root)
                cache = Path(importlib.util.cache_from_source(str(cache_root / relative)))
                cache.parent.mkdir(parents=True, exist_ok=True)
                py_compile.compile(
                    str(source),
                    cfile=str(cache),
                    dfile=str(image_root / relative),
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                )
                compiled += 1
                found = True
            if found:
                break
        if not found:
            missing.append(name)
    return compiled, missing


def read_modules(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument(
        "--wheels", type=Path, nargs="+", required=True, help="directories of wheels"
    )
    parser.add_argument("--modules", type=Path, required=True, help="the modules to compile")
    parser.add_argument(
        "--target-stdlib",
        type=Path,
        required=True,
        help="a copy of the target's /usr/lib/python3.X",
    )
    parser.add_argument("--out", type=Path, required=True, help="the tree the image copies in")
    args = parser.parse_args(argv)

    version = args.target_stdlib.name.removeprefix("python")
    mine = f"{sys.version_info.major}.{sys.version_info.minor}"
    if version != mine:
        raise SystemExit(f"the target's Python is {version}, this build stage's {mine}")
    site = make_venv(args.out, version)
    wheels = [wheel for directory in args.wheels for wheel in directory.glob("*.whl")]
    install_wheels(wheels, args.out, version)
    removed = prune(site)
    stdlib_in_image = Path("/usr/lib") / args.target_stdlib.name
    compiled, missing = write_bytecode(
        read_modules(args.modules),
        [
            (args.target_stdlib, stdlib_in_image, args.out / stdlib_in_image.relative_to("/")),
            (site, Path(VENV) / site.relative_to(args.out / VENV.lstrip("/")), site),
        ],
    )
    print(
        f"[assemble] {len(wheels)} wheels; {removed / 1e6:.1f} MB pruned; {compiled} modules "
        f"compiled; {len(missing)} listed modules not in this image: {' '.join(missing[:20])}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
