"""`oncestream demo`: the whole exactly-once pipeline, with faults, then the audit."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

import orjson
import typer

from ._app import EXIT_FAILURE, app, cli_errors, console


@app.command("demo")
@cli_errors
def demo_command(
    messages: int = typer.Option(200_000, "--messages", "-n", help="Orders to generate."),
    hard_faults: bool = typer.Option(
        False, "--hard-faults", help="Also SIGKILL and restart the nats-server mid-run."
    ),
    keep: bool = typer.Option(False, "--keep", help="Keep the data directory afterwards."),
    data_dir: Path | None = typer.Option(None, "--data-dir", help="Where to put the data."),
    rate: float = typer.Option(
        5000.0, help="Orders per second the producer publishes (0: as fast as it can)."
    ),
    timeout: float = typer.Option(600.0, help="Give up after this many seconds."),
    as_json: bool = typer.Option(False, "--json", help="Also print the summary as JSON."),
    output: str = typer.Option(
        "parquet",
        "--output",
        metavar="parquet|delta|iceberg",
        help="Where the enriched orders land: the ORDERS_ENRICHED stream (parquet: the "
        "revenue as a Parquet file), or a Delta or Iceberg table the audit reads.",
    ),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        help="Write the end-to-end latency plot (PNG) here (a new file; default with "
        "--keep: latency.png in the data directory).",
    ),
) -> None:
    """Publish orders, run a Spark pipeline through faults, audit it: 0 missing, 0 duplicated."""
    from ..demo._internal import DemoConfig, print_summary, run_demo, summary_dict

    config = DemoConfig(
        messages=messages,
        hard_faults=hard_faults,
        keep=keep,
        data_dir=data_dir,
        rate=None if rate == 0 else rate,
        timeout=timeout,
        plot=plot,
        output=output,
    )
    # SIGTERM's default action ends Python without unwinding: the demo's nats-server,
    # Spark session and data directory would outlive it. Unwinding runs their cleanup.
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        result = run_demo(config, console)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print_summary(result, console)
    if as_json:
        typer.echo("DEMO-JSON " + orjson.dumps(summary_dict(result)).decode())
    if not result.ok:
        raise typer.Exit(EXIT_FAILURE)


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)
