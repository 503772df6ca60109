"""`oncestream metrics`: serve streams' gauges (mirror and source lag included) to Prometheus.

The exporter for what no worker process reports: a hub's streams sourcing
leaf streams, a mirror, any stream's size. Each scrape asks the server.
"""

from __future__ import annotations

import asyncio
import logging
import signal

import typer

from .._connection import connect
from .._errors import ConfigError
from .._names import check_stream_name
from .._options import ConnectOptions
from ._app import app, cli_errors, console, run_async
from ._connect_flags import with_connect_options

log = logging.getLogger(__name__)


@app.command("metrics")
@cli_errors
@with_connect_options
def metrics_command(
    streams: list[str] | None = typer.Argument(
        None, metavar="[STREAM]...", help="Streams to report on (default: every stream)."
    ),
    port: int = typer.Option(9465, "--metrics-port", help="Port of the /metrics endpoint."),
    host: str = typer.Option(
        "127.0.0.1", "--metrics-host", help="Address the metrics endpoint binds to."
    ),
    *,
    options: ConnectOptions,
) -> None:
    """Serve stream gauges and mirrors'/sources' lag to Prometheus on /metrics until Ctrl-C."""
    for name in streams or ():
        check_stream_name(name, "STREAM")
    try:
        from ..metrics import instrument_streams, serve_metrics
    except ImportError:
        raise ConfigError(
            "oncestream metrics needs prometheus-client: pip install 'oncestream[metrics]'"
        ) from None

    async def main() -> None:
        async with await connect(options.replace(name="oncestream-metrics")) as conn:
            server = serve_metrics(port, host)
            watched = instrument_streams(conn, tuple(streams or ()))
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            console.print(f"metrics on {server.url} (Ctrl-C ends)", highlight=False, markup=False)
            try:
                await stop.wait()
            finally:
                watched.close()
                server.close()

    run_async(main())
