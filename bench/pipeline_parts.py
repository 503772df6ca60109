"""The streaming pipeline beside its two halves, each as a batch and as a streaming query.

bench-peers compares the pipeline (``readStream`` -> ``writeStream``) with ``spark.read``
and ``df.write``: batch queries. This runs, one after the other on this machine, each on
a fresh server and Spark session (bench/profile_pipeline.py, N messages of 128 B, output
streams with fast-ingest batches, the subject an option, the rows' ``stream`` and
``sequence`` as lineage ids, as bench-peers' pipeline):

- ``batch-read``: ``spark.read`` of the source -> ``noop``;
- ``read``: ``readStream`` of the source, N/10 per micro-batch -> ``noop``;
- ``batch-write``: the same rows from Parquet -> ``df.write`` jetstream;
- ``write``: the same rows from Parquet, 10 micro-batches -> ``writeStream`` jetstream;
- ``pipeline``: ``readStream`` jetstream -> ``writeStream`` jetstream.

and prints the client CPU per message of each (Spark's JVM, its Python workers, the
streaming source's planning process) beside the pipeline's, with the two sums of parts.

Run: ``SPARK_LOCAL_IP=127.0.0.1 flock /tmp/oncestream-heavy.lock .venv/bin/python
bench/pipeline_parts.py [N]``. Writes ``bench/results/pipeline-parts-<stamp>.json``
and ``.md``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODES = {
    "batch-read": ["--mode", "batch-read"],
    "read": ["--mode", "read"],
    "batch-write": ["--mode", "batch-write"],
    "write": ["--mode", "write"],
    "pipeline": ["--mode", "lineage"],
}
SERVER = "nats-server"


def _run(mode: str, args: list[str], n: int) -> dict[str, Any]:
    out = Path(tempfile.mkdtemp(prefix="pipeline-parts-")) / f"{mode}.json"
    command = [sys.executable, str(HERE / "profile_pipeline.py"), str(n), *args]
    command += ["--batched", "--subject", "option", "--json", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    record = json.loads(out.read_text())
    client = sum(r["us_per_msg"] for r in record["rows"] if r["process"] != SERVER)
    server = sum(r["us_per_msg"] for r in record["rows"] if r["process"] == SERVER)
    return {
        "mode": mode,
        "rate": round(n / record["wall"], 1),
        "client_us_per_msg": round(client, 2),
        "server_us_per_msg": round(server, 2),
        "processes": {r["process"]: round(r["us_per_msg"], 2) for r in record["rows"]},
        "load": [round(x, 2) for x in record["load"]],
    }


def main() -> None:
    n = int(float(sys.argv[1])) if len(sys.argv) > 1 else 1_000_000
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    rows = {}
    for mode, args in MODES.items():
        rows[mode] = _run(mode, args, n)
        row = rows[mode]
        print(
            f"{mode:12s} {row['rate']:>10,.0f} msg/s  client {row['client_us_per_msg']:5.2f}"
            f"  server {row['server_us_per_msg']:5.2f} us/msg",
            flush=True,
        )
    pipeline = rows["pipeline"]["client_us_per_msg"]
    batch_parts = rows["batch-read"]["client_us_per_msg"] + rows["batch-write"]["client_us_per_msg"]
    stream_parts = rows["read"]["client_us_per_msg"] + rows["write"]["client_us_per_msg"]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    record = {
        "bench": "pipeline-parts",
        "when": stamp,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "n": n,
        "rows": list(rows.values()),
        "pipeline_vs_batch_parts": round(pipeline / batch_parts, 3),
        "pipeline_vs_streaming_parts": round(pipeline / stream_parts, 3),
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"pipeline-parts-{stamp}.json").write_text(json.dumps(record, indent=2) + "\n")
    (RESULTS / f"pipeline-parts-{stamp}.md").write_text(_markdown(record))
    print(_markdown(record))


def _markdown(record: dict[str, Any]) -> str:
    names = sorted({p for row in record["rows"] for p in row["processes"] if p != SERVER})
    lines = [
        f"# pipeline and its parts, {record['when']} (commit {record['commit']}), "
        f"N={record['n']:,}",
        "",
        "| query | msg/s | client us/msg | server us/msg | "
        + " | ".join(names)
        + " | load after |",
        "|---|---:|---:|---:|" + "---:|" * len(names) + "---|",
    ]
    for row in record["rows"]:
        cells = " | ".join(f"{row['processes'].get(p, 0.0):.2f}" for p in names)
        lines.append(
            f"| {row['mode']} | {row['rate']:,.0f} | {row['client_us_per_msg']:.2f} "
            f"| {row['server_us_per_msg']:.2f} | {cells} | {row['load'][0]} |"
        )
    lines += [
        "",
        f"pipeline client / (batch read + batch write): {record['pipeline_vs_batch_parts']}",
        f"pipeline client / (streaming read + streaming write): "
        f"{record['pipeline_vs_streaming_parts']}",
    ]
    return "\n".join(lines) + "\n"


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=HERE.parent, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


if __name__ == "__main__":
    main()
