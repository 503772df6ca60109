"""Publishing exactly once: the pipelined Publisher, atomic chunks, producer sessions, records.

Example::

    from oncestream.publish import Publisher, PublisherOptions

    async with Publisher(conn, PublisherOptions(stream="ORDERS")) as pub:
        await pub.publish("orders.eu", b"{}", msg_id="order-1")
"""

from ._atomic import AtomicPublisher, AtomicStats
from ._batch import MAX_BATCH, check_atomic
from ._fast_ingest import FAST_INGEST_SINCE
from ._frames import AckTally
from ._options import KeyFunction, PubAck, PublisherOptions, PublisherStats
from ._publisher import Publisher
from ._records import SubjectLog
from ._session import SOURCE_POS_HEADER, ProducerSession

__all__ = [
    "FAST_INGEST_SINCE",
    "MAX_BATCH",
    "SOURCE_POS_HEADER",
    "AckTally",
    "AtomicPublisher",
    "AtomicStats",
    "KeyFunction",
    "ProducerSession",
    "PubAck",
    "Publisher",
    "PublisherOptions",
    "PublisherStats",
    "SubjectLog",
    "check_atomic",
]
