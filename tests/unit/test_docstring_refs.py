"""Every ``oncestream`` import and dotted path in the docstrings under src/ resolves.

What tests/unit/test_doc_links.py does for Markdown links, for docstrings: a
``from oncestream.x import y`` line (as written in an example) must import, and a
dotted path such as ``oncestream.spark.register`` or ``:class:`~oncestream.publish.
AtomicPublisher``` must name a module, or a module's attribute, that exists. The
layout change left docstrings naming modules that had moved (issue 42: 15 of them,
``from oncestream.spark.foreach_batch import transactional`` among them).
"""

from __future__ import annotations

import ast
import importlib
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
FILES = sorted((SRC / "oncestream").rglob("*.py"))

_FROM_IMPORT = re.compile(
    r"^[ \t]*(?:>>> |\.\.\. )?from (oncestream[\w.]*) import \(?([\w, \t]+)\)?", re.M
)
_IMPORT = re.compile(r"^[ \t]*(?:>>> |\.\.\. )?import (oncestream[\w.]*)", re.M)
# A dotted path, not a subject with a wildcard or a placeholder (``oncestream.x.>``,
# ``oncestream.schedule.<stream>``).
_PATH = re.compile(r"(?<![\w.$/-])(oncestream(?:\.[A-Za-z_]\w*)+)(?!\.?[>*<\w])")


@cache
def _code_strings() -> frozenset[str]:
    """The string constants of the package's code: span attributes, subjects, loggers."""
    found: set[str] = set()
    for file in FILES:
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.add(node.value)
    return frozenset(found)


def docstrings(source: str) -> list[tuple[int, str]]:
    """(line, text) of the module's, every class's and every function's docstring."""
    tree = ast.parse(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text:
                line = node.body[0].lineno if node.body else 1
                found.append((line, text))
    return found


@cache
def _module(name: str) -> object | None:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):  # that module, not a dependency
            return None
        raise


def resolves(path: str) -> bool:
    """Whether ``path`` is a module, or attributes of the longest module prefix."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        obj = _module(".".join(parts[:cut]))
        if obj is None:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def broken(source: str) -> list[str]:
    """What in ``source``'s docstrings names an oncestream module or name that is not there.

    A plain literal (````oncestream.outcome````, no ``:mod:`` or ``:class:`` role) that
    the code uses as a string is a name (a span attribute, a subject), not a path.
    """
    bad: list[str] = []
    for start, text in docstrings(source):

        def where(match: re.Match[str], start: int = start, text: str = text) -> str:
            return f"line {start + text.count(chr(10), 0, match.start())}"

        for match in _FROM_IMPORT.finditer(text):
            module, names = match.groups()
            if _module(module) is None:
                bad.append(f"{where(match)}: from {module} import ...: no module {module}")
                continue
            for name in (n.strip() for n in names.split(",")):
                if name and not resolves(f"{module}.{name}"):
                    bad.append(f"{where(match)}: from {module} import {name}: no {name}")
        for match in _IMPORT.finditer(text):
            if _module(match.group(1)) is None:
                bad.append(f"{where(match)}: import {match.group(1)}: no module {match.group(1)}")
        for match in _PATH.finditer(text):
            path = match.group(1)
            literal = text[max(0, match.start() - 2) : match.start()] == "``"
            if literal and path in _code_strings():
                continue
            if not resolves(path):
                bad.append(f"{where(match)}: {path} does not resolve")
    return sorted(set(bad))


@pytest.mark.parametrize("file", FILES, ids=lambda f: str(f.relative_to(SRC)))
def test_docstring_references_resolve(file: Path) -> None:
    assert broken(file.read_text()) == []


def test_a_stale_reference_is_reported() -> None:
    source = (
        '"""Module.\n\nExample::\n\n'
        "    from oncestream.spark.foreach_batch import transactional\n"
        "    from oncestream.spark import transactional, nowhere\n"
        "    >>> import oncestream.gone\n\n"
        "See :func:`oncestream.spark.register`, :class:`~oncestream.publish.Nothing`, the\n"
        "subject ``oncestream.publish.progress.>``, the span attribute\n"
        "``oncestream.outcome`` and :mod:`oncestream.outcome`.\n"
        '"""\n'
    )
    assert broken(source) == [
        "line 11: oncestream.outcome does not resolve",
        "line 5: from oncestream.spark.foreach_batch import ...: "
        "no module oncestream.spark.foreach_batch",
        "line 5: oncestream.spark.foreach_batch does not resolve",
        "line 6: from oncestream.spark import nowhere: no nowhere",
        "line 7: import oncestream.gone: no module oncestream.gone",
        "line 7: oncestream.gone does not resolve",
        "line 9: oncestream.publish.Nothing does not resolve",
    ]
