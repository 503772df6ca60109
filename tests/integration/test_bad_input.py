"""Bad input for every CLI command: one row per case (issue 10), run by tests/_cli_cases.py.

Each row names the command, what exists before, the exit code (0 ok, 1 the work
failed, 2 bad usage or configuration), a fragment of the message, and what must
hold afterwards. One nats-server serves every row; rows use their own stream names.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from oncestream import Connection, ConsumerNotFound, Processor, SQLiteLedger
from oncestream._message import Message
from oncestream.ledger import LedgerTx
from oncestream.publish import Publisher, PublisherOptions
from oncestream.server import NatsServer
from oncestream.streams import delete_stream
from tests import server_configs
from tests._cli_cases import Case, CliEnv, Outcome, Running, run_case

CONFIG, FAILED = 2, 1
ROOT = os.geteuid() == 0
NO_DAC_OVERRIDE = (
    "setpriv",
    "--bounding-set=-dac_override,-dac_read_search",
    "--inh-caps=-dac_override,-dac_read_search",
)


@pytest.fixture
def cli_env(module_nats_server: NatsServer, tmp_path: Path) -> CliEnv:
    return CliEnv(
        url=module_nats_server.url, tmp=tmp_path / "case", values={"port": module_nats_server.port}
    )


def _unchanged(name: str, content: str) -> Any:
    def check(env: CliEnv, _: Outcome) -> None:
        assert (env.tmp / name).read_text() == content, f"{name} was changed or deleted"

    return check


def _user_dir(env: CliEnv) -> None:
    env.file("work/thesis.tex", "years of work")
    env.file("work/jetstream/keep.txt", "mine")


def _user_dir_intact(env: CliEnv, _: Outcome) -> None:
    assert (env.tmp / "work/thesis.tex").read_text() == "years of work"
    assert (env.tmp / "work/jetstream/keep.txt").read_text() == "mine"
    assert sorted(p.name for p in (env.tmp / "work").iterdir()) == ["jetstream", "thesis.tex"]


def _sqlite(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE other (x INTEGER)")


def _ledger(path: Path, stream: str, rows: int) -> None:
    from oncestream.ledger import LedgerEntry, SQLiteLedger

    with SQLiteLedger(path) as ledger:
        tx = ledger.begin()
        tx.claim([LedgerEntry(stream=stream, seq=seq) for seq in range(1, rows + 1)])
        tx.commit()


def _mode_is(path: Path, mode: int) -> None:
    assert path.stat().st_mode & 0o777 == mode, f"{path} mode changed"


def _absent_stream(env: CliEnv, stream: str) -> None:
    assert env.messages(stream) == -1, f"stream {stream} was created"


def _count_is(env: CliEnv, stream: str, count: int) -> None:
    assert env.messages(stream) == count, f"stream {stream} does not hold {count} messages"


def _absent(path: Path) -> None:
    assert not path.exists(), f"{path} was created"


CONNECT = ["-s", "{url}"]
PROCESS = ["process", *CONNECT, "--ledger", "sqlite:///{tmp}/ledger.db"]


# -- issue 19: the stream, the server and the ledger failing under `process` ----------------

#: The effects table has no key, so an effect applied twice shows as a repeated row.
EFFECTS = "CREATE TABLE IF NOT EXISTS effects (seq INTEGER NOT NULL)"
HANDLER = (
    "def handle(msg, tx):\n    tx.execute('INSERT INTO effects (seq) VALUES (?)', (msg.seq,))\n"
)
SLOW_HANDLER = "import time\n\n" + HANDLER.replace(":\n", ":\n    time.sleep(0.01)\n", 1)


def _insert(msg: Message, tx: LedgerTx) -> None:
    tx.execute("INSERT INTO effects (seq) VALUES (?)", (msg.seq,))


def _worker(
    env: CliEnv, stream: str, count: int, *, url: str | None = None, slow: bool = False
) -> None:
    """Setup: the effects table in the ledger's database, the handler, ``count`` messages."""
    with sqlite3.connect(env.tmp / "ledger.db") as db:
        db.execute(EFFECTS)
    env.file("bi_fx.py", SLOW_HANDLER if slow else HANDLER)
    _publish(env, stream, count, url=url)


def _publish(env: CliEnv, stream: str, count: int, *, url: str | None = None) -> None:
    async def main() -> None:
        from oncestream import ConnectOptions, connect
        from oncestream.streams import StreamSpec, ensure_stream

        async with await connect(ConnectOptions(servers=(url or env.url,))) as conn:
            spec = StreamSpec(name=stream, subjects=(f"{stream.lower()}.>",))
            await ensure_stream(conn, spec)
            async with Publisher(conn, PublisherOptions(stream=stream)) as pub:
                first = (await conn.stream_info(stream))["state"]["last_seq"]
                for n in range(first + 1, first + count + 1):
                    await pub.publish(f"{stream.lower()}.x", b"%d" % n, msg_id=f"m{n}")

    asyncio.run(main())


def _effects(env: CliEnv) -> list[int]:
    with sqlite3.connect(env.tmp / "ledger.db") as db:
        return [row[0] for row in db.execute("SELECT seq FROM effects ORDER BY seq")]


def _exactly_once(count: int) -> Any:
    def check(env: CliEnv, _: Outcome) -> None:
        effects = _effects(env)
        assert effects == list(range(1, count + 1)), f"effects not exactly once: {effects}"

    return check


def _progress_lines(running: Running, after: float, before: float) -> int:
    return sum(1 for when, line in running.lines if after <= when <= before and "applied=" in line)


def _delete_stream_once_applied(stream: str, count: int) -> Any:
    def during(env: CliEnv, running: Running) -> None:
        running.wait_for(f"applied={count} ")
        env.run(lambda conn: delete_stream(conn, stream))

    return during


def _tail_then_delete(env: CliEnv, running: Running) -> None:
    running.wait_for("#1 ")
    env.run(lambda conn: delete_stream(conn, "BI_TGONE"))


def _own_server(env: CliEnv) -> None:
    """Setup: a server of the row's own (the row stops it), a slow worker's messages on it."""
    work = env.tmp / "own-nats"
    server = NatsServer(server_configs.jetstream(work), work_dir=work).start()
    env.defer(server.close)
    env.values["own"] = server
    env.values["own_url"] = server.url
    _worker(env, "BI_DOWN", 300, url=server.url, slow=True)


def _stop_server_then_sigterm(env: CliEnv, running: Running) -> None:
    # A transaction is acked, the next one is being applied. Transactions follow the
    # server's delivery chunks, not --batch: the count may go 0, 81, 181 (a CI run).
    running.wait_for(re.compile(r"applied=[1-9]\d* "))
    env.values["own"].stop()  # by its PID
    running.signal(signal.SIGTERM)


def _restart_and_finish(env: CliEnv, outcome: Outcome) -> None:
    """The server back on the same store: a worker finishes; every message applied once."""
    server: NatsServer = env.values["own"]
    server.start()

    async def finish() -> None:
        from oncestream import ConnectOptions, connect

        async with await connect(ConnectOptions(servers=(server.url,))) as conn:
            processor = Processor(
                conn, "BI_DOWN", "c", _insert, ledger=SQLiteLedger(env.tmp / "ledger.db")
            )
            task = asyncio.create_task(processor.run())
            try:
                await _until_all_acked(conn, "BI_DOWN", "c")
            finally:
                await processor.stop()
                await task

    asyncio.run(finish())
    _exactly_once(300)(env, outcome)


async def _until_all_acked(conn: Connection, stream: str, consumer: str) -> None:
    """Until the consumer has nothing pending and nothing unacknowledged (at most 60 s)."""
    async with asyncio.timeout(60):
        while True:
            info = await conn.consumer_info(stream, consumer)
            if not info["num_pending"] and not info["num_ack_pending"]:
                return
            await asyncio.sleep(0.2)


def _lock_held_by_another_process(env: CliEnv, running: Running) -> None:
    running.wait_for("applied=5 ")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            f"db = sqlite3.connect({str(env.tmp / 'ledger.db')!r}, isolation_level=None)\n"
            "db.execute('BEGIN IMMEDIATE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n"
            "db.execute('ROLLBACK')\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        _publish(env, "BI_LOCK", 5)
        noticed = running.wait_for("is locked by another process")
        # Progress lines go on while the batch waits for the lock (0.2 s apart).
        deadline = time.monotonic() + 10
        while _progress_lines(running, noticed, time.monotonic()) < 3:
            assert time.monotonic() < deadline, "no progress lines while the ledger is locked"
            time.sleep(0.1)
        assert "applied=10 " not in running.output()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
    running.wait_for("applied=10 ")
    running.signal(signal.SIGTERM)


def _ledger_with_rows(env: CliEnv, stream: str) -> None:
    from oncestream.ledger import LedgerEntry

    with SQLiteLedger(env.tmp / "ledger.db") as ledger:
        ledger.connection.execute(EFFECTS)
        tx = ledger.begin()
        tx.claim([LedgerEntry(stream=stream, seq=seq) for seq in range(1000, 3000)])
        tx.commit()
        ledger.connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _damaged(offset: int) -> Any:
    """Setup: a ledger whose bytes from ``offset`` on are garbage (16: the magic kept)."""

    def setup(env: CliEnv) -> None:
        stream = f"BI_BAD{offset}"
        _ledger_with_rows(env, stream)
        env.file("bi_fx.py", HANDLER)
        path = env.tmp / "ledger.db"
        size = path.stat().st_size
        with path.open("r+b") as handle:
            handle.seek(offset)
            handle.write(bytes((n * 37 + 11) % 256 for n in range(size - offset)))
        env.values["ledger_bytes"] = path.read_bytes()
        _publish(env, stream, 5)

    return setup


def _untouched_and_unacked(stream: str) -> Any:
    """Check: the damaged ledger is byte for byte as it was; the server acked nothing."""

    def check(env: CliEnv, _: Outcome) -> None:
        assert (env.tmp / "ledger.db").read_bytes() == env.values["ledger_bytes"]

        async def acked(conn: Connection) -> int:
            try:
                info = await conn.consumer_info(stream, "c")
            except ConsumerNotFound:  # the ledger failed before the consumer was set up
                return 0
            return int(info["ack_floor"]["stream_seq"])

        assert env.run(acked) == 0, "a message was acked without being applied"
        assert env.messages(stream) == 5

    return check


def _read_only_ledger(env: CliEnv) -> None:
    """Setup: a ledger on a read-only file system (root: a tmpfs remounted read-only;
    otherwise a directory without write permission, which stops a non-root user alike)."""
    where = env.tmp / "ro"
    where.mkdir()
    if ROOT:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], check=True)
        env.defer(lambda: subprocess.run(["umount", str(where)], check=True))
    env.file("bi_fx.py", HANDLER)
    ledger = SQLiteLedger(where / "ledger.db")
    with ledger:
        ledger.connection.execute(EFFECTS)
    env.values["ledger_bytes"] = (where / "ledger.db").read_bytes()
    if ROOT:
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    else:
        where.chmod(0o555)
        env.defer(lambda: where.chmod(0o755))
    env.stream("BI_RO")


def _nothing_applied(env: CliEnv, _: Outcome) -> None:
    assert _effects(env) == [], "a message was applied into a ledger that cannot record it"


def _read_only_untouched(env: CliEnv, outcome: Outcome) -> None:
    assert (env.tmp / "ro" / "ledger.db").read_bytes() == env.values["ledger_bytes"]
    cause = "is mounted read-only" if ROOT else "is not writable (permission denied)"
    assert cause in " ".join(outcome.output.split())

    async def consumers(conn: Connection) -> int:
        return int((await conn.stream_info("BI_RO"))["state"]["consumer_count"])

    assert env.run(consumers) == 0, "the consumer was created before the ledger was checked"


# -- issue 38 minors: literal messages, values out of range, flags that need another ----------

HUGE = "99999999999999999999"  # over 64 bits: orjson's "Integer exceeds 64-bit range" before
INT64_MAX = "9223372036854775807"


def _stream_with(stream: str, count: int, *consumers: str, **config: Any) -> Any:
    """Setup: ``stream`` with ``count`` messages and durable ``consumers`` (extra config)."""

    def setup(env: CliEnv) -> None:
        _publish(env, stream, count)
        for name in consumers:
            body = {
                "stream_name": stream,
                "config": {
                    "durable_name": name,
                    "ack_policy": "explicit",
                    "deliver_policy": "all",
                    **config,
                },
            }
            env.run(
                lambda conn, name=name, body=body: conn.api(
                    f"CONSUMER.CREATE.{stream}.{name}", body
                )
            )

    return setup


# -- issue 38: the consumer's max_deliver, the ledger's pruning, reset and the ledger ---------


def _limited_consumer(stream: str, max_deliver: int, count: int = 3) -> Any:
    """Setup: ``count`` messages, consumer ``c`` with ``max_deliver``, the effects handler."""

    def setup(env: CliEnv) -> None:
        _worker(env, stream, count)
        config = {"durable_name": "c", "ack_policy": "explicit", "max_deliver": max_deliver}
        body = {"stream_name": stream, "config": config}
        env.run(lambda conn: conn.api(f"CONSUMER.CREATE.{stream}.c", body))

    return setup


def _consumer_config(env: CliEnv, stream: str, name: str) -> dict[str, Any]:
    async def info(conn: Connection) -> dict[str, Any]:
        return dict(await conn.consumer_info(stream, name))

    return dict(env.run(info))


def _next_message_not_skipped(stream: str, name: str) -> Any:
    """Check: the consumer, reset past the end, still gets the next message stored."""

    def check(env: CliEnv, _: Outcome) -> None:
        assert _consumer_config(env, stream, name)["num_pending"] == 0
        _publish(env, stream, 1)
        after = _consumer_config(env, stream, name)
        assert after["num_pending"] == 1, f"the next message stored was skipped: {after}"

    return check


def _still_pending(stream: str, count: int) -> Any:
    """Check: the consumer holds all ``count`` messages still (nothing taken, nothing lost)."""

    def check(env: CliEnv, _: Outcome) -> None:
        async def left(conn: Connection) -> int:
            info = await conn.consumer_info(stream, "c")
            return int(info["num_pending"]) + int(info["num_ack_pending"])

        assert env.run(left) == count

    return check


def _filter_is(stream: str, name: str, wanted: str | None) -> Any:
    def check(env: CliEnv, _: Outcome) -> None:
        config = _consumer_config(env, stream, name)["config"]
        assert config.get("filter_subject") == wanted, config

    return check


def _no_consumer(stream: str, name: str) -> Any:
    def check(env: CliEnv, _: Outcome) -> None:
        async def names(conn: Connection) -> list[str]:
            info = await conn.stream_info(stream)
            assert info["state"]["consumer_count"] == 0
            return []

        env.run(names)

    return check


PINNED_5S = {
    "priority_groups": ["oncestream"],
    "priority_policy": "pinned_client",
    "priority_timeout": 5_000_000_000,
}
NOOP = "def handle(msg, tx):\n    pass\n"


#: Fails on the message whose body is 4, every time.
FAIL_ON_4 = HANDLER.replace(
    ":\n", ":\n    if msg.data == b'4':\n        raise ValueError('cannot apply 4')\n", 1
)


def _limit_set_while_running(env: CliEnv, running: Running) -> None:
    running.wait_for("applied=3 ")
    body = {"max_deliver": 3}

    async def edit(conn: Connection) -> Any:
        from oncestream.streams import update_consumer

        return await update_consumer(conn, "BI_MDRUN", "c", body)

    env.run(edit)
    _publish(env, "BI_MDRUN", 1)  # body 4: fails


def _three_applied_and_4_kept(env: CliEnv, _: Outcome) -> None:
    assert _effects(env) == [1, 2, 3]
    _still_pending("BI_MDRUN", 1)(env, _)


CASES = [
    # -- connection flags (every command) --------------------------------------------------
    Case("creds-missing", ["status", *CONNECT, "--creds", "/missing"], CONFIG, "/missing"),
    Case("server-url-empty", ["status", "-s", ""], CONFIG, "--server (or $NATS_URL) is empty"),
    Case("server-url-bad-scheme", ["status", "-s", "http://x:1"], CONFIG, "not a NATS URL"),
    Case("server-url-bad-port", ["status", "-s", "nats://127.0.0.1:99999"], CONFIG, "port"),
    Case(
        "domain-and-api-prefix",
        ["status", *CONNECT, "--domain", "a", "--api-prefix", "B.API"],
        CONFIG,
        "mutually exclusive",
    ),
    # -- demo: never delete what it did not create -----------------------------------------
    Case(
        "demo-data-dir-not-ours",
        ["demo", "--data-dir", "{tmp}/work", "-n", "1000"],
        CONFIG,
        "is not empty and is not a previous demo's directory",
        setup=_user_dir,
        check=_user_dir_intact,
    ),
    Case(
        "demo-data-dir-is-a-file",
        ["demo", "--data-dir", "{tmp}/f.txt"],
        CONFIG,
        "is not a directory",
        setup=lambda env: env.file("f.txt", "keep me"),
        check=_unchanged("f.txt", "keep me"),
    ),
    Case("demo-too-few-messages", ["demo", "-n", "10"], CONFIG, "messages must be >= 1000"),
    Case(
        "demo-negative-rate",
        ["demo", "--rate", "-5"],
        CONFIG,
        "rate (orders per second) must be a number per second from 0.001",
    ),
    Case("demo-zero-timeout", ["demo", "--timeout", "0"], CONFIG, "timeout must be > 0"),
    # -- server ----------------------------------------------------------------------------
    Case(
        "server-port-taken",
        ["server", "--port", "{port}", "--store-dir", "{tmp}/store"],
        FAILED,
        "port {port} on 127.0.0.1 is already in use",
        subprocess=True,
    ),
    Case(
        "server-store-dir-is-a-file",
        ["server", "--port", "-1", "--store-dir", "{tmp}/f.txt"],
        CONFIG,
        "is not a directory",
        setup=lambda env: env.file("f.txt", "keep me"),
        check=_unchanged("f.txt", "keep me"),
    ),
    Case("server-port-out-of-range", ["server", "--port", "70000"], CONFIG, "1..65535"),
    Case("server-bad-domain", ["server", "--port", "-1", "--domain", "a b"], CONFIG, "domain"),
    Case("server-bad-max-payload", ["server", "--max-payload", "-1"], CONFIG, "max_payload"),
    # -- missing streams and consumers are named -------------------------------------------
    Case(
        "status-missing-stream", ["status", "NOPE1", *CONNECT], CONFIG, "stream 'NOPE1' not found"
    ),
    Case(
        "status-missing-consumer",
        ["status", "BI_STATUS", "nope", *CONNECT],
        CONFIG,
        "consumer 'nope' not found on stream 'BI_STATUS'",
        setup=lambda env: env.stream("BI_STATUS"),
    ),
    Case(
        "doctor-missing-stream",
        ["doctor", "NOPE_DR", *CONNECT],
        CONFIG,
        "stream 'NOPE_DR' not found",
    ),
    Case(
        "doctor-missing-consumer",
        ["doctor", "BI_DR/nope", *CONNECT],
        CONFIG,
        "consumer 'nope' not found on stream 'BI_DR'",
        setup=lambda env: env.stream("BI_DR"),
    ),
    Case("doctor-two-slashes", ["doctor", "A/B/C", *CONNECT], CONFIG, "one '/' at most"),
    Case(
        "doctor-max-deliver-zero",
        ["doctor", *CONNECT, "--max-deliver", "0"],
        CONFIG,
        "--max-deliver must be an integer > 0, got '0'",
    ),
    Case(
        "doctor-dead-letter-stream-bad-name",
        ["doctor", *CONNECT, "--dead-letter-stream", "DL.Q"],
        CONFIG,
        "--dead-letter-stream: 'DL.Q' is not a valid stream name",
    ),
    Case("doctor-bad-stream-name", ["doctor", "A.B", *CONNECT], CONFIG, "not a valid stream name"),
    Case(
        "doctor-monitor-not-http",
        ["doctor", *CONNECT, "--monitor", "ftp://127.0.0.1:8222"],
        CONFIG,
        "--monitor must be the server's monitoring URL, http(s)://HOST:PORT",
    ),
    Case(
        "doctor-monitor-with-credentials",
        ["doctor", *CONNECT, "--monitor", "http://admin:s3cret@127.0.0.1:8222"],
        CONFIG,
        "(a URL with credentials)",
        absent=("s3cret",),
    ),
    Case(
        "doctor-monitor-at-the-client-port",
        ["doctor", *CONNECT, "--monitor", "http://127.0.0.1:{port}"],
        CONFIG,
        "--monitor http://127.0.0.1:{port} is not a NATS monitoring endpoint: GET "
        "http://127.0.0.1:{port}/varz answered a NATS INFO line, not HTTP: that is the "
        "server's client port",
    ),
    Case(
        "doctor-monitor-unreachable",
        ["doctor", *CONNECT, "--monitor", "http://127.0.0.1:1"],
        FAILED,
        "cannot read http://127.0.0.1:1/varz",
    ),
    Case(
        "doctor-bad-ack-timeout",
        ["doctor", *CONNECT, "--ack-timeout", "soon"],
        CONFIG,
        "--ack-timeout must be a duration",
    ),
    Case(
        "doctor-zero-task-max-failures",
        ["doctor", *CONNECT, "--task-max-failures", "0"],
        CONFIG,
        "--task-max-failures must be >= 1, got 0",
    ),
    Case(
        "doctor-server-unreachable",
        ["doctor", "-s", "nats://127.0.0.1:1"],
        FAILED,
        "cannot connect to NATS at nats://127.0.0.1:1",
    ),
    Case(
        "audit-missing-input",
        ["audit", "-i", "NOPE2", "-o", "stream:X", *CONNECT],
        CONFIG,
        "'NOPE2' not found",
    ),
    Case(
        "audit-missing-output-stream",
        ["audit", "-i", "BI_AUDIT", "-o", "stream:NOPE3", *CONNECT],
        CONFIG,
        "'NOPE3' not found",
        setup=lambda env: env.stream("BI_AUDIT"),
    ),
    Case(
        "process-missing-stream",
        [*PROCESS, "--stream", "NOPE4", "--consumer", "c", "--handler", "bi_ok:handle"],
        CONFIG,
        "stream 'NOPE4' not found",
        setup=lambda env: env.file("bi_ok.py", "def handle(msg, tx):\n    pass\n"),
        in_tmp=True,
    ),
    # -- process: caught at start, before any message -------------------------------------
    Case(
        "process-dead-letter-stream-not-capturing",
        [
            *PROCESS,
            "--stream",
            "BI_DLQ_IN",
            "--consumer",
            "c",
            "--handler",
            "bi_ok2:handle",
            "--dead-letter-stream",
            "BI_WORK",
        ],
        CONFIG,
        "dead-letter stream 'BI_WORK' does not capture the dead-letter subject 'BI_WORK.BI_DLQ_IN'",
        setup=lambda env: (
            env.file("bi_ok2.py", "def handle(msg, tx):\n    pass\n"),
            env.stream("BI_DLQ_IN", "bi.dlq.in"),
            env.stream("BI_WORK", "bi.work.>"),
        ),
        in_tmp=True,
    ),
    Case(
        "process-handler-wrong-signature",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "bi_sig:handle"],
        CONFIG,
        "must accept (msg, tx); handle(msg) does not",
        setup=lambda env: env.file("bi_sig.py", "def handle(msg):\n    pass\n"),
        in_tmp=True,
    ),
    Case(
        "process-handler-raises-on-import",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "bi_boom:handle"],
        CONFIG,
        "cannot import 'bi_boom'",
        setup=lambda env: env.file("bi_boom.py", "raise RuntimeError('boom at import')\n"),
        in_tmp=True,
    ),
    Case(
        "process-handler-exits-on-import",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "bi_exit:handle"],
        CONFIG,
        "cannot import 'bi_exit': SystemExit(3)",
        setup=lambda env: env.file("bi_exit.py", "import sys\nsys.exit(3)\n"),
        in_tmp=True,
    ),
    Case(
        "process-handler-unknown-module",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "bi_nonexistent:f"],
        CONFIG,
        "cannot import 'bi_nonexistent'",
    ),
    Case(
        "process-handler-unknown-attribute",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "bi_attr:nope"],
        CONFIG,
        "has no attribute 'nope'",
        setup=lambda env: env.file("bi_attr.py", "x = 1\n"),
        in_tmp=True,
    ),
    # -- audit: one-line errors, never a traceback -----------------------------------------
    Case(
        "audit-parquet-not-parquet",
        ["audit", "-i", "BI_AUD2", "-o", "parquet:{tmp}/notes.txt", *CONNECT],
        CONFIG,
        "cannot be read as Parquet",
        setup=lambda env: (env.stream("BI_AUD2"), env.file("notes.txt", "not parquet\n")),
        check=_unchanged("notes.txt", "not parquet\n"),
    ),
    Case(
        "audit-sqlite-missing-table",
        ["audit", "-i", "BI_AUD3", "-o", "sql:sqlite:///{tmp}/out.db#orders", *CONNECT],
        CONFIG,
        "no table 'orders'",
        setup=lambda env: (env.stream("BI_AUD3"), _sqlite(env.tmp / "out.db")),
    ),
    Case(
        "audit-sqlite-missing-file",
        ["audit", "-i", "BI_AUD4", "-o", "sql:sqlite:///{tmp}/nope.db#orders", *CONNECT],
        CONFIG,
        "does not exist",
        setup=lambda env: env.stream("BI_AUD4"),
        check=lambda env, _: _absent(env.tmp / "nope.db"),
    ),
    Case(
        "audit-postgres-unreachable",
        [
            "audit",
            "-i",
            "BI_AUD5",
            "-o",
            "sql:postgresql://app:pw-SECRET@127.0.0.1:1/db#t",
            *CONNECT,
        ],
        FAILED,
        "cannot read sql output postgresql://app:***@127.0.0.1:1/db",
        setup=lambda env: env.stream("BI_AUD5"),
        absent=("pw-SECRET",),
    ),
    # -- status --ledger: read-only, named, echoed as given --------------------------------
    Case(
        "status-ledger-typo-is-not-created",
        ["status", "BI_ST", "c", *CONNECT, "--ledger", "sqlite:///{tmp}/typo.db"],
        CONFIG,
        "no ledger at",
        setup=lambda env: (env.stream("BI_ST"), env.consumer("BI_ST", "c")),
        check=lambda env, _: _absent(env.tmp / "typo.db"),
    ),
    Case(
        "status-ledger-without-stream",
        ["status", *CONNECT, "--ledger", "sqlite:///{tmp}/l.db"],
        CONFIG,
        "--ledger needs STREAM",
    ),
    Case(
        "status-ledger-not-a-ledger",
        ["status", "BI_ST2", *CONNECT, "--ledger", "sqlite:///{tmp}/other.db"],
        CONFIG,
        "is not an oncestream ledger",
        setup=lambda env: (env.stream("BI_ST2"), _sqlite(env.tmp / "other.db")),
    ),
    Case(
        "status-ledger-unsupported-scheme-echoed",
        ["status", "BI_ST3", *CONNECT, "--ledger", "mysql://x@y/z"],
        CONFIG,
        "'mysql://x@y/z' has unsupported scheme 'mysql'",
        setup=lambda env: env.stream("BI_ST3"),
    ),
    Case(
        "status-ledger-with-stream-only-is-used",
        ["status", "BI_ST4", *CONNECT, "--ledger", "sqlite:///{tmp}/ledger.db", "--json"],
        0,
        '"ledger_applied": 2',
        setup=lambda env: (env.stream("BI_ST4"), _ledger(env.tmp / "ledger.db", "BI_ST4", 2)),
    ),
    Case(
        "process-ledger-directory-missing",
        [
            "process",
            *CONNECT,
            "--ledger",
            "sqlite:///{tmp}/no/such/dir/l.db",
            "--stream",
            "BI_P",
            "--consumer",
            "c",
            "--handler",
            "bi_ok3:handle",
        ],
        CONFIG,
        "does not exist",
        setup=lambda env: env.file("bi_ok3.py", "def handle(msg, tx):\n    pass\n"),
        in_tmp=True,
    ),
    Case(
        "process-ledger-not-sqlite",
        [
            "process",
            *CONNECT,
            "--ledger",
            "sqlite:///{tmp}/notes.txt",
            "--stream",
            "BI_P",
            "--consumer",
            "c",
            "--handler",
            "bi_ok4:handle",
        ],
        CONFIG,
        "is not an SQLite database",
        setup=lambda env: (
            env.file("bi_ok4.py", "def handle(msg, tx):\n    pass\n"),
            env.file("notes.txt", "my notes\n"),
        ),
        check=_unchanged("notes.txt", "my notes\n"),
        in_tmp=True,
    ),
    Case(
        "process-filter-matches-nothing",
        [
            *PROCESS,
            "--stream",
            "BI_FILT",
            "--consumer",
            "c",
            "--handler",
            "bi_ok5:handle",
            "--filter-subject",
            "other.>",
        ],
        CONFIG,
        "filter subject 'other.>' matches nothing stream 'BI_FILT' stores",
        setup=lambda env: (
            env.file("bi_ok5.py", "def handle(msg, tx):\n    pass\n"),
            env.stream("BI_FILT", "bi.filt.>"),
        ),
        in_tmp=True,
    ),
    Case(
        "audit-negative-samples",
        ["audit", "-i", "BI_AUD6", "-o", "stream:BI_AUD6", "--samples", "-1", *CONNECT],
        CONFIG,
        "--samples must be >= 0",
    ),
    # -- topology ----------------------------------------------------------------------------
    Case(
        "topology-dir-is-a-file",
        ["topology", "up", "hub-leaf", "--dir", "{tmp}/afile"],
        CONFIG,
        "not a directory",
        setup=lambda env: env.file("afile", "keep me", mode=0o644),
        check=lambda env, _: _mode_is(env.tmp / "afile", 0o644),
    ),
    Case(
        "topology-negative-timeout",
        ["topology", "up", "cluster3", "--dir", "{tmp}/t", "--timeout", "-1"],
        CONFIG,
        "--timeout must be > 0",
        check=lambda env, _: _absent(env.tmp / "t"),
    ),
    Case(
        "topology-dir-not-ours",
        ["topology", "up", "hub-leaf", "--dir", "{tmp}"],
        CONFIG,
        "holds files topology did not create (thesis.tex)",
        setup=lambda env: env.file("thesis.tex", "years of work", mode=0o644),
        check=lambda env, _: (
            _unchanged("thesis.tex", "years of work")(env, _),
            _mode_is(env.tmp, 0o755),
        ),
    ),
    Case("topology-unknown-kind", ["topology", "up", "bogus"], CONFIG, "bogus"),
    Case("topology-down-nothing", ["topology", "down", "--dir", "{tmp}"], CONFIG, "no topology"),
    Case(
        "topology-state-file-corrupt",
        ["topology", "status", "--dir", "{tmp}"],
        CONFIG,
        "is not a topology state file",
        setup=lambda env: env.file("topology.json", "{not json"),
        check=_unchanged("topology.json", "{not json"),
    ),
    Case(
        "process-negative-progress",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "x:y", "--progress", "-5"],
        CONFIG,
        "--progress must be 0 (no progress lines) or from 0.1 to 86400 seconds, got -5",
    ),
    # -- issue 19: the stream, the server and the ledger failing under a running process ---
    Case(
        "process-stream-deleted",
        [
            *PROCESS,
            "--stream",
            "BI_GONE",
            "--consumer",
            "c",
            "--handler",
            "bi_fx:handle",
            "--progress",
            "0.2",
        ],
        CONFIG,
        "StreamNotFound: stream 'BI_GONE' was deleted (and consumer 'c' with it)",
        setup=lambda env: _worker(env, "BI_GONE", 3),
        during=_delete_stream_once_applied("BI_GONE", 3),
        check=_exactly_once(3),
        subprocess=True,
        in_tmp=True,
    ),
    Case(
        "tail-follow-stream-deleted",
        ["tail", "BI_TGONE", *CONNECT, "--follow"],
        CONFIG,
        "stream 'BI_TGONE' was deleted while tail was reading it",
        setup=lambda env: _publish(env, "BI_TGONE", 1),
        during=_tail_then_delete,
        subprocess=True,
    ),
    Case(
        "process-sigterm-while-server-down",
        [
            "process",
            "-s",
            "{own_url}",
            "--ledger",
            "sqlite:///{tmp}/ledger.db",
            "--stream",
            "BI_DOWN",
            "--consumer",
            "c",
            "--handler",
            "bi_fx:handle",
            "--batch",
            "100",
            "--ack-wait",
            "2s",
            "--progress",
            "0.2",
        ],
        0,
        "stopping while the server is unreachable",
        setup=_own_server,
        during=_stop_server_then_sigterm,
        check=_restart_and_finish,
        subprocess=True,
        in_tmp=True,
        timeout=60,
    ),
    Case(
        "process-ledger-locked-by-another-process",
        [
            *PROCESS,
            "--stream",
            "BI_LOCK",
            "--consumer",
            "c",
            "--handler",
            "bi_fx:handle",
            "--progress",
            "0.2",
        ],
        0,
        "the ledger {tmp}/ledger.db is locked by another process",
        setup=lambda env: _worker(env, "BI_LOCK", 5),
        during=_lock_held_by_another_process,
        check=_exactly_once(10),
        subprocess=True,
        in_tmp=True,
    ),
    Case(
        "process-ledger-corrupt-pages",
        [*PROCESS, "--stream", "BI_BAD4096", "--consumer", "c", "--handler", "bi_fx:handle"],
        CONFIG,
        # The first read of the damaged pages names it (the registry, since wave 4).
        "LedgerUnusable: SQLite ledger {tmp}/ledger.db cannot be used (read the registered "
        "consumers: database disk image is malformed): the file is damaged",
        setup=_damaged(4096),
        check=_untouched_and_unacked("BI_BAD4096"),
        subprocess=True,  # before the fix it retried forever: the timeout ends it
        in_tmp=True,
        timeout=30,
    ),
    Case(
        "process-ledger-corrupt-header",
        [*PROCESS, "--stream", "BI_BAD16", "--consumer", "c", "--handler", "bi_fx:handle"],
        CONFIG,
        "SQLite ledger {tmp}/ledger.db cannot be used (open: file is not a database)",
        setup=_damaged(16),
        check=_untouched_and_unacked("BI_BAD16"),
        subprocess=True,
        in_tmp=True,
        timeout=30,
    ),
    Case(
        "process-ledger-read-only",
        [
            "process",
            *CONNECT,
            "--ledger",
            "sqlite:///{tmp}/ro/ledger.db",
            "--stream",
            "BI_RO",
            "--consumer",
            "c",
            "--handler",
            "bi_fx:handle",
        ],
        CONFIG,
        "--ledger sqlite:///{tmp}/ro/ledger.db: the SQLite ledger {tmp}/ro/ledger.db cannot be "
        "written",
        setup=_read_only_ledger,
        check=_read_only_untouched,
        subprocess=True,
        in_tmp=True,
    ),
    Case(
        "process-ledger-file-not-writable",
        [*PROCESS, "--stream", "BI_RO2", "--consumer", "c", "--handler", "bi_fx:handle"],
        CONFIG,
        "the SQLite ledger {tmp}/ledger.db cannot be written: {tmp}/ledger.db is not writable "
        "(permission denied)",
        setup=lambda env: (
            _worker(env, "BI_RO2", 1),
            (env.tmp / "ledger.db").chmod(0o444),
        ),
        check=_nothing_applied,
        # root writes any file: drop the capabilities that let it, so the row runs in CI too
        subprocess=True,
        prefix=NO_DAC_OVERRIDE if ROOT else (),
        in_tmp=True,
    ),
    Case(
        "process-handler-not-module-colon-function",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "justaname"],
        CONFIG,
        "module:function",
    ),
    # -- issue 38: messages are printed as they are, never as rich markup -------------------
    Case(
        "error-message-keeps-brackets",
        ["status", "BI_[bold]MK[x]", *CONNECT],
        CONFIG,
        "stream 'BI_[bold]MK[x]' not found",
    ),
    Case(
        "table-cell-keeps-brackets",
        ["stream", "info", "BI_MK2", *CONNECT],
        0,
        "bi.[bold].[x]",
        setup=lambda env: env.stream("BI_MK2", "bi.[bold].[x]"),
    ),
    Case(
        "title-and-line-keep-brackets",
        ["stream", "add", "BI_[x]MK3", "--subjects", "bi.mk3.[bold]", *CONNECT],
        0,
        "created stream BI_[x]MK3 stream BI_[x]MK3",
    ),
    # -- issue 38: consumer reset --to-seq past the end is clamped, as Kafka does ---------
    Case(
        "reset-to-seq-past-the-end-is-clamped",
        ["consumer", "reset", "BI_RS", "c", "--to-seq", "100", "--force", *CONNECT],
        0,
        "reset consumer BI_RS/c to seq 4 (--to-seq 100 is past the stream's end: clamped to "
        "its end, seq 4, the next message stored",
        setup=_stream_with("BI_RS", 3, "c"),
        check=_next_message_not_skipped("BI_RS", "c"),
    ),
    Case(
        "reset-to-seq-past-the-end-dry-run-says-so",
        ["consumer", "reset", "BI_RS2", "c", "--to-seq", "100", "--dry-run", *CONNECT],
        0,
        "would reset consumer BI_RS2/c to seq 4 (seq 100) (--to-seq 100 is past the stream's "
        "end: clamped",
        setup=_stream_with("BI_RS2", 3, "c"),
    ),
    Case(
        "reset-to-seq-over-64-bits",
        ["consumer", "reset", "BI_RS3", "c", "--to-seq", HUGE, "--force", *CONNECT],
        CONFIG,
        f"--to-seq must be an integer at most {INT64_MAX} (a 64-bit integer",
        setup=_stream_with("BI_RS3", 3, "c"),
    ),
    Case(
        "reset-to-time-over-int64-nanoseconds",
        ["consumer", "reset", "BI_RS3", "c", "--to-time", "99999999999h", "--dry-run", *CONNECT],
        CONFIG,
        "--to-time must be at most 9223372036s (about 292 years",
        setup=_stream_with("BI_RS3", 3, "c"),
    ),
    Case(
        "reset-to-time-year-1",
        [
            "consumer",
            "reset",
            "BI_RS4",
            "c",
            "--to-time",
            "0001-01-01T00:00:00Z",
            "--dry-run",
            *CONNECT,
        ],
        0,
        "would reset consumer BI_RS4/c to seq 1",
        setup=_stream_with("BI_RS4", 3, "c"),
    ),
    # -- issue 38: a filter must match something the stream stores --------------------------
    Case(
        "edit-filter-outside-the-stream",
        ["consumer", "edit", "BI_EF", "c", "--filter", "other.>", *CONNECT],
        CONFIG,
        "--filter 'other.>' matches nothing stream 'BI_EF' stores (its subjects: bi_ef.>)",
        setup=_stream_with("BI_EF", 1, "c"),
        check=_filter_is("BI_EF", "c", None),
    ),
    Case(
        "add-filter-outside-the-stream",
        ["consumer", "add", "BI_AF", "c", "--filter", "other.x", *CONNECT],
        CONFIG,
        "--filter 'other.x' matches nothing stream 'BI_AF' stores (its subjects: bi_af.>)",
        setup=_stream_with("BI_AF", 1),
        check=_no_consumer("BI_AF", "c"),
    ),
    # -- issue 38: --takeover-after needs --standby and the consumer's setting ---------------
    Case(
        "process-takeover-after-without-standby",
        [
            *PROCESS,
            "--stream",
            "BI_TK",
            "--consumer",
            "c",
            "--handler",
            "bi_tk:handle",
            "--takeover-after",
            "5s",
        ],
        CONFIG,
        "--takeover-after 5s applies only with --standby",
        setup=lambda env: env.file("bi_tk.py", NOOP),
        in_tmp=True,
    ),
    Case(
        "process-priority-group-without-standby",
        [
            *PROCESS,
            "--stream",
            "BI_TK",
            "--consumer",
            "c",
            "--handler",
            "bi_tk:handle",
            "--priority-group",
            "g",
        ],
        CONFIG,
        "--priority-group g applies only with --standby or --overflow-min-pending",
        setup=lambda env: env.file("bi_tk.py", NOOP),
        in_tmp=True,
    ),
    Case(
        "process-takeover-after-differs-from-the-consumer",
        [
            *PROCESS,
            "--stream",
            "BI_TK2",
            "--consumer",
            "c",
            "--handler",
            "bi_tk:handle",
            "--standby",
            "--takeover-after",
            "3s",
        ],
        CONFIG,
        "consumer BI_TK2/c takes over after 5s (its priority_timeout), not 3s (pinned_ttl, CLI "
        "--takeover-after): run with --takeover-after 5s, or change it for every instance with "
        "`oncestream consumer edit BI_TK2 c --takeover-after 3s`",
        setup=lambda env: (
            env.file("bi_tk.py", NOOP),
            _stream_with("BI_TK2", 1, "c", **PINNED_5S)(env),
        ),
        in_tmp=True,
    ),
    Case(
        "process-standby-default-differs-from-the-consumer",
        [
            *PROCESS,
            "--stream",
            "BI_TK3",
            "--consumer",
            "c",
            "--handler",
            "bi_tk:handle",
            "--standby",
        ],
        CONFIG,
        "takes over after 5s (its priority_timeout), not 10s",
        setup=lambda env: (
            env.file("bi_tk.py", NOOP),
            _stream_with("BI_TK3", 1, "c", **PINNED_5S)(env),
        ),
        in_tmp=True,
    ),
    Case(
        "consumer-edit-takeover-after",
        ["consumer", "edit", "BI_TK4", "c", "--takeover-after", "3s", *CONNECT],
        0,
        "priority_timeout: 5s -> 3s",
        setup=_stream_with("BI_TK4", 1, "c", **PINNED_5S),
    ),
    Case(
        "consumer-edit-takeover-after-not-pinned",
        ["consumer", "edit", "BI_TK5", "c", "--takeover-after", "3s", *CONNECT],
        CONFIG,
        "--takeover-after applies to a consumer of a --standby group (priority policy "
        "pinned_client); BI_TK5/c has priority policy 'none'",
        setup=_stream_with("BI_TK5", 1, "c"),
    ),
    # -- issue 38: rates and intervals in a sensible range; no silent wait -----------------
    Case(
        "demo-rate-too-slow",
        ["demo", "--rate", "1e-9"],
        CONFIG,
        "rate (orders per second) must be a number per second from 0.001 (one every 1,000 s)",
    ),
    Case("demo-rate-nan", ["demo", "--rate", "nan"], CONFIG, "--rate must be a finite number"),
    Case("demo-timeout-inf", ["demo", "--timeout", "inf"], CONFIG, "--timeout must be a finite"),
    Case(
        "status-watch-interval-nan",
        ["status", "--watch", "--interval", "nan", "--count", "2", *CONNECT],
        CONFIG,
        "--interval must be a finite number, got nan",
        subprocess=True,  # before the fix it waited forever: the timeout ends it
        timeout=20,
    ),
    Case(
        "status-watch-interval-huge",
        ["status", "--watch", "--interval", "1e300", "--count", "2", *CONNECT],
        CONFIG,
        "--interval must be from 0.1 to 3600 seconds, got 1e+300",
        subprocess=True,
        timeout=20,
    ),
    Case(
        "process-progress-nan",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "x:y", "--progress", "nan"],
        CONFIG,
        "--progress must be a finite number",
    ),
    # -- issue 38: integers over 64 bits and huge durations, every verb -----------------------
    Case(
        "stream-add-max-msgs-over-64-bits",
        ["stream", "add", "BI_I1", "--subjects", "bi.i1", "--max-msgs", HUGE, *CONNECT],
        CONFIG,
        "--max-msgs must be an integer at most",
        check=lambda env, _: _absent_stream(env, "BI_I1"),
    ),
    Case(
        "stream-add-max-msg-size-over-int32",
        ["stream", "add", "BI_I2", "--subjects", "bi.i2", "--max-msg-size", "4294967296", *CONNECT],
        CONFIG,
        "--max-msg-size must be an integer from -1 to 2147483647, got 4294967296",
        check=lambda env, _: _absent_stream(env, "BI_I2"),
    ),
    Case(
        "stream-add-dupe-window-over-int64-nanoseconds",
        [
            "stream",
            "add",
            "BI_I3",
            "--subjects",
            "bi.i3",
            "--dupe-window",
            "999999999999h",
            *CONNECT,
        ],
        CONFIG,
        "--dupe-window must be at most 9223372036s",
        check=lambda env, _: _absent_stream(env, "BI_I3"),
    ),
    Case(
        "stream-get-seq-over-64-bits",
        ["stream", "get", "BI_I4", HUGE, *CONNECT],
        CONFIG,
        "SEQ must be an integer at most",
        setup=lambda env: env.stream("BI_I4"),
    ),
    Case(
        "stream-purge-seq-over-64-bits",
        ["stream", "purge", "BI_I5", "--seq", HUGE, "--force", *CONNECT],
        CONFIG,
        "--seq must be an integer at most",
        setup=lambda env: _publish(env, "BI_I5", 2),
        check=lambda env, _: _count_is(env, "BI_I5", 2),
    ),
    Case(
        "consumer-add-max-deliver-over-64-bits",
        ["consumer", "add", "BI_I6", "c", "--max-deliver", HUGE, *CONNECT],
        CONFIG,
        "--max-deliver must be an integer at most",
        setup=lambda env: env.stream("BI_I6"),
        check=_no_consumer("BI_I6", "c"),
    ),
    Case(
        "consumer-add-deliver-seq-over-64-bits",
        ["consumer", "add", "BI_I6", "c", "--deliver", HUGE, *CONNECT],
        CONFIG,
        "start seq must be an integer at most",
        setup=lambda env: env.stream("BI_I6"),
        check=_no_consumer("BI_I6", "c"),
    ),
    Case(
        "consumer-add-deliver-time-over-int64-nanoseconds",
        ["consumer", "add", "BI_I6", "c", "--deliver", "99999999999h", *CONNECT],
        CONFIG,
        "--deliver must be at most 9223372036s",
        setup=lambda env: env.stream("BI_I6"),
        check=_no_consumer("BI_I6", "c"),
    ),
    Case(
        "consumer-add-ack-wait-zero",
        ["consumer", "add", "BI_I6", "c", "--ack-wait", "0s", *CONNECT],
        CONFIG,
        "--ack-wait must be more than 0, got '0s'",
        setup=lambda env: env.stream("BI_I6"),
        check=_no_consumer("BI_I6", "c"),
    ),
    Case(
        "consumer-edit-ack-wait-over-int64-nanoseconds",
        ["consumer", "edit", "BI_I7", "c", "--ack-wait", "99999999999999h", *CONNECT],
        CONFIG,
        "--ack-wait must be at most 9223372036s",
        setup=_stream_with("BI_I7", 1, "c"),
    ),
    Case(
        "consumer-edit-backoff-empty-element",
        ["consumer", "edit", "BI_I7", "c", "--backoff", "1s,,2s", *CONNECT],
        CONFIG,
        "--backoff must be durations separated by commas",
        setup=_stream_with("BI_I7", 1, "c"),
    ),
    Case(
        "consumer-reset-empty-ledger",
        ["consumer", "reset", "BI_I7", "c", "--to-start", "--ledger", "", "--force", *CONNECT],
        CONFIG,
        "--ledger must be the Processor's ledger URL or path",
        setup=_stream_with("BI_I7", 1, "c"),
    ),
    Case(
        "consumer-edit-max-ack-pending-over-64-bits",
        ["consumer", "edit", "BI_I7", "c", "--max-ack-pending", HUGE, *CONNECT],
        CONFIG,
        "--max-ack-pending must be an integer at most",
        setup=_stream_with("BI_I7", 1, "c"),
    ),
    Case(
        "tail-from-seq-over-64-bits",
        ["tail", "BI_I8", "--from", HUGE, *CONNECT],
        CONFIG,
        "--from must be an integer at most",
        setup=lambda env: _publish(env, "BI_I8", 1),
    ),
    Case(
        "tail-from-time-over-int64-nanoseconds",
        ["tail", "BI_I8", "--from", "99999999999h", *CONNECT],
        CONFIG,
        "--from must be at most 9223372036s",
        setup=lambda env: _publish(env, "BI_I8", 1),
    ),
    Case(
        "dlq-replay-in-over-int64-nanoseconds",
        ["dlq", "replay", "BI_I9", "--all", "--in", "99999999999h", "--force", *CONNECT],
        CONFIG,
        "--in must be at most 9223372036s",
        setup=lambda env: env.stream("BI_I9"),
    ),
    Case(
        "process-max-deliver-over-64-bits",
        [
            *PROCESS,
            "--stream",
            "BI_P",
            "--consumer",
            "c",
            "--handler",
            "x:y",
            "--max-deliver",
            HUGE,
        ],
        CONFIG,
        "--max-deliver must be an integer at most",
    ),
    Case(
        "process-start-time-over-int64-nanoseconds",
        [
            *PROCESS,
            "--stream",
            "BI_I10",
            "--consumer",
            "c",
            "--handler",
            "bi_tk:handle",
            "--start-time",
            "99999999999h",
        ],
        CONFIG,
        "--start-time must be at most 9223372036s",
        setup=lambda env: (env.file("bi_tk.py", NOOP), env.stream("BI_I10")),
        in_tmp=True,
    ),
    Case(
        "audit-samples-over-64-bits",
        ["audit", "-i", "BI_I11", "-o", "stream:BI_I11", "--samples", HUGE, *CONNECT],
        CONFIG,
        "--samples must be an integer at most",
    ),
    # -- issue 38: max_deliver, pruning flags, reset with the ledger ------------------------
    Case(
        "process-prune-interval-not-a-duration",
        [
            *PROCESS,
            "--stream",
            "BI_P",
            "--consumer",
            "c",
            "--handler",
            "x:f",
            "--prune-interval",
            "soon",
        ],
        CONFIG,
        "--prune-interval must be a duration",
    ),
    Case(
        "process-prune-interval-too-short",
        [
            *PROCESS,
            "--stream",
            "BI_P",
            "--consumer",
            "c",
            "--handler",
            "x:f",
            "--prune-interval",
            "0.0001",
        ],
        CONFIG,
        "--prune-interval must be 0 (never prune) or at least 0.1s (each round asks the "
        "server for the consumer's state; the default is 30s), got '0.0001'",
    ),
    Case(
        "process-ack-policy-unknown",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "x:f", "--ack-policy", "no"],
        CONFIG,
        "--ack-policy must be explicit or all, got 'no'",
    ),
    Case(
        "process-prune-grace-negative",
        [
            *PROCESS,
            "--stream",
            "BI_P",
            "--consumer",
            "c",
            "--handler",
            "x:f",
            "--prune-grace",
            "-5s",
        ],
        CONFIG,
        "--prune-grace must be a duration (a number of seconds or a string like '500ms', "
        "'2s', '1.5m' or '1h'), got '-5s'",
    ),
    Case(
        "process-consumer-max-deliver-without-dead-letter-stream",
        [*PROCESS, "--stream", "BI_MD", "--consumer", "c", "--handler", "bi_fx:handle"],
        CONFIG,
        "consumer BI_MD/c has max_deliver 3 and no dead-letter stream is configured: the "
        "server would stop delivering a message that failed 3 times, and it would be neither "
        "applied nor dead-lettered. Fix: `oncestream consumer edit BI_MD c --max-deliver -1`",
        setup=_limited_consumer("BI_MD", 3),
        check=_still_pending("BI_MD", 3),
        in_tmp=True,
    ),
    Case(
        "process-consumer-max-deliver-not-above-the-processors",
        [
            *PROCESS,
            "--stream",
            "BI_MD2",
            "--consumer",
            "c",
            "--handler",
            "bi_fx:handle",
            "--dead-letter-stream",
            "BI_MD2_DLQ",
            "--max-deliver",
            "5",
        ],
        CONFIG,
        "consumer BI_MD2/c has max_deliver 3; with a dead-letter stream it must be -1 or > "
        "the Processor's max_deliver (5)",
        setup=_limited_consumer("BI_MD2", 3),
        check=_still_pending("BI_MD2", 3),
        in_tmp=True,
    ),
    Case(
        "process-consumer-max-deliver-set-while-running",
        [
            *PROCESS,
            "--stream",
            "BI_MDRUN",
            "--consumer",
            "c",
            "--handler",
            "bi_fx:handle",
            "--backoff",
            "50ms",
            "--progress",
            "0.2",
        ],
        FAILED,
        "MaxDeliverError: consumer BI_MDRUN/c has max_deliver 3 while this Processor runs "
        "(BI_MDRUN seq 4 failed (delivery 1 of 3))",
        setup=lambda env: (_worker(env, "BI_MDRUN", 3), env.file("bi_fx.py", FAIL_ON_4)),
        during=_limit_set_while_running,
        check=_three_applied_and_4_kept,
        subprocess=True,
        in_tmp=True,
    ),
    Case(
        "consumer-reset-ledger-missing",
        [
            "consumer",
            "reset",
            "BI_RL",
            "c",
            "--to-end",
            "--force",
            *CONNECT,
            "--ledger",
            "sqlite:///{tmp}/nope.db",
        ],
        CONFIG,
        "no ledger at {tmp}/nope.db",
        setup=lambda env: (_publish(env, "BI_RL", 3), env.consumer("BI_RL", "c")),
        check=_still_pending("BI_RL", 3),  # refused before the reset
    ),
    Case(
        "consumer-reset-ledger-bad-scheme",
        [
            "consumer",
            "reset",
            "BI_RL2",
            "c",
            "--to-end",
            "--force",
            *CONNECT,
            "--ledger",
            "mysql://x@y/z",
        ],
        CONFIG,
        "unsupported scheme 'mysql'",
        setup=lambda env: (_publish(env, "BI_RL2", 3), env.consumer("BI_RL2", "c")),
        check=_still_pending("BI_RL2", 3),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, cli_env: CliEnv) -> None:
    run_case(case, cli_env)
