"""`oncestream server`: run an embedded nats-server in the foreground."""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
from pathlib import Path

import typer

from ..server import JetStreamConfig, NatsServer, ServerConfig
from ._app import app, cli_errors, console


@app.command("server")
@cli_errors
def server_command(
    port: int = typer.Option(4222, help="Client port on 127.0.0.1 (-1 picks a free one)."),
    store_dir: Path | None = typer.Option(
        None, "--store-dir", help="JetStream store (default: a temporary directory)."
    ),
    domain: str | None = typer.Option(None, help="JetStream domain."),
    max_payload: int | None = typer.Option(None, help="Largest message in bytes."),
) -> None:
    """Run a JetStream-enabled nats-server on 127.0.0.1 until Ctrl-C / SIGTERM."""
    work_dir = Path(tempfile.mkdtemp(prefix="oncestream-server-"))
    config = ServerConfig(
        port=port,
        max_payload=max_payload,
        jetstream=JetStreamConfig(store_dir=store_dir or work_dir / "jetstream", domain=domain),
    )
    server = NatsServer(config, work_dir=work_dir)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with server:
        console.print(f"nats-server ready at [bold]{server.url}[/] (pid {server.pid})")
        console.print(f"store: {server.store_dir}   config: {server.config_file}")
        console.print("Ctrl-C to stop")
        while not stop.wait(0.5):
            if not server.running():
                raise typer.Exit(1)
    console.print("stopped")
    if store_dir is None:
        shutil.rmtree(work_dir, ignore_errors=True)
