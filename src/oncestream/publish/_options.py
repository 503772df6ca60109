"""Options, ack and statistics types of the :class:`~oncestream.publish.Publisher`.

Import them from :mod:`oncestream.publish` (or :mod:`oncestream`); this
module keeps them out of ``_publisher.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .._errors import ConfigError
from .._names import check_stream_name
from .._options import parse_duration

__all__ = [
    "KeyFunction",
    "PubAck",
    "PublisherOptions",
    "PublisherStats",
    "warn_unchecked_window",
]

log = logging.getLogger(__name__)

KeyFunction = Callable[[str, bytes, "Mapping[str, str | Sequence[str]] | None"], str]


#: The most sends per message PublisherOptions takes: at the default ack timeout, a
#: retry horizon of over an hour and a half.
MAX_ATTEMPTS = 1000


@dataclass(frozen=True, kw_only=True)
class PublisherOptions:
    """How a :class:`Publisher` pipelines and retries.

    Args:
        max_inflight: unacknowledged publishes allowed at once.
        backpressure: when ``max_inflight`` is reached, ``publish()`` waits for
            a permit (True) or raises :class:`TooManyInflight` (False).
        ack_timeout: time without a PubAck before the message is re-sent
            with the same msg id (seconds, or a duration string like ``"5s"``).
        max_attempts: sends per message before its future fails with
            :class:`PublishFailed`.
        retry_backoff: delays (seconds or duration strings) before attempt 2,
            3, ...; the last value repeats.
        stream: the target stream; enables the window guard in ``start()``
            (without it ``start()`` logs a warning that the guard cannot run,
            unless ``check_window`` is False).
        check_window: raise :class:`ConfigError` in ``start()`` when
            :attr:`retry_horizon` exceeds the stream's ``duplicate_window``.
        tracing: a PRODUCER span per message with its ``traceparent`` in the
            message's headers (:mod:`oncestream.tracing`; needs ``oncestream[otel]``).
            Off: no header, no cost.
        ingest: ``"auto"`` sends first attempts as fast-ingest batches (one flow
            ack per window instead of a PubAck per message) when the server is
            2.14+ and ``stream`` sets ``allow_batched``, else with pipelined
            acks; ``"fast"`` requires batches (``start()`` raises
            :class:`ConfigError` naming why they are unavailable); ``"acks"``
            always waits for each message's PubAck (its stream sequence and
            duplicate flag). See :mod:`oncestream.publish._fast_ingest`.

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
    tracing: bool = False
    ingest: Literal["auto", "fast", "acks"] = "auto"

    def __post_init__(self) -> None:
        if self.ingest not in ("auto", "fast", "acks"):
            raise ConfigError(f"ingest must be 'auto', 'fast' or 'acks', got {self.ingest!r}")
        if not isinstance(self.tracing, bool):
            raise ConfigError(f"tracing must be True or False, got {self.tracing!r}")
        if isinstance(self.max_inflight, bool) or not isinstance(self.max_inflight, int):
            raise ConfigError(f"max_inflight must be an integer >= 1, got {self.max_inflight!r}")
        if self.max_inflight < 1:
            raise ConfigError(f"max_inflight must be an integer >= 1, got {self.max_inflight!r}")
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise ConfigError(f"max_attempts must be an integer >= 1, got {self.max_attempts!r}")
        if not 1 <= self.max_attempts <= MAX_ATTEMPTS:
            # Past this the retry horizon outlasts any duplicate window worth having (and
            # summing its backoff delays would take a while).
            raise ConfigError(
                f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS}, "
                f"got {self.max_attempts!r}"
            )
        ack_timeout = parse_duration("ack_timeout", self.ack_timeout)
        if ack_timeout <= 0:
            raise ConfigError(f"ack_timeout must be a duration > 0, got {self.ack_timeout!r}")
        object.__setattr__(self, "ack_timeout", ack_timeout)
        backoff = self.retry_backoff
        if isinstance(backoff, str):  # "50ms,250ms,1s"
            backoff = tuple(part for part in backoff.split(",") if part.strip())
        try:
            delays = tuple(parse_duration("retry_backoff", b) for b in backoff)
        except ConfigError:
            delays = ()
        if not delays:
            raise ConfigError(
                "retry_backoff must list one or more delays >= 0 (seconds, or strings like "
                f"'250ms'), got {self.retry_backoff!r}"
            )
        object.__setattr__(self, "retry_backoff", delays)
        if self.stream is not None:
            check_stream_name(self.stream, "stream")

    def backoff(self, attempt: int) -> float:
        """Delay before sending attempt number ``attempt`` (2, 3, ...)."""
        index = min(max(attempt - 2, 0), len(self.retry_backoff) - 1)
        return self.retry_backoff[index]

    @property
    def patience(self) -> float:
        """``ack_timeout * max_attempts``: how long a start-up request is retried.

        As patient as one message's sends (backoff delays aside): a leader election
        or a paused server at start is ridden out as it would be a moment later.
        :meth:`Publisher.start` retries its ``STREAM.INFO`` this long, and
        ``oncestream publish`` its other start-up requests.
        """
        return self.ack_timeout * self.max_attempts

    @property
    def retry_horizon(self) -> float:
        """Longest time after a message's first send at which it can still be sent again.

        ``max_attempts * ack_timeout`` plus every backoff delay. A duplicate window
        at least this long de-duplicates every retry that reaches the stream leader
        without delay; the server counts the window from the first copy's arrival, so a
        re-send held on its way (a paused server between client and leader) needs the
        window to be longer by that delay (docs/publishing.md, "Window guard").
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
                f"stream {stream!r} has duplicate_window {duplicate_window:g}s, shorter than "
                f"the retry horizon {self.retry_horizon:g}s (max_attempts={self.max_attempts} x "
                f"ack_timeout={self.ack_timeout:g}s + backoff): a late retry could be stored "
                "twice. Raise the stream's duplicate_window or lower ack_timeout / max_attempts"
            )


@dataclass(frozen=True)
class PubAck:
    """The server's confirmation that a message is stored.

    ``duplicate`` is True when the stream already held a message with the
    same msg id (inside its duplicate window) and kept only that one.

    ``batch`` is the fast-ingest batch id when a flow ack confirmed the
    message (``PublisherOptions.ingest``): the server confirms a range, so
    ``seq`` is then 0 and ``duplicate`` False, also for a de-duplicated copy.
    """

    stream: str
    seq: int
    duplicate: bool = False
    domain: str | None = None
    batch: str | None = None


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


def warn_unchecked_window(horizon: float) -> None:
    """A Publisher without ``stream``: its window guard cannot run; say so once per process."""
    if horizon in _WARNED:
        return
    _WARNED.add(horizon)
    log.warning(
        "Publisher without options.stream: its retry horizon (%gs) is not checked against "
        "any stream's duplicate_window, so a retry after the window could be stored twice. "
        "Give PublisherOptions(stream=...) to check it at start(), or check_window=False "
        "to say the windows were checked otherwise",
        horizon,
    )


_WARNED: set[float] = set()
