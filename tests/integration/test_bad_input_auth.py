"""Bad input around authentication, permissions and TLS (issue 19), run by tests/_cli_cases.py.

One server with per-user permissions (``app`` may do everything: the rows'
setup and ``{url}`` log in as ``app``; ``nopub`` may not publish to
``ba.orders.>``; ``nosub`` may not subscribe to ``_INBOX.>``; ``{bare}`` is
the server's URL without credentials), a relay in
front of it that records the wire, and a server that requires TLS. Each row
gives the command, the exit code (0 ok, 1 the work failed, 2 bad usage or
configuration), a fragment of the message, and what must hold afterwards:
nothing stored twice or lost, no password on the wire or in the output.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oncestream.server import NatsServer, User
from oncestream.server._jwt import new_keypair
from tests import server_configs
from tests._cli_cases import Case, CliEnv, Outcome, run_case
from tests._wiretap import WireTap

OK, FAILED, CONFIG = 0, 1, 2
PASSWORD = "wire-Secret-8713"
FAST = 5.0  # seconds a refused publish or subscription may take (was 28 s, or a timeout)


@pytest.fixture(scope="module")
def secure(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    """The servers, the relay and the TLS files every row uses."""
    import trustme

    work = tmp_path_factory.mktemp("bad-input-auth")
    users = (
        User(user="app", password=PASSWORD),
        User(user="nopub", password="nopub-pw", permissions={"publish": {"deny": ["ba.orders.>"]}}),
        User(user="nosub", password="nosub-pw", permissions={"subscribe": {"deny": ["_INBOX.>"]}}),
    )
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    files = {name: work / f"{name}.pem" for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert.cert_chain_pems[0].write_to_path(str(files["cert"]))
    cert.private_key_pem.write_to_path(str(files["key"]))
    permissions = NatsServer(
        server_configs.permissions(work / "perm", users=users),
        work_dir=work / "perm",
    )
    tls = NatsServer(
        server_configs.tls(
            work / "tls",
            cert_file=files["cert"],
            key_file=files["key"],
            ca_file=files["ca"],
            verify=False,
        ),
        work_dir=work / "tls",
    )
    with permissions as perm, tls, WireTap(perm.port) as tap:
        yield {"url": perm.url, "tap": tap, "tls": tls, **files}


@pytest.fixture
def cli_env(secure: dict[str, Any], tmp_path: Path) -> CliEnv:
    tap: WireTap = secure["tap"]
    bare = secure["url"]
    values = {
        "bare": bare,
        "tap": str(tap.port),
        "tls_port": str(secure["tls"].port),
        **{name: str(secure[name]) for name in ("ca", "cert", "key")},
        "_tap": tap,
    }
    url = bare.replace("nats://", f"nats://app:{PASSWORD}@")
    return CliEnv(url=url, tmp=tmp_path / "case", values=values)


def _orders(stream: str) -> Callable[[CliEnv], None]:
    """Setup: stream ``stream`` on ``ba.orders.<stream>.>``, two records, the clock."""

    def setup(env: CliEnv) -> None:
        env.stream(stream, f"ba.orders.{stream.lower()}.>")
        env.file("in.jsonl", '{"id": 1}\n{"id": 2}\n')
        env.values["started"] = time.monotonic()

    return setup


def _publish(stream: str, *login: str) -> list[str]:
    """Publish in.jsonl to ``stream``; as ``app`` unless ``login`` gives other flags."""
    subject = f"ba.orders.{stream.lower()}.x"
    server = "{bare}" if login else "{url}"
    return ["publish", "{tmp}/in.jsonl", "--stream", stream, "--subject", subject,
            "--id-field", "id", "-s", server, "--no-progress", *login]  # fmt: skip


def _refused_fast_then_stored_once(stream: str) -> Callable[[CliEnv, Outcome], None]:
    """Refused within FAST, nothing stored; the same command as ``app`` then stores each once."""

    def check(env: CliEnv, _: Outcome) -> None:
        elapsed = time.monotonic() - env.values["started"]
        assert elapsed < FAST, f"the refusal took {elapsed:.1f}s"
        assert env.messages(stream) == 0
        again = Case("rerun", _publish(stream), OK, "stored 2")
        run_case(again, env)
        assert env.messages(stream) == 2

    return check


def _nothing_on_the_wire(env: CliEnv, _: Outcome) -> None:
    tap: WireTap = env.values["_tap"]
    assert tap.accepted > 0, "the client never reached the relay"
    assert PASSWORD.encode() not in tap.sent, "the password reached a server without TLS"
    assert b"CONNECT" not in tap.sent


MISTYPED_SEED = new_keypair("user").seed
MISTYPED_SEED = MISTYPED_SEED[:20] + ("A" if MISTYPED_SEED[20] != "A" else "B") + MISTYPED_SEED[21:]
JWT_ONLY = "-----BEGIN NATS USER JWT-----\naaa.bbb.ccc\n------END NATS USER JWT------\n"
CONNECT_FLAGS = ["--user", "app", f"--password={PASSWORD}", "--tls-ca", "{ca}"]

CASES = [
    # -- permissions: the server's violation, fast, nothing lost ---------------------------
    Case(
        "publish-denied",
        _publish("BA_PUB", "--user", "nopub", "--password", "nopub-pw"),
        CONFIG,
        'permissions violation for publish to "ba.orders.ba_pub.x"',
        setup=_orders("BA_PUB"),
        check=_refused_fast_then_stored_once("BA_PUB"),
    ),
    Case(
        "publish-inbox-subscription-denied",
        _publish("BA_SUB", "--user", "nosub", "--password", "nosub-pw"),
        CONFIG,
        "refused this user's subscription to its reply inbox",
        setup=_orders("BA_SUB"),
        check=_refused_fast_then_stored_once("BA_SUB"),
    ),
    Case(
        "status-inbox-subscription-denied",
        ["status", "-s", "{bare}", "--user", "nosub", "--password", "nosub-pw"],
        CONFIG,
        'permissions violation for subscription to "_inbox.',
    ),
    # -- credential and TLS files: option errors, the secret never shown ------------------
    Case(
        "tls-ca-is-a-key-file",
        ["status", "-s", "{bare}", "--tls-ca", "{key}"],
        CONFIG,
        "tls_ca_file '{key}' holds no CA certificate in PEM format",
    ),
    Case(
        "tls-cert-and-key-do-not-match",
        ["status", "-s", "{bare}", "--tls-ca", "{ca}", "--tls-cert", "{ca}", "--tls-key", "{key}"],
        CONFIG,
        "are not a PEM certificate and its private key",
    ),
    Case(
        "creds-without-seed",
        ["status", "-s", "{bare}", "--creds", "{tmp}/jwt-only.creds"],
        CONFIG,
        "needs a valid user nkey seed after a '-----BEGIN USER NKEY SEED-----' line",
        setup=lambda env: env.file("jwt-only.creds", JWT_ONLY),
    ),
    Case(
        "creds-without-jwt",
        ["status", "-s", "{bare}", "--creds", "{tmp}/notes.creds"],
        CONFIG,
        "it needs a user JWT after a '-----BEGIN NATS USER JWT-----' line",
        setup=lambda env: env.file("notes.creds", "my notes\n"),
    ),
    Case(
        "nkey-seed-mistyped",
        ["status", "-s", "{bare}", "--nkey-seed", MISTYPED_SEED],
        CONFIG,
        "nkey_seed is not a valid user nkey seed",
        absent=(MISTYPED_SEED,),
    ),
    # -- TLS asked for: required of the server, never downgraded --------------------------
    Case(
        "tls-url-to-a-plaintext-server",
        ["status", "-s", "tls://127.0.0.1:{tap}", *CONNECT_FLAGS],
        FAILED,
        "TlsNotOffered: the server at 127.0.0.1:{tap} does not offer TLS",
        absent=(PASSWORD,),
        check=_nothing_on_the_wire,
    ),
    Case(
        "tls-ca-with-a-nats-url-to-a-plaintext-server",
        ["status", "-s", "nats://127.0.0.1:{tap}", *CONNECT_FLAGS],
        FAILED,
        "does not offer TLS",
        absent=(PASSWORD,),
        check=_nothing_on_the_wire,
    ),
    Case(
        "plain-websocket-with-tls-ca",
        ["status", "-s", "ws://127.0.0.1:1", "--tls-ca", "{ca}"],
        CONFIG,
        "is plain WebSocket (ws://) but TLS was asked for",
    ),
    Case(
        "tls-connection-closes-without-asyncio-warning",
        ["status", "-s", "tls://127.0.0.1:{tls_port}", "--tls-ca", "{ca}"],
        OK,
        "",
        subprocess=True,
        absent=("eof_received", "WARNING"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input(case: Case, cli_env: CliEnv) -> None:
    run_case(case, cli_env)
