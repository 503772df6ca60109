"""Which writer of this process wrote a batch id into a target: two writers in one query fail.

Inside a streaming query the scope of a writer's batch ids is the query id alone
(:mod:`._query_scope`), so two writers of one query into one target record the
same ``(query, batch_id)``: the second finds the first's record and skips its own
rows as a replay, silently. A writer therefore claims each ``(target, batch_id)``
it writes or skips in this process with a token of its configuration (not its
identity: a writer re-created identically every batch is the same writer, and its
replay of a batch must still be skipped); a writer with another token that meets
the claim in the same query run is refused. Under Spark Connect the writers of one query run in one
Python worker of the server; on classic Spark in the driver: one process either way.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Hashable

__all__ = [
    "claim_batch",
    "claimed_by_another",
    "config_token",
    "release_batch",
    "second_writer",
    "take_batch",
]

#: Batch ids remembered per target: Spark runs a query's batches one at a time and
#: replays only its last one, so a few cover every collision.
_IDS_PER_TARGET = 8
#: Targets remembered (least recently used dropped first).
_TARGETS = 1024

_lock = threading.Lock()
#: target -> batch id -> (token, run) of the writer that wrote or skipped it.
_claims: OrderedDict[Hashable, OrderedDict[int, tuple[str, str | None]]] = OrderedDict()


def config_token(*parts: object) -> str:
    """A digest of a writer's configuration (it may hold secrets: never kept in clear)."""
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def claimed_by_another(
    target: Hashable, batch_id: int, token: str, run: str | None, *, in_query: bool = False
) -> bool:
    """Whether another write reached ``batch_id`` of ``target`` in this run.

    A writer configured otherwise; inside a streaming query (``in_query``) also the
    same writer (or an identical one) called a second time for the batch: Spark calls
    a query's batch function once per batch in a run (a failed batch ends the run),
    so a second write of one batch into one target in one run is a second
    DataFrame, whose rows the replay check would skip.

    Args:
        target: what the batch ids are recorded for, scope included.
        batch_id: the micro-batch id.
        token: :func:`config_token` of the asking writer.
        run: the query run (classic Spark's run id; None: this process, as under
            Connect, whose worker serves one query run). A claim of an earlier run
            does not count: a restarted query may be given a writer configured
            otherwise (another ``query_name``), and its replay must still be skipped.
    """
    with _lock:
        ids = _claims.get(target)
        held = None if ids is None else ids.get(batch_id)
    return held is not None and held[1] == run and (held[0] != token or in_query)


def claim_batch(target: Hashable, batch_id: int, token: str, run: str | None) -> None:
    """Record that the writer ``token`` wrote (or found recorded) ``batch_id`` of ``target``.

    Claimed once the batch is in the target, so a writer whose attempt failed (its
    transaction rolled back) leaves the batch to a writer configured otherwise.
    """
    with _lock:
        _store(target, batch_id, token, run)


def _store(target: Hashable, batch_id: int, token: str, run: str | None) -> None:
    """Record a claim (the caller holds ``_lock``)."""
    ids = _claims.get(target)
    if ids is None:
        ids = _claims[target] = OrderedDict()
        while len(_claims) > _TARGETS:
            _claims.popitem(last=False)
    else:
        _claims.move_to_end(target)
    ids[batch_id] = (token, run)
    ids.move_to_end(batch_id)
    while len(ids) > _IDS_PER_TARGET:
        ids.popitem(last=False)


def take_batch(
    target: Hashable, batch_id: int, token: str, run: str | None, *, in_query: bool = False
) -> bool:
    """Check and claim ``batch_id`` of ``target`` in one step; False when another write
    holds it (the caller refuses: :func:`second_writer`).

    For writers whose target cannot check inside its own transaction (a Delta or
    Iceberg commit): checked before the write and claimed in the same step, two writers
    running at once cannot both pass the check. A failed write gives its claim back
    (:func:`release_batch`). See :func:`claimed_by_another` for the arguments.
    """
    with _lock:
        ids = _claims.get(target)
        held = None if ids is None else ids.get(batch_id)
        if held is not None and held[1] == run and (held[0] != token or in_query):
            return False
        _store(target, batch_id, token, run)
    return True


def release_batch(target: Hashable, batch_id: int, token: str, run: str | None) -> None:
    """Give back a :func:`take_batch` claim after the write failed (the batch is left to
    whichever writer Spark's retry brings); another writer's claim is kept."""
    with _lock:
        ids = _claims.get(target)
        if ids is not None and ids.get(batch_id) == (token, run):
            del ids[batch_id]


def second_writer(what: str, batch_id: int, fix: str) -> str:
    """The refusal of a second writer of one query into one table, and what it leaves."""
    return (
        f"two writers write {what} in one query (batch {batch_id}), or one writer twice: "
        f"their batch ids would be skipped as each other's. Fix: {fix}. Batch {batch_id} "
        "may be in the table already with the other writer's rows only: a restart skips "
        "it as written, so this writer's rows of it are not written then; write them "
        "yourself (this batch's DataFrame) if you need them"
    )
