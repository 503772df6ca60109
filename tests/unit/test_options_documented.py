"""Every field of every public options class is in a docs table with its real default.

Each class has one table in docs/ (the first table after the heading that names
it): ``| option | default | meaning |``, the first cell one or more names in
backticks (``a``, ``b`` or ``a`` / ``b``), the second their defaults in the same
order (or one default for all). A default is compared with the dataclass's: a
number with its unit (``30 s``, ``500ms``, ``20,000``), ``True``/``false``, a
tuple (``(1, 5, 30) s``, ``50ms/250ms/1s``), a string (in backticks or not). A
field whose default is None is computed or absent: its cell may describe it
(``min(expires/2, 30 s)``) but must not claim a number or a boolean.

The Spark source and sink take camelCase options (``SOURCE_OPTIONS``,
``SINK_OPTIONS``): each must be in its page's table, and where the option maps to
a field with a literal default, that default is checked too.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from oncestream import ConnectOptions
from oncestream.doctor import DoctorOptions
from oncestream.load import LoadOptions
from oncestream.process import ProcessorOptions
from oncestream.publish import PublisherOptions
from oncestream.read import PullOptions
from oncestream.spark._options import CONNECT_OPTIONS, PUBLISHER_OPTIONS
from oncestream.spark._sink_options import SINK_OPTIONS, SinkOptions
from oncestream.spark._source_options import SOURCE_OPTIONS, SourceOptions

ROOT = Path(__file__).resolve().parents[2]
_md = MarkdownIt("commonmark").enable("table")

#: class -> the page whose table documents it.
CLASSES: dict[type, str] = {
    ConnectOptions: "docs/topologies.md",
    PublisherOptions: "docs/publishing.md",
    PullOptions: "docs/processing.md",
    ProcessorOptions: "docs/processing.md",
    LoadOptions: "docs/publishing.md",
    DoctorOptions: "docs/operations.md",
}
#: Defaults computed from another field (read/_options.py): the cell must say how.
COMPUTED = {
    (PullOptions, "idle_heartbeat"): "min(expires/2, 30 s)",
    (ProcessorOptions, "idle_heartbeat"): "min(expires/2, 30 s)",
    (PullOptions, "pin_refresh"): "`expires`",
}
#: Fields that are not options a user sets: filled by the component that builds them.
NOT_OPTIONS = {(LoadOptions, "labels"), (LoadOptions, "template")}
SPARK: dict[str, tuple[tuple[str, ...], tuple[type, ...], str]] = {
    "source": (SOURCE_OPTIONS, (SourceOptions, ConnectOptions), "docs/spark-source.md"),
    "sink": (SINK_OPTIONS, (SinkOptions, PublisherOptions, ConnectOptions), "docs/spark-sink.md"),
}
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_NUMBER = re.compile(r"^(-?[\d,]*\.?\d+)\s*(ms|min|s|m|h)?$")


def tables(markdown: str) -> list[tuple[str, list[list[str]]]]:
    """(the heading above it, body rows as cell texts) of each table of a page."""
    found: list[tuple[str, list[list[str]]]] = []
    heading = ""
    tokens = _md.parse(markdown)
    rows: list[list[str]] | None = None
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            heading = tokens[i + 1].content
        elif token.type == "tbody_open":
            rows = []
        elif token.type == "tbody_close" and rows is not None:
            found.append((heading, rows))
            rows = None
        elif token.type == "tr_open" and rows is not None:
            rows.append([])
        elif token.type == "inline" and rows is not None and rows:
            rows[-1].append(token.content)
    return found


def table_of(cls: type, page: str) -> list[list[str]]:
    """The first table under a heading that names ``cls``."""
    for heading, rows in tables((ROOT / page).read_text()):
        if f"`{cls.__name__}`" in heading:
            return rows
    raise AssertionError(f"{page}: no table under a heading naming `{cls.__name__}`")


def _split(cell: str) -> list[str]:
    """A cell's comma (or slash) separated parts, parentheses and backticks kept whole."""
    for sep in (", ", " / "):
        parts, depth, ticks, current = [], 0, False, ""
        i = 0
        while i < len(cell):
            ch = cell[i]
            depth += ch == "("
            depth -= ch == ")"
            ticks ^= ch == "`"
            if not depth and not ticks and cell.startswith(sep, i):
                parts.append(current)
                current, i = "", i + len(sep)
                continue
            current += ch
            i += 1
        parts.append(current)
        if len(parts) > 1:
            return [p.strip() for p in parts]
    return [cell.strip()]


def documented(rows: list[list[str]]) -> dict[str, str]:
    """Name -> default cell, for every name in the tables' first column."""
    out: dict[str, str] = {}
    for row in rows:
        # Names in parentheses are another spelling of the name before them.
        names = re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", row[0]))
        aliases = re.findall(r"`([^`]+)`", "".join(re.findall(r"\([^)]*\)", row[0])))
        defaults = _split(row[1]) if len(names) > 1 else [row[1].strip()]
        if len(defaults) == 1:
            defaults *= len(names)
        if len(defaults) != len(names):
            raise AssertionError(f"cannot pair names {names} with defaults {row[1]!r}")
        out.update(zip(names, defaults, strict=True))
        out.update(dict.fromkeys(aliases, defaults[-1]))
    return out


def _number(text: str) -> float | None:
    match = _NUMBER.match(text.strip())
    if not match:
        return None
    return float(match[1].replace(",", "")) * _UNITS[match[2] or "s"]


def parse(cell: str) -> Any:
    """The value a default cell states, or the cell's text when it states no literal."""
    text = cell.strip().strip("`").strip()
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("", "-", "none", "(none)") or low.startswith("none "):
        return None
    if low in ('""', "''"):
        return ""
    number = _number(text)
    if number is not None:
        return number
    tuple_match = re.match(r"^\(([^)]*)\)\s*(ms|s)?$", text)
    if tuple_match:
        unit = tuple_match[2] or "s"
        items = [_number(p.strip() + unit) for p in tuple_match[1].split(",")]
        if None not in items:
            return tuple(items)
    if "/" in text and "(" not in text:
        items = [_number(p) for p in text.split("/")]
        if None not in items:
            return tuple(items)
    return text


def matches(cell: str, default: Any) -> bool:
    """Whether a docs cell states ``default``."""
    stated = parse(cell)
    if default is None or default == () or default == {}:
        return stated is None or (isinstance(stated, str) and _number(stated) is None)
    if isinstance(default, bool):
        return stated is default
    if isinstance(default, int | float):
        return not isinstance(stated, bool) and isinstance(stated, float) and stated == default
    if isinstance(default, tuple) and all(isinstance(x, int | float) for x in default):
        return bool(stated == tuple(float(x) for x in default))
    if isinstance(default, str):
        return bool(stated == default) or f"`{default}`" in cell
    return True  # a nested options object (its own table) or a mapping: documented by name


def default_of(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def problems(cls: type, docs: dict[str, str]) -> list[str]:
    """Fields of ``cls`` missing from ``docs``, or documented with another default."""
    bad: list[str] = []
    for field in dataclasses.fields(cls):
        if (cls, field.name) in NOT_OPTIONS:
            continue
        if field.name not in docs:
            bad.append(f"{field.name}: not documented")
            continue
        default = default_of(field)
        computed = COMPUTED.get((cls, field.name))
        if computed is not None and computed not in docs[field.name]:
            bad.append(f"{field.name}: docs say {docs[field.name]!r}, the default is {computed}")
        elif default is not dataclasses.MISSING and not matches(docs[field.name], default):
            bad.append(f"{field.name}: docs say {docs[field.name]!r}, the default is {default!r}")
    return bad


@pytest.mark.parametrize("cls", list(CLASSES), ids=lambda c: c.__name__)
def test_every_field_is_documented_with_its_default(cls: type) -> None:
    assert problems(cls, documented(table_of(cls, CLASSES[cls]))) == []


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


@pytest.mark.parametrize("side", list(SPARK))
def test_every_spark_option_is_documented_with_its_default(side: str) -> None:
    names, classes, page = SPARK[side]
    docs: dict[str, str] = {}
    for _heading, rows in tables((ROOT / page).read_text()):
        if rows and len(rows[0]) == 3 and "`servers`" in rows[0][0]:
            docs = documented(rows)
            break
    fields = {CONNECT_OPTIONS.get(n, PUBLISHER_OPTIONS.get(n, _snake(n))): n for n in names}
    bad: list[str] = []
    for name in names:
        if name not in docs and not any(k.endswith("*") and name.startswith(k[:-1]) for k in docs):
            bad.append(f"{name}: not documented")
    for cls in classes:
        for field in dataclasses.fields(cls):
            spark_name = fields.get(field.name)
            default = default_of(field)
            literal = default not in (dataclasses.MISSING, None, (), {})
            if spark_name in docs and literal and not matches(docs[spark_name], default):
                cell = docs[spark_name]
                bad.append(f"{spark_name}: docs say {cell!r}, the default is {default!r}")
    assert bad == []


def test_a_wrong_or_missing_default_is_reported() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Options:
        batch: int = 4000
        expires: float = 30.0
        heartbeat: float | None = None
        backoff: tuple[float, ...] = (1.0, 5.0, 30.0)
        bind: bool = False
        name: str = "ONCESTREAM"
        forgotten: int = 1

    page = (
        "### `Options`\n\n| option | default | meaning |\n|---|---|---|\n"
        "| `batch` | 1000 | per transaction |\n"
        "| `expires`, `heartbeat` | 30 s, min(expires/2, 30 s) | pulls |\n"
        "| `backoff` | (1, 5, 30) s | naks |\n| `bind` | True | no API |\n"
        "| `name` | `ONCESTREAM` | a stream |\n"
    )
    docs = documented(tables(page)[0][1])
    assert problems(Options, docs) == [
        "batch: docs say '1000', the default is 4000",
        "bind: docs say 'True', the default is False",
        "forgotten: not documented",
    ]
    assert (
        matches("500ms", 0.5)
        and matches("20,000", 20000)
        and matches("50ms/250ms/1s", (0.05, 0.25, 1.0))
    )
    assert not matches("expires/2", 15.0) and not matches("5", None)
