"""Bad input for every CLI command: one row per case (issue 10), run by tests/_cli_cases.py.

Each row names the command, what exists before, the exit code (0 ok, 1 the work
failed, 2 bad usage or configuration), a fragment of the message, and what must
hold afterwards. One nats-server serves every row; rows use their own stream names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oncestream.server import NatsServer
from tests import server_configs
from tests._cli_cases import Case, CliEnv, Outcome, run_case

CONFIG, FAILED = 2, 1


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    work = tmp_path_factory.mktemp("bad-input-nats")
    server = NatsServer(server_configs.jetstream(work), work_dir=work)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def cli_env(shared_server: NatsServer, tmp_path: Path) -> CliEnv:
    return CliEnv(url=shared_server.url, tmp=tmp_path / "case")


def _unchanged(name: str, content: str) -> object:
    def check(env: CliEnv, _: Outcome) -> None:
        assert (env.tmp / name).read_text() == content, f"{name} was changed or deleted"

    return check


CONNECT = ["-s", "{url}"]

CASES = [
    # -- connection flags (every command) --------------------------------------------------
    Case("creds-missing", ["status", *CONNECT, "--creds", "/missing"], CONFIG, "/missing"),
    Case("server-url-bad-scheme", ["status", "-s", "http://x:1"], CONFIG, "not a NATS URL"),
    Case("server-url-bad-port", ["status", "-s", "nats://127.0.0.1:99999"], CONFIG, "port"),
    Case(
        "domain-and-api-prefix",
        ["status", *CONNECT, "--domain", "a", "--api-prefix", "B.API"],
        CONFIG,
        "mutually exclusive",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, cli_env: CliEnv) -> None:
    run_case(case, cli_env)
