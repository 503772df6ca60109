"""Where a consumer (or a read) starts: sequence, time, new messages only, or everything."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .._errors import ConfigError
from .._options import parse_int, parse_time, rfc3339

__all__ = ["StartPosition"]


@dataclass(frozen=True, kw_only=True)
class StartPosition:
    """Where a consumer being created starts; at most one of the fields is set.

    Args:
        seq: the first stream sequence to deliver (``deliver_policy=by_start_sequence``).
        time: the first message time to deliver (``by_start_time``).
        new_only: only messages stored after the consumer is created (``new``).

    With none set the consumer delivers everything (``all``).
    """

    seq: int | None = None
    time: datetime | None = None
    new_only: bool = False

    def __post_init__(self) -> None:
        given = [
            name
            for name, v in (("seq", self.seq), ("time", self.time), ("new_only", self.new_only))
            if v not in (None, False)
        ]
        if len(given) > 1:
            raise ConfigError(f"give at most one start position, got {', '.join(given)}")
        if self.seq is not None and (isinstance(self.seq, bool) or self.seq < 1):
            raise ConfigError(f"start seq must be a sequence >= 1, got {self.seq!r}")
        if self.seq is not None:
            parse_int("start seq", self.seq, minimum=1)
        if self.time is not None:
            object.__setattr__(self, "time", parse_time("start time", self.time))

    @property
    def policy(self) -> str:
        """The consumer's ``deliver_policy``."""
        if self.seq is not None:
            return "by_start_sequence"
        if self.time is not None:
            return "by_start_time"
        return "new" if self.new_only else "all"

    def to_config(self) -> dict[str, Any]:
        """The consumer config keys that express this start."""
        config: dict[str, Any] = {"deliver_policy": self.policy}
        if self.seq is not None:
            config["opt_start_seq"] = self.seq
        if self.time is not None:
            config["opt_start_time"] = rfc3339(self.time)
        return config

    def describe(self) -> str:
        """A human description (``--start-seq 100``, ``--new-only``, ``all``)."""
        if self.seq is not None:
            return f"start seq {self.seq}"
        if self.time is not None:
            return f"start time {rfc3339(self.time)}"
        return "new messages only" if self.new_only else "the beginning (all)"

    def matches(self, config: dict[str, Any]) -> bool:
        """Whether an existing consumer's config starts here."""
        policy = config.get("deliver_policy", "all")
        if policy != self.policy:
            return False
        if self.seq is not None:
            return int(config.get("opt_start_seq", 0)) == self.seq
        if self.time is not None:
            raw = str(config.get("opt_start_time", ""))
            try:
                existing = parse_time("opt_start_time", _trim_nanos(raw))
            except ConfigError:
                return False
            return abs((existing - self.time).total_seconds()) < 0.001
        return True

    @staticmethod
    def describe_config(config: dict[str, Any]) -> str:
        """How an existing consumer's config starts, in the same words as :meth:`describe`."""
        policy = config.get("deliver_policy", "all")
        if policy == "by_start_sequence":
            return f"start seq {config.get('opt_start_seq')}"
        if policy == "by_start_time":
            return f"start time {config.get('opt_start_time')}"
        return {"new": "new messages only", "all": "the beginning (all)"}.get(
            policy, f"deliver_policy {policy}"
        )


def _trim_nanos(text: str) -> str:
    """Python parses at most microseconds: cut RFC 3339 nanoseconds to six digits."""
    match = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", text)
    if not match:
        return text
    frac = (match.group(2) or "")[:7]
    return f"{match.group(1)}{frac}{match.group(3)}"
