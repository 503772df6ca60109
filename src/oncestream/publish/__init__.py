"""Publishing exactly once: the pipelined Publisher, producer sessions, records on a subject.

Example::

    from oncestream.publish import Publisher, PublisherOptions

    async with Publisher(conn, PublisherOptions(stream="ORDERS")) as pub:
        await pub.publish("orders.eu", b"{}", msg_id="order-1")
"""

from ._frames import AckTally
from ._options import KeyFunction, PubAck, PublisherOptions, PublisherStats
from ._publisher import Publisher
from ._records import SubjectLog
from ._session import SOURCE_POS_HEADER, ProducerSession

__all__ = [
    "SOURCE_POS_HEADER",
    "AckTally",
    "KeyFunction",
    "ProducerSession",
    "PubAck",
    "Publisher",
    "PublisherOptions",
    "PublisherStats",
    "SubjectLog",
]
