"""The servers of one trial, each in its own network namespace (see :mod:`torture.netns`).

Kinds: ``single`` (one server, ``sync_interval: always``, store on a small
tmpfs), ``cluster`` (3 nodes, stream R3, server default sync), ``leaf`` (a leaf
in domain ``leaf`` whose stream the hub, domain ``hub``, sources), ``cluster-sync``
(the cluster with ``sync_interval: always``, to compare with the default).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

from oncestream import ConnectOptions, OncestreamError, connect
from oncestream.server import (
    ClusterConfig,
    JetStreamConfig,
    LeafNodeConfig,
    LeafRemote,
    NatsServer,
    ServerConfig,
)
from oncestream.streams import StreamSource, StreamSpec, ensure_stream

from .cachefs import CacheMount
from .netns import Net

#: ``cluster`` runs the server's default sync; ``cluster-sync`` adds ``sync_interval: always``.
KINDS = ("single", "cluster", "leaf", "cluster-sync")
CLIENT, ROUTE, LEAF, HTTP = 4222, 6222, 7422, 8222
STREAM, SUBJECT = "T", "t"
#: The Publisher's own stream in short-window trials (it relies on the window by design).
PUB_STREAM, PUB_SUBJECT = "TP", "tp"
HUB_STREAM = "TH"
PROGRESS_STREAM, PROGRESS_SUBJECT = "ONCESTREAM_PUBLISH_PROGRESS", "oncestream.publish.progress"
TMPFS_BYTES = 48 * 1024 * 1024
LAZY_STORE_BYTES = 1 << 30


def stream_spec(*, replicas: int, window: float | None, partitions: int) -> StreamSpec:
    """The producers' stream :data:`STREAM`, as oncestream creates streams for users:
    ``allow_batched`` where the server takes fast-ingest batches (the Publishers' first
    attempts go that way), the default duplicate window unless the trial drew a short
    one. ``partitions`` (``members=partitioned``): ``t.*`` in that many partitions keyed
    by token 1, the producer's name (``t.pub``, ``t.sess``, ``t.cli``: see
    :mod:`torture.options`); 0: ``t.>``, not partitioned."""
    if partitions:
        spec = StreamSpec(name=STREAM, subjects=(f"{SUBJECT}.*",), replicas=replicas,
                          partitions=partitions, partition_key=(1,))  # fmt: skip
    else:
        spec = StreamSpec(name=STREAM, subjects=(f"{SUBJECT}.>",), replicas=replicas)
    if window is not None:
        spec = replace(spec, duplicate_window=window)
    return spec


class Topology:
    """Servers of one trial kind, started inside namespaces of ``net``."""

    def __init__(
        self, kind: str, net: Net, work: Path, *, lazy: bool = False, spare: bool = False
    ) -> None:
        self.kind, self.net, self.work = kind, net, work
        self.servers: dict[str, NatsServer] = {}
        self.addr: dict[str, str] = {}
        self.store_mount: Path | None = None
        #: ``lazy``: each node's store on its own page-cache mount (the lost-page-cache faults).
        self.lazy: dict[str, CacheMount] = {}
        self._want_lazy = lazy
        self.clustered = kind.startswith("cluster")
        nodes = (
            ["c1", "c2", "c3"]
            if self.clustered
            else {"single": ["s1"], "leaf": ["hub", "leaf"]}[kind]
        )
        #: ``spare``: a fourth cluster node, configured and routed, started by the first
        #: membership change (a fresh node for the stream to move a replica to).
        self.spare = "c4" if spare and self.clustered else None
        if self.spare:
            nodes.append(self.spare)
        #: Nodes whose server was started at least once (the spare only after its start).
        self.started: set[str] = set()
        #: ``time.monotonic()`` of each node's last (re)start.
        self.started_at: dict[str, float] = {}
        for node in nodes:
            self.addr[node] = net.add_node(node)
        for node in nodes:
            self._add(node)

    def store(self, node: str) -> Path:
        """``node``'s JetStream store folder (a page-cache mount in ``lazy`` trials)."""
        return self.work / node / "jetstream"

    def _add(self, node: str) -> None:
        store = self.store(node)
        store.mkdir(parents=True, exist_ok=True)
        if self._want_lazy:
            self.lazy[node] = CacheMount(store, self.work / node)
        blocks: tuple[Any, ...] = ()
        domain = sync = None
        if self.kind == "single":
            self.net.track_mount(str(store))
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_BYTES}", "tmpfs", str(store)],
                check=True,
                timeout=20,
            )
            self.store_mount = store
            sync = "always"
        elif self.clustered:
            sync = "always" if self.kind == "cluster-sync" else None
            routes = tuple(f"nats-route://{a}:{ROUTE}" for n, a in self.addr.items() if n != node)
            blocks = (ClusterConfig(name="C", port=ROUTE, host=self.addr[node], routes=routes),)
        elif node == "hub":
            domain = "hub"
            blocks = (LeafNodeConfig(port=LEAF, host=self.addr[node]),)
        else:
            domain = "leaf"
            remote = LeafRemote(url=f"nats-leaf://{self.addr['hub']}:{LEAF}", account="$G")
            blocks = (LeafNodeConfig(remotes=(remote,), reconnect=0.25),)
        config = ServerConfig(
            host=self.addr[node],
            loopback_only=False,
            port=CLIENT,
            http_port=HTTP,
            server_name=node,
            jetstream=JetStreamConfig(
                store_dir=store,
                domain=domain,
                sync_interval=sync,
                # nats-server sizes a store from its disk's free space: on the page-cache
                # mounts (which hold writes in memory) give it a fixed limit instead.
                max_file_store=TMPFS_BYTES * 4
                if self.kind == "single"
                else (LAZY_STORE_BYTES if self._want_lazy else None),
            ),
            blocks=blocks,
        )
        self.servers[node] = NatsServer(
            config,
            work_dir=self.work / node,
            command_prefix=self.net.exec_prefix(node),
            ready_timeout=30,
        )

    def start(self) -> None:
        for mount in self.lazy.values():
            self.net.track_mount(str(mount.mount))  # a crashed run's cleanup unmounts it
            mount.start()
            assert mount.proc is not None
            self.net.track_pid(mount.proc.pid)
        for node, server in self.servers.items():
            if node == self.spare:
                continue
            server.start()
            assert server.pid is not None
            self.net.track_pid(server.pid)
            self.started.add(node)
            self.started_at[node] = time.monotonic()

    def restart(self, node: str) -> None:
        server = self.servers[node]
        server.kill()
        server.start()
        assert server.pid is not None
        self.net.track_pid(server.pid)
        self.started.add(node)
        self.started_at[node] = time.monotonic()

    def members(self) -> list[str]:
        """The nodes of the cluster (or the trial's servers): every one started so far."""
        return [n for n in self.servers if n in self.started]

    def url(self, node: str) -> str:
        return f"nats://{self.addr[node]}:{CLIENT}"

    def producer_target(self) -> dict[str, Any]:
        """servers/domain the producers use."""
        if self.clustered:
            return {"servers": [self.url(n) for n in self.servers], "domain": None}
        if self.kind == "leaf":
            return {"servers": [self.url("leaf")], "domain": "leaf"}
        return {"servers": [self.url("s1")], "domain": None}

    def processor_target(self) -> dict[str, Any]:
        """servers/domain/stream the processors use."""
        if self.kind == "leaf":
            return {"servers": [self.url("hub")], "domain": "hub", "stream": HUB_STREAM}
        return {**self.producer_target(), "stream": STREAM}

    def connect_options(self, target: dict[str, Any]) -> ConnectOptions:
        return ConnectOptions(
            servers=tuple(target["servers"]),
            domain=target.get("domain"),
            reconnect_wait=0.2,
            max_reconnect_attempts=-1,
            connect_timeout=3.0,
        )

    async def create_streams(
        self, timeout: float = 60.0, *, window: float | None = None, partitions: int = 0
    ) -> None:
        """Create the streams, retrying while the cluster elects its meta leader.

        ``window``: the producers' stream's duplicate window (None: StreamSpec's default,
        what users get); a short one also creates :data:`PUB_STREAM`, the Publisher's.
        ``partitions``: the producers' stream in that many partitions (:func:`stream_spec`).
        """
        if partitions and self.kind == "leaf":
            raise ValueError("a leaf trial's processed stream sources the leaf's: no partitions")
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await self._create_streams(window, partitions)
            except OncestreamError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def _create_streams(self, window: float | None, partitions: int) -> None:
        replicas = 3 if self.clustered else 1
        spec = stream_spec(replicas=replicas, window=window, partitions=partitions)
        # A fresh cluster drops API requests until it has a meta leader (~0.4 s): a
        # short request timeout retries soon instead of waiting the default 5 s.
        options = replace(self.connect_options(self.producer_target()), request_timeout=1.5)
        # The CLI's progress stream, as `oncestream publish` would create it on first use.
        # Created here because the CLI, started while the disk is full, reports the
        # failed creation as a configuration error (exit 2): docs/guarantees.md, finding 9.
        progress = StreamSpec(
            name=PROGRESS_STREAM,
            subjects=(f"{PROGRESS_SUBJECT}.>",),
            max_msgs_per_subject=4,
            duplicate_window=60.0,
            replicas=replicas,
        )
        async with await connect(options) as conn:
            await ensure_stream(conn, spec)
            await ensure_stream(conn, progress)
            if window is not None:
                pub = StreamSpec(name=PUB_STREAM, subjects=(f"{PUB_SUBJECT}.>",), replicas=replicas)
                await ensure_stream(conn, pub)
        if self.kind == "leaf":
            origin = StreamSource(name=STREAM, domain="leaf")
            hub = self.connect_options(self.processor_target())
            async with await connect(hub) as conn:
                await ensure_stream(conn, StreamSpec(name=HUB_STREAM, sources=(origin,)))

    async def leader(self) -> str | None:
        """The cluster's stream leader (server name), or None."""
        peers = await self.peers_now()
        return peers[0] if peers else None

    async def peers_now(self) -> list[str]:
        """The stream's peers, its leader first ([]: unknown, or no leader)."""
        return self.peers_of(await self.stream_cluster())

    async def stream_cluster(self) -> dict[str, Any]:
        """``STREAM.INFO``'s cluster block of the producers' stream ({}: unknown, or no
        leader)."""
        if not self.clustered:
            return {}
        try:
            async with await connect(self.connect_options(self.producer_target())) as conn:
                return await self._cluster(conn)
        except Exception:
            return {}

    @classmethod
    async def stream_peers(cls, conn: Any) -> list[str]:
        """``STREAM.INFO``'s peer set of the producers' stream: its leader, then each
        replica ([] without a leader)."""
        return cls.peers_of(await cls._cluster(conn))

    @staticmethod
    async def _cluster(conn: Any) -> dict[str, Any]:
        try:
            info = await conn.stream_info(STREAM)
        except Exception:
            return {}
        cluster: dict[str, Any] = info.get("cluster") or {}
        return cluster if cluster.get("leader") else {}

    @staticmethod
    def peers_of(cluster: dict[str, Any]) -> list[str]:
        """A cluster block's leader, then each replica ([] without a leader)."""
        if not cluster:
            return []
        replicas = [str(r.get("name")) for r in cluster.get("replicas") or () if r.get("name")]
        return [str(cluster["leader"]), *replicas]

    @staticmethod
    def behind_of(cluster: dict[str, Any]) -> list[str]:
        """A cluster block's replicas that are not current (offline, or catching up after
        a restart, a truncation or a lost page cache)."""
        return sorted(
            str(r.get("name"))
            for r in cluster.get("replicas") or ()
            if r.get("offline") or not r.get("current")
        )

    def meta_current(self, node: str) -> bool:
        """Whether the JetStream meta leader counts ``node`` a current peer (its ``/jsz``
        lists the meta group's replicas): a stream can be placed on it."""
        for addr in self.addr.values():
            try:
                url = f"http://{addr}:{HTTP}/jsz"
                with urllib.request.urlopen(url, timeout=1.0) as response:
                    meta = json.loads(response.read()).get("meta_cluster") or {}
            except (OSError, ValueError):
                continue
            for replica in meta.get("replicas") or ():
                if replica.get("name") == node and replica.get("current"):
                    return True
        return False

    def meta_leaders(self) -> dict[str, str | None]:
        """Each node's JetStream metadata leader per its ``/jsz`` ("": none; None: no
        answer)."""
        out: dict[str, str | None] = {}
        for node, addr in self.addr.items():
            try:
                url = f"http://{addr}:{HTTP}/jsz"
                with urllib.request.urlopen(url, timeout=2.0) as response:
                    meta = json.loads(response.read()).get("meta_cluster") or {}
                out[node] = str(meta.get("leader") or "")
            except (OSError, ValueError):
                out[node] = None
        return out

    def stop(self) -> None:
        for server in self.servers.values():
            try:
                server.kill()
            except Exception:
                pass
        if self.store_mount is not None:
            subprocess.run(["umount", "-l", str(self.store_mount)], check=False, timeout=20)
        for mount in self.lazy.values():
            mount.stop()
