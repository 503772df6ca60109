"""oncestream: exactly-once data pipelines on NATS JetStream, in Python and PySpark.

The everyday names are here; each component's folder (``oncestream.streams``,
``oncestream.read``, ``oncestream.publish``, ``oncestream.load``,
``oncestream.process``, ``oncestream.audit``, ``oncestream.ledger``,
``oncestream.server``, ``oncestream.spark``) lists all of its public names in
its own ``__all__``.
Modules whose name starts with an underscore are private and may change.

Importing the package is cheap: each name below loads its component when it is
first used (PEP 562), so a process that needs one part (a Spark worker
unpickling the data source) does not pay for the rest (nats-py, the
Processor, the ledgers).
"""

import sys as _sys
import types as _types
import typing as _typing
from importlib import import_module as _import_module

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

if _typing.TYPE_CHECKING:
    from ._connection import Connection, connect
    from ._message import Message, MessageMetadata
    from ._options import ConnectOptions
    from .audit import AuditReport, KeySpec, OutputReport, OutputSpec, audit
    from .ledger import Ledger, LedgerTx, PostgresLedger, SQLiteLedger, ledger_from_url
    from .process import (
        DeadLetter,
        GroupMember,
        GroupOptions,
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
    from .streams import (
        Partitioning,
        StoredMessage,
        StreamSource,
        StreamSpec,
        ensure_stream,
        lineage_id,
    )

__version__ = "0.2.0"

#: Each lazily loaded name and the module that defines it.
_LAZY = {
    "Connection": "._connection",
    "connect": "._connection",
    "Message": "._message",
    "MessageMetadata": "._message",
    "ConnectOptions": "._options",
    "AuditReport": ".audit",
    "KeySpec": ".audit",
    "OutputReport": ".audit",
    "OutputSpec": ".audit",
    "audit": ".audit",
    "Ledger": ".ledger",
    "LedgerTx": ".ledger",
    "PostgresLedger": ".ledger",
    "SQLiteLedger": ".ledger",
    "ledger_from_url": ".ledger",
    "DeadLetter": ".process",
    "GroupMember": ".process",
    "GroupOptions": ".process",
    "Processor": ".process",
    "ProcessorOptions": ".process",
    "ProcessorStats": ".process",
    "list_dead_letters": ".process",
    "replay_dead_letters": ".process",
    "ProducerSession": ".publish",
    "PubAck": ".publish",
    "Publisher": ".publish",
    "PublisherOptions": ".publish",
    "PublisherStats": ".publish",
    "MessageStream": ".read",
    "PullOptions": ".read",
    "StartPosition": ".read",
    "iter_messages": ".read",
    "pull_messages": ".read",
    "read_stream": ".read",
    "Partitioning": ".streams",
    "StoredMessage": ".streams",
    "StreamSource": ".streams",
    "StreamSpec": ".streams",
    "ensure_stream": ".streams",
    "lineage_id": ".streams",
}


#: The components, loaded on first use as ``oncestream.<name>`` (as an eager import
#: of the names above used to load most of them). Not ``audit``: that name is the
#: function, as it always was (see :class:`_Package`).
_COMPONENTS = frozenset(
    {"ledger", "load", "process", "publish", "read", "server", "spark", "streams", "tracing"}
)


class _Package(_types.ModuleType):
    """The package's module type: ``oncestream.audit`` stays the function.

    Importing a submodule binds it as an attribute of its package. When the eager
    ``from .audit import audit`` ran here, the function replaced the submodule at
    once; loaded lazily, the ``oncestream.audit`` package can be imported first (by
    any module that uses it), and its binding would hide the function for good.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name == "audit" and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)

    def __reduce__(self) -> tuple[object, tuple[str]]:
        # By reference, as pickle and cloudpickle take a plain module: cloudpickle knows
        # only the exact module type, and a Spark UDF naming ``oncestream`` pickles it.
        return _import_module, (self.__name__,)


_sys.modules[__name__].__class__ = _Package


# Hidden from type checkers: with a module ``__getattr__`` in sight, a misspelt name
# is an ``object`` to them instead of an error (the names are declared above).
if not _typing.TYPE_CHECKING:

    def __getattr__(name: str) -> object:
        if name in _COMPONENTS:
            return _import_module(f".{name}", __name__)
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'oncestream' has no attribute {name!r}")
        value = getattr(_import_module(module, __name__), name)
        globals()[name] = value  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY, *_COMPONENTS})


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
    "GroupMember",
    "GroupOptions",
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
    "Partitioning",
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
