"""One exception tree for oncestream.

Every error raised by oncestream derives from :class:`OncestreamError`.
Errors coming from nats-py or the server are translated at the boundary
(``raise ... from exc``) so callers never need to import nats-py's
exception classes. JetStream API errors keep the server's ``err_code``
(see nats-server ``errors.json``) and HTTP-like ``code``.

Tree::

    OncestreamError
    ├── ConfigError                 bad option, file or argument (also a ValueError)
    ├── ConnectError                cannot reach / stay connected to NATS
    │   ├── AuthenticationError     credentials rejected
    │   └── TlsNotOffered           TLS was asked for, the server does not do it
    ├── PermissionDenied            subject not allowed for this user/account
    ├── OperationTimeout            a request or ack did not complete in time
    ├── JetStreamError              the JetStream API answered with an error
    │   ├── NoResponders            503: nothing listens on the subject (never a timeout)
    │   ├── StreamNotFound          10059, or a publish subject no stream captures
    │   ├── ConsumerNotFound        10014
    │   ├── MessageNotFound         10037
    │   ├── WrongLastSequence       10071, 10164 (expected last / last subject seq)
    │   ├── WrongLastMsgId          10070
    │   ├── StreamMismatch          10060 (expected stream)
    │   └── MessageTooLarge         10054, or above the server's max_payload
    ├── PublishError                a publish could not be confirmed
    │   ├── TooManyInflight         fail-fast mode and max_inflight reached
    │   └── PublishFailed           retries exhausted without a PubAck
    ├── DataLossError               planned messages were removed by retention
    ├── LedgerError                 the processing ledger failed
    │   └── LedgerUnusable          corrupt, not a database, read-only: retrying cannot help
    ├── MaxDeliverError             a consumer's max_deliver ends a message's retries
    └── ServerError                 the embedded nats-server failed
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

__all__ = [
    "AuthenticationError",
    "ConfigError",
    "ConnectError",
    "ConsumerNotFound",
    "DataLossError",
    "JetStreamError",
    "LedgerError",
    "LedgerUnusable",
    "MaxDeliverError",
    "MessageNotFound",
    "MessageTooLarge",
    "NoResponders",
    "OncestreamError",
    "OperationTimeout",
    "PermissionDenied",
    "PublishError",
    "PublishFailed",
    "ServerError",
    "StreamMismatch",
    "StreamNotFound",
    "TlsNotOffered",
    "TooManyInflight",
    "WrongLastMsgId",
    "WrongLastSequence",
    "jetstream_error",
]


class ErrCode(IntEnum):
    """The JetStream ``err_code`` values oncestream acts on: each named once, here.

    Names follow nats-server's ``server/errors.json`` constants (``JS...Err``),
    shortened; a member compares equal to the plain int a server answer carries.
    Where a typed exception exists (:class:`StreamNotFound`...) catch that instead.
    Internal (not in ``__all__``): callers see the typed exceptions and ``err_code``.
    """

    CLUSTER_NOT_AVAIL = 10008  # JSClusterNotAvailErr: no meta leader
    CLUSTER_NOT_LEADER = 10009  # JSClusterNotLeaderErr
    CONSUMER_CREATE = 10012  # JSConsumerCreateErrF: also a setting fixed at creation
    CONSUMER_NOT_FOUND = 10014  # JSConsumerNotFoundErr
    MAXIMUM_STREAMS_LIMIT = 10027  # JSMaximumStreamsLimitErr
    NO_MESSAGE_FOUND = 10037  # JSNoMessageFoundErr
    SEQUENCE_NOT_FOUND = 10043  # JSSequenceNotFoundErrF: e.g. a message delete, already gone
    NOT_ENABLED_FOR_ACCOUNT = 10039  # JSNotEnabledForAccountErr
    STREAM_INVALID_CONFIG = 10052  # JSStreamInvalidConfigF
    MESSAGE_EXCEEDS_MAXIMUM = 10054  # JSStreamMessageExceedsMaximumErr
    STREAM_MSG_DELETE_FAILED = 10057  # JSStreamMsgDeleteFailedF: no message at that seq
    STREAM_NAME_EXIST = 10058  # JSStreamNameExistErr: the name has another config
    STREAM_NOT_FOUND = 10059  # JSStreamNotFoundErr
    STREAM_NOT_MATCH = 10060  # JSStreamNotMatchErr: expected stream does not match
    STREAM_SUBJECT_OVERLAP = 10065  # JSStreamSubjectOverlapErr
    WRONG_LAST_MSG_ID = 10070  # JSStreamWrongLastMsgIDErrF
    WRONG_LAST_SEQUENCE = 10071  # JSStreamWrongLastSequenceErrF
    STREAM_REPLICAS_NOT_SUPPORTED = 10074  # JSStreamReplicasNotSupportedErr
    STREAM_OFFLINE = 10118  # JSStreamOfflineErr: every replica down
    CONSUMER_OFFLINE = 10119  # JSConsumerOfflineErr
    CONSUMER_ALREADY_EXISTS = 10148  # JSConsumerAlreadyExists
    DUPLICATE_MESSAGE_CONFLICT = 10158  # JSStreamDuplicateMessageConflict: id in process
    WRONG_LAST_SEQUENCE_CONSTANT = 10164  # JSStreamWrongLastSequenceConstantErr
    TOO_MANY_REQUESTS = 10167  # JSStreamTooManyRequests: a full ingest queue dropped it
    ATOMIC_INCOMPLETE_BATCH = 10176  # JSAtomicPublishIncompleteBatchErr
    ATOMIC_TOO_LARGE_BATCH = 10199  # JSAtomicPublishTooLargeBatchErrF
    ATOMIC_DUPLICATE_MESSAGE = 10201  # JSAtomicPublishContainsDuplicateMessageErr
    CONSUMER_INVALID_RESET = 10204  # JSConsumerInvalidResetErr
    BATCH_DISABLED = 10205  # JSBatchPublishDisabledErr
    BATCH_UNKNOWN_ID = 10208  # JSBatchPublishUnknownBatchIDErr
    ATOMIC_TOO_MANY_INFLIGHT = 10210  # JSAtomicPublishTooManyInflight
    BATCH_TOO_MANY_INFLIGHT = 10211  # JSBatchPublishTooManyInflight


class OncestreamError(Exception):
    """Root of every error raised by oncestream."""


class ConfigError(OncestreamError, ValueError):
    """An option, file or argument is invalid; the message names it and what is allowed."""


class ConnectError(OncestreamError):
    """The NATS connection could not be established or was lost for good."""


class AuthenticationError(ConnectError):
    """The server rejected the credentials (never includes the secret itself)."""


class TlsNotOffered(ConnectError):
    """TLS was asked for but the server does not offer it: no credential was sent to it.

    TLS is asked for by a ``tls://``/``wss://`` server URL or a TLS file option
    (CA, client certificate); the message names the server (without credentials).
    """


class PermissionDenied(OncestreamError):
    """The server refused a subject for this user or account."""


class OperationTimeout(OncestreamError, TimeoutError):
    """A request, ack or readiness wait did not complete in time."""


class JetStreamError(OncestreamError):
    """The JetStream API returned an error.

    Attributes:
        code: HTTP-like status code from the server (e.g. 404, 400, 503).
        err_code: JetStream error identifier from nats-server ``errors.json``
            (e.g. 10071 for a wrong last sequence), or 0 if the server gave none.
        description: the server's description text.
    """

    err_codes: tuple[int, ...] = ()

    def __init__(self, description: str, *, code: int = 0, err_code: int = 0) -> None:
        self.description = description
        self.code = code
        self.err_code = err_code
        suffix = f" (err_code={err_code})" if err_code else ""
        super().__init__(f"{description}{suffix}")


class NoResponders(JetStreamError):
    """Nothing listens on the subject (status 503).

    No stream captures a published subject, no consumer serves a pull, or no
    JetStream API answers for that domain / API prefix; while a clustered
    stream or consumer moves to a new leader it is temporary.

    Attributes:
        transient: the caller knows the target exists (e.g. reading a stream
            whose consumer is being replaced), so a retry may succeed.
    """

    def __init__(
        self, description: str, *, code: int = 503, err_code: int = 0, transient: bool = False
    ) -> None:
        super().__init__(description, code=code, err_code=err_code)
        self.transient = transient


class StreamNotFound(JetStreamError):
    """No stream with that name, or (the server confirmed) none captures a published subject."""

    err_codes = (ErrCode.STREAM_NOT_FOUND,)


class ConsumerNotFound(JetStreamError):
    """No consumer with that name on the stream."""

    err_codes = (ErrCode.CONSUMER_NOT_FOUND,)


class MessageNotFound(JetStreamError):
    """No message at that sequence / for that subject."""

    err_codes = (ErrCode.NO_MESSAGE_FOUND,)


class WrongLastSequence(JetStreamError):
    """An ``expected_last_seq`` / ``expected_last_subject_seq`` check failed.

    10164 is the clustered form ("wrong last sequence" without the number) that an
    R3 stream's leader answers, e.g. to a re-send after a leader change (seen by the
    fault campaign, torture/: ProducerSession then raised instead of
    finding its own earlier attempt stored).
    """

    err_codes = (ErrCode.WRONG_LAST_SEQUENCE, ErrCode.WRONG_LAST_SEQUENCE_CONSTANT)


class WrongLastMsgId(JetStreamError):
    """An ``expected_last_msg_id`` check failed."""

    err_codes = (ErrCode.WRONG_LAST_MSG_ID,)


class StreamMismatch(JetStreamError):
    """The message landed on a different stream than ``expected_stream``."""

    err_codes = (ErrCode.STREAM_NOT_MATCH,)


class MessageTooLarge(JetStreamError):
    """The message exceeds the stream's max_msg_size or the server's max_payload."""

    err_codes = (ErrCode.MESSAGE_EXCEEDS_MAXIMUM,)


class PublishError(OncestreamError):
    """A publish could not be confirmed by a PubAck."""


class TooManyInflight(PublishError):
    """Fail-fast mode: ``max_inflight`` unacknowledged publishes are already pending."""


class PublishFailed(PublishError):
    """Every retry of a publish went unacknowledged; the message may or may not be stored.

    Re-publishing it with the same msg id inside the duplicate window is safe.
    The Publisher also raises it when its last attempt was answered "no
    responders" by a stream that exists or may exist (no leader: an outage);
    the ``__cause__`` is then a transient :class:`NoResponders`.
    """

    def __init__(self, message: str, *, msg_id: str | None = None, attempts: int = 0) -> None:
        self.msg_id = msg_id
        self.attempts = attempts
        super().__init__(message)


class DataLossError(OncestreamError):
    """Messages that a read planned to return were removed from the stream."""


class LedgerError(OncestreamError):
    """The processing ledger could not record or look up a message."""


class LedgerUnusable(LedgerError):
    """The ledger database cannot be used until someone fixes it; retrying cannot help.

    A corrupt file, a file that is not a database, a read-only file or file
    system, a file that cannot be opened. The message names the file and the cause.
    """


class MaxDeliverError(OncestreamError):
    """A consumer's ``max_deliver`` ends, or ended, a message's deliveries before the
    Processor applied it or dead-lettered it.

    Raised by :meth:`Processor.run` when the limit was set or lowered under a
    running Processor without a dead-letter stream, or when the server stopped
    delivering a message it had not applied (``$JS.EVENT.ADVISORY.CONSUMER.
    MAX_DELIVERIES``). The message names the way out.

    Attributes:
        stream, consumer: the consumer.
        max_deliver: its limit, as last read (0 when unknown).
        seqs: the stream sequences the server stopped delivering (empty: caught
            before the server's last delivery, nothing was dropped yet).
    """

    def __init__(
        self,
        message: str,
        *,
        stream: str = "",
        consumer: str = "",
        max_deliver: int = 0,
        seqs: tuple[int, ...] = (),
    ) -> None:
        super().__init__(message)
        self.stream = stream
        self.consumer = consumer
        self.max_deliver = max_deliver
        self.seqs = seqs


class ServerError(OncestreamError):
    """The embedded nats-server could not start, or exited unexpectedly."""


_BY_ERR_CODE: dict[int, type[JetStreamError]] = {
    code: cls
    for cls in (
        StreamNotFound,
        ConsumerNotFound,
        MessageNotFound,
        WrongLastSequence,
        WrongLastMsgId,
        StreamMismatch,
        MessageTooLarge,
    )
    for code in cls.err_codes
}


def jetstream_error(error: dict[str, Any] | Any) -> JetStreamError:
    """Build the typed exception for a JetStream API error object.

    Args:
        error: the ``error`` member of a JetStream API response
            (``{"code": 400, "err_code": 10071, "description": "..."}``), or a
            nats-py ``APIError`` carrying the same fields.

    Returns:
        An instance of the most specific :class:`JetStreamError` subclass.
    """
    if isinstance(error, dict):
        code = int(error.get("code") or 0)
        err_code = int(error.get("err_code") or 0)
        description = str(error.get("description") or "JetStream API error")
    else:
        code = int(getattr(error, "code", 0) or 0)
        err_code = int(getattr(error, "err_code", 0) or 0)
        description = str(getattr(error, "description", None) or error)
    cls = _BY_ERR_CODE.get(err_code, JetStreamError)
    return cls(description, code=code, err_code=err_code)
