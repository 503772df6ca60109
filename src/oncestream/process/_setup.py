"""Consumer set-up of the :class:`~oncestream.Processor`: its durable consumer, the DLQ stream."""

from __future__ import annotations

import functools
import inspect
from typing import Any

from .._connection import Connection
from .._errors import ConfigError, ConsumerNotFound, ErrCode, JetStreamError, StreamNotFound
from .._names import (
    subject_matches,
    subjects_overlap,
)
from ..read import StartPosition
from ..streams import Partitioning, add_stream
from ._bound import BoundConsumer
from ._maxdeliver import refusal
from ._options import ProcessorOptions

__all__ = [
    "FloorHistory",
    "check_handler",
    "consumer_filters",
    "dead_letter_stream_config",
    "setup_consumer",
]


async def setup_consumer(
    conn: Connection, stream: str, consumer: str, opts: ProcessorOptions
) -> BoundConsumer:
    """Create or validate the durable consumer (and the DLQ stream); what the parts are told.

    With ``bind`` nothing is asked of the server: the ack wait is the configured one.

    Raises:
        ConfigError: the consumer exists with a config the Processor cannot run on.
        ConsumerNotFound: it does not exist and ``create`` is off.
    """
    subject = ""
    if opts.dead_letter_stream:
        subject = opts.dead_letter_subject or f"{opts.dead_letter_stream}.{stream}"
    bound = functools.partial(
        BoundConsumer, stream=stream, consumer=consumer, options=opts, dlq_subject=subject
    )
    if opts.bind:
        return bound(ack_wait=opts.ack_wait)
    try:
        info = await conn.consumer_info(stream, consumer)
    except ConsumerNotFound:
        if not opts.create:
            raise
        info = await _create_consumer(conn, stream, consumer, opts)
    _validate_consumer(info.get("config", {}), stream, consumer, opts)
    ack_wait = float(info.get("config", {}).get("ack_wait", opts.ack_wait * 1e9)) / 1e9
    if opts.dead_letter_stream:
        await _ensure_dlq_stream(conn, opts.dead_letter_stream, subject, stream)
    return bound(ack_wait=ack_wait)


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
        "ack_policy": opts.ack_policy,
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
        stream_config = (await conn.stream_info(stream)).get("config", {})
        subjects = stream_config.get("subjects") or []
        partitioning = Partitioning.from_config(stream_config)
        if partitioning is not None:  # stored as <partition>.<subject>
            subjects = [*subjects, f"*.{partitioning.subjects}"]
        if subjects and not any(subjects_overlap(s, opts.filter_subject) for s in subjects):
            raise ConfigError(
                f"filter subject {opts.filter_subject!r} matches nothing stream {stream!r} "
                f"stores (its subjects: {subjects})"
            )
    if opts.start is not None:
        config.update(opts.start.to_config())
    if opts.priority_group is not None:
        config["priority_groups"] = [opts.priority_group]
        config["priority_policy"] = _SERVER_POLICY[opts.policy]
        if opts.pinned:
            config["priority_timeout"] = int(opts.pinned_ttl * 1e9)
    payload = {"stream_name": stream, "config": config, "action": "create"}
    try:
        return await conn.api(f"CONSUMER.CREATE.{stream}.{consumer}", payload)
    except JetStreamError as exc:
        if exc.err_code == ErrCode.CONSUMER_ALREADY_EXISTS:  # created by another instance
            return await conn.consumer_info(stream, consumer)
        raise


def _validate_consumer(
    config: dict[str, Any], stream: str, consumer: str, opts: ProcessorOptions
) -> None:
    where = f"consumer {stream}/{consumer}"
    if config.get("deliver_subject"):
        raise ConfigError(f"{where} is a push consumer; the Processor needs a pull consumer")
    policy = config.get("ack_policy")
    if policy != opts.ack_policy:
        if policy == "all":
            hint = (
                "run the Processor with ack_policy 'all' (CLI --ack-policy all: one ack per "
                "batch, one Processor at a time on the consumer)"
            )
        elif policy == "explicit":
            hint = "run the Processor with ack_policy 'explicit' (the default)"
        else:
            hint = "the Processor needs 'explicit' or 'all'"
        raise ConfigError(
            f"{where} has ack_policy {policy!r}, not {opts.ack_policy!r}; {hint}, or use "
            f"another consumer (the ack policy of a consumer cannot be changed)"
        )
    refused = refusal(config, stream, consumer, opts)
    if refused:
        raise ConfigError(refused)
    if opts.start is not None and not opts.start.matches(config):
        raise ConfigError(
            f"{where} already exists and starts at {StartPosition.describe_config(config)}, not at "
            f"{opts.start.describe()}; a start applies only to a consumer being created "
            f"(drop the start option, or remove the consumer with `oncestream consumer rm`)"
        )
    _validate_priority(config, where, opts)
    _validate_takeover(config, stream, consumer, opts)
    wanted = opts.filter_subject
    if wanted:
        filters = [config.get("filter_subject")] if config.get("filter_subject") else []
        filters += config.get("filter_subjects") or []
        if filters != [wanted]:
            raise ConfigError(f"{where} filters {filters or 'nothing'}; expected [{wanted!r}]")


_SERVER_POLICY = {"pinned": "pinned_client", "overflow": "overflow"}


def _validate_priority(config: dict[str, Any], where: str, opts: ProcessorOptions) -> None:
    groups = config.get("priority_groups") or []
    policy = config.get("priority_policy") or "none"
    if opts.priority_group is None:
        if policy != "none":
            raise ConfigError(
                f"{where} has priority policy {policy!r} with groups {groups}; pass "
                f"priority_group (CLI: --standby for pinned_client) to process it"
            )
        return
    wanted = _SERVER_POLICY[opts.policy]
    if policy != wanted or opts.priority_group not in groups:
        raise ConfigError(
            f"{where} has priority policy {policy!r} with groups {groups or 'none'}, not "
            f"{wanted!r} with group {opts.priority_group!r}; a consumer's priority policy "
            f"cannot be changed: use another consumer name, or remove this one with "
            f"`oncestream consumer rm` (its acked position is lost; the ledger keeps "
            f"applied messages from being applied again)"
        )


def _validate_takeover(
    config: dict[str, Any], stream: str, consumer: str, opts: ProcessorOptions
) -> None:
    """A pinned consumer's ``priority_timeout`` must be this instance's ``pinned_ttl``.

    Refused, not edited: the other instances of the group run with the consumer's
    setting, and each refreshes its pin every ``pinned_ttl / 3``; a shorter server
    timeout than that takes the pin from a healthy active instance, a longer one
    makes the takeover slower than this instance was told.
    """
    if not opts.pinned:
        return
    timeout = int(config.get("priority_timeout") or 0)
    if timeout == int(opts.pinned_ttl * 1e9):
        return
    raise ConfigError(
        f"consumer {stream}/{consumer} takes over after {timeout / 1e9:g}s (its "
        f"priority_timeout), not {opts.pinned_ttl:g}s (pinned_ttl, CLI --takeover-after): "
        f"run with --takeover-after {timeout / 1e9:g}s, or change it for every instance "
        f"with `oncestream consumer edit {stream} {consumer} --takeover-after "
        f"{opts.pinned_ttl:g}s` and restart them with it"
    )


def dead_letter_stream_config(name: str, subject: str, source: dict[str, Any]) -> dict[str, Any]:
    """The config of a dead-letter stream the Processor creates for dead letters on
    ``subject`` of the stream whose config is ``source`` (``STREAM.INFO`` ``config``).

    It has as many replicas as the stream it keeps the failures of: an R1
    dead-letter stream in a cluster loses its letters with its one node.

    Example::

        dead_letter_stream_config("DLQ", "DLQ.ORDERS", {"num_replicas": 3})
        # {"name": "DLQ", "subjects": ["DLQ.>"], "num_replicas": 3, ...}
    """
    subjects = [f"{name}.>"] if subject.startswith(f"{name}.") else [subject]
    return {
        "name": name,
        "subjects": subjects,
        "storage": "file",
        "num_replicas": max(int(source.get("num_replicas") or 1), 1),
        "duplicate_window": int(120e9),
    }


async def _ensure_dlq_stream(conn: Connection, name: str, subject: str, stream: str) -> None:
    """Create the dead-letter stream (as many replicas as ``stream``), or check that the
    existing one captures ``subject`` (it is never changed)."""
    try:
        info = await conn.stream_info(name)
    except StreamNotFound:
        source = (await conn.stream_info(stream)).get("config", {})
        await add_stream(conn, dead_letter_stream_config(name, subject, source))
        return
    subjects = info.get("config", {}).get("subjects") or []
    if not any(subject_matches(pattern, subject) for pattern in subjects):
        raise ConfigError(
            f"dead-letter stream {name!r} does not capture the dead-letter subject "
            f"{subject!r} (its subjects: {subjects or 'none'}); name a stream listening on "
            f"{subject!r}, or a new stream name (created with subjects ['{name}.>'])"
        )


def consumer_filters(config: dict[str, Any]) -> tuple[str, ...]:
    """The filter subjects of a consumer config (empty: it takes every subject)."""
    filters = [config["filter_subject"]] if config.get("filter_subject") else []
    return tuple(filters + list(config.get("filter_subjects") or []))


class FloorHistory:
    """Ack floors seen over time; what may be pruned is the floor seen ``grace`` seconds ago.

    A redelivered copy of a message can only exist if it was delivered before
    the ack floor passed it, and it may still sit in another instance's buffer
    for a while: pruning up to an older floor leaves that copy its ledger row.
    A floor counts for the consumer's filter when it was seen: when the filter
    changes, the floors seen before are forgotten.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._samples: list[tuple[float, int]] = []
        self._filters: tuple[str, ...] = ()

    def prunable(self, floor: int, now: float, filters: tuple[str, ...] = ()) -> int:
        """Record ``floor`` observed at ``now`` under ``filters``; return the sequence to
        prune up to (0 = none), a floor seen under the same filters."""
        if filters != self._filters:
            self._samples.clear()
            self._filters = filters
        self._samples.append((now, floor))
        old = [f for t, f in self._samples if now - t >= self.grace]
        self._samples = [(t, f) for t, f in self._samples if now - t < self.grace]
        if not old:
            return 0
        # Keep the newest old-enough floor: it stays valid for the next rounds.
        self._samples.insert(0, (now - self.grace, old[-1]))
        return old[-1]
