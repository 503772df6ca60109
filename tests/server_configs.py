"""Every nats-server configuration the tests use, in one place.

Tests pick a config from here instead of writing config text inline.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from oncestream.server import Cluster, JetStreamConfig, ServerConfig


def jetstream(
    work_dir: Path, *, domain: str | None = None, max_payload: int | None = None
) -> ServerConfig:
    """A single JetStream server with file storage in ``work_dir/jetstream``."""
    return ServerConfig(
        server_name="js",
        max_payload=max_payload,
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream", domain=domain),
    )


def atomic_batch_limits(
    work_dir: Path, *, max_inflight_per_stream: int, timeout: str = "10s"
) -> ServerConfig:
    """A JetStream server staging at most ``max_inflight_per_stream`` atomic batches per stream.

    nats-server's ``jetstream { limits { batch { max_inflight_per_stream, timeout } } }``
    (``server/opts.go``; defaults 50, ``streamDefaultMaxAtomicBatchInflightPerStream``,
    and 10 s, after which a batch without its commit is abandoned).
    """
    block = JetStreamConfig(store_dir=work_dir / "jetstream").to_dict()
    limits = {"max_inflight_per_stream": max_inflight_per_stream, "timeout": timeout}
    block["limits"] = {"batch": limits}
    return ServerConfig(server_name="js-batch-limits", extra={"jetstream": block})


# -- authentication and TLS (issue 6) ---------------------------------------------------


def user_password(work_dir: Path, *, user: str, password: str) -> ServerConfig:
    """JetStream server requiring one user/password."""
    from oncestream.server import Authorization

    return ServerConfig(
        server_name="auth-user",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=(Authorization(user=user, password=password),),
    )


def users(work_dir: Path, *, users: dict[str, str]) -> ServerConfig:
    """JetStream server with one user/password login per ``users`` entry (name -> password)."""
    from oncestream.server import Authorization, User

    return ServerConfig(
        server_name="auth-users",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=(Authorization(users=tuple(User(user=u, password=p) for u, p in users.items())),),
    )


def permissions(work_dir: Path, *, users: tuple[Any, ...]) -> ServerConfig:
    """JetStream server with ``users`` (``oncestream.server.User``, each with its permissions)."""
    from oncestream.server import Authorization

    return ServerConfig(
        server_name="auth-permissions",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=(Authorization(users=users),),
    )


def stream_lookup_denied(work_dir: Path) -> ServerConfig:
    """JetStream server whose users may not list streams by subject (``STREAM.NAMES``).

    Users (password ``<user>-pw``): ``app`` (every permission) and ``nonames``
    (denied ``$JS.API.STREAM.NAMES``; it may read ``STREAM.INFO`` and publish).
    """
    from oncestream.server import User

    denied = {"publish": {"deny": ["$JS.API.STREAM.NAMES"]}}
    users = (
        User(user="app", password="app-pw"),
        User(user="nonames", password="nonames-pw", permissions=denied),
    )
    return permissions(work_dir, users=users)


def token(work_dir: Path, *, token: str) -> ServerConfig:
    """JetStream server requiring a token."""
    from oncestream.server import Authorization

    return ServerConfig(
        server_name="auth-token",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=(Authorization(token=token),),
    )


def nkey_users(work_dir: Path, *, public_keys: tuple[str, ...]) -> ServerConfig:
    """JetStream server accepting the given public user nkeys."""
    from oncestream.server import Authorization, User

    return ServerConfig(
        server_name="auth-nkey",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=(Authorization(users=tuple(User(nkey=key) for key in public_keys)),),
    )


def operator_mode(work_dir: Path, setup: object) -> ServerConfig:
    """JetStream server in operator (JWT) mode with a memory resolver (``OperatorSetup``)."""
    from oncestream.server import OperatorSetup

    assert isinstance(setup, OperatorSetup)
    return ServerConfig(
        server_name="auth-jwt",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=(setup.config(),),
    )


def tls(
    work_dir: Path,
    *,
    cert_file: Path,
    key_file: Path,
    ca_file: Path,
    verify: bool,
    user: str | None = None,
    password: str | None = None,
    allow_non_tls: bool = False,
) -> ServerConfig:
    """JetStream server requiring TLS (and client certificates when ``verify``).

    ``allow_non_tls``: TLS is offered (INFO ``tls_available``), not required.
    ``user``/``password``: that login is required too.
    """
    from oncestream.server import Authorization, ServerTLS, TLSConfig

    blocks: tuple[object, ...] = (
        ServerTLS(
            tls=TLSConfig(cert_file=cert_file, key_file=key_file, ca_file=ca_file, verify=verify)
        ),
    )
    if user is not None and password is not None:
        blocks += (Authorization(user=user, password=password),)
    return ServerConfig(
        server_name="auth-tls",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=blocks,
        extra={"allow_non_tls": True} if allow_non_tls else {},
    )


# -- processing (issue 3) ---------------------------------------------------------------


def cross_account_consumer(work_dir: Path, *, stream: str, consumer: str) -> ServerConfig:
    """HUB owns ``stream``/``consumer``; APP may only pull it and ack, under ``JS.acc@hub.API``.

    Users: ``hub``/``hub-pw`` (HUB, JetStream) and ``app``/``app-pw`` (APP, no JetStream).
    """
    from oncestream.server import Account, AccountsConfig, Export, Import, User

    next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
    acks = f"$JS.ACK.{stream}.{consumer}.>"
    hub = Account(
        name="HUB",
        users=(User(user="hub", password="hub-pw"),),
        jetstream=True,
        exports=(Export(subject=next_subject, response_type="stream"), Export(subject=acks)),
    )
    app = Account(
        name="APP",
        users=(User(user="app", password="app-pw"),),
        imports=(
            Import(
                account="HUB",
                subject=next_subject,
                to=f"JS.acc@hub.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
            ),
            Import(account="HUB", subject=acks),
        ),
    )
    return ServerConfig(
        server_name="xacct",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=(AccountsConfig(accounts=(hub, app)),),
    )


def operator_mode_mtls(
    work_dir: Path, setup: object, *, cert_file: Path, key_file: Path, ca_file: Path
) -> ServerConfig:
    """Operator (JWT) mode and mutual TLS together."""
    from oncestream.server import OperatorSetup, ServerTLS, TLSConfig

    assert isinstance(setup, OperatorSetup)
    tls = TLSConfig(cert_file=cert_file, key_file=key_file, ca_file=ca_file, verify=True)
    return ServerConfig(
        server_name="auth-jwt-mtls",
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream"),
        blocks=(setup.config(), ServerTLS(tls=tls)),
    )


# -- doctor (issue 37) -----------------------------------------------------------------


def monitored(work_dir: Path, *, http_port: int, sync_interval: str | None = None) -> ServerConfig:
    """A JetStream server with its monitoring endpoint (``/varz``) on ``http_port``.

    ``sync_interval``: ``"always"`` fsyncs before each acknowledgement; None keeps
    nats-server's default (2m), which ``oncestream doctor --monitor`` reports.
    """
    return ServerConfig(
        server_name="monitored",
        http_port=http_port,
        jetstream=JetStreamConfig(store_dir=work_dir / "jetstream", sync_interval=sync_interval),
    )


def mixed_sync_cluster(work_dir: Path) -> Cluster:
    """A 3-node cluster (not started) on nats-server's default fsync policy (2m), but for
    its first node, which has ``sync_interval: always``: one node's /varz then does not
    tell the others' policy."""
    cluster = Cluster(work_dir, size=3, sync_interval=None)
    first = cluster.servers[cluster.node_names[0]]
    assert first.config.jetstream is not None
    always = replace(first.config.jetstream, sync_interval="always")
    first.config = replace(first.config, jetstream=always)
    return cluster
