"""What a load did: :class:`LoadResult`, and :class:`LoadIncomplete` when it stopped early."""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import OncestreamError

__all__ = ["LoadIncomplete", "LoadResult"]


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    """What :func:`~oncestream.load.load` did with the input.

    Counts:
        stored: records the stream stored.
        duplicates: records the stream already held (msg-id de-duplication).
        skipped: records not sent because an earlier run had stored them (its
            progress record and the scan after it said so).
        malformed: records that were never published (bad JSON or CSV, a missing
            id or subject field, an id the server would read as another, too large).
        failed: records whose publish failed for good (no PubAck for the retry
            horizon, refused by the server).
        sent, retried: the Publisher's messages sent and extra attempts.

    Where it got to:
        complete: the whole input is confirmed (stored or already there).
        up_to_date: an earlier run had confirmed the whole file; nothing was sent.
        confirmed: every record on lines (or positions) 1..confirmed is confirmed.
        first_unconfirmed: the first line not confirmed when the load stopped early.
        read_to: the last line read.
        lines, size, path: a regular file's line count, bytes and absolute path
            as the load found it at its start (None for a stream or an iterable).
        start_line: lines 1..start_line were confirmed by an earlier run.
        resumed: this run resumed after an earlier one's progress record.
        changed_after: the file changed after what an earlier run published.
        resumable: progress records were kept (a re-run resumes, however late).
        known_ids: msg ids found stored after the recorded point, not sent again.

    Why it stopped early:
        interrupted: the ``stop`` event was set.
        stopped: a malformed record (``on_error="stop"``) or a progress record that
            could not be written stopped it.
        id_refused: the record that stopped it has an id the server would read as
            another id (bad input rather than a failure).
        failure: the first publish that failed for good; ``errors`` the first
            failures as text (``line N: Type: message``).
        refused: a record's subject belongs to another stream or none: why, in words.
        progress_error: why the last progress record could not be written (a
            re-run then scans from the previous one and still stores nothing twice).
        rewritten: the file changed in place while it was read (how): its counted
            bytes are not the same at the end (a malformed line there is torn by the
            rewrite rather than bad in the file). None otherwise.

        seconds: how long publishing took, to its last progress record.
        duplicate_window: the target stream's duplicate window in seconds.
    """

    stream: str
    stored: int = 0
    duplicates: int = 0
    skipped: int = 0
    malformed: int = 0
    failed: int = 0
    sent: int = 0
    retried: int = 0
    complete: bool = False
    up_to_date: bool = False
    confirmed: int = 0
    first_unconfirmed: int | None = None
    read_to: int = 0
    lines: int | None = None
    size: int | None = None
    path: str | None = None
    start_line: int = 0
    resumed: bool = False
    changed_after: bool = False
    resumable: bool = False
    known_ids: int = 0
    interrupted: bool = False
    stopped: bool = False
    id_refused: bool = False
    failure: BaseException | None = None
    errors: tuple[str, ...] = ()
    refused: str | None = None
    progress_error: str | None = None
    rewritten: str | None = None
    seconds: float = 0.0
    duplicate_window: float | None = None


class LoadIncomplete(OncestreamError):
    """A load stopped before every record was confirmed; ``result`` says how far it got.

    Nothing is lost and nothing is stored twice by running the same load again:
    a regular file's re-run resumes after its progress record; a stream's or an
    iterable's re-run is de-duplicated inside the duplicate window.
    """

    def __init__(self, message: str, result: LoadResult) -> None:
        super().__init__(message)
        self.result = result
