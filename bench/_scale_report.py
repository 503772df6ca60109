"""bench-scale output: the markdown table and the plot (rate and RSS against N, log scale)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: Which nats.go case each oncestream path is compared with (same N, same server config).
PEER = {
    "publisher": "nats.go publish",
    "publisher-fast": "nats.go publish",
    "spark-sink-fast": "nats.go publish",
    "producer-batch": "nats.go publish",
    "spark-sink": "nats.go publish",
    "spark-source": "nats.go ordered",
    "processor-sqlite": "nats.go fetch+ack",
    "processor-sqlite-batch": "nats.go fetch+ack",
    "processor-sqlite-ackall": "nats.go fetch+ack",
    "processor-postgres": "nats.go fetch+ack",
    "processor-postgres-merge": "nats.go fetch+ack",
    "processor-postgres-batch": "nats.go fetch+ack",
}


#: A path beside another of the same run: the sink beside the Publisher on the same
#: ingest path (the issue-24 bar: >= 1.0x), the Processor on PostgreSQL beside it on
#: SQLite with the same kind of handler (issue 40: >= 0.5x for a per-message handler).
SAME_PATH = {
    "spark-sink": "publisher",
    "spark-sink-fast": "publisher-fast",
    "processor-sqlite-ackall": "processor-sqlite",
    "processor-postgres": "processor-sqlite",
    "processor-postgres-merge": "processor-sqlite",
    "processor-postgres-batch": "processor-sqlite-batch",
}


def _us(value: Any) -> str:
    return "" if value is None else f"{value:.2f}"


def _mib(value: Any) -> str:
    return "" if value is None else f"{value:,.1f}"


def _ledger(rec: dict[str, Any]) -> str:
    if "ledger_rows_after_prune" not in rec:
        return ""
    size = rec.get("ledger_bytes_after_prune")
    kib = f", {size / 1024:,.0f} KiB" if isinstance(size, int) else ""
    return f"{rec['ledger_rows_after_prune']:,} rows{kib}"


def _notes(rec: dict[str, Any]) -> str:
    notes = []
    if "spark_memory" in rec:
        notes.append(f"local[2], spark.driver/executor.memory={rec['spark_memory']}")
    if "tasks" in rec:
        notes.append(f"{rec['tasks']} tasks")
    if "timed_cpu" in rec:
        notes.append("CPU of the timed part (JVM start-up and warm-ups left out)")
    if "batch_size" in rec:
        notes.append(f"batch_size={rec['batch_size']}")
    if "rounds" in rec:
        notes.append("median of " + "/".join(f"{rate:,}" for rate in rec["rounds"]))
    if "error" in rec:
        notes.append("FAILED: " + rec["error"].strip().splitlines()[-1][:120])
    return "; ".join(notes)


def write_markdown(records: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    """One table: rate, ratio to nats.go and to the smallest N, RSS, store, ledger."""
    ok = [r for r in records if "error" not in r]
    rate = {(r["path"], r["n"]): float(r["rate"]) for r in ok}
    smallest = {}
    for r in sorted(ok, key=lambda r: r["n"]):
        smallest.setdefault(r["path"], r)
    lines = []
    if meta.get("label"):
        lines.append(f"**{meta['label']}**\n")
    lines.append(
        f"{meta['date']}, {meta['cpus']} cores, load average {meta['loadavg'][0]:.2f} at the end;"
        f" stream: {meta['storage']} storage, duplicate window {meta['duplicate_window']:g} s;"
        " 128-byte messages.\n"
    )
    lines.append(
        "| path | N | rate (msg/s) | vs nats.go | vs smallest N | CPU client (µs/msg) |"
        " CPU server (µs/msg) | client peak RSS (MiB) |"
        " vs smallest N | server peak RSS (MiB) | store (MiB) | ledger after pruning | notes |"
    )
    lines.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in records:
        if "error" in r:
            lines.append(f"| {r['path']} | {r['n']:,} | failed | | | | | | | | | | {_notes(r)} |")
            continue
        peer = PEER.get(r["path"])
        ratio = ""
        if peer and (peer, r["n"]) in rate:
            ratio = f"{r['rate'] / rate[(peer, r['n'])]:.2f}x {peer}"
        own = SAME_PATH.get(r["path"])
        if own and (own, r["n"]) in rate:
            ratio += ("; " if ratio else "") + f"{r['rate'] / rate[(own, r['n'])]:.2f}x {own}"
        base = smallest[r["path"]]
        scale = f"{r['rate'] / base['rate']:.2f}x" if base is not r else ""
        rss = ""
        if base is not r and base.get("client_rss_mib"):
            rss = f"{r['client_rss_mib'] / base['client_rss_mib']:.2f}x"
        lines.append(
            f"| {r['path']} | {r['n']:,} | {r['rate']:,.0f} | {ratio} | {scale} |"
            f" {_us(r.get('client_cpu_us'))} | {_us(r.get('server_cpu_us'))} |"
            f" {_mib(r.get('client_rss_mib'))} | {rss} | {_mib(r.get('server_rss_mib'))} |"
            f" {_mib(r.get('store_mib'))} | {_ledger(r)} | {_notes(r)} |"
        )
    return "\n".join(lines) + "\n"


def plot(records: list[dict[str, Any]], out: Path, meta: dict[str, Any]) -> None:
    """Rate and client peak RSS against N, log-log, one line per path (nats.go dashed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rate, ax_rss) = plt.subplots(1, 2, figsize=(12, 4.8))
    paths = list(dict.fromkeys(r["path"] for r in records))
    for path in paths:
        rows = sorted((r for r in records if r["path"] == path and "error" not in r),
                      key=lambda r: r["n"])  # fmt: skip
        if not rows:
            continue
        style = "--" if path.startswith("nats.go") else "-"
        ns = [r["n"] for r in rows]
        ax_rate.plot(ns, [r["rate"] for r in rows], style, marker="o", label=path)
        ax_rss.plot(ns, [r["client_rss_mib"] for r in rows], style, marker="o", label=path)
    for ax, title, unit in (
        (ax_rate, "rate", "msg/s"),
        (ax_rss, "client peak RSS (process tree)", "MiB"),
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("N messages (128 B)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
    ax_rate.legend(fontsize=7)
    suptitle = "oncestream bench-scale"
    if meta.get("label"):
        suptitle += f" ({meta['label']})"
    fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
