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

from .netns import Net

#: ``cluster`` runs the server's default sync; ``cluster-sync`` adds ``sync_interval: always``.
KINDS = ("single", "cluster", "leaf", "cluster-sync")
CLIENT, ROUTE, LEAF, HTTP = 4222, 6222, 7422, 8222
STREAM, SUBJECT = "T", "t"
HUB_STREAM = "TH"
PROGRESS_STREAM, PROGRESS_SUBJECT = "ONCESTREAM_PUBLISH_PROGRESS", "oncestream.publish.progress"
TMPFS_BYTES = 48 * 1024 * 1024


class Topology:
    """Servers of one trial kind, started inside namespaces of ``net``."""

    def __init__(self, kind: str, net: Net, work: Path) -> None:
        self.kind, self.net, self.work = kind, net, work
        self.servers: dict[str, NatsServer] = {}
        self.addr: dict[str, str] = {}
        self.store_mount: Path | None = None
        self.clustered = kind.startswith("cluster")
        nodes = (
            ["c1", "c2", "c3"]
            if self.clustered
            else {"single": ["s1"], "leaf": ["hub", "leaf"]}[kind]
        )
        for node in nodes:
            self.addr[node] = net.add_node(node)
        for node in nodes:
            self._add(node)

    def _add(self, node: str) -> None:
        store = self.work / node / "jetstream"
        store.mkdir(parents=True, exist_ok=True)
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
                max_file_store=TMPFS_BYTES * 4 if self.kind == "single" else None,
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
        for server in self.servers.values():
            server.start()
            assert server.pid is not None
            self.net.track_pid(server.pid)

    def restart(self, node: str) -> None:
        server = self.servers[node]
        server.kill()
        server.start()
        assert server.pid is not None
        self.net.track_pid(server.pid)

    def url(self, node: str) -> str:
        return f"nats://{self.addr[node]}:{CLIENT}"

    def producer_target(self) -> dict[str, Any]:
        """servers/domain the producers use."""
        if self.clustered:
            return {"servers": [self.url(n) for n in ("c1", "c2", "c3")], "domain": None}
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

    async def create_streams(self, timeout: float = 60.0) -> None:
        """Create the streams, retrying while the cluster elects its meta leader."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return await self._create_streams()
            except OncestreamError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    async def _create_streams(self) -> None:
        replicas = 3 if self.clustered else 1
        # allow_batched: the producers' Publishers send first attempts as fast-ingest
        # batches (issue 24), so the campaign's faults land on that path.
        spec = StreamSpec(
            name=STREAM,
            subjects=(f"{SUBJECT}.>",),
            replicas=replicas,
            duplicate_window=300.0,
            allow_batched=True,
        )
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
        if self.kind == "leaf":
            origin = StreamSource(name=STREAM, domain="leaf")
            hub = self.connect_options(self.processor_target())
            async with await connect(hub) as conn:
                await ensure_stream(conn, StreamSpec(name=HUB_STREAM, sources=(origin,)))

    async def leader(self) -> str | None:
        """The cluster's stream leader (server name), or None."""
        if not self.clustered:
            return None
        try:
            async with await connect(self.connect_options(self.producer_target())) as conn:
                info = await conn.stream_info(STREAM)
        except Exception:
            return None
        leader = (info.get("cluster") or {}).get("leader")
        return str(leader) if leader else None

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
