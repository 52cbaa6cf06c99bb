"""The docs cannot rot: what README.md and docs/*.md name exists, and their links resolve.

Why a test: the docs name modules, scripts, make targets and flags that the code renames and
drops, and a reader who copies a command that no longer exists loses the trust the rest of the
page needs. Each rule is simple enough that a failure says exactly what to fix, as
`file:line: what is missing`:

- Paths. A token that starts with a top-level directory of the repository (`src/`, `tests/`,
  `hack/`, ...), anywhere in the text, must exist; with a `*` it is a glob that must match; a
  `#anchor` after a Markdown path must resolve in that file. A `<dir>/<module>.py` token that
  starts elsewhere names a module of ours, relative to `src/` or one of the two packages in it.
- Code (code spans and the lines of fenced blocks). `make X` needs a Makefile target X. A flag
  `--x` belongs to the nearest command before it in its span or line: `jobset-controller [sub]`
  and `kubectl jobset [sub]` (checked against `cli.build_parser`), `in-place-restart-agent` and
  `jobset-controller agent` (the agent's own parser), or a script under `hack/` named by path or
  file name (the flag must appear in its source). A span that starts with a flag is one of ours:
  some parser of ours must accept it. A flag after any other program is that program's, and is
  not checked: write another program's flag after its name.
- Links. Every `[text](target)` outside code that is not a URL must name an existing file
  relative to its doc, and its `#anchor` a heading (GitHub's slug) or an `<a id>` there.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobset_controller import agent
from jobset_controller.cli import build_parser

ROOT = Path(__file__).resolve().parents[3]
TOP_DIRS = ("src", "tests", "hack", "docs", "manifests", "charts", "examples", ".ci")
# Where a module path that does not start at the root is looked for: our packages, or src/.
MODULE_BASES = ("src", "src/jobset_controller", "src/jobset_controller_dev")

_NOT_AFTER = r"(?<![\w./~$-])"  # a path's start: not inside a word, a URL or another path
_ROOT_PATH = re.compile(
    _NOT_AFTER + r"((?:" + "|".join(map(re.escape, TOP_DIRS)) + r")/[\w./*+-]*)(#[\w-]+)?"
)
_MODULE_PATH = re.compile(_NOT_AFTER + r"((?:[a-z_][a-z0-9_]*/)+[a-z_][a-z0-9_]*\.py)\b")
_SPAN = re.compile(r"`([^`]+)`")
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_MAKE = re.compile(r"(?:^|[\s;&|(])make\s+([A-Za-z][\w-]*)")
_FLAG = re.compile(r"(?<![\w-])--([a-z0-9][a-z0-9-]*)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


@dataclass(frozen=True)
class Code:
    """A code span, or a logical line of a fenced block (continuations joined)."""

    line: int
    text: str


@dataclass(frozen=True)
class Doc:
    path: Path
    text: str  # the whole file
    prose: str  # the file with code blanked out, same offsets, so line numbers hold
    code: tuple[Code, ...]
    headings: tuple[str, ...]

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1


def read_doc(path: Path) -> Doc:
    text = path.read_text()
    lines = text.split("\n")
    prose_lines: list[str] = []
    code: list[Code] = []
    headings: list[str] = []
    in_block, pending, pending_line = False, "", 0
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            prose_lines.append("")
            continue
        if in_block:
            prose_lines.append("")
            logical = re.sub(r"(^|\s)#.*$", "", line)  # a shell comment is not code
            if not pending:
                pending_line = number
            if logical.rstrip().endswith("\\"):
                pending += logical.rstrip()[:-1] + " "
                continue
            code.append(Code(pending_line, pending + logical))
            pending = ""
            continue
        prose_lines.append(line)
        if match := _HEADING.match(line):
            headings.append(match.group(2))
    outside = "\n".join(prose_lines)
    for span in _SPAN.finditer(outside):
        code.append(Code(outside.count("\n", 0, span.start()) + 1, span.group(1)))
    prose = _SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), outside)
    return Doc(path, text, prose, tuple(sorted(code, key=lambda c: c.line)), tuple(headings))


def where(doc: Doc, line: int) -> str:
    return f"{doc.path.name if doc.path.parent.name != 'docs' else 'docs/' + doc.path.name}:{line}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text (links to their words, no code marks or tags),
    lower case, punctuation dropped (letters, digits, `_` and `-` kept), spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(doc: Doc) -> set[str]:
    found: set[str] = set(_HTML_ANCHOR.findall(doc.text))
    seen: dict[str, int] = {}
    for heading in doc.headings:
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _exists(root: Path, path: str) -> bool:
    if "*" in path:
        return any(root.glob(path.rstrip("/")))
    return (root / path).exists()


def path_problems(doc: Doc, root: Path) -> Iterator[str]:
    for match in _ROOT_PATH.finditer(doc.text):
        path, anchor = match.group(1).rstrip(".,:;"), match.group(2)
        line = doc.line_of(match.start())
        if not _exists(root, path):
            yield f"{where(doc, line)}: path `{path}` does not exist"
        elif anchor and path.endswith(".md") and anchor[1:] not in anchors(read_doc(root / path)):
            yield f"{where(doc, line)}: `{path}` has no anchor `{anchor}`"
    for match in _MODULE_PATH.finditer(doc.text):
        module = match.group(1)
        if module.split("/")[0] in TOP_DIRS:
            continue
        if not any((root / base / module).is_file() for base in MODULE_BASES):
            line = doc.line_of(match.start())
            yield f"{where(doc, line)}: module `{module}` is not under {', '.join(MODULE_BASES)}"


def make_targets(makefile: Path) -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*)\s*:", makefile.read_text(), flags=re.M))


def make_problems(doc: Doc, targets: set[str]) -> Iterator[str]:
    for code in doc.code:
        for target in _MAKE.findall(code.text):
            if target not in targets:
                yield f"{where(doc, code.line)}: `make {target}`: no such target in the Makefile"


@dataclass(frozen=True)
class Commands:
    """The flags each command of ours accepts: the CLI per subcommand ("" for the top level),
    and the agent's."""

    cli: Mapping[str, frozenset[str]]
    agent: frozenset[str]

    def everything(self) -> frozenset[str]:
        return self.agent.union(*self.cli.values())


def our_commands() -> Commands:
    """Read from the parsers themselves: `cli.build_parser` per subcommand, and the agent's
    parser (built inside `agent.main`, so read from its `--help`)."""
    parser = build_parser()
    cli = {"": frozenset(parser._option_string_actions)}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                cli[name] = frozenset(sub._option_string_actions)
    help_text = io.StringIO()
    with contextlib.redirect_stdout(help_text), pytest.raises(SystemExit):
        agent.main(["--help"])
    options = re.findall(r"^ {2}(-\S+(?:, -\S+)*)", help_text.getvalue(), flags=re.M)
    agent_flags = frozenset(flag.split()[0] for line in options for flag in line.split(", "))
    return Commands(cli, agent_flags)


def _scripts(root: Path) -> dict[str, Path]:
    """hack/ scripts by path and by file name (a name two scripts share is left out)."""
    scripts = [p for p in (root / "hack").rglob("*") if p.suffix in (".sh", ".py")]
    by_name: dict[str, list[Path]] = {}
    for script in scripts:
        by_name.setdefault(script.name, []).append(script)
    named = {name: paths[0] for name, paths in by_name.items() if len(paths) == 1}
    return {**named, **{str(p.relative_to(root)): p for p in scripts}}


@functools.cache
def _script_flags(script: Path) -> str:
    """Where a script's flags are spelled: its text, and for a Python script the text of the
    modules beside it that it imports (the benches share flags through benchlib), transitively."""
    seen: set[Path] = set()
    pending = [script]
    texts = []
    while pending:
        path = pending.pop()
        if path in seen or not path.exists():
            continue
        seen.add(path)
        text = path.read_text()
        texts.append(text)
        if path.suffix == ".py":
            for module in re.findall(r"^\s*(?:from|import) (\w+)", text, flags=re.M):
                pending.append(path.parent / f"{module}.py")
    return "\n".join(texts)


def flag_problems(doc: Doc, commands: Commands, root: Path) -> Iterator[str]:
    scripts = _scripts(root)
    for code in doc.code:
        tokens = re.sub(r"[\[\]\"'()]", " ", code.text).split()
        owner: tuple[str, str] | None = ("ours", "") if code.text.startswith("--") else None
        for index, token in enumerate(tokens):
            following = tokens[index + 1] if index + 1 < len(tokens) else ""
            if token in ("|", ";", "&&", "||", "--"):
                owner = None  # a bare `--`: what follows goes on to another program (pytest)
            elif token in ("jobset-controller", "kubectl-jobset") or (
                token == "kubectl" and following == "jobset"
            ):
                owner = ("cli", "")
            elif (
                owner is not None and owner[0] == "cli" and owner[1] == "" and token in commands.cli
            ):
                owner = ("agent", "") if token == "agent" else ("cli", token)
            elif token == "in-place-restart-agent":
                owner = ("agent", "")
            elif token.lstrip("./") in scripts:
                owner = ("script", token.lstrip("./"))
            for flag in ("--" + name for name in _FLAG.findall(token)):
                if owner is None:
                    continue
                kind, name = owner
                if kind == "script" and not re.search(
                    rf"(?<![\w-]){re.escape(flag)}(?![\w-])", _script_flags(scripts[name])
                ):
                    yield f"{where(doc, code.line)}: `{flag}` is not in {name}"
                elif kind == "cli" and flag not in commands.cli.get(name, frozenset()):
                    command = f"jobset-controller {name}".rstrip()
                    yield f"{where(doc, code.line)}: `{command}` has no flag `{flag}`"
                elif kind == "agent" and flag not in commands.agent:
                    yield f"{where(doc, code.line)}: the agent has no flag `{flag}`"
                elif kind == "ours" and flag not in commands.everything():
                    yield f"{where(doc, code.line)}: no command of ours has the flag `{flag}`"


def link_problems(doc: Doc) -> Iterator[str]:
    for match in _LINK.finditer(doc.prose):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        line = doc.line_of(match.start())
        linked = (doc.path.parent / file_part).resolve() if file_part else doc.path
        if not linked.exists():
            yield f"{where(doc, line)}: link `{target}`: `{file_part}` does not exist"
        elif anchor and linked.suffix == ".md" and anchor not in anchors(read_doc(linked)):
            yield f"{where(doc, line)}: link `{target}`: no anchor `#{anchor}` in {linked.name}"


DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _report(problems: list[str]) -> str:
    return f"{len(problems)} problem(s) in the docs:\n" + "\n".join(problems)


def test_every_path_the_docs_name_exists() -> None:
    problems = [p for path in DOCS for p in path_problems(read_doc(path), ROOT)]
    assert not problems, _report(problems)


def test_every_make_target_the_docs_name_is_in_the_makefile() -> None:
    targets = make_targets(ROOT / "Makefile")
    problems = [p for path in DOCS for p in make_problems(read_doc(path), targets)]
    assert not problems, _report(problems)


def test_every_flag_the_docs_give_our_commands_and_scripts_is_accepted() -> None:
    commands = our_commands()
    problems = [p for path in DOCS for p in flag_problems(read_doc(path), commands, ROOT)]
    assert not problems, _report(problems)


def test_every_relative_link_and_anchor_in_the_docs_resolves() -> None:
    problems = [p for path in DOCS for p in link_problems(read_doc(path))]
    assert not problems, _report(problems)


# The rules themselves, on a repository made for the purpose.


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "hack").mkdir()
    (tmp_path / "hack" / "go.sh").write_text("# usage: hack/go.sh [--fast]\n")
    (tmp_path / "src" / "jobset_controller" / "runtime").mkdir(parents=True)
    (tmp_path / "src" / "jobset_controller" / "runtime" / "client.py").write_text("")
    (tmp_path / "Makefile").write_text("test:  ## the tests\n\thack/test.sh\n")
    (tmp_path / "docs" / "a.md").write_text(
        "# Title\n\n## Why `plan`? — it\n\n## Why `plan`? — it\n"
    )
    return tmp_path


COMMANDS = Commands({"": frozenset(), "run": frozenset({"--workers"})}, frozenset({"--kubeconfig"}))


def _doc(repo: Path, text: str) -> Doc:
    (repo / "README.md").write_text(text)
    return read_doc(repo / "README.md")


def test_a_missing_path_or_module_is_reported_with_its_line(repo: Path) -> None:
    doc = _doc(
        repo,
        "intro\nsee hack/go.sh and hack/gone.sh,\nthen `runtime/client.py` and runtime/nope.py\n",
    )
    assert list(path_problems(doc, repo)) == [
        "README.md:2: path `hack/gone.sh` does not exist",
        "README.md:3: module `runtime/nope.py` is not under src, src/jobset_controller, "
        "src/jobset_controller_dev",
    ]


def test_urls_and_paths_outside_the_repository_are_not_paths_of_ours(repo: Path) -> None:
    doc = _doc(repo, "https://example.com/hack/x.sh, ~/.cache/docs/x and /tmp/src/y\n")
    assert list(path_problems(doc, repo)) == []


def test_only_make_targets_in_code_are_checked(repo: Path) -> None:
    doc = _doc(repo, "`make test`, `make lint`; we make things in prose\n")
    assert list(make_problems(doc, make_targets(repo / "Makefile"))) == [
        "README.md:1: `make lint`: no such target in the Makefile"
    ]


def test_a_flag_belongs_to_the_command_before_it(repo: Path) -> None:
    doc = _doc(
        repo,
        "`jobset-controller run --workers 4 --nope`\n"
        "```sh\nhack/go.sh --fast --slow -- --to-pytest   # --in-a-comment\n"
        "kubectl apply --server-side -k x\n```\n"
        "`in-place-restart-agent --workers`, `--kubeconfig` and `--unknown`\n",
    )
    assert list(flag_problems(doc, COMMANDS, repo)) == [
        "README.md:1: `jobset-controller run` has no flag `--nope`",
        "README.md:3: `--slow` is not in hack/go.sh",
        "README.md:6: the agent has no flag `--workers`",
        "README.md:6: no command of ours has the flag `--unknown`",
    ]


def test_heading_anchors_are_githubs_slugs_with_repeats_numbered(repo: Path) -> None:
    assert slug("Rolling back to upstream's controller") == "rolling-back-to-upstreams-controller"
    assert anchors(read_doc(repo / "docs" / "a.md")) == {"title", "why-plan--it", "why-plan--it-1"}


def test_a_broken_link_or_anchor_is_reported(repo: Path) -> None:
    doc = _doc(
        repo,
        "[a](docs/a.md#why-plan--it) [b](docs/b.md) [c](docs/a.md#nope) [d](#title)\n"
        "[web](https://example.com/x) `[code](nowhere.md)`\n# Title\n",
    )
    assert list(link_problems(doc)) == [
        "README.md:1: link `docs/b.md`: `docs/b.md` does not exist",
        "README.md:1: link `docs/a.md#nope`: no anchor `#nope` in a.md",
    ]
