"""Embedded nats-server: config rendering and process control.

Example::

    from oncestream.server import NatsServer

    with NatsServer() as server:
        print(server.url)
"""

from ._config import JetStreamConfig, ServerConfig, render
from ._process import NatsServer, find_nats_server

__all__ = ["JetStreamConfig", "NatsServer", "ServerConfig", "find_nats_server", "render"]
