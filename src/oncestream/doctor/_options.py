"""What ``doctor`` checks against: the retry horizons, the monitoring URL, and its targets."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field

from .._errors import ConfigError
from .._names import check_consumer_name, check_stream_name
from .._options import parse_positive_int
from ..process import ProcessorOptions
from ..publish import PublisherOptions

__all__ = [
    "MIN_ACK_WAIT",
    "SPARK_TASK_MAX_FAILURES",
    "DoctorOptions",
    "Target",
    "parse_target",
]

#: Spark's ``spark.task.maxFailures`` default, which the ``jetstream`` sink assumes too
#: (its ``taskMaxFailures`` option): a task runs this many times at most.
SPARK_TASK_MAX_FAILURES = 4
#: Below this ack wait (seconds) a consumer is flagged: the Processor renews a slow
#: batch with in-progress acks every half ack wait, so a stall of ~5 s redelivers it.
MIN_ACK_WAIT = 10.0


@dataclass(frozen=True, kw_only=True)
class DoctorOptions:
    """The horizons ``doctor`` checks streams and consumers against.

    Args:
        publisher: the Publisher settings whose retry horizon each stream's
            duplicate window must cover (``ack_timeout``, ``max_attempts``,
            ``retry_backoff``; the defaults unless given).
        task_max_failures: Spark task attempts the ``jetstream`` sink assumes
            (its window check multiplies the retry horizon by it).
        monitor: the monitoring URL (``http://host:8222``) of a server holding the
            streams, or a tuple of them (one per server of a cluster); each one's
            ``/varz`` tells that server's fsync policy (``sync_interval``). None: unknown.
            Read back as a tuple (:attr:`monitors`).
        min_ack_wait: consumers with a shorter ack wait are flagged.
        max_deliver: the Processor's ``max_deliver`` (attempts before it dead-letters),
            which a consumer's own ``max_deliver`` must exceed.
        dead_letter_stream: the Processor's dead-letter stream; None when not known
            (a consumer ``max_deliver`` above ``max_deliver`` is then a warning: the
            Processor accepts it with a dead-letter stream and refuses it without one).

    Raises:
        ConfigError: naming the bad value.
    """

    publisher: PublisherOptions = field(default_factory=PublisherOptions)
    task_max_failures: int = SPARK_TASK_MAX_FAILURES
    monitor: str | tuple[str, ...] | None = None
    min_ack_wait: float = MIN_ACK_WAIT
    max_deliver: int = ProcessorOptions.max_deliver
    dead_letter_stream: str | None = None

    def __post_init__(self) -> None:
        tmf = self.task_max_failures
        if isinstance(tmf, bool) or not isinstance(tmf, int) or tmf < 1:
            raise ConfigError(f"task_max_failures must be an integer >= 1, got {tmf!r}")
        object.__setattr__(self, "max_deliver", parse_positive_int("max_deliver", self.max_deliver))
        if self.dead_letter_stream is not None:
            check_stream_name(self.dead_letter_stream, "dead_letter_stream")
        if self.monitor is not None:
            given = (self.monitor,) if isinstance(self.monitor, str) else tuple(self.monitor)
            urls = tuple(dict.fromkeys(_monitor_url(url) for url in given))
            object.__setattr__(self, "monitor", urls or None)

    @property
    def monitors(self) -> tuple[str, ...]:
        """The monitoring URLs given, normalised (``()`` when none)."""
        if isinstance(self.monitor, str):  # only before __post_init__ normalised it
            return (self.monitor,)
        return self.monitor or ()

    @property
    def spark_horizon(self) -> float:
        """Seconds over which a Spark task's attempts may re-send a row."""
        return self.publisher.retry_horizon * self.task_max_failures


def _monitor_url(value: str) -> str:
    """``value`` as ``scheme://host:port`` (no path), or ConfigError naming what is allowed."""
    if not isinstance(value, str):
        raise ConfigError(f"--monitor must be a URL string, got {type(value).__name__}")
    try:
        parts = urllib.parse.urlsplit(value.strip())
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.username is not None
        or parts.path not in ("", "/")
        or parts.query
    ):
        shown = value if "@" not in value else "(a URL with credentials)"
        raise ConfigError(
            f"--monitor must be the server's monitoring URL, http(s)://HOST:PORT "
            f"(nats-server's http_port, e.g. http://127.0.0.1:8222), got {shown!r}"
        )
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")


@dataclass(frozen=True)
class Target:
    """A stream to check, with one of its consumers (``consumer``) or all of them (None)."""

    stream: str
    consumer: str | None = None


def parse_target(text: str) -> Target:
    """``STREAM`` or ``STREAM/CONSUMER`` (names cannot contain ``/``).

    Raises:
        ConfigError: a name breaks nats-server's rules, or more than one ``/``.
    """
    stream, slash, consumer = text.partition("/")
    if slash and "/" in consumer:
        raise ConfigError(f"{text!r} is not STREAM or STREAM/CONSUMER (one '/' at most)")
    check_stream_name(stream, f"stream in {text!r}")
    if slash:
        check_consumer_name(consumer, f"consumer in {text!r}")
        return Target(stream, consumer)
    return Target(stream)
