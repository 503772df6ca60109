"""Frames collected by the range reader -> Arrow record batches, built with compute kernels."""

from __future__ import annotations

import re
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc

from .._errors import OncestreamError
from .._headers import BLOCK_START, MSG_ID, SEQUENCE, SUBJECT, TIME_STAMP, parse_block
from .._message import ack_layout
from .._nats import FrameSink

__all__ = ["ARROW_SCHEMA", "to_batch"]

ARROW_SCHEMA = pa.schema(
    [
        pa.field("stream", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("sequence", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("msg_id", pa.string()),
        pa.field("headers", pa.map_(pa.string(), pa.list_(pa.string()))),
        pa.field("data", pa.binary()),
    ]
)

# The server appends these after the message's own headers, always in this order.
_DIRECT_RE = re.compile(
    rf"\r\n{SUBJECT}: ([^\r]*)\r\n{SEQUENCE}: (\d+)\r\n{TIME_STAMP}: ([^\r]*)\r\n".encode()
)
# As nats-server reads it (see oncestream._headers.header_value): the first line
# named exactly Nats-Msg-Id, spaces after the colon skipped, up to the next CRLF.
_MSG_ID_RE = r"(?s)\r\n" + MSG_ID + r": *(?P<v>.*?)\r\n"
_MSG_ID_KEY = b"\r\n" + MSG_ID.encode() + b":"
_LEADING = BLOCK_START + MSG_ID + ": "


def to_batch(
    chunk: FrameSink,
    stream_name: pa.Scalar,
    *,
    last: int,
    direct: bool,
    include_headers: bool,
) -> tuple[pa.RecordBatch | None, int | None]:
    """The chunk's messages up to sequence ``last`` and the last sequence seen (None: empty).

    Direct-get frames carry subject, sequence and time in headers the server
    appends; consumer frames carry them in the subject and ``$JS.ACK`` reply.
    """
    n = len(chunk.datas)
    if n == 0:
        return None, None
    if direct:
        joined = b"\n".join(cast("list[bytes]", chunk.headers))
        found = _DIRECT_RE.findall(joined)
        has_ids = _MSG_ID_KEY in joined
        if len(found) != n:
            raise OncestreamError(
                f"reading stream {stream_name.as_py()!r}: unexpected direct get headers"
            )
        subjects, seqs, stamps = zip(*found, strict=True)
        subject = pa.array(subjects, pa.binary()).cast(pa.string())
        seq = pa.array(seqs, pa.binary()).cast(pa.string()).cast(pa.int64())
        timestamp = _parse_timestamps(pa.array(stamps, pa.binary()).cast(pa.string()))
    else:
        has_ids = any(h is not None and _MSG_ID_KEY in h for h in chunk.headers)
        subject = pa.array(chunk.subjects, pa.binary()).cast(pa.string())
        tokens = pc.split_pattern(pa.array(chunk.replies, pa.binary()).cast(pa.string()), ".")
        at = ack_layout(len(chunk.replies[0].split(b".")))
        seq = pc.cast(pc.list_element(tokens, at.stream_seq), pa.int64())
        nanos = pc.cast(pc.list_element(tokens, at.timestamp_ns), pa.int64())
        timestamp = pc.cast(pc.divide(nanos, 1000), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    last_seen = int(seq[n - 1].as_py())
    raw_headers = pa.array(chunk.headers, pa.binary())
    msg_id = _msg_ids(raw_headers) if has_ids else pa.nulls(n, pa.string())
    if include_headers:
        headers = _headers_column(chunk.headers, direct)
    else:
        headers = pa.nulls(n, ARROW_SCHEMA.field("headers").type)
    columns = [
        pa.repeat(stream_name, n) if n else pa.array([], pa.string()),
        subject,
        seq,
        timestamp,
        msg_id,
        headers,
        pa.array(chunk.datas, pa.binary()),
    ]
    batch = pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)
    if last_seen > last:
        batch = batch.filter(pc.less_equal(seq, last))
        last_seen = last
    return (batch if batch.num_rows else None), last_seen


def _parse_timestamps(stamps: pa.Array) -> pa.Array:
    """RFC 3339 UTC times with up to nanosecond fractions -> timestamp[us, UTC]."""
    secs = pc.strptime(
        pc.utf8_slice_codeunits(stamps, 0, 19), format="%Y-%m-%dT%H:%M:%S", unit="us"
    )
    fraction = pc.replace_substring(pc.utf8_slice_codeunits(stamps, 20, 26), "Z", "")
    micros = pc.cast(pc.utf8_rpad(fraction, 6, "0"), pa.int64())
    return pc.add(secs, pc.cast(micros, pa.duration("us"))).cast(pa.timestamp("us", tz="UTC"))


def _msg_ids(raw_headers: pa.Array) -> pa.Array:
    """The msg id column: the server's reading of Nats-Msg-Id, null when absent or empty."""
    found = _leading_ids(raw_headers)
    if found is None:
        found = pc.struct_field(pc.extract_regex(raw_headers, _MSG_ID_RE), [0])
    try:
        ids = found.cast(pa.string())
    except pa.ArrowInvalid:  # bytes that are not UTF-8 (a foreign writer): U+FFFD, as msg_id_of
        ids = pa.array(
            [None if v is None else v.decode("utf-8", "replace") for v in found.to_pylist()],
            pa.string(),
        )
    return pc.if_else(pc.equal(ids, ""), pa.scalar(None, pa.string()), ids)


def _leading_ids(raw_headers: pa.Array) -> pa.Array | None:
    """The ids when every block's first header line is ``Nats-Msg-Id: <id>``.

    That is what the Publisher writes (its ``Nats-Expected-Stream`` comes after), so
    mostly what a stream holds. The server reads the first line of that name, up to the
    next CRLF: here one split at that CRLF, for a seventh of the regex's cost (about
    0.4 us a row). None when any block has another shape (another header first, a second
    space after the colon that the server would skip): the regex reads those.
    """
    if (
        not pc.all(pc.starts_with(raw_headers, _LEADING)).as_py()
        or pc.any(pc.starts_with(raw_headers, _LEADING + " ")).as_py()
    ):
        return None
    # An explicit stop: binary_slice without one fails ("Negative buffer resize", pyarrow 26).
    values = pc.binary_slice(raw_headers, len(_LEADING), 2**31 - 1)
    return pc.list_element(pc.split_pattern(values, "\r\n", max_splits=1), 0)


def _user_headers(raw: bytes | None, direct: bool) -> list[tuple[str, list[str]]] | None:
    """The headers column of one row: the message's own headers, msg id and control hidden."""
    if not raw:
        return None
    headers = parse_block(raw, direct=direct)
    headers.pop(MSG_ID, None)  # it has its own column
    return list(headers.items()) or None


def _headers_column(raw: list[bytes | None], direct: bool) -> pa.Array:
    values = [_user_headers(h, direct) for h in raw]
    return pa.array(values, ARROW_SCHEMA.field("headers").type)
