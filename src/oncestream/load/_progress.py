"""Progress records of file loads, kept in the server, for exactly-once re-runs.

Msg-id de-duplication lasts only the stream's ``duplicate_window``. To make a
re-run of a file's load (``oncestream publish FILE``) add nothing whatever the
time between the runs, each run of one (file, target stream) pair keeps one subject of a small
progress stream (``ONCESTREAM_PUBLISH_PROGRESS``) and appends a
:class:`PublishProgress` to it:

- ``line``: every record on lines ``1..line`` is confirmed stored (or was a
  malformed line that was skipped);
- ``scan_from``: a stream sequence such that any record after ``line`` that
  the stream holds has a higher sequence (the highest PubAck sequence seen
  before the first unconfirmed record was first sent);
- ``reserved``: no line above it was ever sent, by this run or an earlier one
  (written *before* such a line is sent);
- ``prefix_sha256``/``offset``: the hash of the file's bytes up to the end
  of ``line``, so a change to what was already published is refused while a
  file that grew or changed after ``line`` resumes;
- the whole file's sha256, the subject template and id mode, and the target
  stream's creation time (a re-created stream is refused).

A re-run reads the last record, scans the target stream after ``scan_from``
for msg ids (:func:`oncestream.read.stored_ids`; the scan is bounded by the stream's last
sequence) and publishes only the lines after ``line`` whose id is not there.
Writes carry ``Nats-Expected-Last-Subject-Sequence``, so two runs of the same
file cannot interleave their records unnoticed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

import orjson

from .._connection import Connection
from .._errors import (
    ConfigError,
    ErrCode,
    JetStreamError,
    OncestreamError,
    PermissionDenied,
    WrongLastSequence,
)
from .._retry import retrying
from ..publish import SubjectLog
from ..streams import StreamSpec, create_stream_if_missing
from ..streams._internal import stream_exists
from ._labels import Label, default_label

__all__ = [
    "PROGRESS_STREAM",
    "ConcurrentRun",
    "ProgressStore",
    "PublishProgress",
    "progress_key",
]

log = logging.getLogger(__name__)

PROGRESS_STREAM = "ONCESTREAM_PUBLISH_PROGRESS"
PROGRESS_SUBJECT = "oncestream.publish.progress"
_VERSION = 1
#: JetStream refusals of the progress stream's creation that the user fixes (nats-server
#: errors.json): account without JetStream, stream limit, invalid config, another stream's
#: config under the name, overlapping subjects, replicas without a cluster. Any other
#: (a store that cannot be created on a full disk, 10049; no meta leader) is failed work.
_USAGE_ERR_CODES = frozenset(
    {
        ErrCode.NOT_ENABLED_FOR_ACCOUNT,
        ErrCode.MAXIMUM_STREAMS_LIMIT,
        ErrCode.STREAM_INVALID_CONFIG,
        ErrCode.STREAM_NAME_EXIST,
        ErrCode.STREAM_SUBJECT_OVERLAP,
        ErrCode.STREAM_REPLICAS_NOT_SUPPORTED,
    }
)


class ConcurrentRun(ConfigError):
    """Another run of the same file and stream wrote progress since this one read it."""


def progress_key(stream: str, path: str) -> str:
    """The subject token of one (target stream, absolute file path) pair."""
    return hashlib.sha256(f"{stream}\0{path}".encode()).hexdigest()[:32]


@dataclass(frozen=True, kw_only=True)
class PublishProgress:
    """One progress record (see the module docstring for the meaning of each field)."""

    stream: str
    stream_created: str
    file: str
    sha256: str
    size: int
    subject: str
    ids: str
    line: int
    scan_from: int
    reserved: int
    done: bool
    run: str
    prefix_sha256: str = ""
    offset: int = 0
    version: int = _VERSION

    def to_json(self) -> bytes:
        return orjson.dumps(asdict(self))

    @classmethod
    def from_json(cls, data: bytes) -> PublishProgress:
        fields = orjson.loads(data)
        if not isinstance(fields, dict):
            raise ValueError("not a JSON object")
        return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})

    def advanced(self, **changes: Any) -> PublishProgress:
        return replace(self, **changes)


class ProgressStore:
    """Reads and appends the progress records of one (stream, file) pair.

    Args:
        conn: an open connection (same account / domain as the target stream).
        stream: the progress stream; created when missing.
        key: :func:`progress_key` of the pair.
        label: how messages name the load's options.
    """

    def __init__(
        self,
        conn: Connection,
        stream: str,
        key: str,
        *,
        ack_timeout: float = 5.0,
        max_attempts: int = 5,
        label: Label = default_label,
    ) -> None:
        self.conn = conn
        self.stream = stream
        self._label = label
        self.subject = f"{PROGRESS_SUBJECT}.{key}"
        self._lock = asyncio.Lock()
        # As patient as the run's own publishes (ack timeout, attempts): a server
        # outage the records ride out must not stop the run at a progress record, nor
        # at one of its requests (STREAM.INFO, the last record, creating the stream).
        self._budget = ack_timeout * max_attempts
        self._log = SubjectLog(
            conn,
            stream,
            self.subject,
            ack_timeout=ack_timeout,
            max_attempts=max_attempts,
            retry_budget=self._budget,
        )

    @property
    def last_seq(self) -> int:
        """The sequence of the last record read or written (0: none)."""
        return self._log.last_seq

    async def ensure(self, replicas: int = 1) -> None:
        """Create the progress stream if it does not exist.

        Raises:
            ConfigError: it cannot be created for a reason the user fixes (permissions,
                overlapping subjects, limits), naming the stream and the ways out.
            OncestreamError: the server failed to create it (a full disk, no meta leader):
                failed work, to re-run.
        """
        if await retrying(
            lambda: stream_exists(self.conn, self.stream),
            budget=self._budget,
            what=f"looking up the progress stream {self.stream!r}",
        ):
            return
        spec = StreamSpec(
            name=self.stream,
            subjects=(f"{PROGRESS_SUBJECT}.>",),
            max_msgs_per_subject=4,
            duplicate_window=60.0,
            replicas=replicas,
            allow_batched=False,  # records go on the ack path (SubjectLog): no batches
        )
        try:
            # Created by another run meanwhile: that one is used (safe to repeat).
            await retrying(
                lambda: create_stream_if_missing(self.conn, spec),
                budget=self._budget,
                what=f"creating the progress stream {self.stream!r}",
            )
        except (JetStreamError, PermissionDenied) as exc:
            what = (
                f"cannot create the progress stream {self.stream!r} "
                f"(subjects '{PROGRESS_SUBJECT}.>')"
            )
            if isinstance(exc, JetStreamError) and exc.err_code not in _USAGE_ERR_CODES:
                raise OncestreamError(
                    f"{what}: {exc}. The server failed to create it; nothing was published: "
                    "re-run when it recovers"
                ) from exc
            raise ConfigError(
                f"{what}: {exc}. Create it, name another one that captures "
                f"'{PROGRESS_SUBJECT}.>' with {self._label('progress_stream')}, or publish "
                f"without resume records with {self._label('no_resume')}"
            ) from exc
        log.debug("created stream %s for publish progress records", self.stream)

    async def last(self) -> PublishProgress | None:
        """The last record of this pair, or None."""
        found = await self._log.last()
        if found is None:
            return None
        try:
            return PublishProgress.from_json(found.data)
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"the progress record at {self.stream!r} seq {found.seq} is unreadable "
                f"({exc}); publish with {self._label('fresh')} to start over"
            ) from exc

    async def write(self, record: PublishProgress) -> None:
        """Append ``record`` after the last one this store read or wrote.

        Raises:
            ConcurrentRun: another run wrote in between.
            OncestreamError: the server did not confirm the write.
        """
        async with self._lock:
            token = f"{record.run}:{record.reserved}:{record.line}:{int(record.done)}"
            for _ in range(2):
                try:
                    await self._log.append(record.to_json(), msg_id=token)
                    return
                except WrongLastSequence as exc:
                    if self._log.last_seq == self._log.refused_expected:
                        # Nothing was stored after the record this run read: a write to
                        # the subject stays in flight (a replicated stream refuses others
                        # meanwhile, 10164), most likely this run's own, held while the
                        # stream has no quorum. No rival: retry, not bad usage (seed 52,
                        # trial 95: exit 2 with no other publish running).
                        raise OncestreamError(
                            f"progress of {record.file!r} to stream {record.stream!r} not "
                            f"confirmed: the server still holds a write to it in flight "
                            f"(after seq {self._log.last_seq}; the progress stream without "
                            "a quorum?); re-run this command"
                        ) from exc
                    stored = await self.last()
                    if stored is not None and stored.run == record.run:
                        # This run's own earlier write, reported as failed (no PubAck
                        # during an outage) but stored: write again after it.
                        continue
                    raise ConcurrentRun(
                        f"another publish of {record.file!r} to stream {record.stream!r} "
                        "wrote progress while this one ran; run one publish of a file at a "
                        "time (re-run this command when the other one has finished)"
                    ) from exc
            raise ConcurrentRun(
                f"progress of {record.file!r} to stream {record.stream!r} kept moving while "
                "this run wrote it; run one publish of a file at a time"
            )

    async def close(self) -> None:
        try:
            await self._log.close()
        except Exception as exc:  # the connection may be gone; nothing is pending
            log.debug("progress publisher close: %s", exc)
