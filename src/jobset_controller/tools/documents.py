"""Manifest files read and judged the same way by ``validate`` and ``plan``.

Why shared: ``plan`` promises the same verdict and the same error lines as ``validate``; one
reader and one line format make that true by construction.
"""

from __future__ import annotations

import json
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


class _NotJson(ValueError):
    """A constant Python's JSON reader accepts and JSON does not (``NaN``, ``Infinity``)."""


def _no_constant(name: str) -> Any:
    raise _NotJson(f"{name} is not JSON")


def load_json_documents(text: str) -> list[Any]:
    """Every JSON value of ``text``, one after another (a stream, as kubectl reads a .json file).

    Why JSON is read as JSON: YAML's reader decodes each ``\\u`` escape alone, so the surrogate
    pair ``"\\ud800\\udc00"`` (U+10000, valid JSON) becomes two lone surrogates; the JSON reader
    combines the pair. ``NaN`` and ``Infinity`` are refused as the API server's reader refuses them.
    """
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    documents: list[Any] = []
    position = 0
    while True:
        while position < len(text) and text[position] in " \t\r\n":
            position += 1
        if position == len(text):
            return documents
        document, position = decoder.raw_decode(text, position)
        documents.append(document)


def read_documents(path: Path) -> list[Any]:
    """The documents of one file (``.json`` as JSON, anything else as YAML, which JSON also is);
    the exceptions carry the line to print."""
    try:
        text = path.read_text()
    except (OSError, ValueError) as error:  # ValueError: a NUL or a lone surrogate in the name
        raise UnreadableFile(one_line(f"{path}: cannot read: {error}")) from error
    try:
        if path.suffix.lower() == ".json":
            return load_json_documents(text)
        return load_documents(text)
    except (OSError, UnicodeError, yaml.YAMLError, json.JSONDecodeError, _NotJson) as error:
        # Not JSON or YAML at all (checked before the ValueError below, which these are too).
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
        yield from judge_documents(path, documents, gates, uncheckable=uncheckable)


def judge_documents(
    path: Path,
    documents: list[Any],
    gates: FeatureGates,
    *,
    uncheckable: Callable[[str], None] | None = None,
) -> Iterator[Judged]:
    """The JobSet documents of a file, judged; other kinds and empty documents are skipped.

    A document holding a string that is not Unicode text (a lone surrogate, from a YAML or JSON
    ``\\ud800`` escape) is reported to ``uncheckable`` naming the field, and not judged: every
    check measures names in UTF-8 bytes as the API server does, and such a string has none.
    """
    for number, document in enumerate(documents, start=1):
        if document is None:
            continue
        field = not_utf8_field(document)
        if field is not None:
            line = one_line(f"{path}: document {number}: {field}: not valid UTF-8 text")
            if uncheckable is None:
                raise UncheckableFile(line)
            uncheckable(line)
            continue
        check = check_manifest(document, features=gates)
        if check.is_jobset:
            yield Judged(path, number, check)


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (holds no lone surrogate)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def not_utf8_field(document: Any) -> str | None:
    """The path (``metadata.name``, ``spec.replicatedJobs[0]``) of the first string, key or
    value, that is not UTF-8 text; ``None`` when every string is.

    Walked with an explicit stack, not recursion: documents may be nested thousands deep (they
    are reported as too deep later, by the checks, which is where that verdict belongs).
    """
    stack: list[tuple[str, Any]] = [("", document)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, str):
            if not is_utf8(value):
                return where or "(the document)"
        elif isinstance(value, dict):
            items = list(value.items())
            for key, item in reversed(items):
                if isinstance(key, str) and not is_utf8(key):
                    return f"{where or '(the document)'}: a key"
                stack.append((f"{where}.{key}" if where else str(key), item))
        elif isinstance(value, list):
            stack.extend(
                (f"{where}[{index}]", item) for index, item in reversed(list(enumerate(value)))
            )
    return None


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so one message is a line."""
    if text.isprintable():
        return text
    return "".join(
        char if char.isprintable() else char.encode("unicode_escape").decode("ascii")
        for char in text
    )
