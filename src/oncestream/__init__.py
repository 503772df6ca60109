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
    MessageNotFound,
    MessageTooLarge,
    OncestreamError,
    OperationTimeout,
    PermissionDenied,
    PublishError,
    PublishFailed,
    ServerError,
    StreamMismatch,
    StreamNotFound,
    TooManyInflight,
    WrongLastMsgId,
    WrongLastSequence,
)
from ._options import ConnectOptions

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "ConfigError",
    "ConnectError",
    "ConnectOptions",
    "Connection",
    "ConsumerNotFound",
    "DataLossError",
    "JetStreamError",
    "LedgerError",
    "MessageNotFound",
    "MessageTooLarge",
    "OncestreamError",
    "OperationTimeout",
    "PermissionDenied",
    "PublishError",
    "PublishFailed",
    "ServerError",
    "StreamMismatch",
    "StreamNotFound",
    "TooManyInflight",
    "WrongLastMsgId",
    "WrongLastSequence",
    "__version__",
    "connect",
]
