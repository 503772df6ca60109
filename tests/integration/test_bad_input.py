"""Bad input for every CLI command: one row per case (issue 10), run by tests/_cli_cases.py.

Each row names the command, what exists before, the exit code (0 ok, 1 the work
failed, 2 bad usage or configuration), a fragment of the message, and what must
hold afterwards. One nats-server serves every row; rows use their own stream names.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from oncestream.server import NatsServer
from tests._cli_cases import Case, CliEnv, Outcome, run_case

CONFIG, FAILED = 2, 1


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


def _absent(path: Path) -> None:
    assert not path.exists(), f"{path} was created"


CONNECT = ["-s", "{url}"]
PROCESS = ["process", *CONNECT, "--ledger", "sqlite:///{tmp}/ledger.db"]

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
    Case("demo-negative-rate", ["demo", "--rate", "-5"], CONFIG, "rate must be > 0"),
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
        "--progress must be >= 0",
    ),
    Case(
        "process-handler-not-module-colon-function",
        [*PROCESS, "--stream", "BI_P", "--consumer", "c", "--handler", "justaname"],
        CONFIG,
        "module:function",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, cli_env: CliEnv) -> None:
    run_case(case, cli_env)
