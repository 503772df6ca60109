"""The public-API path: what the adapter does when nats-py's internals are not usable.

Components hand the adapter complete protocol frames (``PUB``/``HPUB``) and
expect raw frames back (subject, reply, data, header block). Without the
internals, frames to send are split back into their parts and published with
``Client.publish``; received ``Msg`` objects are turned back into raw frames,
their header dict rendered as a header block. Slower, same results, with two
limits of nats-py's public API: one value per header name, and header names
restricted to nats-py's token rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["frame_of", "header_block", "parse_header_block", "split_frames"]


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


def parse_header_block(block: bytes | bytearray) -> dict[str, str]:
    """A raw header block as nats-py's header dict (a status line -> ``Status``/``Description``).

    A name given several times keeps its last value, as nats-py does.
    """
    lines = block.decode(errors="replace").split("\r\n")
    out: dict[str, str] = {}
    first = lines[0]
    if len(first) > 9 and first[8] == " ":
        status, _, description = first[9:].partition(" ")
        if status.isdigit():
            out["Status"] = status
        if description:
            out["Description"] = description
    for line in lines[1:]:
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def _parse_headers(block: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in block.decode().split("\r\n")[1:]:
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


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
        headers = _parse_headers(buffer[start : start + header_len]) if header_len else None
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
