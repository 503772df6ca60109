"""Process control for multi-server topologies; the 3-node cluster (hub + leaf: ``_hubleaf``).

Readiness is observed, not assumed: after starting the processes we poll
(bounded in time) the servers' monitoring endpoints ``/healthz``, ``/jsz``,
``/routez`` and ``/leafz`` until routes are up, a JetStream meta leader exists
and leaf connections are established.

Example::

    with Cluster(work_dir, size=3) as cluster:
        opts = cluster.options()        # every node's URL
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import orjson

from .._errors import ServerError
from .._options import ConnectOptions
from .._private import private_dir
from ._config import JetStreamConfig, ServerConfig
from ._process import NatsServer, _state, find_nats_server
from ._topology import AccountsConfig, ClusterConfig

__all__ = ["Cluster", "Topology", "free_ports", "monitor", "stop_pid", "wait_for"]

_POLL = 0.05


def free_ports(count: int) -> list[int]:
    """``count`` distinct currently-free TCP ports on 127.0.0.1."""
    with ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def monitor(http_port: int, path: str, timeout: float = 1.0) -> dict[str, Any] | None:
    """GET a monitoring endpoint (``/jsz``, ``/leafz``...) as JSON; None if unreachable."""
    url = f"http://127.0.0.1:{http_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            data: dict[str, Any] = orjson.loads(response.read())
            return data
    except urllib.error.HTTPError as exc:
        # /healthz answers 503 with a JSON body while JetStream is not ready.
        try:
            body: dict[str, Any] = orjson.loads(exc.read())
            return body
        except orjson.JSONDecodeError:
            return None
    except (OSError, orjson.JSONDecodeError):
        return None


def wait_for(check: Callable[[], str | None], *, timeout: float, what: str) -> None:
    """Poll ``check`` until it returns None (satisfied), at most ``timeout`` seconds.

    ``check`` returns a short reason while the condition does not hold yet.

    Raises:
        ServerError: naming ``what`` and the last reason when time runs out.
    """
    deadline = time.monotonic() + timeout
    reason = check()
    while reason is not None:
        if time.monotonic() >= deadline:
            raise ServerError(f"timed out after {timeout:.0f}s waiting for {what}: {reason}")
        time.sleep(_POLL)
        reason = check()


def _healthy(http_port: int) -> str | None:
    health = monitor(http_port, "/healthz")
    if health is None:
        return f"monitoring port {http_port} not answering"
    if health.get("status") != "ok":
        return f"/healthz on {http_port}: {health.get('error') or health}"
    return None


def _pid_is_server(pid: int, config_file: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return config_file.encode() in cmdline


def spawn_detached(server: NatsServer) -> int:
    """Start ``server`` as an independent process (survives this interpreter); its PID."""
    server.write_config()
    with open(server.log_file, "ab") as log:
        proc = subprocess.Popen(
            [find_nats_server(), "-c", str(server.config_file)],
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return proc.pid


def stop_pid(pid: int, config_file: str, timeout: float = 10.0) -> bool:
    """Stop a detached nats-server by PID (SIGTERM, then SIGKILL after ``timeout``).

    The PID is only signalled if it still runs nats-server with ``config_file``
    (PIDs get reused). Returns False when it was not running.
    """
    if not _pid_is_server(pid, config_file):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    # Not the command line: a process that is exiting shows an empty one for a while
    # (its memory is gone first) and still holds its ports and files.
    while _running(pid):
        if time.monotonic() >= deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
        time.sleep(_POLL)
        _reap(pid)
    return True


def _running(pid: int) -> bool:
    """Whether ``pid`` is a process that has not finished exiting (a zombie has)."""
    return _state(pid) not in (None, "Z", "X")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


class Topology:
    """Several nats-servers started, awaited and stopped together.

    Subclasses build :attr:`servers` (name -> NatsServer) and :meth:`_not_ready`.
    """

    kind = "topology"

    def __init__(self, work_dir: Path, *, ready_timeout: float = 30.0) -> None:
        self.work_dir = private_dir(work_dir)
        self.ready_timeout = ready_timeout
        self.servers: dict[str, NatsServer] = {}
        self.http_ports: dict[str, int] = {}
        self.client_ports: dict[str, int] = {}
        self.detached_pids: dict[str, int] = {}

    def _add(self, name: str, config: ServerConfig) -> None:
        self.servers[name] = NatsServer(config, work_dir=self.work_dir / name)
        assert config.http_port is not None
        self.http_ports[name] = config.http_port
        self.client_ports[name] = config.port

    def url(self, name: str) -> str:
        """Client URL of server ``name``."""
        return f"nats://127.0.0.1:{self.client_ports[name]}"

    def _not_ready(self) -> str | None:
        raise NotImplementedError

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the whole topology is formed (see the subclass)."""
        wait_for(self._not_ready, timeout=timeout or self.ready_timeout, what=f"{self.kind}")

    def up(self, *, detach: bool = False) -> Self:
        """Start every server and wait for the topology to form.

        Args:
            detach: start independent processes that outlive this interpreter
                (for ``oncestream topology up``); stop them with :func:`stop_pid`.
        """
        try:
            for name, server in self.servers.items():
                if detach:
                    self.detached_pids[name] = spawn_detached(server)
                else:
                    # Cluster nodes only report ready once they see each other,
                    # so start them without waiting and check readiness below.
                    server.start()
            self.wait_ready()
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop every server (gracefully, by PID)."""
        for name, server in self.servers.items():
            pid = self.detached_pids.pop(name, None)
            if pid is not None:
                stop_pid(pid, str(server.config_file))
            server.stop()

    def start(self, name: str) -> None:
        """(Re)start server ``name`` (same ports, same store) without waiting for the rest."""
        self.servers[name].start()

    def state(self) -> dict[str, Any]:
        """What ``topology up`` records: kind, servers, PIDs, URLs, monitoring ports."""
        return {
            "kind": self.kind,
            "servers": {
                name: {
                    "url": self.url(name),
                    "monitor": f"http://127.0.0.1:{self.http_ports[name]}",
                    "pid": self.detached_pids.get(name) or server.pid,
                    "config_file": str(server.config_file),
                    "log_file": str(server.log_file),
                    "domain": server.config.jetstream.domain if server.config.jetstream else None,
                }
                for name, server in self.servers.items()
            },
        }

    def __enter__(self) -> Self:
        return self.up()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    def __iter__(self) -> Iterator[NatsServer]:
        return iter(self.servers.values())


class Cluster(Topology):
    """A JetStream cluster of ``size`` nodes on loopback, full mesh of routes.

    Args:
        work_dir: one sub-directory per node (config, log, store).
        size: number of nodes (3 for R3 streams).
        name: cluster name; nodes are ``<name>-0`` ... ``<name>-N``.
        sync_interval: JetStream fsync policy (``"always"`` survives SIGKILL of
            every node; with replicas, a minority can be lost regardless).
        domain: optional JetStream domain.
        accounts: optional accounts block (default: the global account, no auth).
    """

    kind = "cluster"

    def __init__(
        self,
        work_dir: Path,
        *,
        size: int = 3,
        name: str = "oncestream",
        sync_interval: str | None = "always",
        domain: str | None = None,
        accounts: AccountsConfig | None = None,
        ready_timeout: float = 30.0,
    ) -> None:
        super().__init__(work_dir, ready_timeout=ready_timeout)
        self.size = size
        ports = free_ports(3 * size)
        client, route, http = ports[:size], ports[size : 2 * size], ports[2 * size :]
        self.node_names = [f"{name}-{i}" for i in range(size)]
        for i, node in enumerate(self.node_names):
            routes = tuple(f"nats-route://127.0.0.1:{route[j]}" for j in range(size) if j != i)
            blocks: tuple[Any, ...] = (ClusterConfig(name=name, port=route[i], routes=routes),)
            if accounts is not None:
                blocks += (accounts,)
            config = ServerConfig(
                server_name=node,
                port=client[i],
                http_port=http[i],
                jetstream=JetStreamConfig(
                    store_dir=self.work_dir / node / "jetstream",
                    domain=domain,
                    sync_interval=sync_interval,
                ),
                blocks=blocks,
            )
            self._add(node, config)

    @property
    def urls(self) -> tuple[str, ...]:
        """Client URLs of every node (give them all to ConnectOptions)."""
        return tuple(self.url(n) for n in self.node_names)

    def options(self, **kwargs: Any) -> ConnectOptions:
        """ConnectOptions listing every node."""
        kwargs.setdefault("reconnect_wait", 0.1)
        return ConnectOptions(servers=self.urls, **kwargs)

    def _node_not_ready(self, node: str) -> str | None:
        port = self.http_ports[node]
        reason = _healthy(port)
        if reason:
            return reason
        routez = monitor(port, "/routez") or {}
        if routez.get("num_routes", 0) < self.size - 1:
            return f"{node} has {routez.get('num_routes', 0)} of {self.size - 1} routes"
        jsz = monitor(port, "/jsz") or {}
        meta = jsz.get("meta_cluster") or {}
        if not meta.get("leader"):
            return f"{node}: no JetStream meta leader yet"
        if meta.get("leader") == node:
            replicas = meta.get("replicas") or []
            behind = [r.get("name") for r in replicas if not r.get("current")]
            if len(replicas) < self.size - 1 or behind:
                return f"meta leader {node}: peers not current: {behind or 'missing'}"
        return None

    def _not_ready(self) -> str | None:
        for node in self.node_names:
            if not self.servers[node].running() and node not in self.detached_pids:
                continue
            reason = self._node_not_ready(node)
            if reason:
                return reason
        return None

    def wait_node_current(self, node: str, timeout: float = 60.0) -> None:
        """Wait until ``node`` rejoined: routes up, healthy, meta and its streams caught up."""
        wait_for(lambda: self._node_not_ready(node), timeout=timeout, what=f"{node} to rejoin")
