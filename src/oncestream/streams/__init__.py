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
    stream_info,
    update_consumer,
    update_stream,
)
from ._partitions import Partitioning
from ._reset import ConsumerReset, ResetTarget, reset_consumer
from ._spec import StreamSource, StreamSpec, create_stream_if_missing, ensure_stream, lineage_id
from ._version import require_server

__all__ = [
    "ConsumerReset",
    "Partitioning",
    "ResetTarget",
    "StoredMessage",
    "StreamSource",
    "StreamSpec",
    "add_stream",
    "consumer_info",
    "create_stream_if_missing",
    "delete_consumer",
    "delete_message",
    "delete_stream",
    "ensure_stream",
    "get_message",
    "last_message",
    "lineage_id",
    "list_consumers",
    "list_streams",
    "require_server",
    "reset_consumer",
    "stream_info",
    "update_consumer",
    "update_stream",
]
