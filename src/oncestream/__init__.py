"""oncestream: exactly-once data pipelines on NATS JetStream, in Python and PySpark.

The public API is what ``__all__`` lists; everything in a module whose name
starts with an underscore is private and may change.
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
from ._options import ConnectOptions
from .read._start import StartPosition
from .audit._audit import AuditReport, KeySpec, OutputReport, OutputSpec
from .ledger import Ledger, LedgerTx, PostgresLedger, SQLiteLedger, ledger_from_url
from ._message import Message, MessageMetadata
from .process._processor import Processor, ProcessorOptions, ProcessorStats
from .publish._session import ProducerSession
from .publish._publisher import PubAck, Publisher, PublisherOptions, PublisherStats
from .read._pull import MessageStream, PullOptions, pull_messages

__version__ = "0.1.0"

__all__ = [
    "AuditReport",
    "AuthenticationError",
    "ConfigError",
    "ConnectError",
    "ConnectOptions",
    "Connection",
    "ConsumerNotFound",
    "DataLossError",
    "JetStreamError",
    "KeySpec",
    "Ledger",
    "LedgerError",
    "LedgerTx",
    "LedgerUnusable",
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
    "StreamMismatch",
    "StreamNotFound",
    "TlsNotOffered",
    "TooManyInflight",
    "WrongLastMsgId",
    "WrongLastSequence",
    "__version__",
    "connect",
    "ledger_from_url",
    "pull_messages",
]
