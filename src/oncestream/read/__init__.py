"""Reading streams: ranges without a consumer, continuous pulls, where a read starts.

Example::

    from oncestream.read import iter_messages

    async for msg in iter_messages(conn, "ORDERS", end_seq=100):
        print(msg.seq, msg.subject, msg.data)
"""

from ._ids import stored_ids
from ._options import PullOptions
from ._pull import MessageStream, pull_messages
from ._range import RangeReader, StreamRecord, iter_messages, read_stream
from ._start import StartPosition

__all__ = [
    "MessageStream",
    "PullOptions",
    "RangeReader",
    "StartPosition",
    "StreamRecord",
    "iter_messages",
    "pull_messages",
    "read_stream",
    "stored_ids",
]
