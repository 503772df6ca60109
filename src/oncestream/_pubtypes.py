"""Options, ack and statistics types of the :class:`~oncestream.publisher.Publisher`.

Import them from :mod:`oncestream.publisher` (or :mod:`oncestream`); this
module only keeps ``publisher.py`` short.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError
from ._options import parse_bool, parse_duration, parse_positive_int

__all__ = ["KeyFunction", "PubAck", "PublisherOptions", "PublisherStats"]

KeyFunction = Callable[[str, bytes, "Mapping[str, str | Sequence[str]] | None"], str]


@dataclass(frozen=True, kw_only=True)
class PublisherOptions:
    """How a :class:`Publisher` pipelines and retries.

    Args:
        max_inflight: unacknowledged publishes allowed at once.
        backpressure: when ``max_inflight`` is reached, ``publish()`` waits for
            a permit (True) or raises :class:`TooManyInflight` (False).
        ack_timeout: seconds without a PubAck before the message is re-sent
            with the same msg id.
        max_attempts: sends per message before its future fails with
            :class:`PublishFailed`.
        retry_backoff: delay in seconds before attempt 2, 3, ...; the last
            value repeats.
        stream: the target stream; enables the window guard in ``start()``.
        check_window: raise :class:`ConfigError` in ``start()`` when
            :attr:`retry_horizon` exceeds the stream's ``duplicate_window``.

    Raises:
        ConfigError: naming the bad value and what is allowed.
    """

    max_inflight: int = 5000
    backpressure: bool = True
    ack_timeout: float = 5.0
    max_attempts: int = 5
    retry_backoff: tuple[float, ...] = (0.05, 0.25, 1.0)
    stream: str | None = None
    check_window: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.max_inflight, bool) or not isinstance(self.max_inflight, int):
            raise ConfigError(f"max_inflight must be an integer >= 1, got {self.max_inflight!r}")
        if self.max_inflight < 1:
            raise ConfigError(f"max_inflight must be an integer >= 1, got {self.max_inflight!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ConfigError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        if not isinstance(self.ack_timeout, int | float) or not self.ack_timeout > 0:
            raise ConfigError(
                f"ack_timeout must be a number of seconds > 0, got {self.ack_timeout!r}"
            )
        backoff = tuple(self.retry_backoff)
        if not backoff or any(
            isinstance(b, bool) or not isinstance(b, int | float) or b < 0 for b in backoff
        ):
            raise ConfigError(
                "retry_backoff must be a non-empty sequence of seconds >= 0, "
                f"got {self.retry_backoff!r}"
            )
        object.__setattr__(self, "retry_backoff", tuple(float(b) for b in backoff))
        if self.stream is not None and (
            not self.stream or any(c in self.stream for c in " .*>\t\r\n")
        ):
            raise ConfigError(f"stream must be a valid stream name, got {self.stream!r}")

    def backoff(self, attempt: int) -> float:
        """Delay before sending attempt number ``attempt`` (2, 3, ...)."""
        index = min(max(attempt - 2, 0), len(self.retry_backoff) - 1)
        return self.retry_backoff[index]

    @property
    def retry_horizon(self) -> float:
        """Longest time after a message's first send at which it can still be sent again.

        ``max_attempts * ack_timeout`` plus every backoff delay: a duplicate
        window at least this long de-duplicates every retry.
        """
        delays = sum(self.backoff(attempt) for attempt in range(2, self.max_attempts + 1))
        return self.max_attempts * self.ack_timeout + delays

    def check_window_fits(self, stream: str, duplicate_window: float) -> None:
        """The window guard: every retry must land inside ``duplicate_window`` seconds.

        Raises:
            ConfigError: naming the horizon, its parts and the stream's window.
        """
        if self.retry_horizon > duplicate_window:
            raise ConfigError(
                f"retry horizon {self.retry_horizon:g}s (max_attempts={self.max_attempts} x "
                f"ack_timeout={self.ack_timeout:g}s + backoff) exceeds stream {stream!r} "
                f"duplicate_window {duplicate_window:g}s: a late retry could be stored twice. "
                "Raise the stream's duplicate_window or lower ack_timeout / max_attempts"
            )

    @classmethod
    def from_spark_options(cls, options: Mapping[str, str]) -> PublisherOptions:
        """Build options from Spark-style string options (case-insensitive, unknown keys ignored).

        Keys: ``maxInflight``, ``backpressure``, ``ackTimeout`` (e.g. ``"5s"``),
        ``maxAttempts``, ``retryBackoff`` (comma list, e.g. ``"50ms,250ms,1s"``),
        ``stream``, ``checkWindow``.
        """
        lowered = {str(k).lower(): v for k, v in options.items()}
        kwargs: dict[str, Any] = {}
        if "maxinflight" in lowered:
            kwargs["max_inflight"] = parse_positive_int("maxInflight", lowered["maxinflight"])
        if "backpressure" in lowered:
            kwargs["backpressure"] = parse_bool("backpressure", lowered["backpressure"])
        if "acktimeout" in lowered:
            kwargs["ack_timeout"] = parse_duration("ackTimeout", lowered["acktimeout"])
        if "maxattempts" in lowered:
            kwargs["max_attempts"] = parse_positive_int("maxAttempts", lowered["maxattempts"])
        if "retrybackoff" in lowered:
            kwargs["retry_backoff"] = tuple(
                parse_duration("retryBackoff", part)
                for part in str(lowered["retrybackoff"]).split(",")
                if part.strip()
            )
        if lowered.get("stream"):
            kwargs["stream"] = lowered["stream"]
        if "checkwindow" in lowered:
            kwargs["check_window"] = parse_bool("checkWindow", lowered["checkwindow"])
        return cls(**kwargs)


@dataclass(frozen=True)
class PubAck:
    """The server's confirmation that a message is stored.

    ``duplicate`` is True when the stream already held a message with the
    same msg id (inside its duplicate window) and kept only that one.
    """

    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None


@dataclass(frozen=True, kw_only=True)
class PublisherStats:
    """Counters since the Publisher started.

    ``sent`` counts messages (not attempts), ``retried`` extra attempts,
    ``duplicates`` acks (first or late) that reported an already stored id.
    """

    sent: int = 0
    acked: int = 0
    duplicates: int = 0
    retried: int = 0
    failed: int = 0
