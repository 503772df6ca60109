"""summary.json, the markdown report and Jepsen-style plots of a campaign."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from .checker import load_history, violations

__all__ = ["KEYS", "violations", "write"]

KEYS = (
    "lost",
    "missing_at_hub",
    "duplicated",
    "applied_twice",
    "missing_effects",
    "unexpected",
    "spark_missing",
    "spark_duplicated",
)


def summarize(results: list[dict[str, Any]], seed: int, run_id: str = "") -> dict[str, Any]:
    faults = Counter(f["kind"] for r in results for f in r["faults"])
    totals = {k: sum(violations(r)[k] for r in results) for k in KEYS}
    return {
        "trials": len(results),
        "seed": seed,
        "run_id": run_id,
        "kinds": dict(Counter(r["kind"] for r in results)),
        "spark_trials": sum(1 for r in results if r.get("spark")),
        "faults": dict(sorted(faults.items())),
        "acked": sum(r["acked"] for r in results),
        **totals,
        "notes": [f"trial {r['index']}: {n}" for r in results for n in r["notes"]],
        "per_trial": [
            {
                "index": r["index"],
                "kind": r["kind"],
                "seed": r["seed"],
                "acked": r["acked"],
                **violations(r),
            }
            for r in results
        ],
    }


def write(out: Path, results: list[dict[str, Any]], seed: int, run_id: str = "") -> dict[str, Any]:
    summary = summarize(results, seed, run_id)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    (out / "results.json").write_text(json.dumps(results, indent=1))
    shutil.copyfile(out / "summary.json", out.parent / "latest.json")
    plots = _plots(out, results)
    (out / "report.md").write_text(_markdown(summary, results, plots))
    return summary


def _markdown(summary: dict[str, Any], results: list[dict[str, Any]], plots: list[str]) -> str:
    lines = [
        f"# Torture campaign, seed {summary['seed']}",
        "",
        "| trials | acked | " + " | ".join(KEYS) + " |",
        "|---|---|" + "---|" * len(KEYS),
        f"| {summary['trials']} | {summary['acked']} | "
        + " | ".join(str(summary[k]) for k in KEYS)
        + " |",
        "",
        "Faults injected: " + ", ".join(f"{k} {v}" for k, v in summary["faults"].items()),
        "",
        "| trial | kind | seed | acked | " + " | ".join(KEYS) + " |",
        "|---|---|---|---|" + "---|" * len(KEYS),
    ]
    for row in summary["per_trial"]:
        vals = " | ".join(str(row[k]) for k in KEYS)
        lines.append(
            f"| {row['index']} | {row['kind']} | {row['seed']} | {row['acked']} | {vals} |"
        )
    lines += ["", "## Recovery after each fault (s to next ack / next applied effect)", ""]
    for r in results:
        for rec in r["recovery"]:
            lines.append(
                f"- trial {r['index']} {rec['kind']}:{rec['target']}: "
                f"ack {rec['ack_after_s']}, apply {rec['apply_after_s']}"
            )
    if summary["notes"]:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in summary["notes"]]
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _plots(out: Path, results: list[dict[str, Any]]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    latencies: list[float] = []
    for r in results:
        tdir = next(out.glob(f"trial-{r['index']:03d}-*"))
        history = load_history(tdir / "history.jsonl")
        start = next((h["mono"] for h in history if h["op"] == "trial"), history[0]["mono"])
        acks = [h for h in history if h["op"] == "ack" and "latency" in h]
        applies = [h for h in history if h["op"] == "apply"]
        latencies += [h["latency"] for h in acks]
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
        last = int(max((h["mono"] for h in history), default=start) - start) + 1
        for series, label in ((acks, "acked publishes"), (applies, "applied effects")):
            buckets = Counter(int(h["mono"] - start) for h in series)
            xs = list(range(0, last + 1))
            ax1.step(xs, [buckets.get(x, 0) for x in xs], where="post", label=label)
        ax1.set_ylabel("ops/s")
        ax1.legend(loc="upper right")
        ax2.scatter(
            [h["mono"] - start for h in acks], [h["latency"] * 1000 for h in acks], s=2, alpha=0.4
        )
        ax2.set_yscale("log")
        ax2.set_ylabel("publish latency (ms)")
        ax2.set_xlabel("seconds")
        for f in r["faults"]:
            if "mono_start" in f and "mono_end" in f:
                for ax in (ax1, ax2):
                    ax.axvspan(
                        f["mono_start"] - start, f["mono_end"] - start, alpha=0.15, color="red"
                    )
                ax1.annotate(
                    f"{f['kind']}:{f['resolved']}",
                    (f["mono_start"] - start, 0),
                    fontsize=6,
                    rotation=90,
                    va="bottom",
                )
        fig.suptitle(f"trial {r['index']} ({r['kind']}, seed {r['seed']})")
        name = f"trial-{r['index']:03d}-{r['kind']}.png"
        fig.savefig(out / name, dpi=80)
        plt.close(fig)
        names.append(name)
    if latencies:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.hist([x * 1000 for x in latencies], bins=60, log=True)
        ax.set_xlabel("publish latency (ms)")
        ax.set_ylabel("count")
        fig.savefig(out / "latency-distribution.png", dpi=80)
        plt.close(fig)
        names.append("latency-distribution.png")
    return names
