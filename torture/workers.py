"""Worker processes of a trial (each is SIGKILLed / SIGSTOPped by the nemesis).

Usage: ``python -m torture.workers ROLE CONFIG_JSON``

Roles: ``publisher`` (:class:`oncestream.Publisher`), ``session``
(:class:`oncestream.ProducerSession`), ``processor`` (:class:`oncestream.Processor`
on a SQLite or PostgreSQL ledger; with ``cfg["pinned"]`` one of an active/standby
pair: a pinned priority group of their consumer), ``member`` (a
:class:`oncestream.GroupMember` named ``cfg["name"]`` of group ``cfg["consumer"]`` over
a partitioned stream, on one ledger URL shared by every partition, the trial's
PostgreSQL; the same effects table and rows as a processor, so the checker counts
every key once per database whoever applied it). Every acknowledged publish is appended to the
worker's history file (one JSON line, written with one ``write`` on an
``O_APPEND`` descriptor, so a SIGKILL never leaves half a line). A restarted
producer resumes from its own history: keys without a recorded ack are sent
again with the same msg id (the stream's duplicate window or the session's
sequence check keeps them single).

Start-up (connecting, the producer's or the consumer's set-up) is retried for up
to :data:`STARTUP_BUDGET` seconds, as a supervised service would be restarted: a
worker started while its servers are down or cut off must not count as a
failure. Each retry is a ``startup-retry`` history line. Past start-up, any
error ends the worker with exit 1 (the trial counts it as a failure), and so
does a publish that failed for good: a producer exits 0 only when every record
of its input was acknowledged.

Every worker runs the library's defaults (``PublisherOptions()``,
``ProcessorOptions()``) plus what the trial drew (:mod:`torture.options`, in
``cfg["options"]``): the SQLite Processor's ack policy, a batch handler (``COPY`` on
PostgreSQL), pruning, and handlers that fail for a share of the keys (dead-lettered
to ``DLQ``; a replayed copy, carrying ``Oncestream-Replay-Of``, is applied).

``cfg["sabotage"]`` breaks the system under test on purpose, for the campaign's
negative control (``python -m torture --sabotage KIND``): ``skip-position`` (the
session skips one position when it resumes) and ``apply-twice`` (the processor
applies one effect twice).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from oncestream import (
    ConnectOptions,
    GroupMember,
    GroupOptions,
    Message,
    NoResponders,
    OncestreamError,
    OperationTimeout,
    PostgresLedger,
    Processor,
    ProcessorOptions,
    ProducerSession,
    Publisher,
    PublisherOptions,
    PublishFailed,
    SQLiteLedger,
    connect,
    ledger_from_url,
)

from .nemesis import RERUN
from .options import failing_key

#: The effects table: no unique constraint, so an effect applied twice shows as two rows.
EFFECTS = "effects"
EFFECTS_COLUMNS = "(key TEXT NOT NULL, proc TEXT, wall REAL, mono REAL)"
T = TypeVar("T")


class History:
    """Append-only JSONL history of one process."""

    def __init__(self, path: str, process: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.process = process

    def write(self, op: str, key: str, result: str, **extra: Any) -> None:
        line = {
            "wall": time.time(),
            "mono": time.monotonic(),
            "process": self.process,
            "op": op,
            "key": key,
            "result": result,
            **extra,
        }
        os.write(self.fd, (json.dumps(line) + "\n").encode())


def acked_keys(path: str) -> set[str]:
    """Keys with an ``ack`` line in a history file."""
    keys: set[str] = set()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for raw in f:
                try:
                    line = json.loads(raw)
                except ValueError:
                    continue
                if line.get("op") == "ack":
                    keys.add(line["key"])
    return keys


def _connect_options(cfg: dict[str, Any]) -> ConnectOptions:
    return ConnectOptions(
        servers=tuple(cfg["servers"]),
        domain=cfg.get("domain"),
        reconnect_wait=0.2,
        max_reconnect_attempts=-1,
        connect_timeout=2.0,
        request_timeout=3.0,
        name=cfg["name"],
    )


#: Seconds a worker keeps retrying its start-up before it fails.
STARTUP_BUDGET = 60.0
#: What a publish raises when it failed for good past its retry horizon (an outage longer
#: than the defaults' 5 s x 5 attempts): the producer's contract is to stop and be run
#: again, resuming from what was acknowledged.
GAVE_UP = (PublishFailed, NoResponders, OperationTimeout)


async def _startup(history: History, what: str, make: Callable[[], Awaitable[T]]) -> T:
    """``make()`` until it succeeds, for at most :data:`STARTUP_BUDGET` seconds."""
    deadline = time.monotonic() + STARTUP_BUDGET
    while True:
        try:
            return await make()
        except OncestreamError as exc:
            if time.monotonic() > deadline:
                raise
            history.write("startup-retry", what, f"{type(exc).__name__}: {exc}"[:300])
            print(f"start-up of {what}: {type(exc).__name__}: {exc}; retrying", flush=True)
            await asyncio.sleep(0.5)


async def _paced(rate: float, i: int, t0: float) -> None:
    """Wait until record ``i`` is due: ``t0`` is the trial's start (wall clock), so a
    restarted producer catches up with the schedule instead of starting it again."""
    due = t0 + i / rate
    delay = due - time.time()
    if delay > 0:
        await asyncio.sleep(delay)


async def run_publisher(cfg: dict[str, Any]) -> int:
    name, count, rate = cfg["name"], int(cfg["count"]), float(cfg["rate"])
    history = History(cfg["history"], name)
    done = acked_keys(cfg["history"])
    # The defaults a user gets (ack timeout, attempts, in flight, ingest "auto": fast-ingest
    # batches where the stream allows them, as streams created by oncestream do).
    options = PublisherOptions(stream=cfg["stream"])

    async def started() -> tuple[Any, Publisher]:
        conn = await connect(_connect_options(cfg))
        try:
            pub = Publisher(conn, options)
            await pub.start()
        except BaseException:
            await conn.close()
            raise
        return conn, pub

    conn, pub = await _startup(history, name, started)
    subject = f"{cfg['subject']}.{name}"
    t0 = float(cfg.get("t0", time.time()))
    pending: set[asyncio.Future[Any]] = set()
    failed: list[str] = []
    errors: list[BaseException | None] = []
    for i in range(count):
        key = f"{name}-{i}"
        if key in done:
            continue
        sent = time.monotonic()
        fut = await pub.publish(subject, key.encode(), msg_id=key)

        def on_ack(f: asyncio.Future[Any], key: str = key, sent: float = sent) -> None:
            pending.discard(f)
            if f.cancelled() or f.exception() is not None:
                failed.append(key)
                errors.append(None if f.cancelled() else f.exception())
                history.write("fail", key, type(f.exception()).__name__)
                return
            ack = f.result()
            history.write(
                "ack",
                key,
                "ok",
                seq=ack.seq,
                dup=bool(ack.duplicate),
                latency=time.monotonic() - sent,
            )

        fut.add_done_callback(on_ack)
        pending.add(fut)
        await _paced(rate, i, t0)
    if pending:
        await asyncio.wait(pending, timeout=120)
    await pub.close()
    await conn.close()
    if failed or pending:
        print(f"publisher {name}: {len(failed)} publishes failed, {len(pending)} unanswered")
        kinds = sorted({type(e).__name__ for e in errors})
        if not pending and all(isinstance(e, GAVE_UP) for e in errors):
            print(f"gave up past the retry horizon ({', '.join(kinds)}); {RERUN}")
        return 1
    return 0


async def run_session(cfg: dict[str, Any]) -> int:
    name, count, rate = cfg["name"], int(cfg["count"]), float(cfg["rate"])
    history = History(cfg["history"], name)
    options = PublisherOptions()  # the defaults (the session sets the stream itself)

    async def started() -> tuple[Any, ProducerSession, int | None]:
        conn = await connect(_connect_options(cfg))
        try:
            session = ProducerSession(
                conn,
                stream=cfg["stream"],
                subject_prefix=cfg["subject"],
                producer_id=name,
                options=options,
            )
            resume = await session.start()
        except BaseException:
            await conn.close()
            raise
        return conn, session, resume

    conn, session, resume = await _startup(history, name, started)
    t0 = float(cfg.get("t0", time.time()))
    first = 0 if resume is None else resume + 1
    marker = Path(cfg.get("marker") or os.devnull)
    if cfg.get("sabotage") == "skip-position" and resume is not None and not marker.exists():
        # The negative control: a resume that skips one position (it was never sent).
        marker.write_text(f"{name}-{first}\n")
        history.write("sabotage", f"{name}-{first}", "skip-position")
        first += 1
    for i in range(first, count):
        sent = time.monotonic()
        try:
            ack = await session.publish(i, f"{name}-{i}".encode())
        except GAVE_UP as exc:
            history.write("fail", f"{name}-{i}", type(exc).__name__)
            print(f"session {name}: {type(exc).__name__}: {exc}")
            print(f"gave up past the retry horizon ({type(exc).__name__}); {RERUN}")
            await conn.close()
            return 1
        if ack is not None:
            history.write(
                "ack",
                f"{name}-{i}",
                "ok",
                seq=ack.seq,
                dup=bool(ack.duplicate),
                latency=time.monotonic() - sent,
            )
        await _paced(rate, i, t0)
    await session.close()
    await conn.close()
    return 0


#: The header a replayed dead letter carries (``oncestream dlq replay``).
REPLAY_OF = "Oncestream-Replay-Of"
#: Ledger-side backoff of handler failures in trials with failing keys: a user's pick, so
#: a failing message reaches the dead-letter stream within seconds (the default, 1 s, 5 s,
#: 30 s..., takes over a minute at max_deliver 5).
FAIL_BACKOFF = (0.5, 1.0)


def record_key(msg: Any) -> str:
    text = bytes(msg.data).decode()
    return str(json.loads(text)["id"]) if text.startswith("{") else text


def processor_options(cfg: dict[str, Any]) -> ProcessorOptions:
    """The library's defaults, plus what the trial drew (``cfg["options"]``)."""
    drawn = cfg.get("options") or {}
    changes: dict[str, Any] = {}
    if not cfg.get("pinned") and drawn.get("ack_policy") == "all":
        changes["ack_policy"] = "all"
    if drawn.get("prune") == "on":
        changes |= {"prune_interval": 1.0, "prune_grace": 1.0}
    if drawn.get("dead_letters", "none") != "none":
        changes |= {"dead_letter_stream": cfg.get("dlq", "DLQ"), "backoff": FAIL_BACKOFF}
    if cfg.get("pinned"):
        # The PostgreSQL pair is active/standby (a pinned priority group of their shared
        # consumer): a kill or pause of the active one is a takeover (after the default
        # pinned_ttl).
        changes |= {"priority_group": "torture", "policy": "pinned"}
    return ProcessorOptions(**changes)


def effect_handlers(cfg: dict[str, Any], history: History, postgres: bool) -> dict[str, Any]:
    """The handler a processor or member runs, as the trial drew it (``handler`` or
    ``batch_handler``): each message's key as a row of the effects table, in the
    transaction that records it in the ledger."""
    name, table = cfg["name"], cfg["table"]
    ph = "%s" if postgres else "?"
    columns = "(key, proc, wall, mono)"
    insert = f"INSERT INTO {table} {columns} VALUES ({ph}, {ph}, {ph}, {ph})"
    twice = cfg.get("sabotage_key") if cfg.get("sabotage") == "apply-twice" else None
    drawn = cfg.get("options") or {}
    share = float(drawn.get("fail_share") or 0.0)
    group = cfg["consumer"]

    def rows_of(msgs: list[Message]) -> list[tuple[str, str, float, float]]:
        rows = []
        for msg in msgs:
            key = record_key(msg)
            # A share of the keys fails in every processor's handler, until an operator
            # replays its dead letter: the replayed copy is applied.
            if failing_key(key, share) and REPLAY_OF not in (msg.headers or {}):
                raise ValueError(f"refused {key} ({group})")
            rows.append((key, name, time.time(), time.monotonic()))
            if key == twice:  # the negative control: one effect applied a second time
                rows.append((key, name, time.time(), time.monotonic()))
                history.write("sabotage", key, "apply-twice")
        return rows

    def handler(msg: Message, tx: Any) -> None:
        for row in rows_of([msg]):
            tx.execute(insert, row)

    def batch_handler(msgs: list[Message], tx: Any) -> None:
        rows = rows_of(msgs)
        if postgres:  # one COPY per transaction, committed with the ledger rows
            with tx.connection.cursor().copy(f"COPY {table} {columns} FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            tx.executemany(insert, rows)

    if drawn.get("handler") == "batch":
        return {"batch_handler": batch_handler}
    return {"handler": handler}


class _Stopper:
    """SIGTERM asks the current processor or member to stop, and one made later (during
    start-up) to stop as soon as it runs."""

    def __init__(self) -> None:
        self.stopping = False
        self.current: Processor | GroupMember | None = None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self._on_sigterm)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked by the harness

    def _on_sigterm(self) -> None:
        self.stopping = True
        if self.current is not None:
            self.current.request_stop()

    def watch(self, runner: Processor | GroupMember) -> None:
        self.current = runner
        if self.stopping:
            runner.request_stop()

    async def until_running(
        self, run: Awaitable[Any], ready: Awaitable[None], what: str, conn: Any
    ) -> asyncio.Task[Any]:
        """``run`` as a task once ``ready``, or once it ended cleanly (a SIGTERM during the
        set-up; the harness counts an end it did not ask for). An error before that is a
        start-up failure (its error, or :class:`OncestreamError`; the connection closed).
        A member's ``ready`` also comes when its ``run`` fails, so ``run`` decides."""
        running = asyncio.ensure_future(run)
        waiting = asyncio.ensure_future(ready)
        await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
        ended = running.done()
        if not ended and waiting.exception() is None:
            return running
        waiting.cancel()
        if ended and not running.cancelled() and running.exception() is None:
            return running
        try:
            await running  # ended before it was set up: its error is a start-up failure
            raise OncestreamError(f"the {what} ended during its set-up")
        finally:
            await conn.close()


async def run_processor(cfg: dict[str, Any]) -> int:
    name, table = cfg["name"], cfg["table"]
    history = History(cfg["history"], name)
    postgres = cfg["ledger"].startswith("postgresql://")
    handlers = effect_handlers(cfg, history, postgres)
    options = processor_options(cfg)
    stopper = _Stopper()  # also during start-up: stop as soon as it runs

    async def started() -> tuple[Any, asyncio.Task[Any]]:
        ledger: SQLiteLedger | PostgresLedger
        ledger = PostgresLedger(cfg["ledger"]) if postgres else SQLiteLedger(cfg["ledger"])
        ledger.open()
        _create_effects(ledger, table)
        conn = await connect(_connect_options(cfg))
        processor = Processor(
            conn, cfg["stream"], cfg["consumer"], ledger=ledger, options=options, **handlers
        )
        stopper.watch(processor)
        running = await stopper.until_running(
            processor.run(), processor.wait_running(timeout=3600), "processor", conn
        )
        return conn, running

    conn, running = await _startup(history, name, started)
    await running
    await conn.close()
    return 0


def _create_effects(ledger: Any, table: str) -> None:
    """The effects table in ``ledger``'s database, if it is not there yet."""
    with ledger.transaction() as tx:
        tx.execute(f"CREATE TABLE IF NOT EXISTS {table} {EFFECTS_COLUMNS}")


#: What a member logs of its partitions (taken, released, rebalanced) into its worker log.
GROUP_LOGGER = "oncestream.process._group"


async def run_member(cfg: dict[str, Any]) -> int:
    """One :class:`GroupMember` (``cfg["name"]``) of group ``cfg["consumer"]``: the
    library's defaults, plus the drawn options (:func:`processor_options`); stops on
    SIGTERM (its partitions released, its membership key deleted)."""
    name, table = cfg["name"], cfg["table"]
    history = History(cfg["history"], name)
    url = cfg["ledger"]
    if "{partition}" in url:
        raise OncestreamError(f"member {name}: the member role runs one shared ledger, got {url}")
    postgres = url.startswith("postgresql://")
    handlers = effect_handlers(cfg, history, postgres)
    options = processor_options(cfg)
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger(GROUP_LOGGER).setLevel(logging.INFO)
    stopper = _Stopper()

    async def started() -> tuple[Any, asyncio.Task[Any]]:
        ledger = ledger_from_url(url)  # the effects table, once (as run_processor does)
        ledger.open()
        try:
            _create_effects(ledger, table)
        finally:
            ledger.close()
        conn = await connect(_connect_options(cfg))
        member = GroupMember(
            conn,
            cfg["stream"],
            cfg["consumer"],
            ledger=url,
            options=GroupOptions(member=name),
            processor_options=options,
            **handlers,
        )
        stopper.watch(member)
        running = await stopper.until_running(
            member.run(), member.wait_running(timeout=3600), "member", conn
        )
        return conn, running

    conn, running = await _startup(history, name, started)
    await running
    await conn.close()
    return 0


ROLES = {
    "publisher": run_publisher,
    "session": run_session,
    "processor": run_processor,
    "member": run_member,
}


def main() -> int:
    role, raw = sys.argv[1], sys.argv[2]
    cfg = json.loads(raw)
    if role not in ("processor", "member"):  # producers stop on SIGTERM's default action
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    try:
        return asyncio.run(ROLES[role](cfg))
    except OncestreamError as exc:
        print(f"{role} {cfg.get('name')}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
