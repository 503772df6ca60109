"""`oncestream audit`: is every input message in each output exactly once?"""

from __future__ import annotations

import orjson
import typer
from rich.table import Table
from rich.text import Text

from .._connection import connect
from .._errors import ConfigError
from .._names import check_stream_name
from .._options import ConnectOptions
from ..audit import AuditReport, KeySpec, OutputSpec, audit
from ..audit._internal import SAMPLES
from ._app import EXIT_FAILURE, app, cli_errors, console, run_async
from ._connect_flags import with_connect_options


def render_report(report: AuditReport) -> Table:
    """The audit as one rich table (one row per output)."""
    table = Table(title=Text(f"audit of {report.input} by {report.key}"), title_justify="left")
    for column in ("output", "expected", "found", "missing", "duplicated", "unexpected", "rows"):
        table.add_column(column, justify="left" if column == "output" else "right")
    for out in report.outputs:
        style = "green" if out.ok else "bold red"
        table.add_row(
            Text(out.output),
            f"{report.expected:,}",
            f"{out.found:,}",
            f"[{style}]{out.missing:,}[/]",
            f"[{style}]{out.duplicated:,}[/]",
            f"[{style}]{out.unexpected:,}[/]",
            f"{out.rows:,}",
        )
    return table


def print_report(report: AuditReport) -> None:
    """Print the table, samples of every problem and the verdict."""
    console.print(render_report(report))
    if report.input_duplicated:
        console.print(f"[bold red]input holds {report.input_duplicated:,} duplicate keys[/]")
    for out in report.outputs:
        for label, values in (
            ("missing", out.missing_samples),
            ("duplicated", out.duplicated_samples),
            ("unexpected", out.unexpected_samples),
        ):
            if values:
                console.print(
                    f"  {out.output} {label} (first {len(values)}): {', '.join(values)}",
                    markup=False,
                    highlight=False,
                )
        if out.latency_ms:
            lat = out.latency_ms
            console.print(
                f"  {out.output} latency p50 {lat['p50']:.0f} ms, p99 {lat['p99']:.0f} ms",
                markup=False,
            )
    verdict = "[bold green]OK: exactly once[/]" if report.ok else "[bold red]FAILED[/]"
    console.print(f"{verdict}  ({report.input_rows:,} input messages, {report.seconds:.1f}s)")


@app.command("audit")
@cli_errors
@with_connect_options
def audit_command(
    input_stream: str = typer.Option(..., "--input", "-i", help="Input stream name."),
    outputs: list[str] = typer.Option(
        ...,
        "--output",
        "-o",
        help="Output to check: stream:NAME, parquet:PATH, delta:PATH, "
        "iceberg:CATALOG#NAMESPACE.TABLE or sql:DSN#TABLE (repeatable).",
    ),
    key: str = typer.Option("msg_id", help="msg_id, lineage or field:NAME."),
    samples: int = typer.Option(SAMPLES, help="How many keys of each problem to list."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    *,
    options: ConnectOptions,
) -> None:
    """Count expected, found, missing, duplicated and unexpected keys; exit 1 if any is off."""
    check_stream_name(input_stream, "--input")
    if samples < 0:
        raise ConfigError(f"--samples must be >= 0, got {samples}")
    specs = [OutputSpec.parse(text) for text in outputs]
    key_spec = KeySpec.parse(key)

    async def run() -> AuditReport:
        async with await connect(options) as conn:
            return await audit(conn, input_stream, specs, key=key_spec, samples=samples)

    report = run_async(run())
    if as_json:
        typer.echo(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode())
    else:
        print_report(report)
    if not report.ok:
        raise typer.Exit(EXIT_FAILURE)
