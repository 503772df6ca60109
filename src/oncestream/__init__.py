"""oncestream: exactly-once data pipelines on NATS JetStream, in Python and PySpark.

The everyday names are here; each component's folder (``oncestream.streams``,
``oncestream.read``, ``oncestream.publish``, ``oncestream.load``,
``oncestream.process``, ``oncestream.audit``, ``oncestream.ledger``,
``oncestream.server``, ``oncestream.spark``) lists all of its public names in
its own ``__all__``.
Modules whose name starts with an underscore are private and may change.
"""

from ._connection import Connection, connect
from ._errors import (
    AuthenticationError,
    ConfigError,
    ConnectError,
    ConsumerNotFound,
    DataLossError,
    JetStreamError,
    LedgerError,
    LedgerUnusable,
    MaxDeliverError,
    MessageNotFound,
    MessageTooLarge,
    NoResponders,
    OncestreamError,
    OperationTimeout,
    PermissionDenied,
    PublishError,
    PublishFailed,
    ServerError,
    StreamMismatch,
    StreamNotFound,
    TlsNotOffered,
    TooManyInflight,
    WrongLastMsgId,
    WrongLastSequence,
)
from ._message import Message, MessageMetadata
from ._options import ConnectOptions
from .audit import AuditReport, KeySpec, OutputReport, OutputSpec, audit
from .ledger import Ledger, LedgerTx, PostgresLedger, SQLiteLedger, ledger_from_url
from .process import (
    DeadLetter,
    Processor,
    ProcessorOptions,
    ProcessorStats,
    list_dead_letters,
    replay_dead_letters,
)
from .publish import ProducerSession, PubAck, Publisher, PublisherOptions, PublisherStats
from .read import (
    MessageStream,
    PullOptions,
    StartPosition,
    iter_messages,
    pull_messages,
    read_stream,
)
from .streams import StoredMessage, StreamSource, StreamSpec, ensure_stream, lineage_id

__version__ = "0.2.0"

__all__ = [
    "AuditReport",
    "AuthenticationError",
    "ConfigError",
    "ConnectError",
    "ConnectOptions",
    "Connection",
    "ConsumerNotFound",
    "DataLossError",
    "DeadLetter",
    "JetStreamError",
    "KeySpec",
    "Ledger",
    "LedgerError",
    "LedgerTx",
    "LedgerUnusable",
    "MaxDeliverError",
    "Message",
    "MessageMetadata",
    "MessageNotFound",
    "MessageStream",
    "MessageTooLarge",
    "NoResponders",
    "OncestreamError",
    "OperationTimeout",
    "OutputReport",
    "OutputSpec",
    "PermissionDenied",
    "PostgresLedger",
    "Processor",
    "ProcessorOptions",
    "ProcessorStats",
    "ProducerSession",
    "PubAck",
    "PublishError",
    "PublishFailed",
    "Publisher",
    "PublisherOptions",
    "PublisherStats",
    "PullOptions",
    "SQLiteLedger",
    "ServerError",
    "StartPosition",
    "StoredMessage",
    "StreamMismatch",
    "StreamNotFound",
    "StreamSource",
    "StreamSpec",
    "TlsNotOffered",
    "TooManyInflight",
    "WrongLastMsgId",
    "WrongLastSequence",
    "__version__",
    "audit",
    "connect",
    "ensure_stream",
    "iter_messages",
    "ledger_from_url",
    "lineage_id",
    "list_dead_letters",
    "pull_messages",
    "read_stream",
    "replay_dead_letters",
]
