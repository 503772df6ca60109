"""A hub server and a leaf server in two JetStream domains, with the walk-through accounts.

Example::

    with HubLeaf(work_dir) as topo:
        hub_opts = topo.options("hub", account="ACC")      # domain "hub"
        leaf_opts = topo.options("leaf", account="ACC")    # domain "leaf"
"""

from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._options import ConnectOptions
from ._cluster import Topology, _healthy, free_ports, monitor, wait_for
from ._config import JetStreamConfig, ServerConfig
from ._jwt import new_keypair
from ._process import NatsServer
from ._topology import (
    Account,
    AccountsConfig,
    Export,
    Import,
    LeafNodeConfig,
    LeafRemote,
    User,
)

__all__ = ["HubLeaf", "hub_leaf_accounts"]


def hub_leaf_accounts(
    *,
    passwords: dict[str, str] | None = None,
    hub_domain: str = "hub",
    aggregate: str = "aggregate",
    durable: str = "dur",
    import_prefix: str = "JS.acc@hub.API",
) -> AccountsConfig:
    """The accounts of the hub/leaf walk-through (same block on both servers).

    ``SYS`` (user ``admin``), ``ACC`` (user ``acc``, JetStream) exporting the
    minimum a durable pull consumer ``durable`` on stream ``aggregate`` needs,
    and ``IMPORT_CLIENT`` (user ``import_client``, JetStream) importing it under
    ``import_prefix`` and permitted to publish nothing else.
    """
    pw = passwords or {}
    api = f"$JS.{hub_domain}.API"
    next_subject = f"CONSUMER.MSG.NEXT.{aggregate}.{durable}"
    ack = f"$JS.ACK.{aggregate}.{durable}.>"
    fc = f"$JS.FC.{aggregate}.{durable}.>"
    acc = Account(
        name="ACC",
        users=(User(user="acc", password=pw.get("acc", "acc")),),
        jetstream=True,
        exports=(
            Export(subject=f"{api}.{next_subject}", response_type="stream"),
            Export(subject=ack),
            Export(subject=fc),
        ),
    )
    client_permissions = {
        "publish": {"allow": [f"{import_prefix}.{next_subject}", ack, fc]},
        "subscribe": {"allow": ["_INBOX.>"]},
    }
    importer = Account(
        name="IMPORT_CLIENT",
        users=(
            User(
                user="import_client",
                password=pw.get("import_client", "import_client"),
                permissions=client_permissions,
            ),
        ),
        jetstream=True,
        imports=(
            Import(
                account="ACC", subject=f"{api}.{next_subject}", to=f"{import_prefix}.{next_subject}"
            ),
            Import(account="ACC", subject=ack),
            Import(account="ACC", subject=fc),
        ),
    )
    system = Account(name="SYS", users=(User(user="admin", password=pw.get("admin", "admin")),))
    return AccountsConfig(accounts=(system, acc, importer), system_account="SYS")


class HubLeaf(Topology):
    """A hub server (domain ``hub``) and a leaf server (domain ``leaf``).

    The leaf connects to the hub with one leaf remote per account in
    ``remote_accounts`` (``ACC`` carries the data; ``SYS`` joins monitoring),
    each authenticated by a fresh nkey user added to that account (the seed is
    only in the leaf's 0600 config; passwords are stored as bcrypt hashes).
    Both servers load the same accounts (see :func:`hub_leaf_accounts`).

    Args:
        work_dir: ``hub/`` and ``leaf/`` sub-directories.
        hub_domain, leaf_domain: the two JetStream domains.
        accounts: accounts block for both servers (default: random passwords).
        remote_accounts: accounts linked over the leaf connection.
        sync_interval: JetStream fsync policy on both servers.
    """

    kind = "hub-leaf"

    def __init__(
        self,
        work_dir: Path,
        *,
        hub_domain: str = "hub",
        leaf_domain: str = "leaf",
        accounts: AccountsConfig | None = None,
        remote_accounts: tuple[str, ...] = ("SYS", "ACC"),
        sync_interval: str | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        super().__init__(work_dir, ready_timeout=ready_timeout)
        if accounts is None:
            passwords = {u: secrets.token_urlsafe(12) for u in ("admin", "acc", "import_client")}
            accounts = hub_leaf_accounts(passwords=passwords, hub_domain=hub_domain)
        hub_client, hub_leaf, hub_http, leaf_client, leaf_http = free_ports(5)
        self.leaf_port = hub_leaf
        remotes = []
        link_keys = {name: new_keypair("user") for name in remote_accounts}
        accounts = replace(
            accounts,
            accounts=tuple(
                replace(acc, users=(*acc.users, User(nkey=link_keys[acc.name].public)))
                if acc.name in link_keys
                else acc
                for acc in accounts.accounts
            ),
        )
        for name in remote_accounts:
            remotes.append(
                LeafRemote(
                    url=f"nats-leaf://127.0.0.1:{hub_leaf}",
                    account=name,
                    nkey_seed=link_keys[name].seed,
                )
            )
        self.accounts = accounts
        self.domains = {"hub": hub_domain, "leaf": leaf_domain}
        self.remote_accounts = remote_accounts
        for role, client, http, leafnodes in (
            ("hub", hub_client, hub_http, LeafNodeConfig(port=hub_leaf)),
            ("leaf", leaf_client, leaf_http, LeafNodeConfig(remotes=tuple(remotes))),
        ):
            config = ServerConfig(
                server_name=f"{role}-server",
                port=client,
                http_port=http,
                jetstream=JetStreamConfig(
                    store_dir=self.work_dir / role / "jetstream",
                    domain=self.domains[role],
                    sync_interval=sync_interval,
                ),
                blocks=(accounts, leafnodes),
            )
            self._add(role, config)

    @property
    def hub(self) -> NatsServer:
        """The hub server."""
        return self.servers["hub"]

    @property
    def leaf(self) -> NatsServer:
        """The leaf server."""
        return self.servers["leaf"]

    def credentials(self, account: str) -> tuple[str, str]:
        """(user, password) of the first user of ``account``."""
        user = self.accounts[account].users[0]
        assert user.user is not None and user.password is not None
        return user.user, user.password

    def options(self, server: str, *, account: str = "ACC", **kwargs: Any) -> ConnectOptions:
        """ConnectOptions for a user of ``account`` at ``server`` ("hub" or "leaf").

        Unless ``api_prefix`` or ``domain`` is given, the domain of ``server`` is used.
        """
        user, password = self.credentials(account)
        if "api_prefix" not in kwargs:
            kwargs.setdefault("domain", self.domains[server])
        kwargs.setdefault("reconnect_wait", 0.1)
        return ConnectOptions(servers=(self.url(server),), user=user, password=password, **kwargs)

    async def create_walkthrough_streams(self) -> None:
        """The walk-through streams: ``test`` at the leaf; at the hub ``test-mirror``
        (mirror) and ``aggregate`` (source) of it, and the durable pull consumer
        ``dur`` on ``aggregate`` that ``IMPORT_CLIENT`` may use."""
        from .._connection import connect
        from ..streams import StreamSource, StreamSpec, ensure_stream

        async with await connect(self.options("leaf")) as leaf:
            await ensure_stream(leaf, StreamSpec(name="test", subjects=("test", "test.>")))
        origin = StreamSource(name="test", domain=self.domains["leaf"])
        async with await connect(self.options("hub")) as hub:
            await ensure_stream(hub, StreamSpec(name="test-mirror", mirror=origin))
            await ensure_stream(hub, StreamSpec(name="aggregate", sources=(origin,)))
            config = {"durable_name": "dur", "ack_policy": "explicit", "deliver_policy": "all"}
            await hub.api(
                "CONSUMER.CREATE.aggregate.dur", {"stream_name": "aggregate", "config": config}
            )

    def leaf_connected(self) -> str | None:
        """None when every leaf remote is connected (seen from both sides), else why not."""
        for role in ("leaf", "hub"):
            leafz = monitor(self.http_ports[role], "/leafz")
            if leafz is None:
                return f"{role} monitoring not answering"
            accounts = {leaf.get("account") for leaf in leafz.get("leafs") or []}
            missing = set(self.remote_accounts) - accounts
            if missing:
                return f"{role}: leaf connection for {sorted(missing)} not established"
        return None

    def wait_leaf_connected(self, timeout: float = 30.0) -> None:
        """Wait until the leaf link is up for every remote account."""
        wait_for(self.leaf_connected, timeout=timeout, what="the leaf connection")

    def _not_ready(self) -> str | None:
        for role in ("hub", "leaf"):
            reason = _healthy(self.http_ports[role])
            if reason:
                return f"{role}: {reason}"
        return self.leaf_connected()

    def state(self) -> dict[str, Any]:
        state = super().state()
        state["users"] = {
            account.name: {"user": user.user, "password": user.password}
            for account in self.accounts.accounts
            for user in account.users[:1]
            if user.user is not None
        }
        return state
