"""The nats-server version a connection reached, and the check that a feature needs a newer one.

The version is the one the server announced in its ``INFO`` when the client
connected (the server this connection talks to; in a cluster of mixed
versions another may answer the JetStream API, which the callers' own error
handling covers).
"""

from __future__ import annotations

from .._connection import Connection
from .._errors import ConfigError

__all__ = ["require_server", "server_version"]


def server_version(conn: Connection) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` from the server's ``INFO``, or None when it gave none."""
    try:
        version = conn.nc.connected_server_version  # nats-py: "0.0.0-unknown" when none
        found = (int(version.major), int(version.minor), int(version.patch))
    except (AttributeError, ValueError, TypeError):
        return None
    return None if found == (0, 0, 0) else found


def require_server(conn: Connection, minimum: tuple[int, int], feature: str) -> None:
    """Refuse early when the connected server is older than ``minimum`` (major, minor).

    Raises:
        ConfigError: naming ``feature``, the version needed and the version found.
    """
    found = server_version(conn)
    if found is not None and found[:2] < minimum:
        needed = f"{minimum[0]}.{minimum[1]}"
        raise ConfigError(
            f"{feature} needs nats-server {needed} or newer; this server is "
            f"{'.'.join(str(p) for p in found)}"
        )
