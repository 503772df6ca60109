"""Progress records of file publishes, kept in the server, for exactly-once re-runs.

Msg-id de-duplication lasts only the stream's ``duplicate_window``. To make a
re-run of ``oncestream publish FILE`` add nothing whatever the time between the
runs, each run of one (file, target stream) pair keeps one subject of a small
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
for msg ids (:func:`stored_ids`; the scan is bounded by the stream's last
sequence) and publishes only the lines after ``line`` whose id is not there.
Writes carry ``Nats-Expected-Last-Subject-Sequence``, so two runs of the same
file cannot interleave their records unnoticed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from dataclasses import asdict, dataclass, replace
from typing import Any

import orjson

from .._connection import Connection
from .._errors import (
    ConfigError,
    JetStreamError,
    MessageNotFound,
    PermissionDenied,
    WrongLastSequence,
)
from .._headers import msg_id_key
from ..publish._publisher import Publisher, PublisherOptions
from ..streams._spec import StreamSpec, stream_exists
from ..streams import add_stream

__all__ = [
    "PROGRESS_STREAM",
    "ConcurrentRun",
    "ProgressStore",
    "PublishProgress",
    "progress_key",
    "stored_ids",
]

log = logging.getLogger("oncestream.progress")

PROGRESS_STREAM = "ONCESTREAM_PUBLISH_PROGRESS"
PROGRESS_SUBJECT = "oncestream.publish.progress"
_VERSION = 1
_SCAN_CONCURRENCY = 128


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
    """

    def __init__(self, conn: Connection, stream: str, key: str) -> None:
        self.conn = conn
        self.stream = stream
        self.subject = f"{PROGRESS_SUBJECT}.{key}"
        self.last_seq = 0
        self._lock = asyncio.Lock()
        self._pub = Publisher(
            conn,
            PublisherOptions(
                stream=stream, max_inflight=1, ack_timeout=2.0, max_attempts=2, check_window=False
            ),
        )

    async def ensure(self, replicas: int = 1) -> None:
        """Create the progress stream if it does not exist.

        Raises:
            ConfigError: it cannot be created (permissions, overlapping subjects),
                naming the stream and the ways out.
        """
        if await stream_exists(self.conn, self.stream):
            return
        spec = StreamSpec(
            name=self.stream,
            subjects=(f"{PROGRESS_SUBJECT}.>",),
            max_msgs_per_subject=4,
            duplicate_window=60.0,
            replicas=replicas,
        )
        try:
            await add_stream(self.conn, spec.to_api())
        except (JetStreamError, PermissionDenied) as exc:
            raise ConfigError(
                f"cannot create the progress stream {self.stream!r} (subjects "
                f"'{PROGRESS_SUBJECT}.>'): {exc}. Create it, name another one that captures "
                f"'{PROGRESS_SUBJECT}.>' with --progress-stream, or publish without resume "
                "records with --no-resume"
            ) from exc
        log.debug("created stream %s for publish progress records", self.stream)

    async def last(self) -> PublishProgress | None:
        """The last record of this pair, or None."""
        try:
            reply = await self.conn.api(
                f"STREAM.MSG.GET.{self.stream}", {"last_by_subj": self.subject}
            )
        except MessageNotFound:
            self.last_seq = 0
            return None
        message = reply["message"]
        self.last_seq = int(message["seq"])
        try:
            return PublishProgress.from_json(base64.b64decode(message.get("data") or b""))
        except (ValueError, TypeError) as exc:
            raise ConfigError(
                f"the progress record at {self.stream!r} seq {self.last_seq} is unreadable "
                f"({exc}); publish with --fresh to start over"
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
                future = await self._pub.publish(
                    self.subject,
                    record.to_json(),
                    msg_id=token,
                    expected_last_subject_seq=self.last_seq,
                )
                try:
                    ack = await future
                except WrongLastSequence as exc:
                    stored = await self.last()
                    if stored is not None and stored == record:
                        return  # an earlier attempt of this very write was stored
                    if stored is not None and stored.run == record.run:
                        # This run's own earlier write, reported as failed (no PubAck
                        # during an outage) but stored: write again after it.
                        continue
                    raise ConcurrentRun(
                        f"another publish of {record.file!r} to stream {record.stream!r} "
                        "wrote progress while this one ran; run one publish of a file at a "
                        "time (re-run this command when the other one has finished)"
                    ) from exc
                self.last_seq = ack.seq
                return
            raise ConcurrentRun(
                f"progress of {record.file!r} to stream {record.stream!r} kept moving while "
                "this run wrote it; run one publish of a file at a time"
            )

    async def close(self) -> None:
        try:
            await self._pub.close()
        except Exception as exc:  # the connection may be gone; nothing is pending
            log.debug("progress publisher close: %s", exc)


async def stored_ids(conn: Connection, stream: str, after: int, until: int) -> set[str]:
    """Msg ids of the messages ``stream`` holds at sequences ``after+1 .. until``.

    The range is read with concurrent ``STREAM.MSG.GET`` requests (deleted
    sequences are skipped), so it works without ``allow_direct``.
    """
    ids: set[str] = set()

    async def get(seq: int) -> None:
        try:
            reply = await conn.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})
        except MessageNotFound:
            return
        hdrs = reply["message"].get("hdrs")
        if hdrs:
            found = msg_id_key(base64.b64decode(hdrs))
            if found is not None:
                ids.add(found)

    seq = after + 1
    while seq <= until:
        stop = min(until, seq + _SCAN_CONCURRENCY - 1)
        await asyncio.gather(*(get(s) for s in range(seq, stop + 1)))
        seq = stop + 1
    if until > after:
        log.info(
            "stream %s: %d msg ids after seq %d (scanned to %d)", stream, len(ids), after, until
        )
    return ids
