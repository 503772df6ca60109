"""Embedded nats-server: config rendering and process control.

Single servers (:class:`NatsServer`), and topologies beyond one process:
a 3-node :class:`Cluster` and a :class:`HubLeaf` pair with two JetStream
domains, built from typed config blocks (accounts, leaf nodes, routes,
authorization, TLS, operator JWTs).

Example::

    from oncestream.server import NatsServer

    with NatsServer() as server:
        print(server.url)
"""

from ._cluster import Cluster, Topology, monitor
from ._config import JetStreamConfig, ServerConfig
from ._hubleaf import HubLeaf, hub_leaf_accounts
from ._jwt import OperatorSetup
from ._process import NatsServer
from ._topology import (
    Account,
    AccountsConfig,
    Authorization,
    ClusterConfig,
    Export,
    Import,
    LeafNodeConfig,
    LeafRemote,
    OperatorConfig,
    ServerTLS,
    TLSConfig,
    User,
)

__all__ = [
    "Account",
    "AccountsConfig",
    "Authorization",
    "Cluster",
    "ClusterConfig",
    "Export",
    "HubLeaf",
    "Import",
    "JetStreamConfig",
    "LeafNodeConfig",
    "LeafRemote",
    "NatsServer",
    "OperatorConfig",
    "OperatorSetup",
    "ServerConfig",
    "ServerTLS",
    "TLSConfig",
    "Topology",
    "User",
    "hub_leaf_accounts",
    "monitor",
]
