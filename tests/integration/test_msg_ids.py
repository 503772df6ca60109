"""Message ids as nats-server reads them: property tests against a real server (issue 19).

nats-server drops the spaces after ``Nats-Msg-Id:``, ends the value at the
first CRLF and ignores an empty id; client libraries trim values. Ids are
drawn from an alphabet of whitespace, control and non-ASCII characters, with
the variants the server would merge (`` a`` next to ``a``). The tests check,
with a fixed seed in ``make test`` and more examples under ``make soak``:

- every id ``check_msg_id`` accepts is stored as its own message (written by
  hand on the wire, so no library trims it first), de-duplicated when sent
  again, read back unchanged by the server and by nats-py, and published by
  the Publisher (both frame paths and ``publish_many``) as itself;
- every id the server merges with another one, or does not de-duplicate, is
  refused by the Publisher, ``publish_many`` and the conditional path;
- a Processor keyed by msg id applies every message the server stored
  exactly once, also foreign ones whose ids we would refuse to write.
"""

from __future__ import annotations

import asyncio
import base64
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from harness import RawClient
from oncestream import (
    ConfigError,
    Connection,
    Processor,
    ProcessorOptions,
    Publisher,
    PublisherOptions,
    SQLiteLedger,
)
from oncestream._headers import check_msg_id, msg_id_of
from oncestream.server import NatsServer

ALPHABET = [
    *"aZ09-:/_.",
    "é",
    "e\u0301",  # the same letter, decomposed: a different id
    "日",
    "\U0001f600",
    "\ufffd",
    *" \t\n\r\x00\x01\x1f\x7f\x85",
    "\xa0",
    "\u2028",
    "\u3000",
    "\u200b",  # zero-width space: not whitespace, accepted inside and at the ends
    "\ufeff",
    "\ud800",  # a lone surrogate: not encodable
]


def generate(seed: int, count: int) -> list[str]:
    """``count`` random ids, each with the variants the server could merge with it."""
    rng = random.Random(seed)
    ids: dict[str, None] = {}
    for _ in range(count):
        core = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6)))
        for variant in (core, " " + core, "  " + core, core + " ", core + "\r\nX: y"):
            ids.setdefault(variant, None)
    return list(ids)


def accepted(msg_id: str) -> bool:
    try:
        check_msg_id(msg_id)
    except ConfigError:
        return False
    return True


def _header(msg_id: str) -> bytes:
    return b"NATS/1.0\r\nNats-Msg-Id: " + msg_id.encode() + b"\r\n\r\n"


async def _stored_ids(conn: Connection, stream: str) -> list[str | None]:
    info = await conn.stream_info(stream)
    out = []
    for seq in range(1, int(info["state"]["last_seq"]) + 1):
        reply = await conn.api(f"STREAM.MSG.GET.{stream}", {"seq": seq})
        out.append(msg_id_of(base64.b64decode(reply["message"].get("hdrs") or "")))
    return out


async def _check_ids(
    seed: int, count: int, server: NatsServer, conn: Connection, make_stream: Any, tmp: Path
) -> None:
    ids = generate(seed, count)
    good = [i for i in ids if accepted(i)]
    bad = [i for i in ids if not accepted(i)]
    assert good and bad
    rng = random.Random(seed)
    rng.shuffle(good)

    # 1. On the wire, written by hand: what the server itself does with each id.
    await make_stream("RAW", ("raw.>",))
    merged: list[str] = []
    async with RawClient(server.url) as raw:
        for n, msg_id in enumerate(good):
            ack = await raw.request_hpub("raw.x", _header(msg_id), b"%d" % n)
            assert not ack.get("duplicate"), f"accepted id {msg_id!r} merged with another"
        for msg_id in good:
            ack = await raw.request_hpub("raw.x", _header(msg_id), b"again")
            assert ack.get("duplicate"), f"accepted id {msg_id!r} is not de-duplicated"
        for msg_id in bad:
            try:
                encoded = _header(msg_id)
            except UnicodeEncodeError:
                continue  # cannot even be sent
            ack = await raw.request_hpub("raw.x", encoded, b"bad")
            if ack.get("duplicate"):
                merged.append(msg_id)
            again = await raw.request_hpub("raw.x", encoded, b"bad")
            if not again.get("duplicate"):
                merged.append(msg_id)  # not de-duplicated at all (empty for the server)
    # The generator must produce ids the server merges, or this test proves nothing.
    assert len(merged) >= count // 2, merged
    stored = await _stored_ids(conn, "RAW")
    assert stored[: len(good)] == good  # read back by the server exactly as written

    # 2. A nats-py consumer reads the accepted ids back unchanged.
    sub = await conn.nc.jetstream().subscribe("raw.x", ordered_consumer=True)
    try:
        for msg_id in good:
            message = await sub.next_msg(timeout=5)
            assert (message.headers or {}).get("Nats-Msg-Id") == msg_id
    finally:
        await sub.unsubscribe()

    # 3. The Publisher refuses every refused id on every path, and stores each accepted one.
    await make_stream("PUB", ("pub.>",))
    async with Publisher(conn, PublisherOptions(stream="PUB")) as pub:
        for msg_id in bad:
            with pytest.raises(ConfigError, match="msg id"):
                await pub.publish("pub.x", b"x", msg_id=msg_id)
            with pytest.raises(ConfigError, match="msg id"):
                await pub.publish("pub.x", b"x", msg_id=msg_id, headers={"X-A": "1"})
            with pytest.raises(ConfigError, match="msg id"):
                await pub.publish_many(["pub.x"], [b"x"], [msg_id])
        half = len(good) // 2
        futures = [
            await pub.publish("pub.x", b"%d" % n, msg_id=i, headers={"X-N": str(n)})
            for n, i in enumerate(good[:half])
        ]
        futures += await pub.publish_many(
            ["pub.x"] * (len(good) - half),
            [b"%d" % n for n in range(half, len(good))],
            good[half:],
        )
        acks = await asyncio.gather(*futures)
    assert not any(a.duplicate for a in acks)
    assert await _stored_ids(conn, "PUB") == good

    # 4. A Processor keyed by msg id applies every stored message once, foreign ids included.
    raw_total = int((await conn.stream_info("RAW"))["state"]["messages"])
    db = tmp / "ledger.db"
    proc = Processor(
        conn,
        "RAW",
        "ids",
        _record_seq,
        ledger=SQLiteLedger(db, key="msg_id"),
        options=ProcessorOptions(batch=50, ack_wait=2, expires=5, prune_interval=0),
    )
    task = asyncio.create_task(proc.run())
    try:
        await proc.wait_until(lambda s: s.applied + s.suppressed >= raw_total, 60)
    finally:
        await proc.stop()
        await task
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT count(*), count(DISTINCT seq) FROM seen").fetchone()
    finally:
        con.close()
    # Every message the server stored as its own (distinct id, or no de-duplication) is
    # applied; the second copies of accepted ids were de-duplicated by the server.
    assert (proc.stats.applied, proc.stats.suppressed) == (raw_total, 0)
    assert rows == (raw_total, raw_total)


def _record_seq(msg: Any, tx: Any) -> None:
    tx.execute("CREATE TABLE IF NOT EXISTS seen (seq INTEGER NOT NULL)")
    tx.execute("INSERT INTO seen (seq) VALUES (?)", (msg.seq,))


async def test_ids_agree_with_the_server(
    nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await _check_ids(7, 30, nats_server, conn, make_stream, tmp_path)


@pytest.mark.soak
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_ids_agree_with_the_server_soak(
    seed: int, nats_server: NatsServer, conn: Connection, make_stream: Any, tmp_path: Path
) -> None:
    await _check_ids(seed, 400, nats_server, conn, make_stream, tmp_path)
