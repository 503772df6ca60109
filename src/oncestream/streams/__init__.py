"""Streams: typed specs, administration of streams and consumers, single stored messages.

Example::

    from oncestream.streams import StreamSpec, ensure_stream

    await ensure_stream(conn, StreamSpec(name="ORDERS", subjects=("orders.>",)))
"""

from ._admin import (
    StoredMessage,
    add_stream,
    consumer_info,
    delete_consumer,
    delete_message,
    delete_stream,
    get_message,
    last_message,
    list_consumers,
    list_streams,
    seq_at_time,
    stream_info,
    update_consumer,
    update_stream,
)
from ._reset import RESET_SINCE, ConsumerReset, ResetTarget, reset_consumer
from ._server_bugs import SERVER_BUGS, ServerBug, Version, format_version, known_bugs
from ._spec import (
    FAST_INGEST_SINCE,
    StreamSource,
    StreamSpec,
    create_stream_if_missing,
    ensure_stream,
    lineage_id,
    overlapping_streams,
    owning_stream,
    stream_exists,
)
from ._upstreams import upstream_rows
from ._version import check_server_bugs, require_server, server_cluster, server_version

__all__ = [
    "FAST_INGEST_SINCE",
    "RESET_SINCE",
    "SERVER_BUGS",
    "ConsumerReset",
    "ResetTarget",
    "ServerBug",
    "StoredMessage",
    "StreamSource",
    "StreamSpec",
    "Version",
    "add_stream",
    "check_server_bugs",
    "consumer_info",
    "create_stream_if_missing",
    "delete_consumer",
    "delete_message",
    "delete_stream",
    "ensure_stream",
    "format_version",
    "get_message",
    "known_bugs",
    "last_message",
    "lineage_id",
    "list_consumers",
    "list_streams",
    "overlapping_streams",
    "owning_stream",
    "require_server",
    "reset_consumer",
    "seq_at_time",
    "server_cluster",
    "server_version",
    "stream_exists",
    "stream_info",
    "update_consumer",
    "update_stream",
    "upstream_rows",
]
