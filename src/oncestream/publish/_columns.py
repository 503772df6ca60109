"""Frames from Arrow columns: a fast batch's messages built by pyarrow, not a Python loop per row.

:meth:`~oncestream.Publisher.publish_columns` takes its messages as Arrow
arrays (the Spark sink's rows arrive that way). Checking the msg ids and
sizes, and formatting each frame, are a few vectorised pyarrow calls per
chunk: about a third of the Python loop's cost per message.

pyarrow is imported lazily (it comes with the ``spark`` extra), so the
Publisher does not need it unless this path is used.
"""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING

from .._errors import ConfigError, MessageTooLarge
from .._headers import check_msg_id, is_clean_msg_id
from ._fast_ingest import op_of
from ._frames import too_large

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Columns", "check_columns", "frames"]

#: A field, or an escaped percent sign (a stream name may hold "%d").
_TOKEN = re.compile(rb"%%|%[bd]")
#: The most bytes of frames one chunk builds at a time (large messages, fewer per chunk).
CHUNK_BYTES = 4 * 1024 * 1024


@cache
def _pieces(template: bytes) -> tuple[bytes, ...]:
    """The literal bytes around the eight fields of a fast-batch frame template."""
    pieces, literal, last = [], b"", 0
    for token in _TOKEN.finditer(template):
        literal += template[last : token.start()]
        last = token.end()
        if token.group() == b"%%":
            literal += b"%"
        else:
            pieces.append(literal)
            literal = b""
    pieces.append(literal + template[last:])
    if len(pieces) != 9:
        raise AssertionError(f"a fast-batch template has 8 fields, not {len(pieces) - 1}")
    return tuple(pieces)


class Columns:
    """Checked message columns: ids and data as binary, header lengths, sizes.

    Built by :func:`check_columns`; :func:`frames` formats any slice of it.
    """

    __slots__ = ("datas", "header_lengths", "ids", "max_size", "sizes")

    def __init__(self, ids: pa.Array, datas: pa.Array, header_lengths: pa.Array) -> None:
        import pyarrow.compute as pc

        self.ids = ids
        self.datas = datas
        self.header_lengths = header_lengths
        self.sizes = pc.add(header_lengths, pc.binary_length(datas))
        #: The largest message (headers + data), 0 without rows.
        self.max_size: int = pc.max(self.sizes).as_py() or 0 if len(ids) else 0

    def rows_within(self, limit: int) -> int:
        """How many rows a chunk may take so that it builds at most CHUNK_BYTES of frames."""
        return min(limit, max(1, CHUNK_BYTES // max(self.max_size, 1)))

    def too_large(self, max_payload: int, msg_ids: pa.Array, subject: str) -> MessageTooLarge:
        """The error naming the first row above ``max_payload``."""
        import pyarrow.compute as pc

        row = pc.index(pc.greater(self.sizes, max_payload), True).as_py()
        return too_large(msg_ids[row].as_py(), subject, self.sizes[row].as_py(), max_payload)

    def __len__(self) -> int:
        return len(self.ids)


def check_columns(
    datas: pa.Array,
    msg_ids: pa.Array,
    *,
    fixed: int,
    max_payload: int,
    subject: str,
    first_row: int = 0,
) -> Columns:
    """Check every message once, vectorised; the same rules as :meth:`Publisher.publish`.

    Args:
        datas: binary (or string) payloads, no nulls.
        msg_ids: string msg ids, no nulls.
        fixed: the header length of an id-only frame without the id.
        max_payload: the server's limit on headers + data.
        subject: the messages' subject (named in errors).
        first_row: the number errors give the first row (the caller's position of it).

    Raises:
        ConfigError: ``datas`` and ``msg_ids`` differ in length, hold a null, or an
            id is not clean (:func:`~oncestream._headers.check_msg_id`; the row is named).
        MessageTooLarge: a message above ``max_payload``.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(datas) != len(msg_ids):
        raise ConfigError(
            f"publish_columns: {len(datas)} data and {len(msg_ids)} msg ids (one each per message)"
        )
    for name, column in (("msg_ids", msg_ids), ("datas", datas)):
        if column.null_count:
            row = pc.index(pc.is_null(column), True).as_py()
            raise ConfigError(f"publish_columns: {name}[{row}] (row {first_row + row}) is null")
    if not pa.types.is_string(msg_ids.type) and not pa.types.is_large_string(msg_ids.type):
        raise ConfigError(f"publish_columns: msg_ids must be strings, not {msg_ids.type}")
    if not any(
        check(datas.type)
        for check in (
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_string,
            pa.types.is_large_string,
        )
    ):
        raise ConfigError(f"publish_columns: datas must be binary or strings, not {datas.type}")
    if datas.type != pa.binary():  # one offset width for the join (Spark may send large types)
        datas = datas.cast(pa.binary())
    if len(msg_ids) and not _all_clean_ascii(msg_ids):
        # The exact rule (isprintable, the slow path's ranges), row by row.
        for row, msg_id in enumerate(msg_ids.to_pylist()):
            if not is_clean_msg_id(msg_id):
                check_msg_id(msg_id, f"the msg_id of row {first_row + row}")
    ids = msg_ids.cast(pa.binary())
    columns = Columns(ids, datas, pc.add(pc.binary_length(ids), fixed))
    if columns.max_size > max_payload:
        raise columns.too_large(max_payload, msg_ids, subject)
    return columns


def _all_clean_ascii(msg_ids: pa.Array) -> bool:
    """Whether every id is printable ASCII, non-empty, with no space at either end."""
    import pyarrow.compute as pc

    return bool(
        pc.all(pc.ascii_is_printable(msg_ids)).as_py()
        and pc.min(pc.utf8_length(msg_ids)).as_py() > 0
        and not pc.any(pc.starts_with(msg_ids, " ")).as_py()
        and not pc.any(pc.ends_with(msg_ids, " ")).as_py()
    )


def frames(
    template: bytes,
    shrink: int,
    *,
    subject: bytes,
    prefix: bytes,
    first_seq: int,
    columns: Columns,
    start: int,
    count: int,
) -> list[bytes]:
    """The frames of rows ``start .. start + count - 1``, batch sequences from ``first_seq``.

    ``template`` takes subject, prefix, seq, op, header length, total length,
    msg id and data (a :class:`~oncestream.publish._fast_ingest.FastBatch`'s);
    ``shrink`` is what the batch's header leaves out.
    """
    import pyarrow.compute as pc

    if first_seq == 1 and count > 1:  # the start message has its own op
        head = frames(
            template,
            shrink,
            subject=subject,
            prefix=prefix,
            first_seq=1,
            columns=columns,
            start=start,
            count=1,
        )
        return head + frames(
            template,
            shrink,
            subject=subject,
            prefix=prefix,
            first_seq=2,
            columns=columns,
            start=start + 1,
            count=count - 1,
        )
    op = op_of(first_seq)
    p = _pieces(template)
    seqs = pc.add(_counter(count), first_seq)
    header_lengths = columns.header_lengths.slice(start, count)
    sizes = columns.sizes.slice(start, count)
    if shrink:
        header_lengths = pc.subtract(header_lengths, shrink)
        sizes = pc.subtract(sizes, shrink)
    joined = pc.binary_join_element_wise(
        p[0] + subject + p[1] + prefix + p[2],
        _digits(seqs),
        p[3] + op + p[4],
        _digits(header_lengths),
        p[5],
        _digits(sizes),
        p[6],
        columns.ids.slice(start, count),
        p[7],
        columns.datas.slice(start, count),
        p[8],
        b"",  # the separator
    )
    return joined.to_pylist()  # type: ignore[no-any-return]


def _digits(numbers: pa.Array) -> pa.Array:
    import pyarrow as pa

    return numbers.cast(pa.string()).cast(pa.binary())


_COUNTER: list[pa.Array] = []


def _counter(count: int) -> pa.Array:
    """0, 1, ..., count - 1 as int64 (a slice of one array grown on demand)."""
    import pyarrow as pa

    if not _COUNTER or len(_COUNTER[0]) < count:
        size = max(count, 2 * len(_COUNTER[0]) if _COUNTER else 16_384)
        _COUNTER[:] = [pa.array(range(size), pa.int64())]
    return _COUNTER[0].slice(0, count)
