"""Which streaming query a ``foreachBatch`` call belongs to: what scopes its batch ids.

The idempotent ``foreachBatch`` helpers (:func:`~oncestream.spark.transactional`,
:func:`~oncestream.spark.delta`) record ``(query, batch_id)`` with the data, so a
replayed batch writes nothing. "query" must be the same across restarts from one
checkpoint and different for any other query or checkpoint; otherwise one query's
batches are skipped as another's.

Classic Spark tells the batch function its query id (a local property of the
calling thread). Spark Connect runs the function in a Python worker of the server
that gets a DataFrame and a batch id only, so there the scope comes from the
query's ``checkpoint_location`` (Spark keeps the query id in its ``metadata``
file); without it the helpers refuse rather than guess. Inside a streaming
query the query id alone is the scope: a ``query_name`` does not enter it, so a
restart from the same checkpoint under another name keeps its batches, and a new
checkpoint under an old name is a new scope.

A ``checkpoint_location`` that is not the running query's (a stale value, another
job's) would scope the batches under another query's id, and skip this query's
batches as that query's. So the id read from it must be one of the queries running
in the session that started the query: Connect runs the function in a worker
bound to a clone of that session, whose ``streams`` lists nothing, but unpickles the
function while the starting session is the active one, so a scope keeps that
session from its unpickling (:meth:`QueryScope.__setstate__`; a writer built while
the worker imports the module of a function pickled by reference keeps it from
``__post_init__``) and asks its ``streams.active`` once per query run. The id read
from the location is never pickled: a copy starts by reading it again. Before a
recorded batch is skipped, the checkpoint is also asked whether Spark committed it
(:meth:`QueryScope.check_replay`).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["QueryScope", "stale_batch_message"]


@dataclass(kw_only=True)
class QueryScope:
    """What scopes a writer's batch ids: the query id, else ``query_name``.

    Args:
        owner: how messages name the writer, e.g. ``transactional(table='t')``.
        query_name: the scope of calls outside a streaming query; inside one the
            query id is the scope whatever the name.
        checkpoint_location: the query's ``checkpointLocation`` (its query id is
            read from there when Spark does not hand it over: Connect).

    Raises:
        ConfigError: a blank ``query_name`` or ``checkpoint_location``; under a
            Spark Connect client, no ``checkpoint_location`` (a writer built in a
            Connect process runs where nothing else tells it its query).
    """

    owner: str
    query_name: str | None = None
    checkpoint_location: str | None = None
    #: The id read from ``checkpoint_location``, once per unpickled copy (one query run).
    _checkpoint_id: str | None = field(default=None, repr=False)
    #: The Connect session that started the query (see :meth:`__setstate__`); not pickled.
    _starter: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        name, location = self.query_name, self.checkpoint_location
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(f"query_name must be a non-empty string, got {name!r}")
        if location is not None and (not isinstance(location, str) or not location.strip()):
            raise ConfigError(
                f"checkpoint_location must be the query's checkpointLocation, got {location!r}"
            )
        if location is None and _connect_client():
            raise ConfigError(_connect_needs_checkpoint(self.owner))
        if location is not None and _in_connect_worker():
            # Built in the server's worker: a foreachBatch function pickled by reference
            # (a module-level function of an importable module) is unpickled by importing
            # its module, which builds the writer with __init__, not __setstate__.
            self._starter = _active_connect_session()

    def __getstate__(self) -> dict[str, Any]:
        # The id read on one side (a direct call on the client) is not the other query's.
        return {**self.__dict__, "_starter": None, "_checkpoint_id": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickle; in a Connect foreachBatch worker, keep the session that started the query.

        The worker unpickles the function while the active session is the one the
        query was started from (later batches run on a clone of it, which lists no
        streaming query): that session's ``streams.active`` tells whether
        ``checkpoint_location`` is a running query's (:meth:`resolve`).
        """
        self.__dict__.update(state)
        self._starter = _active_connect_session()

    def resolve(self, df: DataFrame) -> str:
        """The scope of the batch ``df`` belongs to.

        The query id (classic Spark hands it over; ``checkpoint_location`` holds it),
        whatever ``query_name`` says: a restart from the checkpoint under another
        name is the same query (its replayed batch is skipped, not written again),
        and a new checkpoint under an old name is a new one (its batch ids, which
        restart at 0, are not skipped as the old query's). ``query_name`` only
        outside a streaming query (a direct call).

        Raises:
            ConfigError: nothing names the query (Connect without either option, or
                a call outside a streaming query), the checkpoint's metadata cannot be
                read, or (Connect) its query id is not one of the queries running in
                the session that started this one: ``checkpoint_location`` is not the
                running query's checkpointLocation.
        """
        query_id = _thread_query_id(df)
        if query_id is None and self.checkpoint_location:
            if self._checkpoint_id is None:
                found = _checkpoint_query_id(df, self.checkpoint_location)
                self._check_running(found)
                self._checkpoint_id = found
            query_id = self._checkpoint_id
        if query_id:
            return query_id
        if _is_connect(df):
            raise ConfigError(_connect_needs_checkpoint(self.owner))
        if self.query_name:  # a call outside a streaming query: the caller's own scope
            return self.query_name
        raise ConfigError(
            f"{self.owner} cannot tell which streaming query a batch belongs to: this call "
            "is not part of a streaming query's micro-batch. Pass checkpoint_location= (the "
            "query's checkpointLocation: its query id is read from there) or query_name= (a "
            "name unique to this caller); batch ids of writers sharing one scope are skipped "
            "as each other's"
        )

    def run(self, df: DataFrame) -> str | None:
        """The query run ``df``'s batch belongs to: classic Spark's run id, else None.

        Classic Spark runs the batch function on the query's thread, whose job group
        is the run id; under Connect the function's worker serves one query run.
        """
        if _thread_query_id(df) is None:
            return None
        value = df.sparkSession.sparkContext.getLocalProperty("spark.jobGroup.id")
        return str(value) if value else None

    def _check_running(self, query_id: str) -> None:
        """Refuse a ``checkpoint_location`` whose query id is not a running query's.

        Only where the session that started the query is known (a Connect
        foreachBatch worker); elsewhere :meth:`check_replay` is the only check.
        """
        if self._starter is None:
            return
        running = sorted(str(query.id) for query in self._starter.streams.active)
        if query_id in running or not running:
            # None running: the session is not the starting one (that one lists at
            # least this query), e.g. a writer built during a batch on PySpark 4.3+,
            # where the batch's active session is a clone; the commits check remains.
            return
        raise ConfigError(
            f"{self.owner}: checkpoint_location={self.checkpoint_location!r} is not this "
            f"query's checkpointLocation: its metadata names query {query_id}, and the "
            f"queries running in the session that started this one are "
            f"{', '.join(running)} (a stale or copied value would scope this "
            "query's batches as that query's and skip them). Give the checkpointLocation "
            "the query was started with"
        )

    def check_replay(self, df: DataFrame, batch_id: int) -> None:
        """Before a recorded batch id is skipped: refuse if the checkpoint says it is done.

        Spark runs a batch again only while its checkpoint has no commit for it, so a
        ``<checkpoint_location>/commits/<batch_id>`` that exists while the batch runs
        means ``checkpoint_location`` is another query's (copied from another job):
        skipping would drop this query's rows.

        Raises:
            ConfigError: naming the location and the commit found.
        """
        if not self.checkpoint_location or _thread_query_id(df) is not None:
            return  # classic Spark named the query itself: the location was not used
        path = f"{self.checkpoint_location.rstrip('/')}/commits/{batch_id}"
        try:
            df.sparkSession.read.text(path).limit(1).collect()
        except Exception:  # no commit for this batch: a real replay
            return
        raise ConfigError(
            f"{self.owner}: checkpoint_location={self.checkpoint_location!r} holds a commit "
            f"for batch {batch_id} ({path}) while this query runs batch {batch_id}: it is "
            "not this query's checkpointLocation (Spark never runs a committed batch "
            "again). Give the checkpointLocation the query was started with"
        )


def _connect_needs_checkpoint(owner: str) -> str:
    return (
        f"{owner} under Spark Connect needs checkpoint_location= (the query's "
        "checkpointLocation, where Spark keeps its query id): Connect does not give a "
        "foreachBatch function its query's id, and a query_name alone cannot tell a "
        "restarted query from a new checkpoint under the same name (whose batch ids "
        "restart at 0 and would be skipped as the old query's)"
    )


def stale_batch_message(where: str, recorded: int, scope: str, batch_id: int) -> str:
    """Why a batch id below the last one recorded for its scope is refused.

    Spark re-runs only a query's last batch whose commit it did not record, so an
    older id means the scope is shared: a checkpoint restored from an older copy
    (same query id, older batches), or, for calls outside a streaming query, two
    callers passing one ``query_name``.
    """
    return (
        f"{where} already holds batch {recorded} of query {scope!r}, and the query now "
        f"writes batch {batch_id}: its checkpoint was restored from an older copy (start "
        "the query from a new checkpoint), or, outside a streaming query, another caller "
        "uses that scope (give this one a new query_name)"
    )


def _is_connect(df: DataFrame) -> bool:
    """Whether ``df`` is a Spark Connect DataFrame (no SparkContext behind it)."""
    return type(df).__module__.startswith("pyspark.sql.connect")


def _thread_query_id(df: DataFrame) -> str | None:
    """The query id classic Spark sets on the thread calling the batch function, if any."""
    if _is_connect(df):
        return None
    try:
        value = df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    except Exception:  # a DataFrame of another kind: no SparkContext to ask
        return None
    return str(value) if value else None


def _checkpoint_query_id(df: DataFrame, location: str) -> str:
    """The query id Spark wrote to ``<location>/metadata`` when the query first started.

    Read through the batch's own session, so any file system Spark writes
    checkpoints to works (the file is one JSON line, ``{"id": "<uuid>"}``).

    Raises:
        ConfigError: the file is missing or holds no id.
    """
    path = location.rstrip("/") + "/metadata"
    try:
        lines = [row[0] for row in df.sparkSession.read.text(path).collect()]
        query_id = json.loads("".join(lines))["id"]
    except Exception as exc:
        text = " ".join(str(exc).split())[:300]
        raise ConfigError(
            f"checkpoint_location={location!r}: cannot read the query id from {path} "
            f"({text}); it must be the checkpointLocation of the query this function runs in"
        ) from None
    if not isinstance(query_id, str) or not query_id:
        raise ConfigError(f"checkpoint_location={location!r}: {path} holds no query id")
    return query_id


def _active_connect_session() -> Any:
    """The active Spark Connect session of this process, if pyspark's Connect is loaded."""
    module = sys.modules.get("pyspark.sql.connect.session")
    if module is None:
        return None
    try:
        return module.SparkSession.getActiveSession()
    except Exception:  # no session to ask: the location is checked by its commits only
        return None


def _in_connect_worker() -> bool:
    """Whether this process is a Python worker of a Spark Connect server (it sets the URL)."""
    return "SPARK_CONNECT_LOCAL_URL" in os.environ and _active_connect_session() is not None


def _connect_client() -> bool:
    """Whether this process holds a Spark Connect session (pyspark sets the mark)."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark.sql.utils import is_remote

    return bool(is_remote())
