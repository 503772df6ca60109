"""One cache of NATS connections per Python worker process, for the source and the sink.

Spark runs many tasks in one Python worker; each reuses the connection (and
the commit-record Publisher) of its process instead of connecting per task.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine
from typing import Any

from .._connection import Connection, connect
from .._options import ConnectOptions
from ..publish import Publisher, PublisherOptions

__all__ = ["close_connections", "get_connection", "get_publisher"]

_lock = threading.Lock()
_connections: dict[tuple[int, ConnectOptions, str | None], Connection] = {}
_publishers: dict[tuple[int, int, PublisherOptions], Publisher] = {}
#: The event loop each cached connection was opened on (its reads run there).
_loops: dict[int, asyncio.AbstractEventLoop] = {}


async def get_connection(options: ConnectOptions, *, name: str | None = None) -> Connection:
    """This process's connection for ``options`` (connected on first use, as ``name``)."""
    key = (os.getpid(), options, name)
    loop = asyncio.get_running_loop()
    conn = _connections.get(key)
    if conn is not None and not conn.is_closed and _loops.get(id(conn)) is loop:
        return conn
    conn = await connect(options.replace(name=name) if name else options)
    with _lock:
        _connections[key] = conn
        _loops[id(conn)] = loop
    return conn


async def get_publisher(conn: Connection, options: PublisherOptions) -> Publisher:
    """A started Publisher on ``conn`` kept for the process (e.g. for commit records)."""
    key = (os.getpid(), id(conn), options)
    pub = _publishers.get(key)
    if pub is None or pub.conn is not conn or pub.closed:
        pub = Publisher(conn, options)
        await pub.start()
        with _lock:
            _publishers[key] = pub
    return pub


async def close_connections() -> None:
    """Close this process's cached publishers and connections (tests and orderly shutdown)."""
    pid = os.getpid()
    with _lock:
        pubs = [_publishers.pop(k) for k in [k for k in _publishers if k[0] == pid]]
        conns = [_connections.pop(k) for k in [k for k in _connections if k[0] == pid]]
    for pub in pubs:
        await _on_own_loop(pub.conn, pub.close())
    for conn in conns:
        await _on_own_loop(conn, conn.close())
        _loops.pop(id(conn), None)


async def _on_own_loop(conn: Connection, closing: Coroutine[Any, Any, None]) -> None:
    """Run ``closing`` on the loop ``conn`` was opened on (a connection is bound to it)."""
    loop = _loops.get(id(conn))
    if loop is None or loop is asyncio.get_running_loop():
        await closing
        return
    if loop.is_closed() or not loop.is_running():
        closing.close()  # its loop is gone: nothing can run on it any more
        return
    with contextlib.suppress(Exception):
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(closing, loop))
