"""Exactly-once checker: compare an input stream with its outputs, key by key.

An audit reads every message of the input stream, derives a key per message
(its ``Nats-Msg-Id``, its lineage ``STREAM:SEQ`` or a JSON field), then reads
each output (a stream, a Parquet path or a SQL table) and counts, per output,
the input keys it holds once (found), not at all (missing), more than once
(duplicated), and the keys it holds that the input does not (unexpected).

Example::

    report = await audit(conn, "ORDERS", [OutputSpec.parse("stream:ORDERS_ENRICHED")],
                         key="field:order_id")
    assert report.ok, report.to_dict()
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from .._connection import Connection
from .._dsn import Dsn, parse_dsn
from .._errors import ConfigError, StreamNotFound
from .._names import check_stream_name
from .._options import server_time
from .._private import redact_url, redacted_repr
from ..read import StreamRecord, read_stream
from ..streams import lineage_id
from ._keys import KeySpec
from ._outputs import delta_keys, iceberg_keys, parquet_keys, sql_keys

__all__ = [
    "AuditReport",
    "KeySpec",
    "OutputReport",
    "OutputSpec",
    "StreamRecord",
    "audit",
    "compare",
    "read_stream",
]

SAMPLES = 5


@dataclass(frozen=True, kw_only=True)
class OutputSpec:
    """An output to audit: a stream, a Parquet path, a Delta, Iceberg or SQL table.

    Written ``stream:NAME``, ``parquet:PATH``, ``delta:PATH``,
    ``iceberg:CATALOG#NAMESPACE.TABLE`` or ``sql:DSN#TABLE``.

    For ``iceberg`` the catalog is a warehouse folder (the embedded catalog
    :func:`oncestream.spark.iceberg` keeps there) or an SQL catalog's database URL.

    For ``sql`` the DSN is a database URL with SQLAlchemy's meaning, as for
    ledgers (``sqlite:///relative.db``, ``sqlite:////abs/path.db``, a plain
    file path, or ``postgresql://...``); it is parsed when the spec is, and
    its password never appears in ``str()`` or ``repr()``.
    """

    kind: Literal["stream", "parquet", "delta", "iceberg", "sql"]
    target: str = field(repr=False)
    table: str | None = None

    @property
    def database(self) -> Dsn:
        """The parsed database URL of a ``sql`` output.

        Raises:
            ConfigError: the output is not ``sql`` or the URL is invalid.
        """
        if self.kind != "sql":
            raise ConfigError(f"output {self} is not a sql output")
        return parse_dsn(self.target, "sql output")

    @classmethod
    def parse(cls, text: str) -> OutputSpec:
        """Parse one ``--output`` value.

        Raises:
            ConfigError: on an unknown kind or a missing table name.
        """
        kind, sep, rest = text.partition(":")
        known = kind in ("stream", "parquet", "delta", "iceberg", "sql")
        shown = f"{kind}:{redact_url(rest)}" if known and sep else redact_url(text)
        if not sep or not rest:
            raise ConfigError(
                "output must be 'stream:NAME', 'parquet:PATH', 'delta:PATH', "
                f"'iceberg:CATALOG#NAMESPACE.TABLE' or 'sql:DSN#TABLE', got {shown!r}"
            )
        if kind == "stream":
            return cls(kind="stream", target=check_stream_name(rest, "output stream"))
        if kind in ("parquet", "delta"):
            return cls(kind=kind, target=rest)  # type: ignore[arg-type]
        if kind == "iceberg":
            catalog, _, table = rest.rpartition("#")
            if not catalog or len([p for p in table.split(".") if p]) < 2:
                raise ConfigError(
                    "iceberg output needs 'iceberg:CATALOG#NAMESPACE.TABLE' (CATALOG a "
                    f"warehouse folder or an SQL catalog's database URL): {shown!r}"
                )
            return cls(kind="iceberg", target=catalog, table=table)
        if kind == "sql":
            dsn, _, table = rest.rpartition("#")
            if not dsn or not table or not table.replace("_", "").replace(".", "").isalnum():
                raise ConfigError(
                    f"sql output needs 'sql:DSN#TABLE' with a plain table name: {shown!r}"
                )
            parse_dsn(dsn, "sql output")  # fail on a bad URL when parsing
            return cls(kind="sql", target=dsn, table=table)
        raise ConfigError(
            f"output kind must be stream, parquet, delta, iceberg or sql, got {kind!r} in {shown!r}"
        )

    def __str__(self) -> str:
        table = f"#{self.table}" if self.table else ""
        return f"{self.kind}:{redact_url(self.target)}{table}"

    def __repr__(self) -> str:
        return redacted_repr(self)


@dataclass(kw_only=True)
class OutputReport:
    """What one output holds compared with the input."""

    output: str
    rows: int
    found: int
    missing: int
    duplicated: int
    duplicate_rows: int
    unexpected: int
    missing_samples: list[str] = field(default_factory=list)
    duplicated_samples: list[str] = field(default_factory=list)
    unexpected_samples: list[str] = field(default_factory=list)
    latency_ms: dict[str, float] | None = None
    #: ``(output time, latency ms)`` per record of a stream output, by output time
    #: (for a plot; not in :meth:`to_dict`).
    latency_points: list[tuple[float, float]] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        """True when every input key is present exactly once and nothing else is."""
        return self.missing == 0 and self.duplicated == 0 and self.unexpected == 0

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        del data["latency_points"]
        data["ok"] = self.ok
        return data


@dataclass(kw_only=True)
class AuditReport:
    """The audit's verdict over every output."""

    input: str
    key: str
    input_rows: int
    expected: int
    input_duplicated: int
    outputs: list[OutputReport]
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the input has no duplicate keys and every output is exact."""
        return self.input_duplicated == 0 and all(o.ok for o in self.outputs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "input": self.input,
            "key": self.key,
            "input_rows": self.input_rows,
            "expected": self.expected,
            "input_duplicated": self.input_duplicated,
            "seconds": round(self.seconds, 3),
            "outputs": [o.to_dict() for o in self.outputs],
        }


def compare(
    output: str,
    expected: Iterable[str],
    found: Iterable[str],
    *,
    samples: int = SAMPLES,
) -> OutputReport:
    """Compare the input's keys with an output's keys (pure logic).

    Example::

        compare("t", ["a", "b"], ["a", "a", "c"])  # missing b, duplicated a, unexpected c
    """
    expected_set = expected if isinstance(expected, set | frozenset) else set(expected)
    counts = Counter(found)
    missing = [k for k in expected_set if k not in counts]
    duplicated = {k: n for k, n in counts.items() if n > 1 and k in expected_set}
    unexpected = [k for k in counts if k not in expected_set]
    return OutputReport(
        output=output,
        rows=sum(counts.values()),
        found=len(expected_set) - len(missing),
        missing=len(missing),
        duplicated=len(duplicated),
        duplicate_rows=sum(n - 1 for n in duplicated.values()),
        unexpected=len(unexpected),
        missing_samples=sorted(missing)[:samples],
        duplicated_samples=sorted(duplicated)[:samples],
        unexpected_samples=sorted(unexpected)[:samples],
    )


def _json_field(data: bytes, name: str) -> str | None:
    try:
        value = orjson.loads(data).get(name)
    except (orjson.JSONDecodeError, AttributeError):
        return None
    return None if value is None else str(value)


def stream_key(key: KeySpec, stream: str, record: StreamRecord, *, is_input: bool) -> str | None:
    """The key of a stored message (None when it has none)."""
    if key.kind == "field":
        return _json_field(record.data, key.name or "")
    if key.kind == "lineage" and is_input:
        return lineage_id(stream, record.seq)
    return record.msg_id


def parse_timestamp(text: str) -> float:
    """Seconds since the epoch of a JetStream ``Nats-Time-Stamp`` (to the microsecond)."""
    return server_time(text).timestamp() if text else 0.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def _stream_keys(
    conn: Connection, stream: str, key: KeySpec, *, is_input: bool, with_time: bool
) -> tuple[list[str], dict[str, float]]:
    keys: list[str] = []
    times: dict[str, float] = {}
    cache: dict[str, float] = {}
    async for chunk in read_stream(conn, stream):
        for record in chunk:
            value = stream_key(key, stream, record, is_input=is_input)
            if value is None:
                value = f"<no key at {stream}:{record.seq}>"
            keys.append(value)
            if with_time and value not in times:
                # Timestamps of one chunk share their second; parse each second once.
                second = record.timestamp[:19]
                if second not in cache:
                    cache[second] = parse_timestamp(second)
                frac = record.timestamp[20:].rstrip("Z")
                times[value] = cache[second] + (float("0." + frac) if frac else 0.0)
    return keys, times


async def audit(
    conn: Connection,
    input_stream: str,
    outputs: Iterable[OutputSpec],
    *,
    key: KeySpec | str = "msg_id",
    samples: int = SAMPLES,
) -> AuditReport:
    """Audit ``outputs`` against every message of ``input_stream``.

    Stream outputs also get end-to-end latency percentiles (output stored
    time minus input stored time, first copy of each key).

    Raises:
        StreamNotFound: when a stream does not exist.
        ConfigError: when an output or key cannot be read.
    """
    check_stream_name(input_stream, "input stream")
    loop = asyncio.get_running_loop()
    started = loop.time()
    spec = KeySpec.parse(key) if isinstance(key, str) else key
    specs = list(outputs)
    if not specs:
        raise ConfigError("audit needs at least one output")
    want_time = any(s.kind == "stream" for s in specs)
    try:
        keys, in_times = await _stream_keys(
            conn, input_stream, spec, is_input=True, with_time=want_time
        )
    except StreamNotFound as exc:
        raise StreamNotFound(f"input stream {input_stream!r} not found") from exc
    expected = set(keys)
    reports = []
    for out in specs:
        out_times: dict[str, float] = {}
        if out.kind == "stream":
            found, out_times = await _stream_keys(
                conn, out.target, spec, is_input=False, with_time=True
            )
        elif out.kind == "parquet":
            found = await asyncio.to_thread(parquet_keys, out.target, spec)
        elif out.kind == "delta":
            found = await asyncio.to_thread(delta_keys, out.target, spec)
        elif out.kind == "iceberg":
            found = await asyncio.to_thread(iceberg_keys, out.target, out.table or "", spec)
        else:
            found = await asyncio.to_thread(sql_keys, out.database, out.table or "", spec)
        report = compare(str(out), expected, found, samples=samples)
        points = sorted(
            (t, (t - in_times[k]) * 1000) for k, t in out_times.items() if k in in_times
        )
        lags = [lag for _, lag in points]
        report.latency_points = points
        if lags:
            report.latency_ms = {
                "p50": round(_percentile(lags, 0.50), 1),
                "p99": round(_percentile(lags, 0.99), 1),
                "max": round(max(lags), 1),
            }
        reports.append(report)
    return AuditReport(
        input=f"stream:{input_stream}",
        key=str(spec),
        input_rows=len(keys),
        expected=len(expected),
        input_duplicated=len(keys) - len(expected),
        outputs=reports,
        seconds=loop.time() - started,
    )
