"""The loader's one entry: a file, a stream or an iterable of records into a stream, exactly once.

:func:`load` checks the target stream, reads the file's last progress record
(``_progress``) and decides where the run starts (``_plan``), then publishes
the records pipelined, records its progress as PubAcks confirm them (``_run``)
and returns what happened. A regular file is resumable: a re-run, however late,
adds nothing. A stream (a pipe, stdin) or an iterable of records keeps no
progress: a re-run is de-duplicated by msg id inside the duplicate window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from .._connection import Connection
from .._errors import OncestreamError
from .._retry import retrying
from ..publish import Publisher
from ._input import OpenedSource, Source, open_source, rewritten
from ._options import LoadOptions
from ._plan import ResumePlan, check_target, plan_resume, refused_subject
from ._result import LoadIncomplete, LoadResult
from ._run import (
    Confirmed,
    ProgressKeeper,
    RunState,
    Tally,
    drain,
    is_config_failure,
    new_run_id,
    publish_records,
)

__all__ = ["LoadObserver", "LoadStart", "Source", "load"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class LoadStart:
    """Where a load starts publishing (what :meth:`LoadObserver.publishing` is told).

    Args:
        publisher: the started Publisher (e.g. to serve its metrics).
        lines: the file's line count (None: a stream or an iterable).
        start_line: lines 1..start_line were confirmed by an earlier run.
        resumed: an earlier run's progress record is resumed.
        known_ids: msg ids found stored after that record's point (not sent again).
        changed_after: the file changed after what the earlier run published.
    """

    publisher: Publisher
    lines: int | None
    start_line: int
    resumed: bool
    known_ids: int
    changed_after: bool


class LoadObserver:
    """What :func:`load` tells as it goes; each method does nothing unless overridden.

    Example::

        class Dots(LoadObserver):
            def line(self, line: int) -> None:
                print(".", end="", flush=True)
    """

    def publishing(self, start: LoadStart) -> None:
        """Publishing begins (after the checks and the resume plan)."""

    def line(self, line: int) -> None:
        """The input was read up to ``line`` (told every 256 lines)."""

    def malformed(self, text: str) -> None:
        """A malformed record, never published: ``line N: why`` (``on_error`` decides the rest)."""


async def load(
    conn: Connection,
    source: Source,
    options: LoadOptions,
    *,
    stop: asyncio.Event | None = None,
    observer: LoadObserver | None = None,
) -> LoadResult:
    """Load every record of ``source`` into ``options.stream`` exactly once.

    Each record gets a deterministic msg id (``options.id_field``, or a hash of
    its content) and is published with pipelined acks and retries. For a regular
    file, progress records in the server (``options.progress_stream``) make a
    re-run add nothing, however late: it resumes after what an earlier run
    confirmed and skips what that run stored after it; a changed file, another
    subject or id mode, or a re-created stream is refused (``fresh=True`` starts
    over). A killed or cancelled load resumes the same way.

    Args:
        conn: an open connection.
        source: a path (JSONL or CSV); an open binary file (a regular file opened
            by its path is resumable; stdin or a pipe is read on a thread, without
            progress records); or an iterable or async iterable of records
            (mappings, published as JSON, in order; without progress records). A
            FIFO path waits for its writer before anything else (logged).
        options: the target, the ids, what to do with bad records.
        stop: when set, the load stops reading, waits at most the connection's
            connect timeout for the records in flight, records its progress and
            raises :class:`LoadIncomplete` (``result.interrupted``).
        observer: told when publishing begins, how far the input was read, and
            each malformed record.

    Returns:
        The counts, once every record is confirmed (``result.complete``).

    Raises:
        ConfigError: bad input found before anything was sent (a missing stream,
            a subject it does not capture, a binary file, a CSV header without a
            needed column, a changed file, an unsafe resume), or a window guard
            failure (the retry horizon exceeds the stream's duplicate window).
        ConcurrentRun: another load of the same file to the same stream is running.
        LoadIncomplete: it stopped before every record was confirmed: a
            malformed record with ``on_error="stop"``, a publish that failed for
            good, or ``stop``. ``exc.result`` says how far it got.
        OncestreamError: the server could not be asked (connection lost).

    Example::

        result = await load(conn, "orders.jsonl", LoadOptions(
            stream="ORDERS", subject="orders.{region}", id_field="id"))
        print(result.stored, result.duplicates, result.skipped)
    """
    opened = open_source(source, options)
    try:
        return await _load(
            conn, opened, options, stop or asyncio.Event(), observer or LoadObserver()
        )
    finally:
        opened.close()


async def _load(
    conn: Connection,
    opened: OpenedSource,
    options: LoadOptions,
    stop: asyncio.Event,
    observer: LoadObserver,
) -> LoadResult:
    stream = options.stream
    pub_options = options.publisher_options()
    budget = conn.options.connect_timeout
    # As patient at start-up as the run's own publishes (and its progress records): a
    # leader election or a paused server here is failed work only once it outlasts them.
    info = await retrying(
        lambda: check_target(conn, stream, options.template, options.label),
        budget=pub_options.patience,
        what=f"checking stream {stream!r}",
        budget_source=options.label("patience"),
    )
    facts = opened.facts
    plan = ResumePlan()
    try:
        if facts is not None and opened.hasher is not None and options.resume:
            plan = await plan_resume(
                conn,
                info=info,
                facts=facts,
                template=options.template,
                ids=options.ids,
                progress_stream=options.progress_stream,
                fresh=options.fresh,
                run=new_run_id(),
                hasher=opened.hasher,
                ack_timeout=pub_options.ack_timeout,
                max_attempts=pub_options.max_attempts,
                label=options.label,
            )
        where: dict[str, Any] = {
            "stream": stream,
            "lines": facts.lines if facts is not None else None,
            "size": facts.size if facts is not None else None,
            "path": facts.path if facts is not None else None,
            "start_line": plan.skip_to,
            "resumed": plan.resumed,
            "changed_after": plan.changed_after,
            "resumable": plan.store is not None,
            "known_ids": len(plan.found),
        }
        if plan.done:
            return LoadResult(
                **where,
                complete=True,
                up_to_date=True,
                confirmed=plan.skip_to,
                read_to=plan.skip_to,
            )
        return await _publish(conn, opened, options, plan, info, where, stop, observer, budget)
    finally:
        if plan.store is not None:
            await plan.store.close()


async def _publish(
    conn: Connection,
    opened: OpenedSource,
    options: LoadOptions,
    plan: ResumePlan,
    info: dict[str, Any],
    where: dict[str, Any],
    stop: asyncio.Event,
    observer: LoadObserver,
    budget: float,
) -> LoadResult:
    pub_options = options.publisher_options()
    pub = Publisher(conn, pub_options)
    try:
        await pub.start()
        tally = Tally(max_seq=int(info.get("state", {}).get("last_seq", 0)))
        confirmed = Confirmed(plan.skip_to, tally.max_seq, plan.inherited_to, plan.inherited_floor)
        keeper = ProgressKeeper(plan.store, plan.base, confirmed, opened.hasher)
        keeper.chunk = max(2 * pub_options.max_inflight, 1000)
        state = RunState(stop=stop)
        observer.publishing(
            LoadStart(
                publisher=pub,
                lines=where["lines"],
                start_line=plan.skip_to,
                resumed=plan.resumed,
                known_ids=len(plan.found),
                changed_after=plan.changed_after,
            )
        )
        await publish_records(
            pub,
            opened.items(plan.skip_to, options.needed_columns),
            subject=options.template,
            id_field=options.id_field,
            skip_on_error=options.on_error == "skip",
            found=plan.found,
            confirmed=confirmed,
            keeper=keeper,
            tally=tally,
            state=state,
            on_line=observer.line,
            on_malformed=observer.malformed,
            rate=options.rate,
        )
        await drain(pub, tally, state, budget)
        confirmed.advance(tally.max_seq)
        changed = None
        if opened.facts is not None and opened.source is not None:
            changed = rewritten(opened.source, opened.facts)
        if changed is not None:
            # What was published is not the file as it is now, nor as it was: the final
            # record keeps the whole file's hash from the start, not the prefix read since,
            # so a re-run of the rewritten file is refused (it names --fresh).
            keeper.prefix_trusted = False
        complete = (
            state.eof and confirmed.first_unconfirmed is None and not tally.failed and not changed
        )
        if changed is not None and state.eof and not state.stopped:
            state.stopped = True  # the file ended early: what it held is not all read
        progress_error = state.progress_error or await keeper.final(done=complete, budget=budget)
        seconds = time.monotonic() - state.started
        refused = (
            await refused_subject(
                conn, options.stream, tally, options.label, resumable=where["resumable"]
            )
            if is_config_failure(tally.fatal)
            else None
        )
    finally:
        if not pub.closed:  # an error or a cancellation: what is in flight gets the budget
            with contextlib.suppress(OncestreamError, TimeoutError):
                async with asyncio.timeout(budget):
                    await pub.close()
    stats = pub.stats
    result = LoadResult(
        **where,
        stored=tally.stored,
        duplicates=tally.duplicates,
        skipped=tally.already,
        malformed=tally.malformed,
        failed=tally.failed,
        sent=stats.sent,
        retried=stats.retried,
        complete=complete,
        confirmed=confirmed.line,
        first_unconfirmed=confirmed.first_unconfirmed,
        read_to=state.read_to,
        interrupted=state.interrupted,
        stopped=state.stopped,
        id_refused=state.id_refused,
        failure=tally.fatal,
        errors=tuple(tally.errors),
        refused=refused,
        progress_error=progress_error,
        rewritten=changed,
        seconds=seconds,
        duplicate_window=pub.duplicate_window,
    )
    if not complete:
        what = "records" if opened.records is not None else repr(opened.label)
        raise LoadIncomplete(_why(result, what), result)
    return result


def _why(result: LoadResult, what: str) -> str:
    """One line: where the load stopped, why, and what a re-run does."""
    first = result.first_unconfirmed or result.confirmed + 1
    if result.refused:
        reason = result.refused
    elif result.interrupted:
        reason = "stopped on request"
    elif result.failure is not None:
        reason = f"{type(result.failure).__name__}: {result.failure}"
    elif result.stopped and result.progress_error:
        reason = f"its progress could not be recorded ({result.progress_error})"
    elif result.rewritten and result.malformed:
        reason = (
            f"the file was rewritten while it was read ({result.rewritten}): line {first:,} is "
            "torn by the rewrite, not a malformed record"
        )
    elif result.rewritten:
        reason = (
            f"the file was rewritten while it was read ({result.rewritten}): the lines "
            "published were read partly from each version"
        )
    elif result.stopped:
        reason = "a malformed record stopped it"
    else:
        reason = "not every record was confirmed"
    if result.refused:  # it says the way out: a re-run as it is would be refused again
        return (
            f"load of {what} into stream {result.stream!r} stopped at line {first:,} "
            f"(lines 1..{result.confirmed:,} confirmed): {reason}"
        )
    again = (
        "a re-run resumes after the last confirmed line"
        if result.resumable
        else "a re-run is de-duplicated inside the stream's duplicate window only"
    )
    return (
        f"load of {what} into stream {result.stream!r} stopped at line {first:,} "
        f"(lines 1..{result.confirmed:,} confirmed): {reason}; {again}"
    )
