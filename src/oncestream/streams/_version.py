"""The nats-server version a connection reached, the check that a feature needs a newer one,
and the start-up check against the releases with known exactly-once bugs.

The version is the one the server announced in its ``INFO`` when the client
connected (the server this connection talks to; in a cluster of mixed
versions another may answer the JetStream API, which the callers' own error
handling covers).
"""

from __future__ import annotations

import logging

from .._connection import Connection
from .._errors import ConfigError
from .._nats import server_info
from ._server_bugs import SERVER_BUGS, ServerBug, format_version, known_bugs

__all__ = [
    "check_server_bugs",
    "connected_server_name",
    "require_server",
    "server_cluster",
    "server_version",
]

log = logging.getLogger(__name__)

#: (bug key, server version) pairs already warned about in this process.
_warned: set[tuple[str, tuple[int, int, int]]] = set()


def server_version(conn: Connection) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` from the server's ``INFO``, or None when it gave none."""
    try:
        version = conn.nc.connected_server_version  # nats-py: "0.0.0-unknown" when none
        found = (int(version.major), int(version.minor), int(version.patch))
    except (AttributeError, ValueError, TypeError):
        return None
    return None if found == (0, 0, 0) else found


def server_cluster(conn: Connection) -> str | None:
    """The name of the cluster the connected server is in; None outside a cluster."""
    name = server_info(conn.nc).get("cluster")
    return str(name) if name else None


def connected_server_name(conn: Connection) -> str | None:
    """The name of the server the connection reached (its ``server_name``, or its id when
    none is configured); None when its ``INFO`` gave none."""
    name = server_info(conn.nc).get("server_name")
    return str(name) if name else None


def require_server(
    conn: Connection, minimum: tuple[int, int] | tuple[int, int, int], feature: str
) -> None:
    """Refuse early when the connected server is older than ``minimum``.

    Args:
        minimum: ``(major, minor)``, or ``(major, minor, patch)`` for a feature
            that needs a patch release.

    Raises:
        ConfigError: naming ``feature``, the version needed and the version found.
    """
    found = server_version(conn)
    if found is not None and found[: len(minimum)] < minimum:
        raise ConfigError(
            f"{feature} needs nats-server {format_version(minimum)} or newer; this server is "
            f"{format_version(found)}"
        )


def check_server_bugs(
    conn: Connection,
    use: str,
    *,
    replicas: int | None = None,
    table: tuple[ServerBug, ...] = SERVER_BUGS,
) -> list[ServerBug]:
    """The start-up check against the known-bug table for what the caller is about to do.

    Every row of ``table`` that the connected release has, that concerns ``use``
    (``"publish"``, ``"create"``) and whose scope this deployment is known to be
    in, is logged as a warning once per process (``at_start="warn"``) or refused
    (``"refuse"``). A release or scope the server does not reveal reports nothing:
    ``oncestream doctor`` lists what may apply.

    Args:
        replicas: the target stream's replicas, when there is one.

    Returns:
        The rows that apply (warned about now or before).

    Raises:
        ConfigError: a row with ``at_start="refuse"`` applies, naming the bug,
            the version and the fix.
    """
    version = server_version(conn)
    if version is None:
        return []
    cluster = server_cluster(conn) is not None
    applying = known_bugs(version, cluster=cluster, replicas=replicas, assume=False, table=table)
    found = [bug for bug in applying if use in bug.uses]
    for bug in found:
        text = (
            f"nats-server {format_version(version)} has a known bug ({bug.key}, "
            f"{bug.reference}): {bug.breaks}. It concerns {bug.touches}. Fixed in {bug.fix}; "
            "`oncestream doctor` checks a server and its streams"
        )
        if bug.at_start == "refuse":
            raise ConfigError(text)
        if (bug.key, version) not in _warned:
            _warned.add((bug.key, version))
            log.warning("%s", text)
    return found
