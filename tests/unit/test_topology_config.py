"""Topology config blocks: rendering, validation by ``nats-server -t``, secrets kept out of repr."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from oncestream import ConfigError
from oncestream.server import (
    Account,
    AccountsConfig,
    Authorization,
    Cluster,
    ClusterConfig,
    Export,
    HubLeaf,
    Import,
    JetStreamConfig,
    LeafNodeConfig,
    LeafRemote,
    NatsServer,
    OperatorSetup,
    ServerConfig,
    ServerTLS,
    TLSConfig,
    User,
    hub_leaf_accounts,
)
from oncestream.server._jwt import new_keypair
from tests import server_configs


def _check(config: ServerConfig, work_dir: Path) -> str:
    server = NatsServer(config, work_dir=work_dir)
    server.check_config()
    return server.config_file.read_text()


def test_hub_leaf_configs_are_valid(tmp_path: Path) -> None:
    topo = HubLeaf(tmp_path)
    hub = _check(topo.hub.config, tmp_path / "hub")
    leaf = _check(topo.leaf.config, tmp_path / "leaf")
    assert 'domain: "hub"' in hub and 'domain: "leaf"' in leaf
    assert f'listen: "127.0.0.1:{topo.leaf_port}"' in hub
    assert 'account: "ACC"' in leaf and 'nkey: "SU' in leaf and "nats-leaf://acc:" not in leaf
    _, password = topo.credentials("ACC")
    assert password not in hub + leaf and '"$2a$10$' in hub
    assert 'to: "JS.acc@hub.API.CONSUMER.MSG.NEXT.aggregate.dur"' in hub
    assert 'response_type: "stream"' in hub


def test_cluster_configs_are_valid(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, size=3)
    texts = [_check(s.config, tmp_path / f"n{i}") for i, s in enumerate(cluster)]
    for i, text in enumerate(texts):
        assert 'sync_interval: "always"' in text
        assert text.count("nats-route://127.0.0.1:") == 2
        assert f'server_name: "oncestream-{i}"' in text
    assert len(set(cluster.urls)) == 3


def test_auth_and_operator_configs_are_valid(tmp_path: Path) -> None:
    user_key = new_keypair("user")
    configs = [
        server_configs.user_password(tmp_path / "u", user="u", password="p"),
        server_configs.token(tmp_path / "t", token="tok"),
        server_configs.nkey_users(tmp_path / "n", public_keys=(user_key.public,)),
        server_configs.operator_mode(tmp_path / "o", OperatorSetup.create()),
    ]
    for i, config in enumerate(configs):
        _check(config, tmp_path / f"c{i}")


def test_tls_config_is_valid(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    config = server_configs.tls(
        tmp_path / "s",
        cert_file=tmp_path / "cert.pem",
        key_file=tmp_path / "key.pem",
        ca_file=tmp_path / "ca.pem",
        verify=True,
    )
    text = _check(config, tmp_path / "tls")
    assert "verify: true" in text


def test_invalid_config_is_reported_by_the_server(tmp_path: Path) -> None:
    bad = ServerConfig(
        jetstream=JetStreamConfig(store_dir=tmp_path / "js"),
        blocks=(
            AccountsConfig(
                accounts=(
                    Account(
                        name="A",
                        users=(User(user="a", password="a"),),
                        imports=(Import(account="NOPE", subject="x.>"),),
                    ),
                )
            ),
        ),
    )
    with pytest.raises(ConfigError, match="NOPE"):
        _check(bad, tmp_path / "bad")


def test_blocks_render_expected_keys() -> None:
    text = ServerConfig(
        blocks=(
            ClusterConfig(name="c", port=6222, routes=("nats-route://127.0.0.1:6223",)),
            LeafNodeConfig(port=7422),
            Authorization(token="t0k"),
        )
    ).render()
    assert 'listen: "127.0.0.1:6222"' in text and "nats-route://127.0.0.1:6223" in text
    assert 'listen: "127.0.0.1:7422"' in text and 'token: "$2a$10$' in text
    assert "t0k" not in text
    export = Export(subject="$JS.hub.API.CONSUMER.MSG.NEXT.s.d", response_type="stream")
    assert export.to_dict() == {
        "service": "$JS.hub.API.CONSUMER.MSG.NEXT.s.d",
        "response_type": "stream",
    }


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: User(user="a"), "user and password"),
        (lambda: User(nkey="Nxyz"), "public user key"),
        (lambda: Authorization(), "exactly one"),
        (lambda: Authorization(user="a", password="b", token="c"), "exactly one"),
        (lambda: Account(name="bad name"), "letters, digits"),
        (lambda: TLSConfig(cert_file="c.pem"), "together"),
        (lambda: TLSConfig(verify=True), "ca_file"),
        (lambda: LeafNodeConfig(), "listener port, remotes"),
        (lambda: ClusterConfig(name="c", port=70000), "1..65535"),
        (lambda: Export(subject="x", kind="stream", response_type="stream"), "service"),
        (lambda: AccountsConfig(accounts=(), system_account="SYS"), "system_account"),
        (lambda: OperatorSetup.create(accounts=("A",), jetstream=("B",)), "unknown"),
    ],
)
def test_invalid_blocks_raise_config_error(build, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=message):
        build()


def test_secrets_are_not_in_repr() -> None:
    secret = "s3cret-VALUE"
    setup = OperatorSetup.create()
    key = new_keypair("user")
    seeds = [key.seed, setup.operator.seed, *(kp.seed for kp in setup.accounts.values())]
    objects = [
        User(user="u", password=secret),
        Authorization(token=secret),
        Authorization(user="u", password=secret),
        LeafRemote(url="nats-leaf://127.0.0.1:7422", account="A", user="u", password=secret),
        hub_leaf_accounts(passwords={"acc": secret, "admin": secret, "import_client": secret}),
        setup,
        setup.config(),
        key,
    ]
    for obj in objects:
        text = repr(obj)
        assert secret not in text
        assert not any(seed in text for seed in seeds)
        assert setup.operator_jwt not in text


def test_server_tls_block_wraps_tls_config() -> None:
    tls = TLSConfig(cert_file="c.pem", key_file="k.pem", ca_file="ca.pem", verify=True)
    assert ServerTLS(tls=tls).to_dict()["tls"]["verify"] is True


def test_leaf_remote_with_creds_and_tls_is_valid(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    tls = TLSConfig(
        cert_file=tmp_path / "cert.pem", key_file=tmp_path / "key.pem", ca_file=tmp_path / "ca.pem"
    )
    setup = OperatorSetup.create()
    creds = setup.write_creds(tmp_path / "leaf.creds", account="APP", user="leaf")
    remote = LeafRemote(
        url="tls://127.0.0.1:7422", account=setup.accounts["APP"].public, credentials=creds, tls=tls
    )
    config = ServerConfig(
        jetstream=JetStreamConfig(store_dir=tmp_path / "js", domain="leaf"),
        blocks=(
            setup.config(),
            LeafNodeConfig(remotes=(remote,)),
            ClusterConfig(name="c", port=6222, routes=("nats-route://127.0.0.1:6223",), tls=tls),
        ),
    )
    text = _check(config, tmp_path / "leaf")
    assert f'credentials: "{creds}"' in text and 'resolver: "MEMORY"' in text


def test_server_config_non_loopback_host_needs_explicit_opt_out() -> None:
    with pytest.raises(ConfigError, match="loopback_only=False"):
        ServerConfig(host="10.77.1.2")
    config = ServerConfig(host="10.77.1.2", loopback_only=False, port=4222)
    assert 'host: "10.77.1.2"' in config.render()
    assert "loopback_only" not in config.render()


def test_command_prefix_execs_the_server_under_the_tracked_pid() -> None:
    with NatsServer(command_prefix=("env", "ONCESTREAM_PREFIX_TEST=1")) as server:
        assert server.pid is not None
        exe = Path(f"/proc/{server.pid}/exe").resolve().name
        assert exe.startswith("nats-server")
