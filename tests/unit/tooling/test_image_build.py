"""The image build's helpers (src/jobset_controller_dev/image): the release archive's renaming,
what the venv's assembly removes and compiles, what the base keeps. The images themselves are
the image tier's (tests/image); these pin the rules without podman."""

from __future__ import annotations

import hashlib
import io
import json
import marshal
import sys
import tarfile
from pathlib import Path, PurePosixPath

import pytest

from jobset_controller.manager.environment import go_arch
from jobset_controller_dev.image import assemble, oci, rootfs
from jobset_controller_dev.image.elf import is_elf, read_dynamic


# ------------------------------------------------------------------------------ the OCI archive
def _blob(data: bytes) -> tuple[str, bytes]:
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def _archive(path: Path) -> str:
    """A two-architecture OCI archive as `podman manifest push --all` writes it (index.json
    naming one image index, which lists one manifest per platform); the index's digest."""
    manifests = [
        {"digest": _blob(arch.encode())[0], "platform": {"os": "linux", "architecture": arch}}
        for arch in ("amd64", "arm64")
    ]
    nested_digest, nested = _blob(json.dumps({"manifests": manifests}).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "digest": nested_digest,
                "annotations": {oci.REF_NAME: "localhost/jobset-controller:abc"},
            }
        ],
    }
    members = {
        "oci-layout": b'{"imageLayoutVersion":"1.0.0"}',
        "index.json": json.dumps(index).encode(),
        "blobs/" + nested_digest.replace(":", "/"): nested,
    }
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return nested_digest


def test_renaming_the_release_archive_names_its_image_and_keeps_the_pinned_digest(
    tmp_path: Path,
) -> None:
    built = tmp_path / "built.oci.tar"
    digest = _archive(built)
    released = tmp_path / "release.oci.tar"
    oci.renamed(built, released, "registry.example.com/you/jobset-controller:v0.1.0")
    assert oci.digest(released) == oci.digest(built) == digest
    with tarfile.open(released) as tar:
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
        names = tar.getnames()
    assert index["manifests"][0]["annotations"][oci.REF_NAME] == (
        "registry.example.com/you/jobset-controller:v0.1.0"
    )
    with tarfile.open(built) as tar:
        assert names == tar.getnames()


def test_the_archive_lists_each_architecture_of_its_index(tmp_path: Path) -> None:
    _archive(tmp_path / "a.oci.tar")
    assert oci.platforms(tmp_path / "a.oci.tar") == ["linux/amd64", "linux/arm64"]


def test_an_archive_of_several_images_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "two.oci.tar"
    data = json.dumps({"manifests": [{"digest": "sha256:1"}, {"digest": "sha256:2"}]}).encode()
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo("index.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ValueError, match="one image"):
        oci.digest(path)


# ------------------------------------------------------------------------------ the venv
def _write(path: Path, text: str = "x = 1\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_pruning_removes_what_no_import_reads_and_keeps_the_generated_packages_inits(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site-packages"
    kept = [
        _write(site / "pkg/__init__.py"),
        _write(site / "pkg/core.py"),
        _write(site / "kubernetes/client/models/__init__.py"),
        _write(site / "kubernetes/client/api/__init__.py"),
        _write(site / "pkg-1.0.dist-info/RECORD"),
        _write(site / "pkg-1.0.dist-info/tests/kept-in-metadata"),
    ]
    removed = [
        _write(site / "pkg/tests/test_core.py"),
        _write(site / "pkg/core.pyi"),
        _write(site / "pkg/py.typed", ""),
        _write(site / "pkg/_speedups.c"),
        _write(site / "kubernetes/client/models/v1_pod.py"),
        _write(site / "kubernetes/aio/client/api/core_v1_api.py"),
    ]
    freed = assemble.prune(site)
    assert all(path.exists() for path in kept)
    assert not [path for path in removed if path.exists()]
    assert freed == 5 * len("x = 1\n")  # py.typed is empty


def test_bytecode_is_written_for_listed_modules_only_and_names_the_image_path(
    tmp_path: Path,
) -> None:
    source_root = tmp_path / "stdlib"
    _write(source_root / "listed.py", "def f():\n    return 1\n")
    _write(source_root / "pkg/__init__.py")
    _write(source_root / "pkg/inner.py")
    _write(source_root / "unlisted.py")
    _write(source_root / "_sysconfigdata__linux_x86_64-linux-gnu.py")
    out = tmp_path / "out"
    image_root = Path("/usr/lib/python3.x")
    compiled, missing = assemble.write_bytecode(
        ["listed", "pkg", "pkg.inner", "_sysconfigdata_*", "absent"],
        [(source_root, image_root, out)],
    )
    assert (compiled, missing) == (4, ["absent"])
    tag = sys.implementation.cache_tag
    pyc = out / "__pycache__" / f"listed.{tag}.pyc"
    code = marshal.loads(pyc.read_bytes()[16:])
    assert code.co_filename == str(image_root / "listed.py")
    assert not (out / "__pycache__" / f"unlisted.{tag}.pyc").exists()
    assert (out / "pkg" / "__pycache__" / f"inner.{tag}.pyc").exists()


def test_the_modules_list_skips_comments_and_blank_lines(tmp_path: Path) -> None:
    listed = _write(tmp_path / "modules.txt", "# why\n\nasyncio\nssl  # TLS\n")
    assert assemble.read_modules(listed) == ["asyncio", "ssl"]


# ------------------------------------------------------------------------------ the base
@pytest.mark.parametrize(
    ("path", "dropped"),
    [
        ("test/test_os.py", True),
        ("sqlite3/__init__.py", True),
        ("lib-dynload/_sqlite3.cpython-311-x86_64-linux-gnu.so", True),
        ("lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so", False),
        ("turtle.py", True),
        ("asyncio/events.py", False),
        ("email/test/data.txt", False),
    ],
)
def test_the_base_leaves_out_the_standard_librarys_unused_parts(path: str, dropped: bool) -> None:
    assert rootfs._dropped(PurePosixPath(path)) is dropped


def test_every_dropped_part_says_why() -> None:
    assert all(reason.strip() for reason in rootfs.DROPPED.values())


def test_the_library_closure_of_this_machines_python_holds_its_loader_and_c_library() -> None:
    """Read on this machine's own files, with the rules the base is cut by (arm64's are read the
    same way on amd64: nothing is run)."""
    python = Path(sys.executable).resolve()
    triplet = rootfs.TRIPLETS.get(go_arch())
    if triplet is None or not is_elf(python) or not Path("/usr/lib", triplet).is_dir():
        pytest.skip("needs a Debian multiarch layout of amd64, arm64 or s390x")
    closure = rootfs.library_closure(Path("/"), [str(python).lstrip("/")], triplet)
    names = {PurePosixPath(path).name for path in closure}
    interpreter = read_dynamic(python).interpreter
    assert interpreter is not None
    assert {"libc.so.6", PurePosixPath(interpreter).name} <= names
