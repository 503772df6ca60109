"""`oncestream server`: run an embedded nats-server in the foreground."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import typer
from rich.markup import escape

from .._errors import ConfigError, ServerError
from .._options import DEFAULT_SERVER
from ..server import JetStreamConfig, NatsServer, ServerConfig
from ._app import app, cli_errors, console


def _check_store_dir(store_dir: Path) -> None:
    """A store directory must be a writable directory, or creatable."""
    probe = store_dir
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if store_dir.exists() and not store_dir.is_dir():
        raise ConfigError(f"--store-dir {store_dir} is not a directory")
    if probe.exists() and not (probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)):
        what = "is not writable" if probe.is_dir() else "is not a directory"
        raise ConfigError(f"--store-dir {store_dir}: {probe} {what}")


#: The port clients connect to by default (the one in DEFAULT_SERVER).
_DEFAULT_PORT = int(DEFAULT_SERVER.rsplit(":", 1)[1])


@app.command("server")
@cli_errors
def server_command(
    port: int = typer.Option(_DEFAULT_PORT, help="Client port on 127.0.0.1 (-1 picks a free one)."),
    store_dir: Path | None = typer.Option(
        None, "--store-dir", help="JetStream store (default: a temporary directory)."
    ),
    domain: str | None = typer.Option(None, help="JetStream domain."),
    max_payload: int | None = typer.Option(None, help="Largest message in bytes."),
) -> None:
    """Run a JetStream-enabled nats-server on 127.0.0.1 until Ctrl-C / SIGTERM.

    Exits 1 with the reason when the server cannot start (e.g. the port is taken)
    or stops on its own; the temporary directory it made is always removed. On
    Linux the nats-server dies with this command however it ends, also when it is
    killed (SIGKILL, a crash): no server is left running without it.
    """
    if store_dir is not None:
        store_dir = store_dir.expanduser().absolute()
        _check_store_dir(store_dir)
    work_dir = Path(tempfile.mkdtemp(prefix="oncestream-server-"))
    try:
        config = ServerConfig(
            port=port,
            max_payload=max_payload,
            jetstream=JetStreamConfig(store_dir=store_dir or work_dir / "jetstream", domain=domain),
        )
        _serve(NatsServer(config, work_dir=work_dir), store_dir is None)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def _serve(server: NatsServer, temporary_store: bool) -> None:
    # The handler only records the signal. It used to call Event.set() on the Event the
    # main thread waits on; a signal landing while wait() held the Event's lock made
    # set() wait for that lock forever (not re-entrant): the command hung after Ctrl-C.
    signals: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: signals.append(signum))
    with server:
        console.print(f"nats-server ready at [bold]{escape(server.url)}[/] (pid {server.pid})")
        store = f"{server.store_dir} (temporary)" if temporary_store else str(server.store_dir)
        console.print(f"store: {store}", highlight=False, markup=False)
        console.print("Ctrl-C to stop")
        while not signals:
            if not server.running():
                raise ServerError(server.exit_reason() or "nats-server stopped unexpectedly")
            time.sleep(0.2)  # noticed within 0.2 s (sleep resumes after a handler, PEP 475)
    console.print("stopped")
