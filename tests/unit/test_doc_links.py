"""Each relative link in README.md, CHANGELOG.md and docs/ names a file and heading that exist.

Headings are turned into anchors the way GitHub does (github-slugger): the
heading's text lower-cased, punctuation dropped, spaces made hyphens, a
repeated anchor suffixed ``-1``, ``-2``. Markdown is parsed with markdown-it
(what rich renders with), so links inside code blocks are not links.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "CHANGELOG.md", *(ROOT / "docs").glob("*.md")])
_PUNCTUATION = re.compile(r"[^\w\- ]", re.UNICODE)
_md = MarkdownIt("commonmark").enable("table")


def slug(text: str) -> str:
    """GitHub's anchor for a heading whose rendered text is ``text``."""
    return _PUNCTUATION.sub("", text.strip().lower()).replace(" ", "-")


def _text(inline: Token) -> str:
    return "".join(
        child.content for child in inline.children or () if child.type in ("text", "code_inline")
    )


def anchors(markdown: str) -> set[str]:
    """The anchors of a page's headings, repeats numbered as GitHub numbers them."""
    seen: Counter[str] = Counter()
    out: set[str] = set()
    tokens = _md.parse(markdown)
    for opening, inline in pairwise(tokens):
        if opening.type == "heading_open":
            base = slug(_text(inline))
            out.add(base if not seen[base] else f"{base}-{seen[base]}")
            seen[base] += 1
    return out


@cache
def _anchors_of(file: Path) -> frozenset[str]:
    # Many links point into the same few pages: each is read and parsed once.
    return frozenset(anchors(file.read_text()))


def links(markdown: str) -> list[str]:
    """Every link target and image source of a page (code blocks and spans left out)."""
    found: list[str] = []
    for token in _md.parse(markdown):
        for child in token.children or ():
            if child.type == "link_open":
                found.append(str(child.attrs["href"]))
            elif child.type == "image":
                found.append(str(child.attrs["src"]))
    return found


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """The relative links of ``page`` whose file or heading does not exist."""
    bad: list[str] = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target}: no file {os.path.relpath(file, root)}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors_of(file):
            bad.append(f"{target}: no heading with anchor #{anchor} in {file.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken(page) == []


def test_slugs_follow_github() -> None:
    assert slug("Beside nats.go, issue 24's final run (make bench-scale)") == (
        "beside-natsgo-issue-24s-final-run-make-bench-scale"
    )
    assert slug("Fifth follow-up: three rounds at 10^6") == "fifth-follow-up-three-rounds-at-106"
    assert anchors("# A\n\n## A\n\n### `x` y\n") == {"a", "a-1", "x-y"}


def test_a_broken_link_is_reported(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Here\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#here) [self](#top) [gone](missing.md) [bad](other.md#there)\n\n"
        "# Top\n\n```\n[in code](nowhere.md)\n```\n"
    )
    assert [b.split(":")[0] for b in broken(page, tmp_path)] == ["missing.md", "other.md#there"]
