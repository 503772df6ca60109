"""Network namespaces for the fault campaign: one per nats-server, a bridge, host access.

Layout for run id ``r`` (4 hex chars) and subnet ``10.77.<k>.0/24``:

* namespace ``os-r-br`` holds bridge ``br0``;
* namespace ``os-r-<node>`` holds ``eth0`` = ``10.77.<k>.<i>/24``, its veth peer
  ``v<node>`` is enslaved to ``br0``;
* the host gets veth ``osr-h`` = ``10.77.<k>.254/24`` whose peer ``host`` is on
  ``br0``, so clients run on the host and reach every server directly (no
  forwarding, no NAT, nothing touched outside what we create).

Faults: ``link_down``/``link_up`` set the node's bridge-side veth down (the
node is cut from everyone), ``degrade`` adds loss/delay on the node's ``eth0``
(netem, or a token bucket where the kernel lacks netem).

Everything created is written to a state file under :data:`STATE_DIR` *before*
it is created; :func:`cleanup_stale` (run at the start of each campaign) removes
what a crashed earlier run left, by recorded name only, after checking that the
recording process is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("TORTURE_STATE_DIR", "/run/oncestream-torture"))


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["ip", "netns", "exec", ns, *args] if ns else list(args)
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {result.stderr.strip()}")
    return result


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(state: dict[str, Any]) -> None:
    """Undo one recorded run: processes, mounts, host veth, namespaces (each by name)."""
    for pid in state.get("pids", []):
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for mount in state.get("mounts", []):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False, timeout=20)
    for link in state.get("host_links", []):
        subprocess.run(
            ["ip", "link", "del", "dev", link], capture_output=True, check=False, timeout=20
        )
    for ns in reversed(state.get("namespaces", [])):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False, timeout=20)


def cleanup_stale() -> list[str]:
    """Remove leftovers of earlier runs whose harness process is gone; return their run ids."""
    removed = []
    if not STATE_DIR.is_dir():
        return removed
    for path in sorted(STATE_DIR.glob("*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _alive(int(state.get("owner", 0))) and state.get("owner") != os.getpid():
            continue  # a concurrent run (e.g. the smoke test next to `make torture`)
        _remove(state)
        path.unlink(missing_ok=True)
        removed.append(str(state.get("run_id")))
    return removed


def _used_subnets() -> set[int]:
    used = set()
    for path in STATE_DIR.glob("*.json"):
        try:
            used.add(int(json.loads(path.read_text())["subnet"]))
        except (OSError, ValueError, KeyError):
            continue
    routes = _ip("ip", "-4", "route", "show", check=False).stdout
    for k in range(1, 255):
        if f"10.77.{k}." in routes:
            used.add(k)
    return used


class Net:
    """The namespaces of one run. Use as a context manager, or call :meth:`teardown`."""

    def __init__(self, run_id: str) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        free = [k for k in range(1, 255) if k not in _used_subnets()]
        if not free:
            raise RuntimeError("no free 10.77.<k>.0/24 subnet for the torture network")
        self.subnet = free[0]
        self.state_file = STATE_DIR / f"{run_id}.json"
        self.state: dict[str, Any] = {
            "run_id": run_id,
            "owner": os.getpid(),
            "subnet": self.subnet,
            "namespaces": [],
            "host_links": [],
            "mounts": [],
            "pids": [],
        }
        self.nodes: dict[str, str] = {}  # node -> address
        self.bridge_ns = self._ns_name("br")
        self._save()
        try:
            self._setup_bridge(run_id)
        except BaseException:
            self.teardown()
            raise

    def _setup_bridge(self, run_id: str) -> None:
        self._add_ns(self.bridge_ns)
        _ip("ip", "link", "add", "br0", "type", "bridge", ns=self.bridge_ns)
        _ip("ip", "link", "set", "br0", "up", ns=self.bridge_ns)
        _ip("ip", "link", "set", "lo", "up", ns=self.bridge_ns)
        host_link = f"os{run_id}-h"
        self.state["host_links"].append(host_link)
        self._save()
        _ip("ip", "link", "add", host_link, "type", "veth", "peer", "name", "host")
        _ip("ip", "link", "set", "dev", "host", "netns", self.bridge_ns)
        _ip("ip", "link", "set", "dev", "host", "master", "br0", ns=self.bridge_ns)
        _ip("ip", "link", "set", "dev", "host", "up", ns=self.bridge_ns)
        _ip("ip", "addr", "add", f"10.77.{self.subnet}.254/24", "dev", host_link)
        _ip("ip", "link", "set", "dev", host_link, "up")

    def _ns_name(self, node: str) -> str:
        return f"os-{self.run_id}-{node}"

    def _save(self) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state))
        tmp.replace(self.state_file)

    def _add_ns(self, ns: str) -> None:
        self.state["namespaces"].append(ns)
        self._save()
        _ip("ip", "netns", "add", ns)

    def add_node(self, node: str) -> str:
        """Create the namespace of ``node`` on the bridge; return its address."""
        ns = self._ns_name(node)
        index = len(self.nodes) + 1
        address = f"10.77.{self.subnet}.{index}"
        self._add_ns(ns)
        veth = (
            "ip",
            "link",
            "add",
            "eth0",
            "netns",
            ns,
            "type",
            "veth",
            "peer",
            "name",
            f"v{node}",
        )
        _ip(*veth, ns=self.bridge_ns)
        _ip("ip", "link", "set", "dev", f"v{node}", "master", "br0", ns=self.bridge_ns)
        _ip("ip", "link", "set", "dev", f"v{node}", "up", ns=self.bridge_ns)
        _ip("ip", "addr", "add", f"{address}/24", "dev", "eth0", ns=ns)
        _ip("ip", "link", "set", "eth0", "up", ns=ns)
        _ip("ip", "link", "set", "lo", "up", ns=ns)
        self.nodes[node] = address
        return address

    def exec_prefix(self, node: str) -> tuple[str, ...]:
        """argv prefix running a command inside ``node``'s namespace (``ip`` execs it)."""
        return ("ip", "netns", "exec", self._ns_name(node))

    def track_pid(self, pid: int) -> None:
        """Record a process started in a namespace, so a crashed run's cleanup kills it."""
        self.state["pids"].append(pid)
        self._save()

    def track_mount(self, path: str) -> None:
        self.state["mounts"].append(path)
        self._save()

    # -- faults ---------------------------------------------------------------------

    def link_down(self, node: str) -> None:
        _ip("ip", "link", "set", "dev", f"v{node}", "down", ns=self.bridge_ns)

    def link_up(self, node: str) -> None:
        _ip("ip", "link", "set", "dev", f"v{node}", "up", ns=self.bridge_ns)

    def degrade(self, node: str, *, loss_pct: float = 0.0, delay_ms: int = 0) -> str:
        """Slow and lossy ``eth0`` of ``node``; returns the qdisc used.

        ``netem`` when the kernel has it; otherwise (e.g. this CI's Firecracker
        kernel has no sch_netem) a token bucket: a low rate with a queue of
        ``delay_ms`` gives queueing latency, and tail drops beyond it give loss.
        """
        ns = self._ns_name(node)
        args = ["tc", "qdisc", "replace", "dev", "eth0", "root", "netem"]
        if delay_ms:
            args += ["delay", f"{delay_ms}ms", f"{max(1, delay_ms // 4)}ms"]
        if loss_pct:
            args += ["loss", f"{loss_pct}%"]
        if _ip(*args, ns=ns, check=False).returncode == 0:
            return "netem"
        rate = "256kbit" if loss_pct else "2mbit"
        latency = f"{max(delay_ms, 20)}ms"
        _ip(
            "tc",
            "qdisc",
            "replace",
            "dev",
            "eth0",
            "root",
            "tbf",
            "rate",
            rate,
            "burst",
            "4kb",
            "latency",
            latency,
            ns=ns,
        )
        return "tbf"

    def degrade_clear(self, node: str) -> None:
        _ip("tc", "qdisc", "del", "dev", "eth0", "root", ns=self._ns_name(node), check=False)

    def teardown(self) -> None:
        """Remove everything this run created (idempotent)."""
        _remove(self.state)
        self.state_file.unlink(missing_ok=True)
        self.state_file.with_suffix(".tmp").unlink(missing_ok=True)

    def __enter__(self) -> Net:
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()
