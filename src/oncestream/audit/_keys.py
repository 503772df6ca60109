"""How the audit identifies a message or a row: its msg id, its lineage, or a JSON field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .._errors import ConfigError

__all__ = ["KeySpec"]


@dataclass(frozen=True, kw_only=True)
class KeySpec:
    """How a message or row is identified.

    ``msg_id``: the ``Nats-Msg-Id`` header (a ``msg_id`` column in tables).
    ``lineage``: ``STREAM:SEQ`` of the input message; outputs carry it as their
    message id (what the jetstream sink assigns) or in a ``msg_id`` column, or
    in ``stream`` + ``sequence`` columns.
    ``field:NAME``: a top-level JSON field of the data (a column ``NAME`` in tables).
    """

    kind: Literal["msg_id", "lineage", "field"]
    name: str | None = None

    @classmethod
    def parse(cls, text: str) -> KeySpec:
        """Parse ``msg_id``, ``lineage`` or ``field:NAME`` (``column:NAME`` is an alias)."""
        value = text.strip()
        if value in ("msg_id", "msg-id", "msgid"):
            return cls(kind="msg_id")
        if value == "lineage":
            return cls(kind="lineage")
        prefix, _, name = value.partition(":")
        if prefix in ("field", "column", "json") and name:
            return cls(kind="field", name=name)
        raise ConfigError(f"key must be 'msg_id', 'lineage' or 'field:NAME', got {text!r}")

    def __str__(self) -> str:
        return f"field:{self.name}" if self.kind == "field" else self.kind
