"""Which member of a group applies which partitions: a pure function of the members' names.

Every member computes the assignment itself from the names it sees in the
membership bucket, so no leader is elected and nothing is written: members that
see the same names agree. Members that briefly see different names (one has
noticed a join or an expiry, another not yet) may both run a partition for a
moment, or neither; neither is unsafe. The server's pin gives each partition's
messages to one of them, the ledger's fence keeps the other from applying, and
a partition nobody runs waits until one does.

The assignment is balanced (each member gets ``partitions // members`` or one
more) and stable: a partition goes to the member that scores it highest
(rendezvous hashing, ``blake2b(member/partition)``), then members over their
share give the partitions they score lowest to members under theirs. A member
that joins or leaves moves few partitions besides its own (2.1 of 8 on average when a
fifth member joins four; see tests/unit/test_assignment.py).

Example::

    assign(8, ["a", "b", "c", "d"])["a"]   # e.g. [1, 6]
    static_partitions(8, 1, 4)             # [1, 5]
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from .._errors import ConfigError

__all__ = ["assign", "static_partitions"]


def _score(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def assign(partitions: int, members: Iterable[str]) -> dict[str, list[int]]:
    """Each member's partitions (sorted), every partition to exactly one member.

    Args:
        partitions: how many (0..N-1).
        members: the members' names (duplicates count once).

    Returns:
        ``{member: [partition, ...]}`` for every member (an empty list when there are
        more members than partitions); ``{}`` without members.
    """
    names = sorted(set(members))
    if not names:
        return {}
    score = {(m, p): _score(f"{m}/{p}") for m in names for p in range(partitions)}
    # Each partition to the member that scores it highest: only what the member
    # that joined or left scores highest moves.
    result: dict[str, list[int]] = {m: [] for m in names}
    for p in range(partitions):
        result[max(names, key=lambda m: (score[m, p], m))].append(p)
    # Then balanced: the members holding most keep one more than the others, and
    # each one over its room gives the partitions it scores lowest to the members
    # under theirs that score them highest.
    base, extra = divmod(partitions, len(names))
    ranked = sorted(names, key=lambda m: (-len(result[m]), -_score(m), m))
    room = {m: base + (1 if i < extra else 0) for i, m in enumerate(ranked)}
    spare = sorted(
        (p for m in names for p in result[m]),
        key=lambda p: next(score[m, p] for m in names if p in result[m]),
    )
    for p in spare:
        holder = next(m for m in names if p in result[m])
        if len(result[holder]) <= room[holder]:
            continue
        under = [m for m in names if len(result[m]) < room[m]]
        taker = max(under, key=lambda m: (score[m, p], m))
        result[holder].remove(p)
        result[taker].append(p)
    for taken in result.values():
        taken.sort()
    return result


def static_partitions(partitions: int, index: int, count: int) -> list[int]:
    """Member ``index`` of ``count`` (static mode): partitions ``index``, ``index + count``, ...

    Raises:
        ConfigError: ``index`` or ``count`` out of range.
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"a static group needs at least 1 member, got {count!r}")
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count:
        raise ConfigError(f"static member index must be 0..{count - 1}, got {index!r}")
    return list(range(index, partitions, count))
