"""No password leaks, whatever characters it holds (issue 19).

Random passwords drawn over every URL-special character (``/ # ? @ : %``,
space, quotes, backslash, non-ASCII...) walk every path that prints a URL or a
DSN: option and DSN validation, ``repr()`` of every options/DSN object, a real
nats-server rejecting the password, unreachable NATS and PostgreSQL servers, a
real PostgreSQL rejecting it, audit output specs, and the CLI's output for the
same. No substring of 4 or more characters of the password may appear in a
message, a ``repr``, an exception chain, the captured logs or the CLI's output.
The same passwords must work where they are right (real nats-server and
PostgreSQL logins, given as an option or percent-encoded in a URL).

``make test`` runs a few dozen passwords from a fixed seed; ``make soak``
(marker ``soak``) many more.
"""

from __future__ import annotations

import asyncio
import logging
import random
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from oncestream import (
    AuthenticationError,
    ConfigError,
    ConnectError,
    ConnectOptions,
    LedgerError,
    OncestreamError,
    PostgresLedger,
    connect,
)
from oncestream._dsn import parse_dsn
from oncestream.audit import KeySpec, OutputSpec
from oncestream.ledger import ledger_from_url
from oncestream.ledger._internal import ledger_from_dsn
from oncestream.server import ClusterConfig, LeafRemote, NatsServer
from tests import server_configs

SPECIAL = "/#?@:% \"'\\&=;,+!$*()[]{}<>|^`~\t"
UNICODE = "äé€ß中🙂ñ"
PLAIN = string.ascii_letters + string.digits + "-_."
SEED = 19
RIGHT = "the-right-password"


def make_passwords(seed: int, count: int) -> list[str]:
    """``count`` passwords of 8..18 characters, half of them special; all specials covered."""
    rng = random.Random(seed)
    pool = SPECIAL + UNICODE
    passwords = []
    for i in range(count):
        forced = [pool[(i * 4 + k) % len(pool)] for k in range(4)]
        size = rng.randint(8, 18)
        rest = [rng.choice(pool if rng.random() < 0.5 else PLAIN) for _ in range(size - 4)]
        chars = forced + rest
        rng.shuffle(chars)
        passwords.append("".join(chars))
    return passwords


def leaks(secret: str, texts: list[str]) -> list[str]:
    """The 4-character windows of ``secret`` found in ``texts`` (line breaks folded too)."""
    variants = []
    for text in texts:
        variants += [text, text.replace("\n", ""), " ".join(text.split())]
    windows = {secret[i : i + 4] for i in range(len(secret) - 3)}
    return sorted(w for w in windows if any(w in v for v in variants))


def assert_no_leak(secret: str, where: str, texts: list[str]) -> None:
    found = leaks(secret, texts)
    shown = "\n---\n".join(texts)
    assert not found, f"{where}: password {secret!r} leaked as {found} in:\n{shown}"


def exception_texts(exc: BaseException) -> list[str]:
    """What a caller or a traceback shows of ``exc``: message, repr, notes, the chain."""
    texts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 10:
        seen.add(id(current))
        texts += [str(current), repr(current), *getattr(current, "__notes__", [])]
        suppressed = current.__suppress_context__
        current = current.__cause__ or (None if suppressed else current.__context__)
    return texts


Expect = type[BaseException] | None


def outcome(build: Callable[[], Any], expect: Expect | str) -> list[str]:
    """Run ``build``; the texts it shows (result repr/str or the exception chain).

    ``expect`` is the exception type it must raise, ``"ok"`` when it must succeed,
    or None when either is fine.
    """
    try:
        result = build()
    except Exception as exc:
        if expect == "ok" or (isinstance(expect, type) and not isinstance(exc, expect)):
            raise AssertionError(f"unexpected {type(exc).__name__}: {exc}") from exc
        return exception_texts(exc)
    assert not isinstance(expect, type), f"expected {expect.__name__}, got {result!r}"
    return [repr(result), str(result)]


def offline_cases(pw: str) -> Iterator[tuple[str, Callable[[], Any], Expect | str]]:
    """Every path that validates or shows a URL/DSN without a network."""
    nats = f"nats://app:{pw}@127.0.0.1:4222"
    pg = f"postgresql://app:{pw}@db.example:5432/orders"
    yield (
        "invalid port",
        lambda: ConnectOptions(servers=(f"nats://app:{pw}@h:notaport",)),
        ConfigError,
    )
    token = pw.replace(":", "%3A")  # a ':' would make it user:password
    yield "port range", lambda: ConnectOptions(servers=(f"nats://{token}@h:99999",)), ConfigError
    yield "not a NATS URL", lambda: ConnectOptions(servers=(f"http://app:{pw}@h:1",)), ConfigError
    yield "no host", lambda: ConnectOptions(servers=(f"nats://app:{pw}@",)), ConfigError
    yield (
        "options repr",
        lambda: (lambda o: (o, o.safe_servers))(ConnectOptions(servers=(nats,))),
        "ok",
    )
    yield (
        "encoded URL repr",
        lambda: ConnectOptions(servers=(nats.replace(pw, quote(pw, safe="")),)),
        "ok",
    )
    yield (
        "token URL repr",
        lambda: ConnectOptions(servers=(f"nats://{quote(pw, safe='')}@h:4222",)),
        "ok",
    )
    yield "password option", lambda: ConnectOptions(user="app", password=pw), "ok"
    yield "token option", lambda: ConnectOptions(token=pw), "ok"
    yield "dsn", lambda: parse_dsn(pg), "ok"
    yield "ledger repr", lambda: (ledger_from_url(pg), PostgresLedger(pg)), "ok"
    yield "dsn scheme", lambda: parse_dsn(f"mysql://app:{pw}@h/db"), ConfigError
    yield "sqlite host part", lambda: parse_dsn(f"sqlite://app:{pw}@h/x.db"), ConfigError
    yield "pg without //", lambda: parse_dsn(f"postgresql:app:{pw}@h/db"), ConfigError
    quoted = pw.replace("\\", "\\\\").replace("'", "\\'")
    yield "libpq key=value", lambda: parse_dsn(f"host=db user=app password='{quoted}'"), ConfigError
    yield "audit output", lambda: OutputSpec.parse(f"sql:{pg}#orders"), "ok"
    yield "audit kind", lambda: OutputSpec.parse(f"bogus:{pg}"), ConfigError
    yield "audit no table", lambda: OutputSpec.parse(f"sql:{pg}"), ConfigError
    yield (
        "leaf remote",
        lambda: LeafRemote(url="nats-leaf://h:7422", account="A", user="u", password=pw),
        "ok",
    )
    yield "leaf URL", lambda: LeafRemote(url=f"nats-leaf://u:{pw}@h:7422", account="A"), "ok"
    yield (
        "routes",
        lambda: ClusterConfig(name="c", port=6222, routes=(f"nats-route://r:{pw}@h:6223",)),
        "ok",
    )
    try:
        from oncestream.spark import transactional
        from oncestream.spark._sink_options import SinkOptions
        from oncestream.spark._source_options import SourceOptions
    except ImportError:  # pragma: no cover - the spark extra is part of `make test`
        return
    # A ',' splits the servers list: a password holding one must be percent-encoded there.
    yield (
        "spark source",
        lambda: SourceOptions.from_spark_options({"servers": nats, "stream": "S"}),
        None,
    )
    encoded = {"servers": nats.replace(pw, quote(pw, safe="")), "stream": "S"}
    yield "spark encoded", lambda: SourceOptions.from_spark_options(encoded), "ok"
    source = {"servers": "nats://h:4222", "stream": "S", "user": "u", "password": pw}
    yield "spark password", lambda: SourceOptions.from_spark_options(source), "ok"
    yield (
        "spark sink",
        lambda: SinkOptions.from_spark_options({"servers": nats, "subject": "s"}),
        None,
    )
    yield "foreachBatch", lambda: transactional(pg, table="t"), "ok"


def _sizes(test: int, soak: int) -> pytest.MarkDecorator:
    """``count``: ``test`` passwords in `make test`, ``soak`` under `make soak`."""
    return pytest.mark.parametrize(
        "count", [test, pytest.param(soak, marks=pytest.mark.soak)], ids=["test", "soak"]
    )


@_sizes(40, 2000)
def test_offline_paths(count: int) -> None:
    for pw in make_passwords(SEED, count):
        for where, build, expect in offline_cases(pw):
            assert_no_leak(pw, where, outcome(build, expect))


# -- real servers ------------------------------------------------------------------------


SERVER_PASSWORDS = 40  # users u0..u39 of the auth server; make test uses the first few


@pytest.fixture(scope="module")
def auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """``app``/RIGHT, and users u0, u1... whose passwords are the random ones (soak's too)."""
    users = {"app": RIGHT}
    users.update({f"u{i}": pw for i, pw in enumerate(make_passwords(SEED + 2, SERVER_PASSWORDS))})
    work = tmp_path_factory.mktemp("auth-nats")
    with NatsServer(server_configs.users(work, users=users), work_dir=work) as server:
        yield server


def _options(url: str, **kwargs: Any) -> ConnectOptions:
    return ConnectOptions(servers=(url,), connect_timeout=2, reconnect_wait=0.05, **kwargs)


async def _login(options: ConnectOptions) -> None:
    async with await connect(options) as conn:
        await conn.flush()


def _with_logs(caplog: pytest.LogCaptureFixture, texts: list[str]) -> list[str]:
    out = [*texts, caplog.text]
    caplog.clear()
    return out


Case = tuple[str, Callable[[], Any], Expect | str]


def network_cases(pw: str, nats_url: str, pg_role: str) -> list[Case]:
    """Paths that reach a real (or unreachable) nats-server or PostgreSQL."""
    host = nats_url.removeprefix("nats://")
    enc = quote(pw, safe="")
    dead_pg = f"postgresql://app:{pw}@127.0.0.1:1/db"
    wrong = pg_role.replace("@", f":{quote('x' + pw, safe='')}@", 1)

    def login(url: str, **kwargs: Any) -> Callable[[], None]:
        return lambda: asyncio.run(_login(_options(url, **kwargs)))

    return [
        ("rejected", login(nats_url, user="app", password=pw), AuthenticationError),
        ("rejected URL", login(f"nats://app:{pw}@{host}"), None),
        ("rejected URL enc", login(f"nats://app:{enc}@{host}"), AuthenticationError),
        ("unreachable", login(f"nats://app:{pw}@127.0.0.1:1"), ConnectError),
        ("pg unreachable", lambda: PostgresLedger(dead_pg).open(), LedgerError),
        ("pg status", lambda: _read_count(dead_pg), LedgerError),
        ("pg audit", lambda: _sql_keys(dead_pg), OncestreamError),
        (
            "pg rejected",
            lambda: ledger_from_dsn(parse_dsn(wrong), tables=False).open(),
            LedgerError,
        ),
        (
            "pg rejected raw",
            lambda: PostgresLedger(pg_role.replace("@", f":x{pw}@", 1)).open(),
            None,
        ),
    ]


def _read_count(url: str) -> int:
    from oncestream.ledger._internal import read_applied_count

    return read_applied_count(url, "S")


def _sql_keys(url: str) -> list[str]:
    from oncestream.audit._outputs import sql_keys

    return sql_keys(parse_dsn(url), "t", KeySpec(kind="msg_id"))


@_sizes(6, SERVER_PASSWORDS)
def test_network_paths(
    count: int, auth_server: NatsServer, postgres_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    host = auth_server.url.removeprefix("nats://")
    for i, pw in enumerate(make_passwords(SEED + 2, count)):
        user, enc = f"u{i}", quote(pw, safe="")
        # Right where it is right: as an option and percent-encoded in a URL.
        asyncio.run(_login(_options(auth_server.url, user=user, password=pw)))
        asyncio.run(_login(_options(f"nats://{user}:{enc}@{host}")))
        role = postgres_server.password_role(f"pw_role_{i}", pw)
        ledger_from_dsn(parse_dsn(role.replace("@", f":{enc}@", 1)), tables=False).open()
        for where, build, expect in network_cases(pw, auth_server.url, role):
            assert_no_leak(pw, where, _with_logs(caplog, outcome(build, expect)))


# -- the CLI -----------------------------------------------------------------------------


def _cli(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    from oncestream.cli import app

    result = CliRunner().invoke(app, args, env={"COLUMNS": "100", **(env or {})})
    output = result.stdout + (result.stderr if result.stderr_bytes is not None else "")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        output += "\n".join(exception_texts(result.exception))
    return result.exit_code, output


def cli_rows(pw: str, auth_url: str, plain_url: str) -> list[tuple[str, list[str], int, Any]]:
    """``(what, args, exit code, env)`` of each CLI path that shows a URL or DSN."""
    dead_pg = f"postgresql://app:{pw}@127.0.0.1:1/db"
    in_list = pw.replace(",", "%2C")  # --server is a comma-separated list
    login = ["status", "-s", auth_url, "--user", "app"]
    ledger = ["status", "LEAKS", "-s", plain_url, "--ledger"]
    process = ["process", "-s", plain_url, "--stream", "LEAKS", "--consumer", "c"]
    return [
        ("unreachable", ["status", "-s", f"nats://app:{in_list}@127.0.0.1:1"], 1, None),
        ("bad port", ["status", "-s", f"nats://app:{pw}@127.0.0.1:x"], 2, None),
        ("rejected", [*login, f"--password={pw}"], 2, None),
        ("rejected env", login, 2, {"NATS_PASSWORD": pw}),
        ("ledger", [*ledger, dead_pg], 1, None),
        ("ledger scheme", [*ledger, f"mysql://a:{pw}@h/d"], 2, None),
        ("audit", ["audit", "-i", "LEAKS", "-o", f"sql:{dead_pg}#t", "-s", plain_url], 1, None),
        ("process", [*process, "--handler", "leak_handler:handle", "--ledger", dead_pg], 1, None),
    ]


async def _stream(url: str) -> None:
    from oncestream.streams import StreamSpec, ensure_stream

    async with await connect(ConnectOptions(servers=(url,))) as conn:
        await ensure_stream(conn, StreamSpec(name="LEAKS", subjects=("leaks.>",)))


@_sizes(4, SERVER_PASSWORDS)
def test_cli_paths(
    count: int,
    auth_server: NatsServer,
    module_nats_server: NatsServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "leak_handler.py").write_text("def handle(msg, tx):\n    pass\n")
    asyncio.run(_stream(module_nats_server.url))
    for pw in make_passwords(SEED + 2, count):
        for where, args, code, env in cli_rows(pw, auth_server.url, module_nats_server.url):
            exit_code, output = _cli(args, env)
            assert_no_leak(pw, f"oncestream {where}", _with_logs(caplog, [output]))
            assert exit_code == code, f"oncestream {where}: exit {exit_code}:\n{output}"
