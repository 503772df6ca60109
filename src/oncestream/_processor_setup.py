"""Options, counters and consumer set-up of the :class:`~oncestream.Processor`."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._connection import Connection
from ._errors import ConfigError, ConsumerNotFound, JetStreamError
from ._names import (
    check_publish_subject,
    check_stream_name,
    check_subject_filter,
    subject_matches,
    subjects_overlap,
)
from ._options import parse_duration, parse_positive_int
from ._start import StartPosition, describe_config
from .pull import PullOptions

__all__ = ["FloorHistory", "ProcessorOptions", "ProcessorStats", "setup_consumer"]


@dataclass(frozen=True, kw_only=True)
class ProcessorOptions:
    """How a :class:`Processor` pulls, retries and acknowledges.

    Args:
        batch: messages per pull request and per ledger transaction (1000: each
            transaction's commit, fsync and confirmed ack are shared by more
            messages; 500 measured 8% slower, 2000 no faster).
        max_bytes: byte cap per pull request (0 = none).
        expires: seconds a pull request lives on the server.
        idle_heartbeat: pull heartbeat in seconds (default ``min(expires/2, 30)``).
        unavailable_timeout: seconds the consumer may stay without responders
            (cluster partition, leader election) before :meth:`Processor.run`
            raises ``NoResponders``; None (default) rides through any outage.
            Only a consumer the server confirms deleted ends the run sooner.
        ack_wait: the consumer's ack wait when the Processor creates it (or binds).
        max_deliver: handler attempts before a message is dead-lettered.
        backoff: nak delays in seconds after the 1st, 2nd, ... failure (the last repeats).
        dead_letter_stream: stream that receives dead letters (created if absent,
            unless ``bind``); None keeps retrying failed messages with the last delay.
        dead_letter_subject: subject for dead letters (default ``<dead_letter_stream>.<stream>``).
        filter_subject: consumer filter (validated against an existing consumer).
        bind: use the consumer as it is: no STREAM/CONSUMER API calls at all (for
            cross-account setups that only import ``CONSUMER.MSG.NEXT`` and acks).
        create: create the consumer when it does not exist.
        double_ack: confirm the ack of each batch's last message with the server.
        double_ack_timeout: seconds per confirmation attempt.
        double_ack_attempts: confirmation attempts before giving up (logged; the
            ledger still prevents a second application).
        prune_interval: seconds between ledger pruning rounds (0 = never).
        prune_grace: only prune up to the ack floor observed at least this long ago.
        prune_limit: rows deleted per pruning round at most.
        max_ack_pending: the consumer's max_ack_pending when created.
        start: where a consumer created here starts (:class:`StartPosition`: a
            sequence, a time or new messages only); None starts at the beginning and
            accepts an existing consumer as it is. When given and the consumer
            exists with another start, the Processor refuses (ConfigError).

    Raises:
        ConfigError: naming the bad value.
    """

    batch: int = 1000
    max_bytes: int = 0
    expires: float = 30.0
    idle_heartbeat: float | None = None
    unavailable_timeout: float | None = None
    ack_wait: float = 30.0
    max_deliver: int = 5
    backoff: tuple[float, ...] = (1.0, 5.0, 30.0)
    dead_letter_stream: str | None = None
    dead_letter_subject: str | None = None
    filter_subject: str | None = None
    bind: bool = False
    create: bool = True
    double_ack: bool = True
    double_ack_timeout: float = 1.0
    double_ack_attempts: int = 5
    prune_interval: float = 30.0
    prune_grace: float = 120.0
    prune_limit: int = 10_000
    max_ack_pending: int = 10_000
    start: StartPosition | None = None

    def __post_init__(self) -> None:
        for name in ("batch", "max_deliver", "double_ack_attempts", "prune_limit"):
            object.__setattr__(self, name, parse_positive_int(name, getattr(self, name)))
        object.__setattr__(
            self, "max_ack_pending", parse_positive_int("max_ack_pending", self.max_ack_pending)
        )
        for name in ("ack_wait", "double_ack_timeout", "prune_interval", "prune_grace"):
            object.__setattr__(self, name, parse_duration(name, getattr(self, name)))
        if self.ack_wait < 1:
            raise ConfigError(f"ack_wait must be at least 1s, got {self.ack_wait!r}")
        backoff = tuple(parse_duration("backoff", b) for b in self.backoff)
        if not backoff:
            raise ConfigError("backoff must list at least one delay, got ()")
        object.__setattr__(self, "backoff", backoff)
        if self.max_ack_pending < self.batch:
            raise ConfigError(
                f"max_ack_pending ({self.max_ack_pending}) must be >= batch ({self.batch})"
            )
        if self.dead_letter_subject and not self.dead_letter_stream:
            raise ConfigError("dead_letter_subject needs dead_letter_stream")
        if self.start is not None and not isinstance(self.start, StartPosition):
            raise ConfigError(f"start must be a StartPosition or None, got {self.start!r}")
        if self.start is not None and (self.bind or not self.create):
            raise ConfigError(
                "start applies to a consumer the Processor creates; with bind=True or "
                "create=False it never creates one"
            )
        if self.dead_letter_stream is not None:
            check_stream_name(self.dead_letter_stream, "dead_letter_stream")
        if self.dead_letter_subject is not None:
            check_publish_subject(self.dead_letter_subject, "dead_letter_subject")
        if self.filter_subject is not None:
            check_subject_filter(self.filter_subject, "filter_subject")
        for name in ("expires", "idle_heartbeat"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, parse_duration(name, getattr(self, name)))
        # Validates batch/expires/heartbeat together.
        self.pull_options()

    def pull_options(self) -> PullOptions:
        """The continuous-pull settings derived from these options."""
        return PullOptions(
            batch=self.batch,
            max_bytes=self.max_bytes,
            expires=self.expires,
            idle_heartbeat=self.idle_heartbeat,
            unavailable_timeout=self.unavailable_timeout,
            confirm_missing=not self.bind,  # bind makes no CONSUMER.INFO call
        )


@dataclass
class ProcessorStats:
    """Counters of a running :class:`Processor`."""

    applied: int = 0
    suppressed: int = 0
    failed: int = 0
    dead_lettered: int = 0
    batches: int = 0
    double_acks: int = 0
    double_ack_failures: int = 0
    ledger_errors: int = 0
    heartbeat_errors: int = 0
    pruned: int = 0
    in_progress_acks: int = 0
    started: float = field(default_factory=time.monotonic)
    #: ``observer(kind, seconds)`` for "batch", "handler" and "commit" durations
    #: (what :mod:`oncestream.metrics` turns into histograms); empty costs nothing.
    observers: list[Callable[[str, float], None]] = field(default_factory=list, repr=False)

    def observe(self, kind: str, seconds: float) -> None:
        """Report a duration to every observer."""
        for observer in self.observers:
            observer(kind, seconds)

    def as_dict(self) -> dict[str, Any]:
        """The counters plus ``elapsed`` seconds and ``rate`` (applied per second)."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        data = {k: v for k, v in self.__dict__.items() if k not in ("started", "observers")}
        data["elapsed"] = round(elapsed, 3)
        data["rate"] = round(self.applied / elapsed, 1)
        return data


async def setup_consumer(
    conn: Connection, stream: str, consumer: str, opts: ProcessorOptions
) -> float:
    """Create or validate the durable consumer (and the DLQ stream); return its ack wait."""
    if opts.bind:
        return opts.ack_wait
    try:
        info = await conn.consumer_info(stream, consumer)
    except ConsumerNotFound:
        if not opts.create:
            raise
        info = await _create_consumer(conn, stream, consumer, opts)
    _validate_consumer(info.get("config", {}), stream, consumer, opts)
    ack_wait = float(info.get("config", {}).get("ack_wait", opts.ack_wait * 1e9)) / 1e9
    if opts.dead_letter_stream:
        subject = opts.dead_letter_subject or f"{opts.dead_letter_stream}.{stream}"
        await _ensure_dlq_stream(conn, opts.dead_letter_stream, subject)
    return ack_wait


def check_handler(handler: Any, what: str) -> None:
    """A handler must be callable as ``handler(msg, tx)``.

    Raises:
        ConfigError: naming ``what``, with the signature found.
    """
    if not callable(handler):
        raise ConfigError(f"{what} must be callable as f(msg, tx), got {handler!r}")
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):
        return  # no introspection (some builtins): trust it
    try:
        signature.bind(object(), object())
    except TypeError:
        name = getattr(handler, "__qualname__", type(handler).__name__)
        raise ConfigError(f"{what} must accept (msg, tx); {name}{signature} does not") from None


async def _create_consumer(
    conn: Connection, stream: str, consumer: str, opts: ProcessorOptions
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "durable_name": consumer,
        "ack_policy": "explicit",
        "deliver_policy": "all",
        "ack_wait": int(opts.ack_wait * 1e9),
        # Unlimited: the Processor dead-letters at max_deliver itself, so a
        # crash during the last attempt cannot strand a message.
        "max_deliver": -1,
        "max_ack_pending": opts.max_ack_pending,
        "max_waiting": 512,
    }
    if opts.filter_subject:
        config["filter_subject"] = opts.filter_subject
        subjects = (await conn.stream_info(stream)).get("config", {}).get("subjects") or []
        if subjects and not any(subjects_overlap(s, opts.filter_subject) for s in subjects):
            raise ConfigError(
                f"filter subject {opts.filter_subject!r} matches nothing stream {stream!r} "
                f"stores (its subjects: {subjects})"
            )
    if opts.start is not None:
        config.update(opts.start.to_config())
    payload = {"stream_name": stream, "config": config, "action": "create"}
    try:
        return await conn.api(f"CONSUMER.CREATE.{stream}.{consumer}", payload)
    except JetStreamError as exc:
        if exc.err_code == 10148:  # created concurrently by another instance
            return await conn.consumer_info(stream, consumer)
        raise


def _validate_consumer(
    config: dict[str, Any], stream: str, consumer: str, opts: ProcessorOptions
) -> None:
    where = f"consumer {stream}/{consumer}"
    if config.get("deliver_subject"):
        raise ConfigError(f"{where} is a push consumer; the Processor needs a pull consumer")
    if config.get("ack_policy") != "explicit":
        raise ConfigError(
            f"{where} has ack_policy {config.get('ack_policy')!r}; the Processor needs 'explicit'"
        )
    max_deliver = int(config.get("max_deliver", -1) or -1)
    if 0 < max_deliver <= opts.max_deliver and opts.dead_letter_stream:
        raise ConfigError(
            f"{where} has max_deliver {max_deliver}; with a dead-letter stream it must be "
            f"-1 or > the Processor's max_deliver ({opts.max_deliver}), otherwise "
            f"the server stops redelivering before the message is dead-lettered"
        )
    if opts.start is not None and not opts.start.matches(config):
        raise ConfigError(
            f"{where} already exists and starts at {describe_config(config)}, not at "
            f"{opts.start.describe()}; a start applies only to a consumer being created "
            f"(drop the start option, or remove the consumer with `oncestream consumer rm`)"
        )
    wanted = opts.filter_subject
    if wanted:
        filters = [config.get("filter_subject")] if config.get("filter_subject") else []
        filters += config.get("filter_subjects") or []
        if filters != [wanted]:
            raise ConfigError(f"{where} filters {filters or 'nothing'}; expected [{wanted!r}]")


async def _ensure_dlq_stream(conn: Connection, name: str, subject: str) -> None:
    """Create the dead-letter stream, or check that it captures ``subject``."""
    try:
        info = await conn.stream_info(name)
    except JetStreamError as exc:
        if exc.err_code != 10059:
            raise
        subjects = [f"{name}.>"] if subject.startswith(f"{name}.") else [subject]
        await conn.add_stream(
            {"name": name, "subjects": subjects, "storage": "file", "duplicate_window": int(120e9)}
        )
        return
    subjects = info.get("config", {}).get("subjects") or []
    if not any(subject_matches(pattern, subject) for pattern in subjects):
        raise ConfigError(
            f"dead-letter stream {name!r} does not capture the dead-letter subject "
            f"{subject!r} (its subjects: {subjects or 'none'}); name a stream listening on "
            f"{subject!r}, or a new stream name (created with subjects ['{name}.>'])"
        )


class FloorHistory:
    """Ack floors seen over time; what may be pruned is the floor seen ``grace`` seconds ago.

    A redelivered copy of a message can only exist if it was delivered before
    the ack floor passed it, and it may still sit in another instance's buffer
    for a while: pruning up to an older floor leaves that copy its ledger row.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._samples: list[tuple[float, int]] = []

    def prunable(self, floor: int, now: float) -> int:
        """Record ``floor`` observed at ``now``; return the sequence to prune up to (0 = none)."""
        self._samples.append((now, floor))
        old = [f for t, f in self._samples if now - t >= self.grace]
        self._samples = [(t, f) for t, f in self._samples if now - t < self.grace]
        if not old:
            return 0
        # Keep the newest old-enough floor: it stays valid for the next rounds.
        self._samples.insert(0, (now - self.grace, old[-1]))
        return old[-1]
