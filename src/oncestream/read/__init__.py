"""Reading streams: ranges without a consumer, continuous pulls, where a read starts.

Example::

    from oncestream.read import iter_messages

    async for msg in iter_messages(conn, "ORDERS", end_seq=100):
        print(msg.seq, msg.subject, msg.data)
"""

from ._options import PullOptions, check_group_name
from ._pull import MessageStream, pull_messages
from ._range import (
    RANGE_CONSUMER_PREFIX,
    RangeReader,
    StreamRecord,
    count_sequences,
    delete_consumer_later,
    iter_messages,
    locate_ids,
    nth_sequence,
    read_stream,
    stored_ids,
)
from ._start import StartPosition

__all__ = [
    "RANGE_CONSUMER_PREFIX",
    "MessageStream",
    "PullOptions",
    "RangeReader",
    "StartPosition",
    "StreamRecord",
    "check_group_name",
    "count_sequences",
    "delete_consumer_later",
    "iter_messages",
    "locate_ids",
    "nth_sequence",
    "pull_messages",
    "read_stream",
    "stored_ids",
]
