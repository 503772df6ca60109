"""The demo's closing summary: rich tables and a JSON form."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

if TYPE_CHECKING:
    from ._runner import DemoResult

__all__ = ["print_summary", "summary_dict"]


def _ok(flag: bool) -> str:
    return "[bold green]yes[/]" if flag else "[bold red]NO[/]"


def summary_dict(result: DemoResult) -> dict[str, Any]:
    """The summary as plain data (``oncestream demo --json``)."""
    out = result.audit.outputs[0]
    seconds = max(result.pipeline_seconds, 1e-9)
    latency = out.latency_ms or {}
    return {
        "ok": result.ok,
        "orders": result.producer.orders,
        "publishes_sent": result.producer.sent + result.producer.retried_by_publisher,
        "resent_by_publisher": result.producer.retried_by_publisher,
        "duplicates_dropped_by_server": result.producer.duplicates_dropped,
        "stored_in_orders": result.stored_orders,
        "output": out.output,
        "enriched": {
            "expected": result.audit.expected,
            "found": out.found,
            "missing": out.missing,
            "duplicated": out.duplicated,
            "unexpected": out.unexpected,
            "rows": out.rows,
        },
        "revenue_ok": result.revenue_ok,
        "revenue": result.revenue,
        "faults": result.faults,
        "query_restarts": result.query_restarts,
        "pipeline_seconds": round(result.pipeline_seconds, 2),
        "total_seconds": round(result.total_seconds, 2),
        "orders_per_second": round(result.producer.orders / seconds, 1),
        "latency_ms": latency,
        "latency_plot": result.plot_path or None,
        "data_dir": str(result.data_dir) if result.config.keep else None,
        "revenue_path": result.revenue_path if result.config.keep else None,
    }


def print_summary(result: DemoResult, console: Console) -> None:
    """Print the tables: input, outputs, faults and figures, and where the outputs are."""
    data = summary_dict(result)
    producer = result.producer

    inputs = Table(title="input: ORDERS", title_justify="left", show_header=False)
    inputs.add_column(justify="left")
    inputs.add_column(justify="right")
    inputs.add_row("orders generated", f"{producer.orders:,}")
    inputs.add_row(
        "publishes sent (with re-sends)", f"{producer.sent + producer.retried_by_publisher:,}"
    )
    inputs.add_row("  deliberate duplicate re-sends", f"{producer.resent_on_purpose:,}")
    inputs.add_row(
        f"  re-published after {producer.restarts} producer restart",
        f"{producer.replayed_after_restart:,}",
    )
    inputs.add_row(
        "  re-sent by the Publisher (ack timeouts, reconnects)",
        f"{producer.retried_by_publisher:,}",
    )
    inputs.add_row("duplicates dropped by the server", f"{producer.duplicates_dropped:,}")
    inputs.add_row("orders stored in ORDERS", f"{result.stored_orders:,}")

    enriched = data["enriched"]
    outputs = Table(title="outputs (audited against ORDERS)", title_justify="left")
    for column in ("output", "expected", "found", "missing", "duplicated", "unexpected"):
        outputs.add_column(column, justify="left" if column == "output" else "right")
    style = "green" if result.audit.ok else "bold red"
    outputs.add_row(
        {
            "delta": "Delta table orders_enriched",
            "iceberg": "Iceberg table demo.orders_enriched",
        }.get(result.config.output, "stream ORDERS_ENRICHED"),
        f"{enriched['expected']:,}",
        f"{enriched['found']:,}",
        f"[{style}]{enriched['missing']:,}[/]",
        f"[{style}]{enriched['duplicated']:,}[/]",
        f"[{style}]{enriched['unexpected']:,}[/]",
    )
    revenue = Table(title="revenue by region: Parquet vs generated", title_justify="left")
    for column in ("region", "orders", "revenue", "matches"):
        revenue.add_column(column, justify="left" if column == "region" else "right")
    for row in result.revenue:
        revenue.add_row(row["region"], f"{row['orders']:,}", row["revenue"], _ok(row["ok"]))

    figures = Table(title="run", title_justify="left", show_header=False)
    figures.add_column(justify="left")
    figures.add_column(justify="right")
    figures.add_row("faults injected", "; ".join(result.faults) or "none")
    figures.add_row("query restarts from checkpoint", str(result.query_restarts))
    figures.add_row("pipeline time", f"{result.pipeline_seconds:.1f} s")
    figures.add_row("throughput (orders end to end)", f"{data['orders_per_second']:,.0f} orders/s")
    latency = data["latency_ms"]
    if latency:
        figures.add_row(
            "end-to-end latency p50 / p99",
            f"{latency['p50'] / 1000:.2f} s / {latency['p99'] / 1000:.2f} s",
        )
    figures.add_row("total demo time", f"{result.total_seconds:.1f} s")
    figures.add_row("latency plot", result.plot_path or result.plot_note)

    verdict = (
        "[bold green]exactly once: 0 missing, 0 duplicated[/]"
        if result.ok
        else "[bold red]AUDIT FAILED[/]"
    )
    panel = Panel(Group(inputs, outputs, revenue, figures), title=verdict, expand=False)
    if console.is_terminal:
        console.print(panel)
    else:
        # A log or a pipe: as wide as the panel needs, never a cell value split.
        width = console.measure(panel, options=console.options.update(width=100_000)).maximum
        Console(file=console.file, width=width, no_color=True, highlight=False).print(panel)
    if result.config.keep:
        console.print(f"data kept in [bold]{escape(str(result.data_dir))}[/]:")
        console.print("  jetstream/          the nats-server store (ORDERS, ORDERS_ENRICHED)")
        console.print(f"  {result.revenue_path}", markup=False)
        if result.config.output == "delta":
            console.print("  orders_enriched/    the enriched orders, a Delta table")
        elif result.config.output == "iceberg":
            console.print(
                "  lake/               the enriched orders, Iceberg table demo.orders_enriched"
            )
        console.print("  checkpoints/        Spark checkpoints of both queries")
    else:
        console.print("outputs removed (run with --keep to keep the data directory)")
