"""Classify one trial from its history and final state.

* ``lost``: keys with an ``ack`` in the history that are not in a stream that
  must hold them (the producers' stream; for leaf trials also the hub's source).
* ``duplicated``: keys stored more than once in any of those streams.
* ``applied_twice``: keys with more than one effect row in a database.
* ``missing_effects``: keys stored in the processed stream without an effect
  row in a database (after the drain).
* ``unexpected``: effect rows or stored records whose key no producer could
  have sent, producers that never finished, workers that exited on an error.
* ``recovery``: per fault, seconds from its heal to the next ack and the next
  applied effect.
"""

from __future__ import annotations

import bisect
import json
from pathlib import Path
from typing import Any

from .nemesis import PRODUCERS


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
    lost: set[str] = set()
    duplicated: set[str] = set()
    for counts in streams.values():
        lost |= acked - counts.keys()
        duplicated |= {k for k, n in counts.items() if n > 1}
    processed = streams.get(state["processed_stream"], {})
    applied_twice: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    for db, effects in state["effects"].items():
        applied_twice[db] = sorted(k for k, n in effects.items() if n > 1)
        missing[db] = sorted(processed.keys() - effects.keys())
    stored_keys = {k for c in streams.values() for k in c}
    unexpected = sorted(k for k in stored_keys if k.split("-")[0] not in PRODUCERS)
    unexpected += sorted({k for e in state["effects"].values() for k in e} - processed.keys())
    notes = []
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
        "duplicated": sorted(duplicated),
        "applied_twice": applied_twice,
        "missing_effects": missing,
        "unexpected": unexpected,
        "notes": notes,
        "faults": [f for f in state["faults"] if not f.get("skipped")],
        "skipped_faults": sum(1 for f in state["faults"] if f.get("skipped")),
        "recovery": recovery(history, state["faults"]),
    }


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
        "duplicated": len(result["duplicated"]),
        "applied_twice": sum(len(v) for v in result["applied_twice"].values()),
        "missing_effects": sum(len(v) for v in result["missing_effects"].values()),
        "unexpected": len(result["unexpected"]),
    }
