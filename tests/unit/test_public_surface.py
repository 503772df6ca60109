"""Every public name is documented: the root's ``__all__`` and each component face's.

A name counts as documented when the README, a page under docs/ or a file
under examples/ shows it as code: in a code span or block of the Markdown, or
in an example's source. What components share with each other and users do
not need goes through their internal faces (``_internal.py``, see
docs/architecture.md), which this test leaves out; so the public surface
cannot grow a name nobody documented.
"""

from __future__ import annotations

import importlib
import re
from functools import cache
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "oncestream"
_md = MarkdownIt("commonmark").enable("table")

#: The package and each public component's face (a folder not starting with ``_``).
FACES = (
    "oncestream",
    *(
        f"oncestream.{p.parent.name}"
        for p in sorted(SRC.glob("*/__init__.py"))
        if not p.parent.name.startswith("_")
    ),
)


def _code_of(markdown: str) -> list[str]:
    """The code spans and code blocks of a Markdown page."""
    code: list[str] = []
    for token in _md.parse(markdown):
        if token.type in ("fence", "code_block"):
            code.append(token.content)
        for child in token.children or ():
            if child.type == "code_inline":
                code.append(child.content)
    return code


@cache
def documented_code() -> str:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    parts = [c for page in pages for c in _code_of(page.read_text(encoding="utf-8"))]
    examples = sorted(p for p in (ROOT / "examples").rglob("*") if p.is_file())
    parts += [p.read_text(encoding="utf-8", errors="replace") for p in examples]
    return "\n".join(parts)


def undocumented(names: list[str], code: str) -> list[str]:
    return [n for n in names if not re.search(rf"(?<![\w.]){re.escape(n)}\b", code)]


def test_a_name_only_in_prose_is_not_documented() -> None:
    code = "\n".join(_code_of("Call `read_stream(conn)` or\n\n```python\nlag()\n```\n\naudit it"))
    assert undocumented(["read_stream", "lag", "audit", "stream"], code) == ["audit", "stream"]


@pytest.mark.parametrize("face", FACES)
def test_every_public_name_is_documented(face: str) -> None:
    names = list(importlib.import_module(face).__all__)
    missing = undocumented(names, documented_code())
    assert missing == [], f"{face}.__all__ names what README/docs/examples never show: {missing}"


def _api_sections() -> dict[str, list[str]]:
    """docs/api.md's sections: a face's name and the names its table lists."""
    sections: dict[str, list[str]] = {}
    face = ""
    for line in (ROOT / "docs" / "api.md").read_text(encoding="utf-8").splitlines():
        if heading := re.fullmatch(r"## `([\w.]+)`", line):
            face = heading.group(1)
            sections[face] = []
        elif face and (row := re.match(r"\| `(\w+)` \|", line)):
            sections[face].append(row.group(1))
    return sections


def test_api_md_lists_every_public_name_of_every_face_and_nothing_else() -> None:
    """docs/api.md says it lists every public name: one section per face with a public name."""
    expected = {
        face: sorted(importlib.import_module(face).__all__)
        for face in FACES
        if importlib.import_module(face).__all__
    }
    listed = {face: sorted(names) for face, names in _api_sections().items()}
    assert listed == expected
