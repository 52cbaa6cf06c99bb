"""Manifest files read and judged the same way by ``validate`` and ``plan``.

Why shared: ``plan`` promises the same verdict and the same error lines as ``validate``; one
reader and one line format make that true by construction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from jobset_controller.api import FeatureGates
from jobset_controller.api.manifest import ManifestCheck, check_manifest


class UnreadableFile(Exception):
    """The file cannot be read as YAML at all (bad usage: exit 2)."""


class UncheckableFile(Exception):
    """Valid YAML this process cannot hold (too deep, an integer too long): a failed check."""


class _JsonCompatibleLoader(yaml.SafeLoader):
    """YAML as the API server's YAML-to-JSON conversion reads it: timestamps stay strings."""


_JsonCompatibleLoader.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_documents(text: str) -> list[Any]:
    """Every YAML document of ``text`` (``None`` for an empty one)."""
    return list(yaml.load_all(text, Loader=_JsonCompatibleLoader))


def read_documents(path: Path) -> list[Any]:
    """The documents of one file; the exceptions carry the line to print."""
    try:
        return load_documents(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise UnreadableFile(one_line(f"{path}: cannot read: {error}")) from error
    except (RecursionError, ValueError) as problem:
        reason = "nested too deeply" if isinstance(problem, RecursionError) else problem
        raise UncheckableFile(one_line(f"{path}: cannot check: {reason}")) from problem


@dataclass(frozen=True)
class Judged:
    """One JobSet document of a file and the verdict on it."""

    path: Path
    number: int
    check: ManifestCheck

    @property
    def subject(self) -> str:
        """``JobSet <name>``, or ``document <n>`` for a JobSet without a name."""
        return f"JobSet {self.check.name}" if self.check.name else f"document {self.number}"

    def error_lines(self) -> list[str]:
        """One line per error, ``<file>: <subject>: <field error>``."""
        return [one_line(f"{self.path}: {self.subject}: {error}") for error in self.check.errors]


def judge_files(
    files: Iterable[Path], gates: FeatureGates, *, uncheckable: Callable[[str], None]
) -> Iterator[Judged]:
    """The JobSet documents of every file, judged in order. A file that cannot be checked is
    reported to ``uncheckable`` (one line) and skipped; ``UnreadableFile`` propagates, since a
    file that is not YAML at all ends the command (exit 2)."""
    for path in files:
        try:
            documents = read_documents(path)
        except UncheckableFile as error:
            uncheckable(str(error))
            continue
        yield from judge_documents(path, documents, gates)


def judge_documents(path: Path, documents: list[Any], gates: FeatureGates) -> Iterator[Judged]:
    """The JobSet documents of a file, judged; other kinds and empty documents are skipped."""
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue
        check = check_manifest(document, features=gates)
        if check.is_jobset:
            yield Judged(path, number, check)


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so one message is a line."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )
