"""Authentication end to end against real servers: user/password, token, nkeys, JWT creds, TLS.

Wrong credentials must fail fast with AuthenticationError, and no secret may
appear in repr(), error messages or logs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from oncestream import (
    AuthenticationError,
    ConnectError,
    ConnectOptions,
    OncestreamError,
    connect,
)
from oncestream.server import NatsServer, OperatorSetup
from oncestream.server._jwt import new_keypair
from oncestream.spark._options import connect_options as spark_connect_options
from oncestream.streams import StreamSpec, ensure_stream
from tests import server_configs

SECRET = "pa55-W0rd-xyzzy"
FAST = 3.0  # seconds a rejected login may take


async def _roundtrip(options: ConnectOptions) -> None:
    """Connect, create a stream, publish with a msg id and read its state back."""
    conn = await connect(options)
    try:
        await ensure_stream(conn, StreamSpec(name="AUTH", subjects=("auth.>",)))
        ack = await conn.nc.request("auth.x", b"1", headers={"Nats-Msg-Id": "a1"}, timeout=5)
        assert b'"seq":1' in ack.data
        assert (await conn.stream_info("AUTH"))["state"]["messages"] == 1
    finally:
        await conn.close()


async def _rejected(
    options: ConnectOptions, *secrets: str, caplog: pytest.LogCaptureFixture
) -> str:
    caplog.set_level(logging.DEBUG)
    start = time.monotonic()
    with pytest.raises(AuthenticationError) as info:
        await connect(options)
    elapsed = time.monotonic() - start
    assert elapsed < FAST, f"rejection took {elapsed:.1f}s"
    text = f"{info.value} {info.value!r} {info.value.__cause__!r} {caplog.text}"
    for secret in secrets:
        assert secret not in text
    assert "credentials" in str(info.value) or "authoriz" in str(info.value).lower()
    return str(info.value)


async def test_user_password(
    server_factory: Callable[..., NatsServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = server_factory(server_configs.user_password(tmp_path, user="app", password=SECRET))
    good = ConnectOptions(servers=(server.url,), user="app", password=SECRET)
    await _roundtrip(good)
    assert SECRET not in repr(good)
    await _rejected(good.replace(password="wrong-" + SECRET), SECRET, caplog=caplog)
    await _rejected(ConnectOptions(servers=(server.url,)), caplog=caplog)
    # Credentials embedded in the URL are redacted from messages too.
    url = server.url.replace("nats://", f"nats://app:bad{SECRET}@")
    message = await _rejected(ConnectOptions(servers=(url,)), SECRET, caplog=caplog)
    assert "***@" in message


async def test_token(
    server_factory: Callable[..., NatsServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = server_factory(server_configs.token(tmp_path, token=SECRET))
    good = ConnectOptions(servers=(server.url,), token=SECRET)
    await _roundtrip(good)
    assert SECRET not in repr(good)
    await _rejected(good.replace(token="not-" + SECRET), SECRET, caplog=caplog)


async def test_nkey_seed_string_and_file(
    server_factory: Callable[..., NatsServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    key = new_keypair("user")
    server = server_factory(server_configs.nkey_users(tmp_path, public_keys=(key.public,)))
    await _roundtrip(ConnectOptions(servers=(server.url,), nkey_seed=key.seed))
    seed_file = tmp_path / "user.nk"
    seed_file.write_text(key.seed + "\n")
    await _roundtrip(ConnectOptions(servers=(server.url,), nkey_seed=str(seed_file)))
    await _roundtrip(spark_connect_options({"servers": server.url, "nkeySeed": key.seed}))
    assert key.seed not in repr(ConnectOptions(servers=(server.url,), nkey_seed=key.seed))
    stranger = new_keypair("user")
    await _rejected(
        ConnectOptions(servers=(server.url,), nkey_seed=stranger.seed),
        stranger.seed,
        caplog=caplog,
    )


async def test_jwt_creds_operator_mode(
    server_factory: Callable[..., NatsServer], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    setup = OperatorSetup.create(accounts=("APP",), jetstream=("APP",))
    server = server_factory(server_configs.operator_mode(tmp_path, setup))
    creds = setup.write_creds(tmp_path / "app.creds", account="APP", user="alice")
    await _roundtrip(ConnectOptions(servers=(server.url,), creds=str(creds)))
    # Spark-style options reach the same code.
    await _roundtrip(spark_connect_options({"servers": server.url, "creds": str(creds)}))
    # A user signed by an account this server does not know is rejected.
    foreign = OperatorSetup.create(accounts=("APP",), jetstream=("APP",))
    bad = foreign.write_creds(tmp_path / "foreign.creds", account="APP", user="mallory")
    seed = bad.read_text().split("-----BEGIN USER NKEY SEED-----\n")[1].split("\n")[0]
    await _rejected(ConnectOptions(servers=(server.url,), creds=str(bad)), seed, caplog=caplog)


async def test_tls_server_verification(
    server_factory: Callable[..., NatsServer], tmp_path: Path, tls_files: dict[str, Path]
) -> None:
    config = server_configs.tls(
        tmp_path,
        cert_file=tls_files["cert"],
        key_file=tls_files["key"],
        ca_file=tls_files["ca"],
        verify=False,
    )
    server = server_factory(config)
    await _roundtrip(ConnectOptions(servers=(server.url,), tls_ca_file=str(tls_files["ca"])))
    await _roundtrip(
        ConnectOptions(
            servers=(server.url.replace("nats://", "tls://"),), tls_ca_file=str(tls_files["ca"])
        )
    )
    # A server certificate from an untrusted CA is refused.
    start = time.monotonic()
    with pytest.raises(ConnectError):
        await connect(ConnectOptions(servers=(server.url,), tls_ca_file=str(tls_files["other_ca"])))
    assert time.monotonic() - start < FAST


async def test_tls_client_certificates(
    server_factory: Callable[..., NatsServer], tmp_path: Path, tls_files: dict[str, Path]
) -> None:
    config = server_configs.tls(
        tmp_path,
        cert_file=tls_files["cert"],
        key_file=tls_files["key"],
        ca_file=tls_files["ca"],
        verify=True,
    )
    server = server_factory(config)
    spark_options = {
        "servers": server.url,
        "tlsCaFile": str(tls_files["ca"]),
        "tlsCertFile": str(tls_files["client_cert"]),
        "tlsKeyFile": str(tls_files["client_key"]),
    }
    await _roundtrip(spark_connect_options(spark_options))
    # Without a client certificate the handshake is refused: a clear error, quickly.
    start = time.monotonic()
    with pytest.raises(OncestreamError):
        await connect(ConnectOptions(servers=(server.url,), tls_ca_file=str(tls_files["ca"])))
    assert time.monotonic() - start < FAST


def test_secrets_not_in_repr_or_validation_errors() -> None:
    options = ConnectOptions(
        servers=(f"nats://u:{SECRET}@127.0.0.1:4222",), tls_ca_file=None, domain="hub"
    )
    assert SECRET not in str(options.safe_servers)
    for kwargs in (
        {"password": SECRET, "user": "u"},
        {"token": SECRET},
        {"nkey_seed": new_keypair("user").seed},
    ):
        opts = ConnectOptions(servers=("nats://127.0.0.1:4222",), **kwargs)  # type: ignore[arg-type]
        assert SECRET not in repr(opts)
        assert opts.nkey_seed is None or opts.nkey_seed not in repr(opts)
    with pytest.raises(OncestreamError) as info:
        ConnectOptions(servers=(f"nats://u:{SECRET}@127.0.0.1:notaport",))
    assert SECRET not in str(info.value)
    with pytest.raises(OncestreamError) as info:
        ConnectOptions(servers=("nats://127.0.0.1:4222",), token=SECRET, user="u", password=SECRET)
    assert SECRET not in str(info.value)
