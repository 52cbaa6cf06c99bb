"""The release's OCI image archive: the multi-architecture index's digest (what the release's
manifests pin) and a copy of the archive under the release's image reference.

Why not `podman manifest push` again with the new name: that recompresses every layer of every
architecture (a minute or more); the reference is one annotation in the archive's `index.json`,
outside every digested blob, so renaming is copying the tar with that file rewritten, and the
index's digest (the pinned one) stays the same.
"""

from __future__ import annotations

import argparse
import io
import json
import tarfile
from pathlib import Path
from typing import Any

REF_NAME = "org.opencontainers.image.ref.name"


def _index(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{archive}: no index.json")
        index: dict[str, Any] = json.load(member)
    if len(index.get("manifests", ())) != 1:
        raise ValueError(f"{archive}: expected one image (a manifest list) in index.json")
    return index


def digest(archive: Path) -> str:
    """The digest of the archive's one image: for a multi-architecture image, its index's."""
    return str(_index(archive)["manifests"][0]["digest"])


def platforms(archive: Path) -> list[str]:
    """`os/arch` of each image the archive's index lists."""
    with tarfile.open(archive) as tar:
        blob = "blobs/" + digest(archive).replace(":", "/")
        member = tar.extractfile(blob)
        if member is None:
            raise ValueError(f"{archive}: no {blob}")
        nested = json.load(member)
    return [f"{m['platform']['os']}/{m['platform']['architecture']}" for m in nested["manifests"]]


def renamed(archive: Path, out: Path, reference: str) -> None:
    """Copy `archive` to `out` with its image named `reference` (registry/name:tag)."""
    index = _index(archive)
    index["manifests"][0].setdefault("annotations", {})[REF_NAME] = reference
    data = json.dumps(index, separators=(",", ":")).encode()
    with tarfile.open(archive) as source, tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as copy:
        for member in source.getmembers():
            if member.name == "index.json":
                member.size = len(data)
                copy.addfile(member, io.BytesIO(data))
            else:
                copy.addfile(member, source.extractfile(member) if member.isfile() else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("digest", help="print the archive's image digest")
    show.add_argument("archive", type=Path)
    rename = commands.add_parser("rename", help="copy the archive, its image renamed")
    rename.add_argument("archive", type=Path)
    rename.add_argument("out", type=Path)
    rename.add_argument("reference")
    args = parser.parse_args(argv)
    if args.command == "digest":
        print(digest(args.archive))
    else:
        renamed(args.archive, args.out, args.reference)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
