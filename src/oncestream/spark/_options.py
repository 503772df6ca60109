"""Spark option names: the only place that knows them.

The ``jetstream`` source and sink take Spark's string options
(case-insensitive keys). This module turns the shared ones (connection,
Publisher) into the core option classes and applies the one unknown-option
policy of both sides: an option that is not known is refused, with the
jetstream name to use instead when there is one (a close spelling, or the
counterpart of a Kafka source/sink option) and, for a Kafka option without a
counterpart, why.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from .._errors import ConfigError
from .._headers import MSG_ID
from .._options import ConnectOptions, parse_bool, parse_duration, parse_positive_int
from ..publish import PublisherOptions

__all__ = [
    "CONNECT_OPTIONS",
    "PUBLISHER_OPTIONS",
    "check_known",
    "connect_options",
    "lowered",
    "publisher_options",
]

#: Connection options, shared by the source and the sink (Spark name -> ConnectOptions field).
CONNECT_OPTIONS = {
    "servers": "servers",
    "user": "user",
    "password": "password",
    "token": "token",
    "nkeySeed": "nkey_seed",
    "creds": "creds",
    "tlsCaFile": "tls_ca_file",
    "tlsCertFile": "tls_cert_file",
    "tlsKeyFile": "tls_key_file",
    "domain": "domain",
    "apiPrefix": "api_prefix",
    "connectTimeout": "connect_timeout",
    "requestTimeout": "request_timeout",
}
_DURATIONS = ("connectTimeout", "requestTimeout")

#: Publisher options of the sink (Spark name -> PublisherOptions field).
PUBLISHER_OPTIONS = {
    "maxInflight": "max_inflight",
    "backpressure": "backpressure",
    "ackTimeout": "ack_timeout",
    "maxAttempts": "max_attempts",
    "retryBackoff": "retry_backoff",
    "stream": "stream",
    "checkWindow": "check_window",
    "ingest": "ingest",
}

#: Options Spark itself may pass to a data source.
SPARK_INTERNAL = ("path", "paths", "checkpointLocation", "queryName")

_NO_PARTITIONS = "JetStream streams have no partitions"
_KAFKA_CLIENT = (
    "Kafka client settings have no counterpart; the NATS connection takes 'servers', "
    "the auth options (user/password, token, nkeySeed, creds, tls*) and "
    "'connectTimeout'/'requestTimeout'"
)

#: Kafka source/sink option -> (jetstream options to use, note).
#: An empty tuple means there is no counterpart; the note says why.
KAFKA_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "kafka.bootstrap.servers": (("servers",), "NATS URLs, comma-separated"),
    "subscribe": (("stream", "subjects"), "name the stream; filter subjects with 'subjects'"),
    "subscribePattern": (
        ("subjects",),
        "a subject filter with wildcards ('orders.*', 'orders.>') on option 'stream'",
    ),
    "assign": (("stream", "subjects"), f"{_NO_PARTITIONS}; name the stream and subjects"),
    "topic": (("stream", "subject"), "publish to 'subject'; 'stream' is the expected stream"),
    "maxOffsetsPerTrigger": (
        ("maxOffsetsPerTrigger", "maxMessagesPerTrigger"),
        "messages per micro-batch",
    ),
    "minOffsetsPerTrigger": (
        ("minOffsetsPerTrigger", "maxTriggerDelay"),
        "a micro-batch waits for this many new messages",
    ),
    "maxTriggerDelay": (
        ("maxTriggerDelay", "minOffsetsPerTrigger"),
        "how long a micro-batch waits for 'minOffsetsPerTrigger'",
    ),
    "startingOffsetsByTimestamp": (
        ("startingTimestamp",),
        "one timestamp (epoch milliseconds or ISO-8601) for every stream",
    ),
    "startingOffsetsByTimestampStrategy": (
        (),
        "reads start at the first message at or after 'startingTimestamp'",
    ),
    "endingOffsetsByTimestamp": (
        ("endingTimestamp",),
        "one timestamp (epoch milliseconds or ISO-8601) for every stream",
    ),
    "endingTimestamp": (("endingTimestamp",), "batch reads end before the first message at it"),
    "groupIdPrefix": (
        (),
        "positions live in Spark's checkpoint; the source creates no durable consumer",
    ),
    "kafka.group.id": (
        (),
        "positions live in Spark's checkpoint; the source creates no durable consumer",
    ),
    "fetchOffset.numRetries": (("retryTimeout",), "a time budget for transient errors"),
    "fetchOffset.retryIntervalMs": (("retryTimeout",), "a time budget for transient errors"),
    "kafkaConsumer.pollTimeoutMs": (("requestTimeout",), "time allowed per server request"),
    "kafka.request.timeout.ms": (("requestTimeout", "ackTimeout"), "durations like '5s'"),
    "kafka.delivery.timeout.ms": (("ackTimeout",), "re-send after this long without a PubAck"),
    "kafka.retries": (("maxAttempts",), "sends per message"),
    "kafka.retry.backoff.ms": (("retryBackoff",), "delays like '50ms,250ms,1s'"),
    "kafka.max.in.flight.requests.per.connection": (("maxInflight",), "unacknowledged publishes"),
    "includeHeaders": (
        (),
        "the sink publishes a 'headers' column (map<string,array<string>>) whenever the "
        "DataFrame has one",
    ),
    "kafka.acks": ((), "every publish waits for the stream's PubAck"),
    "kafka.enable.idempotence": ((), f"every publish carries a deterministic {MSG_ID}"),
    "kafka.transactional.id": (
        (),
        "exactly-once comes from deterministic message ids ('idPrefix') and committed-batch "
        "records ('commitsStream')",
    ),
    "kafka.ssl.truststore.location": (("tlsCaFile",), "a PEM CA bundle"),
    "kafka.ssl.keystore.location": (("tlsCertFile", "tlsKeyFile"), "PEM certificate and key"),
    "kafka.sasl.jaas.config": (
        ("user", "password", "token", "nkeySeed", "creds"),
        "one authentication method",
    ),
    "kafka.security.protocol": (("tlsCaFile",), "TLS is on when 'tlsCaFile' is given"),
}

Side = Literal["source", "sink"]


def lowered(options: Mapping[str, Any]) -> dict[str, str]:
    """The options with lower-case keys (Spark's keys are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


_KAFKA_BY_LOWER = {name.lower(): name for name in KAFKA_OPTIONS}


def _suggestion(key: str, known: dict[str, str], side: Side) -> str:
    kafka_name = _KAFKA_BY_LOWER.get(key)
    if kafka_name is None and key.endswith("bootstrap.servers"):
        kafka_name = "kafka.bootstrap.servers"
    if kafka_name is not None:
        names, note = KAFKA_OPTIONS[kafka_name]
        usable = [n for n in names if n.lower() in known]
        if usable:
            quoted = " / ".join(f"'{n}'" for n in usable)
            return f"Kafka's {kafka_name!r}; use {quoted} here ({note})"
        if names:
            other = "sink" if side == "source" else "source"
            quoted = " / ".join(f"'{n}'" for n in names)
            return (
                f"Kafka's {kafka_name!r} has no jetstream counterpart on the {side} "
                f"(the jetstream {other} takes {quoted})"
            )
        return f"Kafka's {kafka_name!r} has no jetstream counterpart: {note}"
    if key.startswith("kafka."):
        return _KAFKA_CLIENT
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f"did you mean '{known[close[0]]}'?"
    return ""


def check_known(options: Mapping[str, Any], known: Iterable[str], side: Side) -> None:
    """The one unknown-option policy of the source and the sink: refuse, with a suggestion.

    Args:
        options: Spark's options as given.
        known: the option names this side takes (canonical spelling).
        side: ``"source"`` or ``"sink"``, for the message.

    Raises:
        ConfigError: naming every unknown option and, per option, what to use instead.

    Example::

        check_known({"startingOffsetsByTimestamp": "{}"}, ["startingTimestamp"], "source")
        # ConfigError: unknown option for the jetstream source: 'startingOffsetsByTimestamp':
        #   Kafka's 'startingOffsetsByTimestamp'; use 'startingTimestamp' here (...) ...
    """
    canonical = {name.lower(): name for name in (*known, *SPARK_INTERNAL)}
    problems = []
    for key in options:
        low = str(key).lower()
        if low in canonical:
            continue
        hint = _suggestion(low, canonical, side)
        problems.append(f"'{key}'" + (f": {hint}" if hint else ""))
    if problems:
        doc = "docs/spark-source.md" if side == "source" else "docs/spark-sink.md"
        plural = "s" if len(problems) > 1 else ""
        raise ConfigError(
            f"unknown option{plural} for the jetstream {side}: {'; '.join(problems)}. "
            f"Known options: {', '.join(sorted(set(known), key=str.lower))} (see {doc})"
        )


def connect_options(options: Mapping[str, Any], *, name: str | None = None) -> ConnectOptions:
    """:class:`ConnectOptions` from the connection options (``servers`` required).

    Raises:
        ConfigError: ``servers`` is missing or a value is invalid.
    """
    low = lowered(options)
    if not low.get("servers"):
        raise ConfigError(
            "option 'servers' is required, e.g. .option('servers', 'nats://127.0.0.1:4222')"
        )
    kwargs: dict[str, Any] = {}
    for key, attr in CONNECT_OPTIONS.items():
        value = low.get(key.lower())
        if not value:
            continue
        kwargs[attr] = parse_duration(f"option {key!r}", value) if key in _DURATIONS else value
    if name is not None:
        kwargs["name"] = name
    return ConnectOptions(**kwargs)


def publisher_options(options: Mapping[str, Any]) -> PublisherOptions:
    """:class:`PublisherOptions` from the sink's Publisher options (other keys are ignored here).

    Raises:
        ConfigError: naming the bad option and value.
    """
    low = lowered(options)
    kwargs: dict[str, Any] = {}
    for key, attr in PUBLISHER_OPTIONS.items():
        raw = low.get(key.lower())
        if raw is None or (key == "stream" and not raw):
            continue
        what = f"option {key!r}"
        if key in ("maxInflight", "maxAttempts"):
            kwargs[attr] = parse_positive_int(what, raw)
        elif key in ("backpressure", "checkWindow"):
            kwargs[attr] = parse_bool(what, raw)
        elif key == "ackTimeout":
            kwargs[attr] = parse_duration(what, raw)
        elif key == "retryBackoff":
            kwargs[attr] = tuple(parse_duration(what, p) for p in raw.split(",") if p.strip())
        else:
            kwargs[attr] = raw
    return PublisherOptions(**kwargs)
