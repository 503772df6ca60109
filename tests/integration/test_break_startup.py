"""Breaker findings on commit 50bbd84 (start-up rides out a stall): `oncestream publish`
against a real nats-server that is paused (SIGSTOP) exactly when one start-up request
reaches it.

A relay in front of the server pauses it just before the client's bytes holding a given
request (its n-th occurrence) are forwarded, so the stall hits that request and no
other. The CLI runs as a subprocess (so Ctrl-C is a real SIGINT); after each scenario the
server is resumed and the stream read back: every record stored exactly once.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import orjson

from oncestream import ConnectOptions, connect
from oncestream.read import stored_ids
from oncestream.server import NatsServer
from oncestream.streams import StreamSpec, ensure_stream
from tests._wiretap import WireTap
from tests.integration.test_publish_resume import _cli, _finish, _start

TOTAL = 200
# Patience 1s x 2 = 2s, far below the 5s request timeout: one attempt, then give up.
SHORT = ["--ack-timeout", "1s", "--max-attempts", "2"]


class PauseAt:
    """A relay to ``server`` that pauses it (SIGSTOP; with ``kill``, kills it) just before
    the ``nth`` client write holding ``trigger`` reaches it; a paused server stays paused
    until :meth:`close`."""

    def __init__(
        self, server: NatsServer, trigger: bytes, nth: int = 1, *, kill: bool = False
    ) -> None:
        self.server = server
        self.kill = kill
        self.trigger = trigger
        self.nth = nth
        self.seen = 0
        self.fired = threading.Event()
        self._lock = threading.Lock()
        self._tap = WireTap(server.port)
        self._tap.on_request = self._saw
        self.url = self._tap.url()

    def _saw(self, chunk: bytes) -> None:
        if self.fired.is_set():
            return
        with self._lock:
            self.seen += chunk.count(self.trigger)
            if self.seen >= self.nth and not self.fired.is_set():
                if self.kill:
                    self.server.kill()
                else:
                    self.server.pause()
                self.fired.set()

    async def wait_fired(self, timeout: float = 60) -> None:
        assert await asyncio.to_thread(self.fired.wait, timeout), "the request never came"

    def close(self) -> None:
        if not self.kill:
            self.server.resume()
        self._tap.close()


def _write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


def _records(count: int) -> list[str]:
    return [orjson.dumps({"id": f"o{i}"}).decode() for i in range(count)]


def _args(url: str, file: str, *extra: str) -> list[str]:
    return [
        *_cli(),
        "publish",
        file,
        "--stream",
        "ORDERS",
        "--subject",
        "orders.x",
        "--id-field",
        "id",
        "-s",
        url,
        "--no-progress",
        *extra,
    ]


async def _stream(url: str, *, allow_direct: bool = True) -> None:
    spec = StreamSpec(
        name="ORDERS", subjects=("orders.>",), duplicate_window=300, allow_direct=allow_direct
    )
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, spec)


async def _stored_once(url: str, want: set[str]) -> None:
    """The stream holds each id of ``want`` exactly once and nothing else."""
    async with await connect(ConnectOptions(servers=(url,))) as conn:
        held = int((await conn.stream_info("ORDERS"))["state"]["messages"])
        ids = await stored_ids(conn, "ORDERS", 0)
    assert ids == want, (sorted(ids - want)[:5], sorted(want - ids)[:5])
    assert held == len(want), f"{held} messages for {len(want)} ids: some stored twice"


async def _rerun_stores_each_once(url: str, file: str, count: int) -> None:
    code, err = await _finish(await _start(_args(url, file)), 120)
    assert code == 0, err
    await _stored_once(url, {f"o{i}" for i in range(count)})


async def _half_done(url: str, tmp_path: Path) -> str:
    """A load stopped at a malformed line 100 (progress recorded, not done); the re-run
    with ``--on-error skip`` resumes and scans the stored ids of the earlier run."""
    lines = _records(TOTAL)
    lines[99] = "{not json"
    file = _write(tmp_path / "orders.jsonl", lines)
    code, err = await _finish(await _start(_args(url, file)), 60)
    assert code == 1 and "malformed" in err, err
    return file


async def _all_but_line_100_once(url: str) -> None:
    await _stored_once(url, {f"o{i}" for i in range(TOTAL) if i != 99})


# -- Defect 1: the patience runs out, and the message does not say what sets it --------


async def test_patience_spent_at_the_target_check_names_the_flags_to_change(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """The server stays paused from the load's first STREAM.INFO on, longer than the
    patience (``--ack-timeout x --max-attempts``): exit 1 (failed work), no traceback, and
    a message naming what to change to wait longer. Observed on 50bbd84: exit 1 with
    ``error: OperationTimeout: $JS.API.STREAM.INFO.ORDERS: timed out`` only: the note
    :func:`oncestream._retry.retrying` adds ("... sets this budget") is dropped by the
    CLI, which prints ``str(exc)``."""
    await _stream(nats_server.url)
    file = _write(tmp_path / "orders.jsonl", _records(TOTAL))
    relay = PauseAt(nats_server, b"STREAM.INFO.ORDERS")
    try:
        code, err = await _finish(await _start(_args(relay.url, file, *SHORT)), 60)
        assert relay.fired.is_set()
    finally:
        relay.close()
    assert code == 1, err
    assert "Traceback" not in err, err
    assert "--ack-timeout" in err and "--max-attempts" in err, err
    await _rerun_stores_each_once(nats_server.url, file, TOTAL)


async def test_patience_spent_in_the_resume_scan_names_the_flags_to_change(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """The resume scan of an earlier run's stored ids (its STREAM.INFO, the second of the
    re-run) outlasts the patience: exit 1 and the flags to change. Observed on 50bbd84:
    ``error: scanning stream 'ORDERS' for records of an earlier run:
    $JS.API.STREAM.INFO.ORDERS: timed out`` (plan_resume re-wraps the error with
    ``{exc}``, which drops the note, and the CLI drops notes as well)."""
    await _stream(nats_server.url)
    file = await _half_done(nats_server.url, tmp_path)
    relay = PauseAt(nats_server, b"STREAM.INFO.ORDERS", nth=2)
    try:
        code, err = await _finish(
            await _start(_args(relay.url, file, "--on-error", "skip", *SHORT)), 60
        )
        assert relay.fired.is_set()
    finally:
        relay.close()
    assert code == 1, err
    assert "Traceback" not in err, err
    assert "scanning stream 'ORDERS'" in err, err
    assert "--ack-timeout" in err and "--max-attempts" in err, err
    code, err = await _finish(await _start(_args(nats_server.url, file, "--on-error", "skip")), 120)
    assert code == 0, err
    await _all_but_line_100_once(nats_server.url)


# -- Defect 3: a killed server cuts the patience short at the reconnect limit ----------


async def test_a_server_killed_at_start_is_waited_for_the_whole_patience(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """The server is killed as the load's first STREAM.INFO reaches it and is back 40 s
    later; the run was given 20s x 5 = 100 s of patience, so it must ride that out (exit 0,
    every record once). Observed on 50bbd84: exit 1 after ~35 s with ``error: ConnectError:
    $JS.API.STREAM.INFO.ORDERS: ConnectionClosedError: nats: connection closed``: the
    connection gives up after max_reconnect_attempts (60) x reconnect_wait (0.5 s), which
    no flag of ``oncestream publish`` sets and the error does not name; the patience the
    user set is not what limits the wait for a killed (rather than paused) server."""
    await _stream(nats_server.url)
    file = _write(tmp_path / "orders.jsonl", _records(TOTAL))
    relay = PauseAt(nats_server, b"STREAM.INFO.ORDERS", kill=True)
    patient = ["--ack-timeout", "20s", "--max-attempts", "5"]
    try:
        proc = await _start(_args(relay.url, file, *patient))
        await relay.wait_fired()
        await asyncio.sleep(40)  # the outage: longer than the reconnect limit, within patience
        await asyncio.to_thread(nats_server.start)
        code, err = await _finish(proc, 120)
    finally:
        relay.close()
    assert code == 0, err
    await _stored_once(nats_server.url, {f"o{i}" for i in range(TOTAL)})
