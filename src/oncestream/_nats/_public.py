"""The public-API path: what the adapter does when nats-py's internals are not usable.

Components hand the adapter complete protocol frames (``PUB``/``HPUB``) and
expect raw frames back (subject, reply, data, header block). Without the
internals, frames to send are split back into their parts and published with
``Client.publish``; received ``Msg`` objects are turned back into raw frames,
their header dict rendered as a header block. Slower, same results, with the
limits of nats-py's public API: one value per header name (the last one it
read), header names restricted to nats-py's token rule, and values trimmed and
decoded by nats-py, so an id written by a foreign client with whitespace at
its end or bytes that are not UTF-8 reads differently here than on the fast
path (ids oncestream writes are never such ids: see ``_headers.check_msg_id``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .._headers import first_values, parse_block

__all__ = ["frame_of", "header_block", "split_frames"]


def header_block(headers: dict[str, str] | None) -> bytes | None:
    """A ``NATS/1.0`` header block equivalent to nats-py's parsed header dict.

    nats-py folds a status line (``NATS/1.0 404 No Messages``) into the
    ``Status`` and ``Description`` keys; they become the status line again.
    """
    if not headers:
        return None
    status = headers.get("Status")
    lines = ["NATS/1.0"]
    if status:
        description = headers.get("Description")
        lines[0] += f" {status} {description}" if description else f" {status}"
    for key, value in headers.items():
        if status and key in ("Status", "Description"):
            continue
        lines.append(f"{key}: {value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def split_frames(buffer: bytes) -> Iterator[tuple[str, str, bytes, dict[str, str] | None]]:
    """``(subject, reply, payload, headers)`` of each ``PUB``/``HPUB`` frame in ``buffer``.

    Raises:
        ValueError: the buffer is not a sequence of complete PUB/HPUB frames.
    """
    pos = 0
    size = len(buffer)
    while pos < size:
        end = buffer.index(b"\r\n", pos)
        parts = buffer[pos:end].split(b" ")
        start = end + 2
        op = parts[0]
        if op == b"PUB" and len(parts) in (3, 4):
            total = int(parts[-1])
            header_len = 0
        elif op == b"HPUB" and len(parts) in (4, 5):
            total = int(parts[-1])
            header_len = int(parts[-2])
        else:
            raise ValueError(f"not a PUB/HPUB frame: {bytes(buffer[pos:end])!r}")
        reply = parts[2].decode() if len(parts) == (4 if op == b"PUB" else 5) else ""
        stop = start + total
        if buffer[stop : stop + 2] != b"\r\n":
            raise ValueError("frame length does not match its payload")
        block = buffer[start : start + header_len] if header_len else None
        headers = first_values(parse_block(block, control=True)) if block else None
        yield parts[1].decode(), reply, bytes(buffer[start + header_len : stop]), headers
        pos = stop + 2


def frame_of(msg: Any) -> tuple[bytes, bytes, bytes, bytes | None]:
    """``(subject, reply, data, header block)`` of a nats-py ``Msg``."""
    return (
        msg.subject.encode(),
        (msg.reply or "").encode(),
        msg.data,
        header_block(msg.headers),
    )
