"""Parsing Python source in tests that read the project's own code (shape and purity checks).

Why not plain `ast.parse`: CPython 3.11 before 3.11.8 (CI's interpreter is 3.11.7) keeps one
recursion-depth counter per interpreter for turning a parsed tree into `ast` objects
(python/cpython gh-106905, fixed by giving each call its own counter). If anything parses while
a conversion is under way, the outer call fails with "SystemError: AST constructor recursion
depth mismatch". In a test process that happens when the collector runs inside the conversion
and finalises an object whose finaliser formats a traceback (3.11's tracebacks parse the failing
line to draw their carets): an asyncio Task with an exception nobody retrieved is one. CI met
it once (2026-11-30). With the collector off for the parse, no Python code runs inside it.
"""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse_python(source: str | Path) -> ast.Module:
    """The module tree of `source` (text, or a file to read), parsed with the collector off."""
    text = source.read_text() if isinstance(source, Path) else source
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(text)
    finally:
        if was_enabled:
            gc.enable()
