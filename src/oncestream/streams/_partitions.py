"""Partitioned streams: the server maps each key to one of N partitions as it stores a message.

A partitioned stream captures one subject pattern (``orders.*``, ``orders.>``) and
has a stream subject transform (nats-server 2.10+) that prefixes every subject it
stores with the number of its partition::

    published  orders.eu.k17
    stored     2.orders.eu.k17      # {{partition(8,2)}}.orders.{{wildcard(1)}}.{{wildcard(2)}}

The partition is ``fnv1a32(key) % N`` where the key is the concatenation of the
chosen ``*`` tokens (no separator), or the whole published subject when no token
is chosen (nats-server ``server/subject_transform.go``, ``getHashPartition``):
the same key always lands in the same partition, so its messages keep their order
inside it. This is the layout of Synadia's static partitioned consumer groups
(orbit.go ``pcgroups``): a stream made here can be consumed by them and the other
way round.

Producers keep publishing to the subjects they know. What reads the stream sees the
stored subjects; :meth:`Partitioning.published_subject` gives the published one back,
and a filter on the published subjects becomes ``*.<filter>`` on the stored ones
(:meth:`Partitioning.stored_filter`).

Example::

    p = Partitioning(subjects="orders.*.*", partitions=8, key=(2,))
    p.partition_of("orders.eu.k17")     # 3
    p.stored_subject("orders.eu.k17")   # "2.orders.eu.k17"
    p.filter_for(3)                     # "3.orders.*.*"
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .._errors import ConfigError
from .._names import check_subject_filter, subject_matches, subjects_overlap

__all__ = ["MAX_PARTITIONS", "Partitioning", "fnv1a32"]

#: The most partitions a stream may have here (each is a consumer and a ledger).
MAX_PARTITIONS = 1024

_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193

#: nats-server's ``partitionMappingFunctionRegEx`` (and the wildcard one), anchored.
_PARTITION = re.compile(r"^{{\s*[pP]artition\s*\((.*)\)\s*}}$")
_WILDCARD = re.compile(r"^{{\s*[wW]ildcard\s*\(\s*(\d+)\s*\)\s*}}$")


def fnv1a32(data: bytes) -> int:
    """The 32-bit FNV-1a hash (Go's ``hash/fnv`` ``New32a``), as nats-server partitions with."""
    h = _FNV_OFFSET
    for byte in data:
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h


@dataclass(frozen=True, kw_only=True)
class Partitioning:
    """How a stream spreads its messages over ``partitions`` by key.

    Args:
        subjects: the one subject pattern the stream captures (and maps).
        partitions: how many partitions (1..1024); each is applied by one member
            of a group at a time (:class:`~oncestream.GroupMember`).
        key: the 1-based indexes of the ``*`` tokens of ``subjects`` that form the
            key (``orders.*.*`` with ``key=(2,)``: the third token); empty: the
            whole published subject is the key.

    Raises:
        ConfigError: a bad pattern, count or key, naming the value and what is allowed.
    """

    subjects: str
    partitions: int
    key: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_subject_filter(self.subjects, "partitioned stream subject")
        if (
            isinstance(self.partitions, bool)
            or not isinstance(self.partitions, int)
            or not 1 <= self.partitions <= MAX_PARTITIONS
        ):
            raise ConfigError(
                f"partitions must be a whole number from 1 to {MAX_PARTITIONS}, "
                f"got {self.partitions!r}"
            )
        tokens = self.subjects.split(".")
        stars = tokens.count("*")
        if not stars and tokens[-1] != ">":
            raise ConfigError(
                f"partitioned stream subject {self.subjects!r} has no wildcard: every message "
                "would land in one partition; use a pattern with '*' or '>' (orders.*, orders.>)"
            )
        key = tuple(self.key)
        if any(isinstance(i, bool) or not isinstance(i, int) for i in key):
            raise ConfigError(f"partition key must be '*' token indexes (1, 2, ...), got {key!r}")
        if len(set(key)) != len(key) or any(not 1 <= i <= stars for i in key):
            allowed = f"1..{stars}" if stars else "none ('>' cannot be a key token)"
            raise ConfigError(
                f"partition key {list(key)} of {self.subjects!r}: each index must name one of "
                f"its '*' tokens, once (allowed: {allowed}); leave it empty to key by the "
                "whole subject"
            )
        object.__setattr__(self, "key", key)

    # -- the server's side ---------------------------------------------------

    def transform(self) -> dict[str, str]:
        """The stream's ``subject_transform`` (``src`` / ``dest``) that maps to partitions."""
        wildcard = 0
        dest: list[str] = []
        for token in self.subjects.split("."):
            if token == "*":
                wildcard += 1
                dest.append(f"{{{{wildcard({wildcard})}}}}")
            else:
                dest.append(token)
        args = ",".join(str(i) for i in (self.partitions, *self.key))
        return {"src": self.subjects, "dest": f"{{{{partition({args})}}}}." + ".".join(dest)}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Partitioning | None:
        """The partitioning of a stream config (``STREAM.INFO`` ``config``), or None.

        Recognised: a ``subject_transform`` whose destination is ``{{partition(N, ...)}}.``
        followed by its source with each ``*`` as ``{{wildcard(i)}}`` (or ``$i``) in order:
        the layout made here and by orbit.go's static groups. Anything else: None.
        """
        transform = config.get("subject_transform") or {}
        src = str(transform.get("src") or ">")
        dest = str(transform.get("dest") or "")
        head, dot, rest = dest.partition(".")
        match = _PARTITION.match(head)
        if not dot or match is None:
            return None
        try:
            args = [int(a.strip()) for a in match.group(1).split(",")]
        except ValueError:
            return None
        wildcard = 0
        for want, have in zip(src.split("."), rest.split("."), strict=False):
            if want == "*":
                wildcard += 1
                found = _WILDCARD.match(have)
                index = int(found.group(1)) if found else _dollar(have)
                if index != wildcard:
                    return None
            elif want != have:
                return None
        if len(src.split(".")) != len(rest.split(".")):
            return None
        try:
            return cls(subjects=src, partitions=args[0], key=tuple(args[1:]))
        except ConfigError:
            return None

    # -- subjects --------------------------------------------------------------

    def partition_of(self, subject: str) -> int:
        """The partition the server stores published ``subject`` in.

        Raises:
            ConfigError: ``subject`` is not captured by the pattern.
        """
        if not subject_matches(self.subjects, subject):
            raise ConfigError(f"subject {subject!r} is not inside {self.subjects!r}")
        tokens = subject.split(".")
        if not self.key:
            data = subject.encode()
        else:
            stars = [i for i, t in enumerate(self.subjects.split(".")) if t == "*"]
            data = b"".join(tokens[stars[i - 1]].encode() for i in self.key)
        return fnv1a32(data) % self.partitions

    def stored_subject(self, subject: str) -> str:
        """The subject the server stores a message published on ``subject`` under.

        A subject outside the pattern is stored as published (the server maps only
        what matches the transform's source).
        """
        if not subject_matches(self.subjects, subject):
            return subject
        return f"{self.partition_of(subject)}.{subject}"

    def published_subject(self, stored: str) -> str:
        """The subject a stored message was published on (its partition token dropped)."""
        head, dot, rest = stored.partition(".")
        if dot and head.isdigit() and subject_matches(self.subjects, rest):
            return rest
        return stored

    def partition_of_stored(self, stored: str) -> int | None:
        """The partition of a stored subject, or None (stored before the stream was partitioned)."""
        head, dot, rest = stored.partition(".")
        if dot and head.isdigit() and subject_matches(self.subjects, rest):
            return int(head)
        return None

    def filter_for(self, partition: int) -> str:
        """The consumer filter subject that takes exactly partition ``partition``."""
        if not 0 <= partition < self.partitions:
            raise ConfigError(
                f"partition {partition!r} does not exist: the stream has partitions "
                f"0..{self.partitions - 1}"
            )
        return f"{partition}.{self.subjects}"

    def stored_filter(self, published: str) -> str:
        """A filter on published subjects as a filter on the stored ones (every partition).

        A filter that already names stored subjects (its first token a partition
        number, or one that does not overlap the pattern) is returned as it is.
        """
        head = published.partition(".")[0]
        if head.isdigit() or head in ("*", ">") or not subjects_overlap(self.subjects, published):
            return published
        return f"*.{published}"

    def describe(self) -> str:
        """One line: ``8 partitions of orders.*.* by token 2`` (or ``by subject``)."""
        by = f"token {', '.join(map(str, self.key))}" if self.key else "subject"
        return f"{self.partitions} partitions of {self.subjects} by {by}"


def _dollar(token: str) -> int:
    """``$i`` (the old wildcard form) as ``i``; 0 when ``token`` is not one."""
    if token.startswith("$") and token[1:].isdigit():
        return int(token[1:])
    return 0
