"""Publisher against a real nats-server: de-duplication, typed errors, backpressure."""

from __future__ import annotations

import asyncio
import base64
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from oncestream import (
    ConfigError,
    Connection,
    MessageTooLarge,
    PublishFailed,
    StreamMismatch,
    StreamNotFound,
    TooManyInflight,
    WrongLastSequence,
)
from oncestream.publish import PubAck, Publisher, PublisherOptions
from oncestream.server import NatsServer


@dataclass(frozen=True)
class StoredMsg:
    seq: int
    subject: str
    msg_id: str | None
    headers: dict[str, str]
    data: bytes


async def read_back(conn: Connection, stream: str, *, batch: int = 2000) -> list[StoredMsg]:
    """Every message of ``stream`` in sequence order, via batched direct gets."""
    nc = conn.nc
    info = await conn.stream_info(stream)
    last = int(info["state"]["last_seq"])
    seq = int(info["state"]["first_seq"]) or 1
    result: list[StoredMsg] = []
    for _round in range(last // max(batch, 1) + 10):
        if seq > last:
            break
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        await nc.publish(
            f"{conn.prefix}.DIRECT.GET.{stream}",
            orjson.dumps({"seq": seq, "batch": batch}),
            reply=inbox,
        )
        try:
            for _ in range(batch + 1):
                msg = await sub.next_msg(timeout=5)
                headers = dict(msg.headers or {})
                if headers.get("Status") in ("204", "404"):
                    break
                stored_seq = int(headers["Nats-Sequence"])
                result.append(
                    StoredMsg(
                        seq=stored_seq,
                        subject=headers["Nats-Subject"],
                        msg_id=headers.get("Nats-Msg-Id"),
                        headers=headers,
                        data=msg.data,
                    )
                )
                seq = stored_seq + 1
        finally:
            await sub.unsubscribe()
    return result


def pause_server(server: NatsServer) -> None:
    """SIGSTOP the server and return once the kernel reports it stopped (signals are async)."""
    server.pause()
    stat = Path(f"/proc/{server.pid}/stat")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        state = stat.read_text().rsplit(")", 1)[1].split()[0]
        if state in ("T", "t"):
            return
        time.sleep(0.001)
    raise AssertionError(f"nats-server pid {server.pid} did not stop within 5 s")


def assert_exactly_once(stored: list[StoredMsg], expected_ids: set[str]) -> None:
    """Every expected msg id is stored exactly once, and nothing else is."""
    counts = Counter(m.msg_id for m in stored)
    duplicated = {k: v for k, v in counts.items() if v > 1}
    assert not duplicated, f"stored more than once: {sorted(duplicated)[:10]}"
    missing = expected_ids - set(counts)
    assert not missing, f"{len(missing)} ids missing, e.g. {sorted(missing)[:10]}"
    unexpected = set(counts) - expected_ids
    assert not unexpected, f"unexpected ids: {sorted(map(str, unexpected))[:10]}"


async def test_seed_scenario_six_publishes_of_two_ids_store_two(conn, make_stream) -> None:
    await make_stream("SEED", ("seed.>",), allow_batched=False)  # the ack path's seq, duplicate
    async with Publisher(conn, PublisherOptions(stream="SEED")) as pub:
        futures = [
            await pub.publish("seed.a", f"copy {i}".encode(), msg_id=f"id-{i % 2}")
            for i in range(6)
        ]
        acks = [await f for f in futures]
    assert [a.duplicate for a in acks] == [False, False, True, True, True, True]
    assert {a.seq for a in acks} == {1, 2}
    assert all(isinstance(a, PubAck) and a.stream == "SEED" for a in acks)
    stats = pub.stats
    assert (stats.sent, stats.acked, stats.duplicates, stats.failed) == (6, 6, 4, 0)
    stored = await read_back(conn, "SEED")
    assert [(m.msg_id, m.data) for m in stored] == [("id-0", b"copy 0"), ("id-1", b"copy 1")]


async def test_many_publishes_with_backpressure_all_stored_once(conn, make_stream) -> None:
    await make_stream("BP", ("bp.>",))
    opts = PublisherOptions(stream="BP", max_inflight=16)
    peak = 0
    async with Publisher(conn, opts) as pub:
        for i in range(3000):
            await pub.publish(f"bp.{i % 3}", b"x" * 64, msg_id=f"m{i}")
            peak = max(peak, pub.inflight)
        await pub.flush()
    assert peak <= 16
    assert pub.stats.acked == 3000
    assert_exactly_once(await read_back(conn, "BP"), {f"m{i}" for i in range(3000)})


async def test_key_fn_gives_ids_and_missing_id_is_a_config_error(conn, make_stream) -> None:
    await make_stream("KEYS", ("keys.>",), allow_batched=False)  # counts the duplicate
    async with Publisher(conn, PublisherOptions(stream="KEYS")) as plain:
        with pytest.raises(ConfigError, match=r"keys\.x"):
            await plain.publish("keys.x", b"no id")

    def key(subject: str, data: bytes, headers: object) -> str:
        return data.decode().split(":")[0]

    async with Publisher(conn, PublisherOptions(stream="KEYS"), key_fn=key) as pub:
        for record in (b"a:1", b"b:1", b"a:2"):
            await pub.publish("keys.x", record)
    assert pub.stats.duplicates == 1
    assert [m.msg_id for m in await read_back(conn, "KEYS")] == ["a", "b"]


async def test_expected_last_subject_seq_conflict_is_typed(conn, make_stream) -> None:
    await make_stream("SEQ", ("seq.>",))
    async with Publisher(conn, PublisherOptions(stream="SEQ")) as pub:
        first = await (await pub.publish("seq.p1", b"1", msg_id="1", expected_last_subject_seq=0))
        await (await pub.publish("seq.other", b"o", msg_id="o"))
        ok = await (
            await pub.publish("seq.p1", b"2", msg_id="2", expected_last_subject_seq=first.seq)
        )
        assert ok.seq == 3
        stale = await pub.publish("seq.p1", b"3", msg_id="3", expected_last_subject_seq=first.seq)
        with pytest.raises(WrongLastSequence) as info:
            await stale
        assert info.value.err_code == 10071
        mismatch = await pub.publish("seq.p1", b"4", msg_id="4", expected_stream="NOPE")
        with pytest.raises(StreamMismatch) as info2:
            await mismatch
        assert info2.value.err_code == 10060
    assert pub.stats.failed == 2
    assert [m.msg_id for m in await read_back(conn, "SEQ")] == ["1", "o", "2"]


async def test_fail_fast_raises_too_many_inflight(conn, make_stream) -> None:
    await make_stream("FF", ("ff.>",))
    opts = PublisherOptions(stream="FF", max_inflight=2, backpressure=False)
    async with Publisher(conn, opts) as pub:
        await pub.publish("ff.a", b"1", msg_id="1")
        await pub.publish("ff.a", b"2", msg_id="2")
        # No await yielded to the loop yet, so neither ack can have been processed.
        with pytest.raises(TooManyInflight):
            await pub.publish("ff.a", b"3", msg_id="3")
        await pub.flush()
        await pub.publish("ff.a", b"3", msg_id="3")
    assert pub.stats.acked == 3


async def test_missing_stream_raises_stream_not_found_promptly(conn) -> None:
    async with Publisher(conn, PublisherOptions(ack_timeout=30, max_attempts=1)) as pub:
        future = await pub.publish("nobody.listens", b"x", msg_id="1")
        # ack_timeout is 30 s: only the server's no-responders status can end this in time.
        with pytest.raises(StreamNotFound, match=r"nobody\.listens"):
            await asyncio.wait_for(future, timeout=3)
        # An unclaimed failure surfaces at flush().
        await pub.publish("nobody.listens", b"y", msg_id="2")
        with pytest.raises(StreamNotFound):
            await asyncio.wait_for(pub.flush(), timeout=3)
        await pub.flush()
    with pytest.raises(StreamNotFound):
        await Publisher(conn, PublisherOptions(stream="MISSING")).start()


async def test_window_guard_rejects_short_duplicate_window(conn, make_stream) -> None:
    await make_stream("SHORT", ("short.>",), duplicate_window=1.0)
    opts = PublisherOptions(stream="SHORT", ack_timeout=2.0, max_attempts=3)
    with pytest.raises(ConfigError) as info:
        await Publisher(conn, opts).start()
    text = str(info.value)
    assert f"{opts.retry_horizon:g}s" in text and "duplicate_window 1s" in text
    # Same options with the guard off start fine; a short horizon passes the guard.
    await Publisher(conn, PublisherOptions(stream="SHORT", check_window=False)).start()
    fits = PublisherOptions(stream="SHORT", ack_timeout=0.2, max_attempts=2, retry_backoff=(0.1,))
    async with Publisher(conn, fits) as pub:
        assert pub.duplicate_window == 1.0


async def test_oversized_payload_rejected_before_sending(conn, make_stream) -> None:
    await make_stream("BIG", ("big.>",))
    async with Publisher(conn, PublisherOptions(stream="BIG")) as pub:
        with pytest.raises(MessageTooLarge) as info:
            await pub.publish("big.x", b"x" * conn.max_payload, msg_id="big")
        assert str(conn.max_payload) in str(info.value)
        assert pub.stats.sent == 0 and pub.inflight == 0
    info2 = await conn.stream_info("BIG")
    assert info2["state"]["messages"] == 0


async def test_closed_server_fails_with_publish_failed(nats_server, conn, make_stream) -> None:
    await make_stream("GONE", ("gone.>",))
    opts = PublisherOptions(ack_timeout=0.2, max_attempts=2, retry_backoff=(0.05,))
    async with Publisher(conn, opts) as pub:
        pause_server(nats_server)
        try:
            future = await pub.publish("gone.x", b"x", msg_id="lost")
            with pytest.raises(PublishFailed) as info:
                await asyncio.wait_for(future, timeout=5)
        finally:
            nats_server.resume()
        assert info.value.msg_id == "lost" and info.value.attempts == 2
        await pub.flush()
    assert pub.stats.retried == 1 and pub.stats.failed == 1


async def test_multi_valued_header_is_sent_as_one_line_per_value(conn, make_stream) -> None:
    await make_stream("HDR", ("hdr.>",))
    async with Publisher(conn, PublisherOptions(stream="HDR")) as pub:
        if not conn.multi_value_headers:
            # nats-py's public API (the adapter's fallback) carries one value per name.
            with pytest.raises(ConfigError, match="one value per header name"):
                await pub.publish("hdr.a", b"x", msg_id="h-1", headers={"X-Tag": ["a", "b"]})
            return
        ack = await (await pub.publish("hdr.a", b"x", msg_id="h-1", headers={"X-Tag": ["a", "b"]}))
    # On the default fast-ingest path the ack holds no sequence: read the subject's last.
    assert ack.stream == "HDR"
    raw = await conn.api("STREAM.MSG.GET.HDR", {"last_by_subj": "hdr.a"})
    block = base64.b64decode(raw["message"]["hdrs"])
    assert b"X-Tag: a\r\nX-Tag: b\r\n" in block
