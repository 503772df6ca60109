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
file) or from a ``query_name`` the user gives. With neither, the helpers refuse
rather than guess.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .._errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["QueryScope", "stale_batch_message"]


@dataclass(kw_only=True)
class QueryScope:
    """What scopes a writer's batch ids: ``query_name``, else the query id.

    Args:
        owner: how messages name the writer, e.g. ``transactional(table='t')``.
        query_name: a name unique to the query *and* its checkpoint.
        checkpoint_location: the query's ``checkpointLocation`` (its query id is
            read from there when Spark does not hand it over: Connect).

    Raises:
        ConfigError: a blank ``query_name`` or ``checkpoint_location``; under a
            Spark Connect client, neither given (a writer built in a Connect
            process will run where nothing tells it its query).
    """

    owner: str
    query_name: str | None = None
    checkpoint_location: str | None = None
    #: The id read from ``checkpoint_location``, once per unpickled copy (one query run).
    _checkpoint_id: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        name, location = self.query_name, self.checkpoint_location
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ConfigError(f"query_name must be a non-empty string, got {name!r}")
        if location is not None and (not isinstance(location, str) or not location.strip()):
            raise ConfigError(
                f"checkpoint_location must be the query's checkpointLocation, got {location!r}"
            )
        if name is None and location is None and _connect_client():
            raise ConfigError(
                f"{self.owner} under Spark Connect needs checkpoint_location= (the query's "
                "checkpointLocation, where Spark keeps its query id) or query_name= (a name "
                "unique to the query and its checkpoint): Connect does not give a "
                "foreachBatch function its query's id, and batch ids of queries sharing one "
                "scope are skipped as each other's"
            )

    def resolve(self, df: DataFrame) -> str:
        """The scope of the batch ``df`` belongs to.

        Raises:
            ConfigError: nothing names the query (Connect without either option, or
                a call outside a streaming query), or the checkpoint's metadata
                cannot be read.
        """
        if self.query_name:
            return self.query_name
        query_id = _thread_query_id(df)
        if query_id:
            return query_id
        if self.checkpoint_location:
            if self._checkpoint_id is None:
                self._checkpoint_id = _checkpoint_query_id(df, self.checkpoint_location)
            return self._checkpoint_id
        where = (
            "Spark Connect does not give a foreachBatch function its query's id"
            if _is_connect(df)
            else "this call is not part of a streaming query's micro-batch"
        )
        raise ConfigError(
            f"{self.owner} cannot tell which streaming query a batch belongs to: {where}. "
            "Pass checkpoint_location= (the query's checkpointLocation: its query id is read "
            "from there) or query_name= (a name unique to this query and checkpoint); batch "
            "ids of queries sharing one scope are skipped as each other's"
        )


def stale_batch_message(where: str, recorded: int, scope: str, batch_id: int) -> str:
    """Why a batch id below the last one recorded for its scope is refused.

    Spark re-runs only a query's last batch whose commit it did not record, so an
    older id means another query shares the scope: a new checkpoint reusing
    ``query_name`` (its batch ids restart at 0, and would be skipped as done) or a
    checkpoint restored from an older copy.
    """
    return (
        f"{where} already holds batch {recorded} of query {scope!r}, and the query now "
        f"writes batch {batch_id}: a new checkpoint reuses that query name (its batch ids "
        "restart at 0) or the checkpoint was restored from an older copy; give this query "
        "a new query_name"
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


def _connect_client() -> bool:
    """Whether this process holds a Spark Connect session (pyspark sets the mark)."""
    if "pyspark" not in sys.modules:
        return False
    from pyspark.sql.utils import is_remote

    return bool(is_remote())
