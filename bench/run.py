"""Run every ``bench/bench_*.py`` script and print one table with ratios.

Contract for a bench script: it runs standalone (``python bench/bench_x.py``),
starts whatever it needs (its own nats-server, Spark), and prints one line per
measured case on stdout::

    RESULT {"group": "publish", "case": "nats-py publish_async", "value": 52000.0,
            "unit": "msg/s", "baseline": true}

Cases in the same group are compared: every non-baseline case gets its ratio
against every baseline case of its group measured in the same run.
Extra keys (``messages``, ``seconds``, ``notes``) are kept in the JSON output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
#: Scripts with their own make target (too long for every `make bench`); run when named.
SEPARATE = ("bench_pipeline.py",)


def run_script(script: Path, console: Console) -> list[dict[str, object]]:
    console.print(f"[bold]running {script.name}[/]")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYTHONPATH=str(HERE.parent))
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, check=False
    )
    results = []
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            record = json.loads(line[len("RESULT ") :])
            record["script"] = script.name
            results.append(record)
    if proc.returncode != 0:
        console.print(f"[red]{script.name} failed (exit {proc.returncode})[/]")
        console.print(proc.stderr[-4000:])
    console.print(f"  {len(results)} results in {time.monotonic() - started:.1f}s")
    return results


def _value(value: float) -> str:
    """Rates as whole numbers; small figures (seconds, percentages) with two decimals."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="run only scripts whose name contains these")
    args = parser.parse_args()
    console = Console()
    scripts = sorted(HERE.glob("bench_*.py"))
    if args.only:
        scripts = [s for s in scripts if any(o in s.name for o in args.only)]
    else:
        scripts = [s for s in scripts if s.name not in SEPARATE]
    results: list[dict[str, object]] = []
    failed = False
    for script in scripts:
        got = run_script(script, console)
        failed |= not got
        results.extend(got)

    table = Table(title="oncestream benchmarks (one run, this machine)")
    for column in ("group", "case", "value", "unit", "vs baseline"):
        table.add_column(column, justify="right" if column in ("value",) else "left")
    by_group: dict[str, list[dict[str, object]]] = {}
    for record in results:
        by_group.setdefault(str(record["group"]), []).append(record)
    for group, records in by_group.items():
        baselines = [r for r in records if r.get("baseline")]
        for record in records:
            ratios = []
            if not record.get("baseline"):
                for base in baselines:
                    ratio = float(record["value"]) / max(float(base["value"]), 1e-9)  # type: ignore[arg-type]
                    ratios.append(f"{ratio:.2f}x {base['case']}")
                    record.setdefault("ratios", {})[str(base["case"])] = round(ratio, 3)  # type: ignore[index]
            table.add_row(
                group,
                str(record["case"]) + (" (baseline)" if record.get("baseline") else ""),
                _value(float(record["value"])),  # type: ignore[arg-type]
                str(record.get("unit", "")),
                "\n".join(ratios),
            )
    if console.is_terminal:
        console.print(table)
    else:  # a log or a pipe: as wide as the table needs, no cell cut or folded
        width = console.measure(table, options=console.options.update(width=100_000)).maximum
        Console(width=width, no_color=True, highlight=False).print(table)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / time.strftime("bench-%Y%m%d-%H%M%S.json")
    out.write_text(json.dumps(results, indent=2))
    console.print(f"results written to {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
