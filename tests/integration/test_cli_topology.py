"""`oncestream topology up|down`: detached servers, state file, the hub/leaf walk-through."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from oncestream import ConnectOptions, connect
from oncestream.server import monitor
from tests._scenario import assert_exactly_once, stream_ids, wait_messages

CLI = str(Path(sys.executable).parent / "oncestream")


def _cli(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *args], capture_output=True, text=True, timeout=timeout, check=False, env=env
    )


def assert_secrets_private(directory: Path, passwords: list[str]) -> None:
    """Every directory 0700, every file that can hold a secret 0600; no plaintext password
    in any config; no server warned about plaintext passwords."""
    assert directory.stat().st_mode & 0o777 == 0o700
    for path in directory.rglob("*"):
        mode = path.stat().st_mode & 0o777
        if path.is_dir():
            assert mode == 0o700, f"{path} is {mode:o}"
        elif path.suffix in (".conf", ".json", ".creds", ".nk", ".key"):
            assert mode == 0o600, f"{path} is {mode:o}"
        if path.suffix == ".conf":
            text = path.read_text()
            leaked = [pw for pw in passwords if pw in text]
            assert not leaked, f"{path} holds a plaintext password"
            assert "$2a$" in text, f"{path} holds no bcrypt hash"
        if path.suffix == ".log":
            assert "Plaintext passwords detected" not in path.read_text(), path


def _alive(pid: int) -> bool:
    """Whether ``pid`` has not finished exiting: not its command line, which is empty
    while an exiting server still holds its ports and store (issue 22: `down` returned then)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _bindable(port: int) -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as nats-server (Go) does
        sock.bind(("127.0.0.1", port))


async def test_hub_leaf_up_walkthrough_down(tmp_path: Path) -> None:
    up = _cli("topology", "up", "hub-leaf", "--dir", str(tmp_path))
    state_file = tmp_path / "topology.json"
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads(state_file.read_text())
        assert state_file.stat().st_mode & 0o777 == 0o600
        hub, leaf = state["servers"]["hub"], state["servers"]["leaf"]
        assert (hub["domain"], leaf["domain"]) == ("hub", "leaf")
        acc = state["users"]["ACC"]
        assert hub["url"] in up.stdout and acc["user"] in up.stdout
        passwords = [user["password"] for user in state["users"].values()]
        assert not any(pw in up.stdout + up.stderr for pw in passwords)
        assert_secrets_private(tmp_path, passwords)

        again = _cli("topology", "up", "hub-leaf", "--dir", str(tmp_path))
        assert again.returncode == 2 and "already running" in again.stderr

        # The walk-through: `up` created test (leaf) -> test-mirror, aggregate (hub).
        data = tmp_path / "data.jsonl"
        data.write_text("".join(json.dumps({"id": f"m{i}", "n": i}) + "\n" for i in range(10)))
        env = {**os.environ, "NATS_PASSWORD": acc["password"]}
        auth = ("--user", acc["user"])
        publish = _cli(
            "publish", str(data), "--stream", "test", "--subject", "test", "--id-field", "id",
            "--server", leaf["url"], *auth, "--domain", "leaf", "--no-progress", env=env,
        )  # fmt: skip
        assert publish.returncode == 0, publish.stderr
        assert acc["password"] not in publish.stdout + publish.stderr
        hub_conn = await connect(
            ConnectOptions(
                servers=(hub["url"],), domain="hub", user=acc["user"], password=acc["password"]
            )
        )
        try:
            for stream in ("aggregate", "test-mirror"):
                await wait_messages(hub_conn, stream, 10, timeout=30)
                assert_exactly_once(
                    await stream_ids(hub_conn, stream), [f"m{i}" for i in range(10)]
                )
        finally:
            await hub_conn.close()
        status = _cli(
            "status", "aggregate", "--server", hub["url"], *auth, "--domain", "hub", "--json",
            env=env,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["stream"]["messages"] == 10

        status = _cli("topology", "status", "--dir", str(tmp_path))
        assert status.returncode == 0 and "ok" in status.stdout
    finally:
        down = _cli("topology", "down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert not _alive(hub["pid"]) and not _alive(leaf["pid"])
    assert monitor(int(hub["monitor"].rsplit(":", 1)[1]), "/healthz") is None
    assert not state_file.exists()
    assert _cli("topology", "down", "--dir", str(tmp_path)).returncode == 2


def test_cluster3_up_down(tmp_path: Path) -> None:
    up = _cli("topology", "up", "cluster3", "--dir", str(tmp_path))
    try:
        assert up.returncode == 0, up.stderr
        state = json.loads((tmp_path / "topology.json").read_text())
        servers = state["servers"]
        assert len(servers) == 3
        port = int(next(iter(servers.values()))["monitor"].rsplit(":", 1)[1])
        jsz = monitor(port, "/jsz") or {}
        assert jsz["meta_cluster"]["cluster_size"] == 3
    finally:
        down = _cli("topology", "down", "--dir", str(tmp_path))
    assert down.returncode == 0, down.stderr
    assert not any(_alive(s["pid"]) for s in servers.values())
    for server in servers.values():  # `up` again right away finds every port free
        _bindable(int(server["url"].rsplit(":", 1)[1]))
