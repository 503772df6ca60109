"""The Processor's options and counters."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import ConfigError
from .._names import check_publish_subject, check_stream_name, check_subject_filter
from .._options import parse_duration, parse_positive_int
from ..read import PullOptions, StartPosition
from ..read._internal import check_group_name

__all__ = ["MIN_PRUNE_INTERVAL", "ProcessorOptions", "ProcessorStats", "check_prune_interval"]

_POLICIES = ("pinned", "overflow")
_ACK_POLICIES = ("explicit", "all")
#: Batches the Processor keeps requested: the next one arrives while one commits.
PULL_WINDOW_BATCHES = 2
#: The shortest pruning interval but 0 (never): each round asks the server for the
#: consumer's state and may write to the ledger. Idle, measured (2 cores, load 1.4):
#: 0.0001s cost 52% of a core in the worker and 14% in the server; 0.1s 2.4% and 1.1%;
#: the default 30s 0.1% and 0.3%.
MIN_PRUNE_INTERVAL = 0.1


def check_prune_interval(name: str, value: str | float) -> float:
    """``value`` as seconds: 0 (never prune) or at least :data:`MIN_PRUNE_INTERVAL`.

    Raises:
        ConfigError: naming ``name``, the value given and what is allowed.
    """
    seconds = parse_duration(name, value)
    if 0 < seconds < MIN_PRUNE_INTERVAL:
        raise ConfigError(
            f"{name} must be 0 (never prune) or at least {MIN_PRUNE_INTERVAL:g}s (each round "
            f"asks the server for the consumer's state; the default is 30s), got {value!r}"
        )
    return seconds


@dataclass(frozen=True, kw_only=True)
class ProcessorOptions:
    """How a :class:`Processor` pulls, retries and acknowledges.

    Args:
        batch: the most messages per ledger transaction (a transaction takes
            what is buffered, up to this); the Processor keeps twice as many
            requested from the server (its pull window), so the next transaction
            arrives while one applies and commits. 4000: larger transactions share
            a commit, fsync and confirmed ack among more messages (10^6 messages,
            SQLite: 1000 pulled ~540 per transaction and ran ~15% slower; a window
            of one batch instead of two, ~1,400 per transaction and 24-26% idle
            CPU instead of 19-21%). A batch is one transaction: with a slow
            handler, lower it so that a batch ends well within ``pinned_ttl``
            (in-progress acks cover ``ack_wait``, for the batch being applied and
            for the messages buffered behind it).
        max_bytes: byte cap per pull request (0 = none).
        expires: seconds a pull request lives on the server.
        idle_heartbeat: pull heartbeat in seconds (default ``min(expires/2, 30)``).
        unavailable_timeout: seconds the consumer may stay without responders
            (cluster partition, leader election) before :meth:`Processor.run`
            raises ``NoResponders``; None (default) rides through any outage.
            Only a consumer the server confirms deleted ends the run sooner.
        ack_wait: the consumer's ack wait when the Processor creates it (or binds).
        max_deliver: handler attempts before a message is dead-lettered (fewer when the
            consumer's own ``max_deliver`` is lowered under a running Processor: it
            dead-letters before the server's last delivery; see
            :class:`~oncestream.MaxDeliverError`).
        backoff: nak delays in seconds after the 1st, 2nd, ... failure (the last repeats).
        dead_letter_stream: stream that receives dead letters (created if absent,
            unless ``bind``); None keeps retrying failed messages with the last delay.
        dead_letter_subject: subject for dead letters (default ``<dead_letter_stream>.<stream>``).
        filter_subject: consumer filter (validated against an existing consumer).
        bind: use the consumer as it is: no STREAM/CONSUMER API calls (for
            cross-account setups that only import ``CONSUMER.MSG.NEXT`` and acks),
            but one ``STREAM.INFO`` at the first dead letter (without it, letters
            name no stream life: docs/processing.md).
        create: create the consumer when it does not exist.
        double_ack: confirm the ack of each batch's last message with the server.
        double_ack_timeout: seconds per confirmation attempt.
        double_ack_attempts: confirmation attempts before giving up (logged; the
            ledger still prevents a second application).
        prune_interval: seconds between ledger pruning rounds: 0 (never) or at least
            0.1. What a round deletes is recorded as the consumer's prune horizon: still
            never applied again.
        prune_grace: only prune up to the ack floor observed at least this long ago.
        prune_limit: rows deleted per pruning round at most.
        max_ack_pending: the consumer's max_ack_pending when created (at least
            ``batch``; below three batches the server pauses the pull window while
            a transaction is applied).
        start: where a consumer created here starts (:class:`StartPosition`: a
            sequence, a time or new messages only); None starts at the beginning and
            accepts an existing consumer as it is. When given and the consumer
            exists with another start, the Processor refuses (ConfigError).
        priority_group: run in this priority group of the consumer (server 2.11+;
            the consumer is created with it, an existing one must list it).
            None: every instance pulls (the ledger still applies each message once).
        policy: with ``priority_group``: ``"pinned"`` (one active instance, the
            others standby; a standby takes over when the active one stops pulling
            for ``pinned_ttl``: killed, frozen, cut off; needs server 2.14+ for the
            consumer reset of a takeover) or ``"overflow"`` (spill-over workers that
            only pull while the consumer is ``min_pending``/``min_ack_pending`` behind).
        pinned_ttl: seconds without a pull request from the active instance after
            which the server moves the pin to a standby (the consumer's
            ``priority_timeout``): the bound on the takeover time. Every batch must
            finish well within it (the active one refreshes its pin while idle and
            between batches, not inside a handler call that blocks the event loop).
        min_pending, min_ack_pending: the overflow condition (at least one > 0).
        tracing: a CONSUMER span per message, a child of the ``traceparent`` in its
            headers, with the ledger's outcome (:mod:`oncestream.tracing`; needs
            ``oncestream[otel]``). Off: no cost.

    Raises:
        ConfigError: naming the bad value.
    """

    batch: int = 4000
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
    ack_policy: str = "explicit"
    double_ack: bool = True
    double_ack_timeout: float = 1.0
    double_ack_attempts: int = 5
    prune_interval: float = 30.0
    prune_grace: float = 120.0
    prune_limit: int = 10_000
    max_ack_pending: int = 20_000
    start: StartPosition | None = None
    priority_group: str | None = None
    policy: str = "pinned"
    pinned_ttl: float = 10.0
    min_pending: int = 0
    min_ack_pending: int = 0
    tracing: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.tracing, bool):
            raise ConfigError(f"tracing must be True or False, got {self.tracing!r}")
        for name in ("batch", "max_deliver", "double_ack_attempts", "prune_limit"):
            object.__setattr__(self, name, parse_positive_int(name, getattr(self, name)))
        object.__setattr__(
            self, "max_ack_pending", parse_positive_int("max_ack_pending", self.max_ack_pending)
        )
        for name in ("ack_wait", "double_ack_timeout", "prune_grace"):
            object.__setattr__(self, name, parse_duration(name, getattr(self, name)))
        object.__setattr__(
            self, "prune_interval", check_prune_interval("prune_interval", self.prune_interval)
        )
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
        self._check_priority()
        self._check_ack_policy()
        # Validates batch/expires/heartbeat together.
        self.pull_options()

    def _check_priority(self) -> None:
        if self.policy not in _POLICIES:
            raise ConfigError(f"policy must be 'pinned' or 'overflow', got {self.policy!r}")
        ttl = parse_duration("pinned_ttl", self.pinned_ttl)
        if ttl < 2:
            raise ConfigError(f"pinned_ttl must be at least 2s, got {self.pinned_ttl!r}")
        object.__setattr__(self, "pinned_ttl", ttl)
        for name in ("min_pending", "min_ack_pending"):
            object.__setattr__(
                self, name, parse_positive_int(name, getattr(self, name), allow_zero=True)
            )
        if self.priority_group is None:
            if self.min_pending or self.min_ack_pending:
                raise ConfigError("min_pending/min_ack_pending need priority_group (overflow)")
            return
        check_group_name(self.priority_group, "priority_group")
        if self.policy == "overflow" and not (self.min_pending or self.min_ack_pending):
            raise ConfigError(
                "policy 'overflow' needs min_pending or min_ack_pending > 0 (when this "
                "instance starts pulling); got both 0"
            )
        if self.policy == "pinned" and (self.min_pending or self.min_ack_pending):
            raise ConfigError(
                "min_pending/min_ack_pending apply to policy 'overflow', not 'pinned'"
            )
        if self.bind:
            raise ConfigError(
                "priority_group needs the consumer API (takeover resets the consumer); "
                "it cannot be combined with bind=True"
            )

    def _check_ack_policy(self) -> None:
        if self.ack_policy not in _ACK_POLICIES:
            raise ConfigError(f"ack_policy must be 'explicit' or 'all', got {self.ack_policy!r}")
        if self.ack_policy != "all":
            return
        if self.bind:
            raise ConfigError(
                "ack_policy 'all' needs the consumer API (the Processor resets the consumer "
                "to its ack floor when it starts); it cannot be combined with bind=True"
            )
        if self.priority_group is not None and self.policy != "pinned":
            raise ConfigError(
                f"ack_policy 'all' is for one Processor applying a consumer at a time (alone, "
                f"or the pinned one of a priority group); policy {self.policy!r} delivers to "
                f"several at once: use ack_policy 'explicit'"
            )

    @property
    def ack_all(self) -> bool:
        """True when a batch is acknowledged with one ack (``ack_policy="all"``)."""
        return self.ack_policy == "all"

    @property
    def pinned(self) -> bool:
        """True for an active/standby member of a pinned priority group."""
        return self.priority_group is not None and self.policy == "pinned"

    def pull_options(self) -> PullOptions:
        """The continuous-pull settings derived from these options."""
        expires, refresh = self.expires, None
        if self.pinned:
            # The active instance must ask again well within pinned_ttl, idle or not.
            refresh = self.pinned_ttl / 3
            expires = max(1.0, min(expires, self.pinned_ttl / 2))
        overflow = self.priority_group is not None and not self.pinned
        return PullOptions(
            batch=PULL_WINDOW_BATCHES * self.batch,
            max_bytes=self.max_bytes,
            expires=expires,
            idle_heartbeat=self.idle_heartbeat,
            unavailable_timeout=self.unavailable_timeout,
            confirm_missing=not self.bind,  # bind makes no CONSUMER.INFO call
            group=self.priority_group,
            pinned=self.pinned,
            pin_refresh=refresh,
            min_pending=self.min_pending if overflow else 0,
            min_ack_pending=self.min_ack_pending if overflow else 0,
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
    #: Redeliveries (delivery count > 1) of messages the ledger already holds: the
    #: server redelivered although the message had been applied and acked (a late
    #: or lost ack; the server confirms a double ack even then, nats-server #4786).
    late_acks: int = 0
    #: Stored message schedules (``Nats-Schedule``) acked without calling the handler.
    schedules_skipped: int = 0
    #: Replayed dead letters for another consumer (``Oncestream-Replay-For`` names the
    #: consumer whose letter was replayed) acked without calling the handler.
    replays_skipped: int = 0
    #: Messages the server stopped delivering at the consumer's ``max_deliver`` (then
    #: dead-lettered from the stream, found applied, or the run failed: never lost silently).
    exhausted: int = 0
    #: Of ``exhausted``: messages this run handed back (nak) that the consumer's ack floor
    #: then moved past although they were never finished (seen after a server restart,
    #: nats-io/nats-server#5727): settled the same way.
    forgotten: int = 0
    #: Times this instance became the active one of a pinned priority group.
    takeovers: int = 0
    #: Times it stopped being the active one (the pin moved on).
    demotions: int = 0
    #: Takeover attempts that found the ledger locked by another process (the old active
    #: instance frozen inside a batch, or busy with long ones); the standby keeps trying.
    takeover_lock_waits: int = 0
    #: Messages a previous instance held unacknowledged that this one took back when it
    #: started (the consumer reset to its ack floor: delivered again at once, in order).
    reclaimed: int = 0
    #: Ack policy ``all``: times deliveries stopped being contiguous (lost in a reconnect,
    #: or a reset by someone else) and the consumer was reset to its ack floor.
    resets: int = 0
    #: ``time.monotonic()`` at creation: the base of ``as_dict()``'s elapsed and rate.
    started: float = field(default_factory=time.monotonic, repr=False)
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
