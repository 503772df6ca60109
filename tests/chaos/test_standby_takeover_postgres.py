"""PostgreSQL: a standby takes over from an active worker frozen inside a pipelined batch.

Two pinned workers (``tests.chaos._standby_worker``) share a PostgreSQL ledger with
its default settings (a per-message handler's statements go out in pipeline mode),
and the database ends sessions idle in a transaction after 3 s
(``idle_in_transaction_session_timeout``, as docs/production.md says to set it). The
active worker SIGSTOPs itself inside a batch, right after its handler's statement for
one message: the batch's transaction is open and holds the owner row the standby's
fence must write. The server must end the frozen session (it is idle in a
transaction: nothing it received waits for more) so that the standby takes over
within the timeout + ``pinned_ttl`` + a few seconds, while the other is still frozen;
then every message is applied once, per-subject order is kept, and the frozen worker,
resumed, applies nothing after the new one began.

Before the writes ended every flush with a Sync, psycopg had sent the statement
without one: the frozen session stayed ``active`` and the standby never took over.

Frozen at the batch's end instead (``end``: its statements sent, waiting for their
results): psycopg used to wait behind a Flush sent after the block's Sync, which turns
the server's timeout off until the next Sync: the session stayed idle in its
transaction for good, and the standby never took over either.
"""

from __future__ import annotations

import asyncio
import signal
import time

import psycopg
import pytest

from oncestream import Connection
from oncestream.server import NatsServer
from tests.chaos.test_standby_takeover import (
    TTL,
    _check,
    _publish,
    _start_pair,
    unpinned_advisories,
)

pytestmark = pytest.mark.postgres

#: The database's idle_in_transaction_session_timeout, seconds.
IDLE_TIMEOUT = 3


def _effects(url: str) -> list[tuple[int, str, str, float]]:
    with psycopg.connect(url, autocommit=True) as con:
        rows = con.execute("SELECT seq, subject, worker, at FROM effects ORDER BY id").fetchall()
    return [(int(s), str(sub), str(w), float(at)) for s, sub, w, at in rows]


async def _wait_applied(url: str, count: int, timeout: float) -> list[tuple[int, str, str, float]]:
    deadline = time.monotonic() + timeout
    rows = _effects(url)
    while len({r[0] for r in rows}) < count and time.monotonic() < deadline:
        await asyncio.sleep(0.1)  # polling the shared database: no event crosses processes
        rows = _effects(url)
    return rows


@pytest.mark.parametrize("where", ["handler", "end"])
async def test_standby_takes_over_from_an_active_frozen_inside_a_pipelined_batch(
    nats_server: NatsServer, conn: Connection, make_stream, postgres_url: str, workers, where: str
) -> None:  # type: ignore[no-untyped-def]
    database = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(
            f'ALTER DATABASE "{database}" SET idle_in_transaction_session_timeout = '
            f"'{IDLE_TIMEOUT}s'"
        )
    url = postgres_url
    active, standby = await _start_pair(
        nats_server,
        conn,
        make_stream,
        url,
        workers,
        active_env={"FREEZE_AT": "320", "FREEZE_WHERE": where},
    )
    await _publish(conn, 10, 290)
    rows = await _wait_applied(url, 300, 30)
    assert len(rows) == 300 and {r[2] for r in rows} == {"A"}
    advisories = await unpinned_advisories(conn)
    await _publish(conn, 300, 100)
    active.wait_line("FROZEN", 20)  # stopped inside the batch applying seq 320 (or at its end)
    frozen_at = time.time()
    bound = IDLE_TIMEOUT + TTL + 5
    # The server moves a pin only to deliver a message: what is published while A's pin
    # holds may all go to A's open pull request, leaving none to pin the standby with
    # until ack_wait (test_standby_takeover.py's quiet-consumer test). So publish once
    # the pin has expired.
    await advisories.next_msg(timeout=TTL + 5)
    await _publish(conn, 400, 50)  # the server pins the standby to deliver these
    standby.wait_line("now the active one", bound)
    assert active.proc.poll() is None, "the frozen worker is gone"
    rows = await _wait_applied(url, 450, 30)
    first_b = min(r[3] for r in rows if r[2] == "B")
    took = first_b - frozen_at
    print(f"takeover from a worker frozen inside a pipelined batch: {took:.2f}s")
    assert took < bound
    active.signal(signal.SIGCONT)  # wakes up with its session gone and its pin moved on
    active.wait_line("no longer the active instance", 30)
    await _publish(conn, 450, 50)
    rows = await _wait_applied(url, 500, 60)
    _check(rows, 500)
    order = [r[2] for r in rows]
    assert order == sorted(order), "A applied after B had taken over"
    assert standby.proc.poll() is None, "the standby exited"
