"""Options of the continuous pull (:class:`~oncestream.read.MessageStream`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .._errors import ConfigError
from .._options import parse_duration, parse_positive_int

__all__ = ["PullOptions", "check_group_name"]

#: The server's rule for priority group names (nats-server consumer.go ``validGroupName``).
_GROUP_NAME = re.compile(r"[a-zA-Z0-9/_=-]{1,16}")


def check_group_name(name: object, what: str = "priority group") -> str:
    """Return ``name`` if the server accepts it as a priority group name.

    Raises:
        ConfigError: naming the value and the rule (1-16 of ``a-zA-Z0-9/_=-``).
    """
    if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
        raise ConfigError(
            f"{what} must be 1-16 characters of a-z, A-Z, 0-9, '/', '_', '=', '-', got {name!r}"
        )
    return name


@dataclass(frozen=True, kw_only=True)
class PullOptions:
    """How a :class:`MessageStream` pulls.

    Args:
        batch: messages requested per pull request (the buffer size).
        max_bytes: byte cap per pull request (0 = none).
        threshold: refill once fewer than this fraction of ``batch`` requested
            messages are still outstanding (0 < threshold <= 1).
        expires: seconds each pull request lives on the server.
        idle_heartbeat: seconds between server heartbeats while a request waits
            (default ``min(expires / 2, 30)``); two missed ones are an error.
        unavailable_timeout: seconds a run of "no responders" answers may last
            before iteration raises :class:`NoResponders` (None = no bound: keep
            re-pulling while the stream runs, e.g. through a cluster partition or
            leader election).
        confirm_missing: after 5 "no responders" answers in a row (and every 5
            more), ask ``CONSUMER.INFO`` whether the consumer exists; only a
            confirmed missing consumer or stream raises :class:`ConsumerNotFound`.
            False makes no API call (a Processor with ``bind=True``): then only
            ``unavailable_timeout`` ends a run of them.
        group: the consumer's priority group to pull in (server 2.11+; the
            consumer must list it in ``priority_groups``). None: no group.
        pinned: the consumer's policy is ``pinned_client``: the stream keeps the
            ``Nats-Pin-Id`` the server hands out and sends it with every request
            (see :attr:`MessageStream.pin_id`); needs ``group``.
        pin_refresh: with ``pinned``, the longest gap between two pull requests
            in seconds (the server releases the pin after the consumer's
            ``priority_timeout`` without one). Default: ``expires``.
        min_pending, min_ack_pending: for an ``overflow`` policy: this stream
            only receives messages while the consumer has at least this many
            pending (undelivered) / ack-pending messages (0 = no condition).

    Raises:
        ConfigError: naming the bad value.
    """

    batch: int = 500
    max_bytes: int = 0
    threshold: float = 0.5
    expires: float = 30.0
    idle_heartbeat: float | None = None
    unavailable_timeout: float | None = None
    confirm_missing: bool = True
    group: str | None = None
    pinned: bool = False
    pin_refresh: float | None = None
    min_pending: int = 0
    min_ack_pending: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "batch", parse_positive_int("batch", self.batch))
        if self.unavailable_timeout is not None:
            bound = parse_duration("unavailable_timeout", self.unavailable_timeout)
            if bound <= 0:
                raise ConfigError(
                    f"unavailable_timeout must be > 0 seconds or None (no bound), "
                    f"got {self.unavailable_timeout!r}"
                )
            object.__setattr__(self, "unavailable_timeout", bound)
        if not isinstance(self.confirm_missing, bool):
            raise ConfigError(
                f"confirm_missing must be True or False, got {self.confirm_missing!r}"
            )
        object.__setattr__(
            self, "max_bytes", parse_positive_int("max_bytes", self.max_bytes, allow_zero=True)
        )
        if not 0 < float(self.threshold) <= 1:
            raise ConfigError(f"threshold must be in (0, 1], got {self.threshold!r}")
        expires = parse_duration("expires", self.expires)
        if expires < 1.0:
            raise ConfigError(f"expires must be at least 1s, got {self.expires!r}")
        object.__setattr__(self, "expires", expires)
        heartbeat = (
            min(expires / 2, 30.0)
            if self.idle_heartbeat is None
            else parse_duration("idle_heartbeat", self.idle_heartbeat)
        )
        if not 0.1 <= heartbeat <= expires / 2:
            raise ConfigError(
                f"idle_heartbeat must be between 100ms and expires/2 ({expires / 2}s), "
                f"got {self.idle_heartbeat!r}"
            )
        object.__setattr__(self, "idle_heartbeat", heartbeat)
        self._check_group()

    def _check_group(self) -> None:
        if self.group is not None:
            check_group_name(self.group)
        for name in ("min_pending", "min_ack_pending"):
            object.__setattr__(
                self, name, parse_positive_int(name, getattr(self, name), allow_zero=True)
            )
        if (self.pinned or self.min_pending or self.min_ack_pending) and self.group is None:
            raise ConfigError("pinned, min_pending and min_ack_pending need a priority group")
        if self.pinned and (self.min_pending or self.min_ack_pending):
            raise ConfigError(
                "min_pending/min_ack_pending apply to the overflow policy, not to pinned"
            )
        if self.pin_refresh is not None:
            refresh = parse_duration("pin_refresh", self.pin_refresh)
            if refresh <= 0:
                raise ConfigError(f"pin_refresh must be > 0 seconds, got {self.pin_refresh!r}")
            object.__setattr__(self, "pin_refresh", refresh)

    @property
    def heartbeat(self) -> float:
        """The effective idle heartbeat in seconds."""
        assert self.idle_heartbeat is not None
        return self.idle_heartbeat
