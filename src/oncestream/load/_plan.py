"""Checks made before a load sends anything: target stream and resume point.

- The target stream exists and captures the subject (asked of the server
  with ``STREAM.NAMES`` filtered by the subject pattern, or read from the
  target's own subjects when the user may not list streams), so a subject that
  lands in another stream is a configuration error naming both streams.
- For a regular file, the last progress record decides where the run
  starts, and whether it may: a changed file, another subject or id mode, a
  re-created stream or a tail that retention removed are refused
  (:class:`ConfigError`) with the way out (``fresh``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from .._connection import Connection
from .._errors import ConfigError, OncestreamError, PermissionDenied, StreamNotFound
from .._names import subjects_overlap
from .._retry import leader_stream_info
from ..read import stored_ids
from ..streams._internal import captures_subject
from ._input import FileFacts, PrefixHasher, SubjectTemplate
from ._labels import Label, default_label
from ._progress import ProgressStore, PublishProgress, progress_key
from ._run import Tally

__all__ = ["ResumePlan", "check_target", "plan_resume", "refused_subject"]

log = logging.getLogger(__name__)


async def check_target(
    conn: Connection, stream: str, template: SubjectTemplate, label: Label = default_label
) -> dict[str, Any]:
    """The target stream's info as its leader sees it, once it is known to capture the subject.

    The resume scan ends at this ``last_seq``; a replica answering while the
    stream has no leader may report an older one, so such an answer raises
    ``Unavailable`` (transient: the caller retries).

    Raises:
        ConfigError: the stream is missing, or the subject belongs to another or no stream.
        Unavailable: the stream has no leader (an election).
    """
    flag = label("stream")
    try:
        info = await leader_stream_info(conn, stream)
    except StreamNotFound:
        raise ConfigError(
            f"stream {stream!r} ({flag}) not found; create it first, capturing the "
            f"subject {template.filter!r}"
        ) from None
    mirror = info.get("config", {}).get("mirror")
    if isinstance(mirror, dict):
        raise ConfigError(
            f"stream {stream!r} ({flag}) is a mirror of {mirror.get('name')!r} and takes no "
            "publishes; publish to the stream it mirrors"
        )
    own = info.get("config", {}).get("subjects") or []
    captures = f"captures {', '.join(repr(s) for s in own)}" if own else "captures no subjects"
    try:
        reply = await conn.api("STREAM.NAMES", {"subject": template.filter})
    except PermissionDenied:
        # The target's own subjects still tell a subject it can never capture.
        if not any(subjects_overlap(template.filter, s) for s in own):
            raise ConfigError(
                f"{template.label} {template.template!r} is not captured by {flag} {stream!r} "
                f"(which {captures}); nothing was published (this user may not list streams, "
                "so which stream captures it is not known)"
            ) from None
        log.info("cannot list streams (permission denied); the server checks each publish")
        return info
    names: list[str] = reply.get("streams") or []
    if stream in names:
        return info
    if names:
        raise ConfigError(
            f"{template.label} {template.template!r} is captured by stream {names[0]!r}, not "
            f"by {flag} {stream!r} (which {captures}); nothing was published"
        )
    raise ConfigError(
        f"no stream captures {template.label} {template.template!r}; {flag} {stream!r} {captures}"
    )


async def refused_subject(
    conn: Connection,
    stream: str,
    tally: Tally,
    label: Label = default_label,
    *,
    resumable: bool = False,
) -> str | None:
    """Why the server refused a record's subject, and the way out.

    The target stream may be gone (deleted while the run published: the subject
    was fine), or not capture the subject (named with the stream that does, when
    the user may list streams). None when ``stream`` captures the subject by now:
    the refusal came from a moment the server could not tell (e.g. a stream
    between leaders), not from a wrong subject, so the run failed and a re-run is
    the way out, not a new subject.

    Args:
        resumable: the run keeps progress records (a re-run of a re-created stream
            needs ``fresh``: the records name the deleted one).
    """
    subject = tally.fatal_subject
    flag = label("stream")
    refusal = f"{type(tally.fatal).__name__}: {tally.fatal}"
    own: list[str] | None = None
    try:
        info = await conn.stream_info(stream)
        own = [str(s) for s in info.get("config", {}).get("subjects") or ()]
    except StreamNotFound:  # it existed at the start (check_target): deleted since
        again = (
            f"re-run with {label('fresh')} (the progress recorded for the deleted stream "
            "does not apply to a new one)"
            if resumable
            else "re-run"
        )
        return (
            f"stream {stream!r} ({flag}) no longer exists: it was deleted while the run "
            f"published (a record was refused: {refusal}), and what this run stored in it "
            f"went with it. Create it, then {again}"
        )
    except OncestreamError as exc:
        log.info("could not read stream %r: %s", stream, exc)
    else:
        if captures_subject(info.get("config") or {}, subject):
            return None
    try:
        reply = await conn.api("STREAM.NAMES", {"subject": subject})
        names: list[str] | None = reply.get("streams") or []
    except OncestreamError as exc:
        log.info("could not look up the stream that captures %r: %s", subject, exc)
        names = None
    if names is not None and stream in names:
        return None
    which = f" (which captures {', '.join(repr(s) for s in own)})" if own else ""
    if names is None:  # unknown now: say only what the server said
        where = f"is not captured by {flag} {stream!r}{which}"
    else:
        captor = f"stream {names[0]!r}" if names else "no stream"
        where = f"is captured by {captor}, not by {flag} {stream!r}{which}"
    return (
        f"subject {subject!r} of a record {where}: the server refused it ({refusal}) and the "
        f"run stopped; fix {label('subject')} or the record"
    )


@dataclass
class ResumePlan:
    """Where a run starts and what it must not send again."""

    base: PublishProgress | None = None
    store: ProgressStore | None = None
    skip_to: int = 0
    inherited_to: int = 0
    inherited_floor: int = 0
    found: set[str] = field(default_factory=set)
    done: bool = False
    resumed: bool = False
    changed_after: bool = False


async def plan_resume(
    conn: Connection,
    *,
    info: dict[str, Any],
    facts: FileFacts,
    template: SubjectTemplate,
    ids: str,
    progress_stream: str,
    fresh: bool,
    run: str,
    hasher: PrefixHasher,
    ack_timeout: float = 5.0,
    max_attempts: int = 5,
    label: Label = default_label,
) -> ResumePlan:
    """Read the file's last progress record and decide where this run starts.

    Raises:
        ConfigError: resuming is unsafe; the message says why and how to start over.
    """
    stream = info["config"]["name"]
    state = info.get("state", {})
    last_seq = int(state.get("last_seq", 0))
    created = str(info.get("created", ""))
    store = ProgressStore(
        conn,
        progress_stream,
        progress_key(stream, facts.path),
        ack_timeout=ack_timeout,
        max_attempts=max_attempts,
        label=label,
    )
    replicas = int(info.get("config", {}).get("num_replicas") or 1)
    await store.ensure(replicas)
    previous = await store.last()
    base = PublishProgress(
        stream=stream,
        stream_created=created,
        file=facts.path,
        sha256=facts.sha256,
        size=facts.size,
        subject=template.template,
        ids=ids,
        line=0,
        scan_from=last_seq,
        reserved=0,
        done=False,
        run=run,
    )
    plan = ResumePlan(base=base, store=store)
    if previous is None or fresh:
        return plan
    _check_same(previous, base, facts, hasher, label)
    plan.changed_after = previous.sha256 != base.sha256
    if previous.done and not plan.changed_after:
        plan.done = True
        plan.skip_to = previous.line
        return plan
    first_seq = int(state.get("first_seq", 0))
    if int(state.get("messages", 0)) and first_seq > previous.scan_from + 1:
        raise ConfigError(
            f"stream {stream!r} no longer holds sequences {previous.scan_from + 1}.."
            f"{first_seq - 1} (retention or a purge removed them), so which records of "
            f"{facts.path!r} after line {previous.line} were stored cannot be checked. "
            f"Re-run with {label('fresh')} to publish from line 1 (records stored before, "
            "outside the duplicate window, are stored again)"
        )
    if last_seq < previous.scan_from and created and created == previous.stream_created:
        # The same stream (its creation time) cannot end before a sequence it acknowledged:
        # this is one replica's own state, which nats-server lets every member answer
        # while the stream has no leader. Nothing was published: the work failed, re-run.
        raise OncestreamError(
            f"stream {stream!r} answered that it ends at sequence {last_seq}, before the "
            f"recorded {previous.scan_from}, although it is the same stream (created "
            f"{created}): a replica answered while the stream had no leader (an election, "
            "a partition). Nothing was published; re-run the same command"
        )
    if last_seq < previous.scan_from:
        raise ConfigError(
            f"stream {stream!r} ends at sequence {last_seq}, before the recorded "
            f"{previous.scan_from}: it is not the stream the earlier run wrote to. "
            f"Re-run with {label('fresh')} to start over"
        )
    try:
        plan.found = await stored_ids(
            conn,
            stream,
            previous.scan_from,
            last_seq,
            retry_timeout=ack_timeout * max_attempts,
            budget_source=label("patience"),
        )
    except OncestreamError as exc:
        failed = OncestreamError(f"scanning stream {stream!r} for records of an earlier run: {exc}")
        for note in getattr(exc, "__notes__", ()):
            failed.add_note(note)
        raise failed from exc
    plan.skip_to = previous.line
    plan.inherited_to = previous.reserved
    plan.inherited_floor = previous.scan_from
    plan.resumed = True
    plan.base = base.advanced(
        line=previous.line, scan_from=previous.scan_from, reserved=previous.reserved
    )
    return plan


def _check_same(
    previous: PublishProgress,
    base: PublishProgress,
    facts: FileFacts,
    hasher: PrefixHasher,
    label: Label,
) -> None:
    """Refuse to resume when what the earlier run published, or how, is not the same."""
    fresh = (
        f"; re-run with {label('fresh')} to publish it from line 1 anyway (records stored "
        "before, outside the stream's duplicate window, are stored again)"
    )
    hasher.advance_to(previous.line)
    if previous.prefix_sha256:
        same = (hasher.offset, hasher.hexdigest()) == (previous.offset, previous.prefix_sha256)
    else:
        same = previous.sha256 == base.sha256
    if not same:
        raise ConfigError(
            f"{facts.path!r} changed since an earlier publish to stream {base.stream!r}: "
            f"lines 1..{previous.line}, which that run published, are not the same any more "
            f"(file sha256 {previous.sha256[:12]}… then, {base.sha256[:12]}… now), so it "
            f"cannot be resumed{fresh}"
        )
    if previous.stream_created != base.stream_created:
        raise ConfigError(
            f"stream {base.stream!r} was re-created since an earlier publish of "
            f"{facts.path!r}, so its progress does not apply{fresh}"
        )
    if (previous.subject, previous.ids) != (base.subject, base.ids):
        raise ConfigError(
            f"an earlier publish of {facts.path!r} to stream {base.stream!r} used "
            f"{label('subject')} {previous.subject!r} and ids '{previous.ids}'; this one uses "
            f"{base.subject!r} and '{base.ids}'. Resume with the same options{fresh}"
        )
