"""`oncestream topology up|down`: run a hub + leaf pair or a 3-node cluster locally.

``up`` starts detached nats-server processes, waits until the topology has
formed, and writes ``topology.json`` (PIDs, URLs, domains, credentials; mode
0600) into ``--dir``; ``down`` stops those processes by PID.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from .._errors import ConfigError, ServerError
from .._options import parse_duration
from .._private import private_dir, write_private
from .._sync import run_sync
from ..server import Cluster, HubLeaf, Topology, monitor
from ..server._internal import stop_pid
from ._app import app, cli_errors, console
from ._help import new_typer

topology_app = new_typer(
    help="Run a local multi-server topology (hub + leaf, or a 3-node cluster).",
)
app.add_typer(topology_app, name="topology")

STATE_FILE = "topology.json"
_DEFAULT_DIR = Path(".oncestream") / "topology"


class Kind(StrEnum):
    """The topologies ``up`` can start."""

    hub_leaf = "hub-leaf"
    cluster3 = "cluster3"


def _running(state: dict[str, Any]) -> list[str]:
    return [
        name
        for name, server in state.get("servers", {}).items()
        if server.get("pid") and _alive(int(server["pid"]), server["config_file"])
    ]


def _alive(pid: int, config_file: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return config_file.encode() in cmdline


def _read_state(directory: Path) -> dict[str, Any] | None:
    path = directory / STATE_FILE
    if not path.is_file():
        return None
    try:
        state: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not a topology state file: {exc}") from None
    return state


#: What ``up`` creates in ``--dir`` (a later ``up`` reuses it: stores survive).
_OURS = {STATE_FILE, "hub", "leaf", *(f"oncestream-{i}" for i in range(3))}


def _check_ours(directory: Path) -> None:
    """Refuse a ``--dir`` holding anything ``up`` did not create: it would be overwritten."""
    if directory.exists() and not directory.is_dir():
        raise ConfigError(f"--dir {directory} is not a directory")
    if not directory.is_dir():
        return
    foreign = sorted(p.name for p in directory.iterdir() if p.name not in _OURS)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ConfigError(
            f"--dir {directory} holds files topology did not create ({shown}); "
            "give a new or empty directory, or one a previous `topology up` used"
        )


def _print_state(state: dict[str, Any], directory: Path) -> None:
    where = escape(str(directory / STATE_FILE))
    console.print(f"[bold]{escape(state['kind'])}[/] is up (state: {where})")
    for name, server in state["servers"].items():
        # Printed without markup (names and URLs as they are): no style tags here.
        domain = f"  domain {server['domain']}" if server.get("domain") else ""
        console.print(
            f"  {name:<14} {server['url']}{domain}  monitor {server['monitor']}  "
            f"pid {server['pid']}",
            highlight=False,
            markup=False,
        )
    users = state.get("users") or {}
    if users:
        state_file = directory / STATE_FILE
        console.print(f"users (passwords in {state_file}, mode 0600):", markup=False)
        for account, cred in users.items():
            console.print(f"  {account:<14} {cred['user']}", highlight=False, markup=False)
    if state["kind"] == Kind.hub_leaf.value:
        leaf, hub = state["servers"]["leaf"], state["servers"]["hub"]
        acc = users.get("ACC", {})
        console.print(
            "streams: test (leaf) -> test-mirror, aggregate (hub); consumer aggregate/dur\n"
            "try, with the password read from the state file:\n"
            f'  export NATS_PASSWORD="$(python -c "import json; print(json.load(open('
            f"'{directory / STATE_FILE}'))['users']['ACC']['password'])\")\"\n"
            f"  oncestream publish FILE --stream test --subject test --id-field id "
            f"--server {leaf['url']} --user {acc.get('user')} --domain leaf\n"
            f"  oncestream status aggregate --server {hub['url']} --user {acc.get('user')} "
            "--domain hub",
            highlight=False,
            markup=False,
        )


@topology_app.command("up")
@cli_errors
def up_command(
    kind: Kind = typer.Argument(..., help="hub-leaf or cluster3."),
    directory: Path = typer.Option(
        _DEFAULT_DIR, "--dir", help="Where configs, stores, logs and the state file go."
    ),
    timeout: float = typer.Option(30.0, help="Seconds to wait for the topology to form."),
    streams: bool = typer.Option(
        True,
        help="hub-leaf: create the walk-through streams (test at the leaf; test-mirror, "
        "aggregate and its consumer dur at the hub).",
    ),
) -> None:
    """Start the servers detached, wait until formed, print URLs, domains and users."""
    if not timeout > 0:
        raise ConfigError(f"--timeout must be > 0 seconds, got {timeout}")
    parse_duration("--timeout", timeout)  # at most int64 nanoseconds, like every wait
    directory = directory.resolve()
    state = _read_state(directory)
    if state is not None and _running(state):
        raise ConfigError(
            f"a topology is already running from {directory} "
            f"(servers {', '.join(_running(state))}); run `oncestream topology down "
            f"--dir {directory}` first"
        )
    _check_ours(directory)
    private_dir(directory)
    topology: Topology
    if kind is Kind.hub_leaf:
        topology = HubLeaf(directory, ready_timeout=timeout)
    else:
        topology = Cluster(directory, size=3, ready_timeout=timeout)
    topology.up(detach=True)
    if streams and isinstance(topology, HubLeaf):
        try:
            run_sync(topology.create_walkthrough_streams(), timeout=60)
        except BaseException:
            topology.down()
            raise
    state = topology.state()
    write_private(directory / STATE_FILE, json.dumps(state, indent=2))
    _print_state(state, directory)


@topology_app.command("down")
@cli_errors
def down_command(
    directory: Path = typer.Option(_DEFAULT_DIR, "--dir", help="The directory given to `up`."),
) -> None:
    """Stop the servers recorded in the state file, by PID."""
    directory = directory.resolve()
    state = _read_state(directory)
    if state is None:
        raise ConfigError(f"no topology state file in {directory}; nothing to stop")
    stopped = []
    for name, server in state.get("servers", {}).items():
        if server.get("pid") and stop_pid(int(server["pid"]), server["config_file"]):
            stopped.append(name)
    (directory / STATE_FILE).unlink()
    shown = ", ".join(stopped) if stopped else "nothing (not running)"
    console.print(f"stopped {shown}", markup=False)


@topology_app.command("status")
@cli_errors
def status_command(
    directory: Path = typer.Option(_DEFAULT_DIR, "--dir", help="The directory given to `up`."),
) -> None:
    """Show which servers of the recorded topology are running and healthy."""
    directory = directory.resolve()
    state = _read_state(directory)
    if state is None:
        raise ConfigError(f"no topology state file in {directory}")
    unhealthy = []
    for name, server in state["servers"].items():
        port = int(server["monitor"].rsplit(":", 1)[1])
        health = (
            monitor(port, "/healthz") if _alive(int(server["pid"]), server["config_file"]) else None
        )
        status = "down" if health is None else str(health.get("status"))
        if status != "ok":
            unhealthy.append(name)
        console.print(f"  {name:<14} {server['url']}  {status}", highlight=False, markup=False)
    if unhealthy:
        raise ServerError(f"not healthy: {', '.join(unhealthy)}")
