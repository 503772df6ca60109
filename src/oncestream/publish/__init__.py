"""Publishing exactly once: the pipelined Publisher, atomic chunks, producer sessions, records.

Example::

    from oncestream.publish import Publisher, PublisherOptions

    async with Publisher(conn, PublisherOptions(stream="ORDERS")) as pub:
        await pub.publish("orders.eu", b"{}", msg_id="order-1")
"""

from ._atomic import AtomicPublisher, AtomicStats
from ._frames import AckTally
from ._options import KeyFunction, PubAck, PublisherOptions, PublisherStats
from ._publisher import Publisher
from ._records import SubjectLog
from ._session import ProducerSession

__all__ = [
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
]
