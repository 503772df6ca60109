"""Classify one trial from its history and final state.

* ``lost``: keys with an ``ack`` in the history that are not in the producers' stream.
* ``missing_at_hub``: (leaf trials) stored at the leaf, not in the hub's source
  stream after the drain.
* ``duplicated``: keys stored more than once in any of those streams.
* ``applied_twice``: keys with more than one effect row in a database.
* ``missing_effects``: keys stored in the processed stream without an effect
  row in a database (after the drain).
* ``unexpected``: effect rows or stored records whose key no producer could
  have sent, producers that never finished, workers that exited on an error.
* ``spark_missing`` / ``spark_duplicated``: (Spark trials) per Spark output (the
  ``jetstream`` output stream, the ``foreachBatch`` table), keys of the processed
  stream absent after the drain / present more than once.
* ``recovery``: per fault, seconds from its heal to the next ack and the next
  applied effect.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

from .nemesis import PRODUCERS

PRODUCED, SOURCED = "T", "TH"  # the producers' stream; the hub's source of it (leaf trials)


def load_history(path: Path) -> list[dict[str, Any]]:
    lines = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            try:
                lines.append(json.loads(raw))
            except ValueError:
                continue
    return sorted(lines, key=lambda line: line["mono"])


def check(history: list[dict[str, Any]], state: dict[str, Any]) -> dict[str, Any]:
    acked = {h["key"] for h in history if h["op"] == "ack"}
    streams: dict[str, dict[str, int]] = state["streams"]
    duplicated: set[str] = set()
    lost = acked - streams[PRODUCED].keys()
    for counts in streams.values():
        duplicated |= {k for k, n in counts.items() if n > 1}
    # Leaf trials: stored at the leaf but not at the hub after the drain.
    at_hub = streams.get(SOURCED)
    missing_at_hub = set() if at_hub is None else streams[PRODUCED].keys() - at_hub.keys()
    processed = streams.get(state["processed_stream"], {})
    applied_twice: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    for db, effects in state["effects"].items():
        applied_twice[db] = sorted(k for k, n in effects.items() if n > 1)
        missing[db] = sorted(processed.keys() - effects.keys())
    stored_keys = {k for c in streams.values() for k in c}
    unexpected = sorted(k for k in stored_keys if k.split("-")[0] not in PRODUCERS)
    unexpected += sorted({k for e in state["effects"].values() for k in e} - processed.keys())
    spark_missing, spark_duplicated = spark_check(state.get("spark"), processed.keys())
    notes = []
    if state["kind"] == "leaf" and state.get("sourced_after_s") is None:
        notes.append("the hub's source never caught up with the leaf's stream")
    if state.get("unfinished"):
        notes.append(f"producers not finished: {state['unfinished']}")
    for name, codes in (state.get("worker_exits") or {}).items():
        notes.append(f"{name} exited {len(codes)}x with {sorted(set(codes))}")
    return {
        "index": state["index"],
        "kind": state["kind"],
        "seed": state["seed"],
        "acked": len(acked),
        "stored": {s: len(c) for s, c in streams.items()},
        "lost": sorted(lost),
        "missing_at_hub": sorted(missing_at_hub),
        "duplicated": sorted(duplicated),
        "applied_twice": applied_twice,
        "missing_effects": missing,
        "unexpected": unexpected,
        "spark": state.get("spark") is not None,
        "spark_ready_after_s": (state.get("spark") or {}).get("ready_after_s"),
        "spark_query_restarts": (state.get("spark") or {}).get("query_restarts"),
        "spark_missing": spark_missing,
        "spark_duplicated": spark_duplicated,
        "notes": notes,
        "faults": [f for f in state["faults"] if not f.get("skipped")],
        "skipped_faults": sum(1 for f in state["faults"] if f.get("skipped")),
        "skipped": [f["kind"] for f in state["faults"] if f.get("skipped")],
        "recovery": recovery(history, state["faults"]),
        "timing": state.get("timing", {}),
        "load": load(history),
    }


def load(history: list[dict[str, Any]]) -> dict[str, float | None]:
    """Acked publishes per second (first to last ack) and publish latency percentiles."""
    acks = [h for h in history if h["op"] == "ack" and "latency" in h]
    if len(acks) < 2:
        return {"acks_per_s": None, "latency_p50_ms": None, "latency_p99_ms": None}
    span = acks[-1]["mono"] - acks[0]["mono"]
    lat = sorted(h["latency"] for h in acks)
    return {
        "acks_per_s": round(len(acks) / span, 1) if span > 0 else None,
        "latency_p50_ms": round(lat[len(lat) // 2] * 1000, 2),
        "latency_p99_ms": round(lat[min(len(lat) - 1, len(lat) * 99 // 100)] * 1000, 2),
    }


def spark_check(
    spark: dict[str, Any] | None, processed: Any
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Per Spark output: processed keys it lacks, keys it holds more than once.

    A key in an output that the processed stream does not hold counts as missing
    too (listed as ``+key``): the Spark job cannot have read it.
    """
    missing: dict[str, list[str]] = {}
    duplicated: dict[str, list[str]] = {}
    for output in ("stream", "db"):
        counts: dict[str, int] = (spark or {}).get(output) or {}
        if spark is None:
            continue
        missing[output] = sorted(set(processed) - counts.keys())
        missing[output] += sorted(f"+{k}" for k in counts.keys() - set(processed))
        duplicated[output] = sorted(k for k, n in counts.items() if n > 1)
    return missing, duplicated


def recovery(history: list[dict[str, Any]], faults: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Seconds from each heal to the next ack and the next applied effect; for a fault
    on one producer or processor, that process's own next ack / effect."""
    acks: dict[str, list[float]] = {"*": []}
    applies: dict[str, list[float]] = {"*": []}
    for h in history:
        if h["op"] in ("ack", "apply"):
            series = acks if h["op"] == "ack" else applies
            series["*"].append(h["mono"])
            series.setdefault(h["process"], []).append(h["mono"])
    for series in (acks, applies):
        for times in series.values():
            times.sort()
    out = []
    for fault in faults:
        if fault.get("skipped") or "mono_end" not in fault:
            continue
        end, target = fault["mono_end"], fault["resolved"]
        row = {"kind": fault["kind"], "target": target}
        for name, series in (("ack_after_s", acks), ("apply_after_s", applies)):
            times = (
                series.get(target, series["*"])
                if fault["kind"] in ("kill", "pause")
                else series["*"]
            )
            i = bisect.bisect_left(times, end)
            row[name] = round(times[i] - end, 3) if i < len(times) else None
        out.append(row)
    return out


def violations(result: dict[str, Any]) -> dict[str, int]:
    return {
        "lost": len(result["lost"]),
        "missing_at_hub": len(result.get("missing_at_hub", ())),
        "duplicated": len(result["duplicated"]),
        "applied_twice": sum(len(v) for v in result["applied_twice"].values()),
        "missing_effects": sum(len(v) for v in result["missing_effects"].values()),
        "unexpected": len(result["unexpected"]),
        "spark_missing": sum(len(v) for v in (result.get("spark_missing") or {}).values()),
        "spark_duplicated": sum(len(v) for v in (result.get("spark_duplicated") or {}).values()),
    }
