"""The Spark source's msg_id column reads every header block as msg_id_of (the server's reading).

msg_id_of is checked against a real server in tests/integration/test_msg_ids.py; here the
column's two ways (a split when the id is the first header line, the regex for any other
block) must agree with it.
"""

from __future__ import annotations

import random

import pyarrow as pa

from oncestream._headers import msg_id_of
from oncestream.spark._columns import _leading_ids, _msg_ids

PIECES = [*"aZ09-:/_.", "é", "日", " ", "  ", "\t", "\r", "\n", "\x00", "\x85", "\u3000", "\ufffd"]


def _blocks(seed: int, count: int) -> list[bytes | None]:
    rng = random.Random(seed)
    blocks: list[bytes | None] = []
    for _ in range(count):
        value = "".join(rng.choice(PIECES) for _ in range(rng.randrange(0, 6))).encode()
        if rng.random() < 0.1:
            value += b"\xff"  # not UTF-8: a foreign writer
        shape = rng.randrange(6)
        if shape == 0:
            blocks.append(b"NATS/1.0\r\nNats-Msg-Id: " + value + b"\r\n\r\n")
        elif shape == 1:
            blocks.append(b"NATS/1.0\r\nX-A: 1\r\nNats-Msg-Id:" + value + b"\r\n\r\n")
        elif shape == 2:
            blocks.append(b"NATS/1.0\r\nnats-msg-id: " + value + b"\r\n\r\n")  # not the header
        elif shape == 3:
            blocks.append(b"NATS/1.0\r\nNats-Msg-Id: " + value + b"\r\nNats-Msg-Id: x\r\n\r\n")
        elif shape == 4:  # the Publisher's pipelined-ack frames
            blocks.append(
                b"NATS/1.0\r\nNats-Msg-Id: " + value + b"\r\nNats-Expected-Stream: S\r\n\r\n"
            )
        else:
            blocks.append(None)
    return blocks


def test_the_column_agrees_with_the_servers_reading_block_by_block() -> None:
    blocks = _blocks(24, 3000)
    for block in blocks:  # one block at a time: the canonical ones take the sliced way
        expected = msg_id_of(block)
        got = _msg_ids(pa.array([block], pa.binary())).to_pylist()[0]
        assert got == expected, (block, got, expected)


def test_a_mixed_chunk_agrees_and_one_with_the_id_first_is_split() -> None:
    blocks = _blocks(7, 3000)
    assert _msg_ids(pa.array(blocks, pa.binary())).to_pylist() == [msg_id_of(b) for b in blocks]
    leading = [
        b"NATS/1.0\r\nNats-Msg-Id: id-%d\r\nNats-Expected-Stream: S\r\n\r\n" % i for i in range(100)
    ]
    array = pa.array(leading, pa.binary())
    assert _leading_ids(array) is not None
    assert _msg_ids(array).to_pylist() == [f"id-{i}" for i in range(100)]
    # A second space after the colon is skipped by the server: not the sliced way.
    assert _leading_ids(pa.array([b"NATS/1.0\r\nNats-Msg-Id:  x\r\n\r\n"])) is None
