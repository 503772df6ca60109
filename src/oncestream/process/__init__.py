"""Processing exactly once: the Processor, its ledger transaction per batch, dead letters.

Example::

    from oncestream.process import Processor, ProcessorOptions

    proc = Processor(conn, "ORDERS", "billing", handler, ledger=SQLiteLedger("billing.db"))
    await proc.run()
"""

from ._applying import BatchHandler, Handler
from ._group import GroupMember, partition_consumer, partition_ledgers
from ._group_options import GroupOptions, GroupStats
from ._options import ProcessorOptions, ProcessorStats
from ._processor import Processor
from ._replay import DeadLetter, ReplayReport, list_dead_letters, replay_dead_letters

__all__ = [
    "BatchHandler",
    "DeadLetter",
    "GroupMember",
    "GroupOptions",
    "GroupStats",
    "Handler",
    "Processor",
    "ProcessorOptions",
    "ProcessorStats",
    "ReplayReport",
    "list_dead_letters",
    "partition_consumer",
    "partition_ledgers",
    "replay_dead_letters",
]
