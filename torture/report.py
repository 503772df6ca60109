"""summary.json, the markdown report and Jepsen-style plots of a campaign."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from .checker import load_history, violations
from .faults import NOT_APPLICABLE
from .nemesis import fault_menu
from .spark import KINDS as SPARK_KINDS
from .topology import STREAM

__all__ = ["KEYS", "violations", "write"]

KEYS = (
    "lost",
    "unstored",
    "missing_at_hub",
    "duplicated",
    "applied_twice",
    "missing_effects",
    "unexpected",
    "worker_failures",
    "reader_mismatch",
    "spark_missing",
    "spark_duplicated",
    "unreadable",
    "dead_letters",
    "replays",
    "harness_failures",
)
#: Replicas of the producers' stream per trial kind (the durability table's rows).
REPLICAS = {"single": 1, "leaf": 1, "cluster": 3, "cluster-sync": 3}
#: Fewer landed faults than this of a kind, over a run of at least COVERAGE_TRIALS trials,
#: prints a warning (issue 11: every fault kind at least 10 times in 100 trials).
COVERAGE_MIN, COVERAGE_TRIALS = 10, 100
#: A kind whose share of landed faults is below this (issue 20: 90 %) gets a warning,
#: once it was attempted LANDING_MIN_TRIES times or more.
LANDING_MIN, LANDING_MIN_TRIES = 0.9, 10


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def coverage_warnings(
    results: list[dict[str, Any]], fault_kinds: tuple[str, ...] = ()
) -> list[str]:
    """Kinds injected fewer than COVERAGE_MIN times, overall and per trial kind (only
    ``fault_kinds`` when the campaign was restricted to them)."""
    if len(results) < COVERAGE_TRIALS:
        return []

    def wanted(kind: str) -> bool:
        return not fault_kinds or kind in fault_kinds

    injected = Counter(f["kind"] for r in results for f in r["faults"])
    skipped = Counter(s["kind"] for r in results for s in r.get("skipped", ()))
    expected = {k for r in results for k, _ in fault_menu(r["kind"])}
    if any(r.get("spark") for r in results):
        expected |= set(SPARK_KINDS)
    out = [
        f"fault kind {k} landed {injected[k]} times (< {COVERAGE_MIN})"
        for k in sorted(expected | set(injected) | set(skipped))
        if wanted(k) and injected[k] < COVERAGE_MIN
    ]
    for kind in sorted({r["kind"] for r in results}):
        per = Counter(f["kind"] for r in results if r["kind"] == kind for f in r["faults"])
        for fault in sorted({k for k, _ in fault_menu(kind) if wanted(k)}):
            if per[fault] < COVERAGE_MIN:
                out.append(f"{kind} trials: {fault} landed {per[fault]} times (< {COVERAGE_MIN})")
    return out


def per_kind(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per trial kind: trials, acked, violations, wall time, load, recovery by fault kind."""
    out: dict[str, dict[str, Any]] = {}
    for kind in sorted({r["kind"] for r in results}):
        rows = [r for r in results if r["kind"] == kind]
        recovery: dict[str, list[float]] = {}
        for r in rows:
            for rec in r["recovery"]:
                if rec["ack_after_s"] is not None:
                    recovery.setdefault(rec["kind"], []).append(rec["ack_after_s"])
        out[kind] = {
            "trials": len(rows),
            "acked": sum(r["acked"] for r in rows),
            "violations": sum(sum(violations(r).values()) for r in rows),
            "wall_s_mean": _mean([r["wall_s"] for r in rows if "wall_s" in r]),
            "acks_per_s": _mean([r["load"]["acks_per_s"] for r in rows if r["load"]["acks_per_s"]]),
            "latency_p50_ms": _mean(
                [r["load"]["latency_p50_ms"] for r in rows if r["load"]["latency_p50_ms"]]
            ),
            "latency_p99_ms": _mean(
                [r["load"]["latency_p99_ms"] for r in rows if r["load"]["latency_p99_ms"]]
            ),
            "recovery_ack_s": {k: _mean(v) for k, v in sorted(recovery.items())},
            "faults": dict(sorted(Counter(f["kind"] for r in rows for f in r["faults"]).items())),
        }
    return out


def landing(results: list[dict[str, Any]], by_target: bool = False) -> dict[str, dict[str, Any]]:
    """Per fault kind: landed, skipped (with the reasons, counted), and the landed share.

    ``by_target``: per ``kind:target`` of the worker faults (``kill:cli``, ...) instead.
    """

    def key(fault: dict[str, Any]) -> str | None:
        if not by_target:
            return str(fault["kind"])
        if fault["kind"] not in ("kill", "pause"):
            return None
        return f"{fault['kind']}:{fault.get('resolved') or fault['target']}"

    landed = Counter(k for r in results for f in r["faults"] if (k := key(f)))
    reasons: dict[str, Counter[str]] = {}
    # A fault whose target an earlier fault took for good (a membership change after the
    # stream was lost) cannot land: apart, only where the trial reports that loss as a
    # measured limit (checker.allowed_loss) and its final read found the stream gone;
    # anywhere else it is a skip like any other.
    moot: Counter[str] = Counter()
    for r in results:
        for s in r.get("skipped", ()):
            if not (k := key(s)):
                continue
            if s["why"].startswith(NOT_APPLICABLE) and _moot(r):
                moot[k] += 1
            else:
                reasons.setdefault(k, Counter())[_reason(s["why"])] += 1
    out = {}
    for kind in sorted(landed.keys() | reasons.keys() | moot.keys()):
        skipped = sum(reasons.get(kind, Counter()).values())
        tried = landed[kind] + skipped
        out[kind] = {
            "landed": landed[kind],
            "skipped": skipped,
            # None: never tried (each one not applicable), so no share to give.
            "landed_pct": round(100.0 * landed[kind] / tried, 1) if tried else None,
            "reasons": dict(reasons.get(kind, Counter()).most_common()),
            "not_applicable": moot[kind],
        }
    return out


def _moot(result: dict[str, Any]) -> bool:
    """Whether a trial reports the loss of the stream a membership change needs as a
    measured limit, the final read confirming it gone (not one "not found" on the way)."""
    return bool(result.get("limit")) and STREAM in result.get("gone_streams", ())


def _count(value: Any) -> str:
    """A total as the table shows it: a list (the harness failures, each with its
    traceback, which the report gives in a section of its own) by its length."""
    return str(len(value)) if isinstance(value, list) else str(value)


def _pct(share: float | None) -> str:
    return "-" if share is None else str(share)


def _reason(why: str) -> str:
    """A skip reason without the run-specific numbers (PIDs, states), to count alike ones."""
    return "".join("#" if c.isdigit() else c for c in why)[:160]


def landing_warnings(per_kind: dict[str, dict[str, Any]]) -> list[str]:
    return [
        f"fault kind {k} landed {row['landed_pct']} % of {row['landed'] + row['skipped']} "
        f"attempts (< {LANDING_MIN:.0%})"
        for k, row in per_kind.items()
        if row["landed"] + row["skipped"] >= LANDING_MIN_TRIES
        and (row["landed_pct"] or 0.0) < LANDING_MIN * 100
    ]


def setting(result: dict[str, Any]) -> str:
    """``R3, sync default``-style words for a trial's durability setting."""
    replicas = REPLICAS.get(result["kind"], 1)
    return f"R{replicas}, sync {result.get('sync') or 'default'}"


def durability(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per setting (replicas, ``sync_interval``): acknowledged writes lost, in every trial
    and in the trials where a lost-page-cache fault (an OS crash) landed."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        if r.get("harness_failures"):
            continue
        row = out.setdefault(
            setting(r),
            {"trials": 0, "acked": 0, "lost": 0, "crash_trials": 0, "crashes": 0,
             "crash_acked": 0, "crash_lost": 0, "limit_trials": 0},
        )  # fmt: skip
        crashes = sum(1 for f in r["faults"] if f["kind"] in ("os-crash", "power-loss"))
        row["trials"] += 1
        row["acked"] += r["acked"]
        row["lost"] += len(r["lost"])
        row["limit_trials"] += bool(r.get("limit"))
        if crashes:
            row["crash_trials"] += 1
            row["crashes"] += crashes
            row["crash_acked"] += r["acked"]
            row["crash_lost"] += len(r["lost"])
    return dict(sorted(out.items()))


def _limit_row(r: dict[str, Any]) -> dict[str, Any]:
    counts = {k: v for k, v in violations(r).items() if v}
    went_back = sum(len(q) for q in (r.get("rewound") or {}).values())
    if went_back:
        counts["rewound"] = went_back
    return {"trial": r["index"], "setting": setting(r), "why": r["limit"], **counts}


def by_option(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per drawn option value (``window=short``...): the trials that ran it, the faults
    that landed in them (by kind) and the violations counted there."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        opts = r.get("options") or {}
        for name, value in opts.items():
            if name == "fail_share":
                continue
            row = out.setdefault(f"{name}={value}", {"trials": 0, "faults": 0, "violations": 0,
                                                     "by_kind": Counter()})  # fmt: skip
            row["trials"] += 1
            row["faults"] += len(r["faults"])
            row["violations"] += 0 if r.get("limit") else sum(violations(r).values())
            row["by_kind"].update(f["kind"] for f in r["faults"])
    return {k: {**v, "by_kind": dict(sorted(v["by_kind"].items()))} for k, v in sorted(out.items())}


def summarize(
    results: list[dict[str, Any]],
    seed: int,
    run_id: str = "",
    fault_kinds: tuple[str, ...] = (),
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    per_fault = landing(results)
    # A trial whose settings allow acked writes to be lost (checker.allowed_loss) reports
    # what it measured as the server's limit, not as oncestream's violation.
    counted = [r for r in results if not r.get("limit")]
    limited = [r for r in results if r.get("limit")]
    totals = {k: sum(violations(r)[k] for r in counted) for k in KEYS}
    limits = {k: sum(violations(r)[k] for r in limited) for k in KEYS}
    phases = Counter(f.get("phase", "run") for r in results for f in r["faults"])
    return {
        "status": "done",
        **(extra or {}),
        "trials": len(results),
        "seed": seed,
        "run_id": run_id,
        "kinds": dict(Counter(r["kind"] for r in results)),
        "spark_trials": sum(1 for r in results if r.get("spark")),
        "faults": {k: row["landed"] for k, row in per_fault.items() if row["landed"]},
        "skipped": {
            k: {"count": row["skipped"], "reasons": row["reasons"]}
            for k, row in per_fault.items()
            if row["skipped"]
        },
        "landing": per_fault,
        "landing_workers": landing(results, by_target=True),
        "faults_by_phase": dict(sorted(phases.items())),
        "records": sum(r.get("records", 0) for r in results),
        "acked": sum(r["acked"] for r in results),
        **totals,
        "violations": {k: v for k, v in totals.items() if v},
        "measured_limits": {
            "trials": [_limit_row(r) for r in limited],
            "totals": {k: v for k, v in limits.items() if v},
        },
        # The CLI's re-sends held past the short window (checker.held_resends): that
        # window's measured limit, not counted as duplicated.
        "held_resends": [
            {"trial": r["index"], "key": k, "why": why}
            for r in results
            for k, why in sorted((r.get("held_resends") or {}).items())
        ],
        "durability": durability(results),
        "by_option": by_option(results),
        "harness_failures": [
            {"trial": r["index"], **f} for r in results for f in r.get("harness_failures", ())
        ],
        "cli_resumes": sum(r.get("cli_resumes", 0) for r in results),
        "pg_switches": sum((r.get("pg_active") or {}).get("switches", 0) for r in results),
        "spark_modes": dict(Counter(r["spark_mode"] for r in results if r.get("spark_mode"))),
        "startup_retries": sum(sum((r.get("startup_retries") or {}).values()) for r in results),
        "disk_full_seen_by_server": sum(
            1 for r in results for f in r["faults"] if f.get("server_enospc")
        ),
        "wall_s": round(sum(r.get("wall_s", 0.0) for r in results), 1),
        "per_kind": per_kind(results),
        "coverage_warnings": coverage_warnings(results, fault_kinds) + landing_warnings(per_fault),
        "notes": [f"trial {r['index']}: {n}" for r in results for n in r["notes"]],
        "failures": [
            {"trial": r["index"], **f} for r in results for f in r.get("worker_failures", ())
        ],
        "sabotaged": [{"trial": r["index"], **s} for r in results for s in r.get("sabotaged", ())],
        "per_trial": [
            {
                "index": r["index"],
                "kind": r["kind"],
                "seed": r["seed"],
                "records": r.get("records", 0),
                "acked": r["acked"],
                "spark_mode": r.get("spark_mode"),
                "options": r.get("options") or {},
                "limit": r.get("limit"),
                "pg_switches": (r.get("pg_active") or {}).get("switches"),
                **violations(r),
            }
            for r in results
        ],
    }


def write(
    out: Path,
    results: list[dict[str, Any]],
    seed: int,
    run_id: str = "",
    fault_kinds: tuple[str, ...] = (),
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    summary = summarize(results, seed, run_id, fault_kinds, extra)
    (out / "results.json").write_text(json.dumps(results, indent=1))
    _write_summary(out, summary)
    # The verdict is written: a plot or the report's text failing must not take it back
    # (the harness's crash path would overwrite latest.json with "crashed").
    try:
        plots = _plots(out, results)
    except Exception as exc:
        plots = []
        summary["report_errors"] = [_error("plots", exc)]
        _write_summary(out, summary)
    try:
        text = _markdown(summary, results, plots)
    except Exception as exc:
        summary.setdefault("report_errors", []).append(_error("report.md", exc))
        _write_summary(out, summary)
        text = _bare_markdown(summary)
    try:
        (out / "report.md").write_text(text)
    except OSError as exc:
        summary.setdefault("report_errors", []).append(_error("report.md", exc))
        _write_summary(out, summary)
    return summary


def _error(what: str, exc: BaseException) -> str:
    try:
        told = str(exc)
    except Exception:  # an exception whose text itself fails
        told = "(its text failed)"
    return f"{what}: {type(exc).__name__}: {told}"[:500]


def _write_summary(out: Path, summary: dict[str, Any]) -> None:
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    shutil.copyfile(out / "summary.json", out.parent / "latest.json")


def _bare_markdown(summary: dict[str, Any]) -> str:
    """The verdict alone, for when the full report could not be written."""
    violations = summary["violations"]
    verdict = ", ".join(f"{k} {v}" for k, v in violations.items()) or "no violations"
    return "\n".join(
        [
            f"# Torture campaign, seed {summary['seed']}",
            "",
            f"{summary['trials']} trials: {verdict}.",
            "",
            "The full report failed: " + "; ".join(summary.get("report_errors", [])),
            "",
        ]
    )


def _markdown(summary: dict[str, Any], results: list[dict[str, Any]], plots: list[str]) -> str:
    verdict = (
        "**Violations: " + ", ".join(f"{k} {v}" for k, v in summary["violations"].items()) + "**"
        if summary["violations"]
        else "No violations."
    )
    sabotage = summary.get("sabotage")
    lines = [
        f"# Torture campaign, seed {summary['seed']}",
        "",
        *([f"Sabotage (negative control): `{sabotage}`.", ""] if sabotage else []),
        verdict,
        "",
        "| trials | input records | acked | " + " | ".join(KEYS) + " |",
        "|---|---|---|" + "---|" * len(KEYS),
        f"| {summary['trials']} | {summary['records']} | {summary['acked']} | "
        + " | ".join(_count(summary[k]) for k in KEYS)
        + " |",
        "",
        f"{summary['trials']} trials in {summary['wall_s']} s; "
        f"{summary['cli_resumes']} CLI resumes after a kill; "
        f"{summary['startup_retries']} start-up retries; faults by phase "
        f"{summary['faults_by_phase']}; {summary.get('pg_switches', 0)} switches of the "
        f"applying PostgreSQL Processor (active/standby; per partition between the "
        f"members in members=partitioned trials); Spark trials by driver/sink "
        f"{summary.get('spark_modes', {})}.",
        "",
        "A fault *landed* when its effect was checked (the process gone or stopped, no "
        "answer across a cut, packets through the shaping classes both ways, ENOSPC); "
        "one that did not is *skipped*, with the reason, and not counted as injected.",
        "",
        "A fault whose target an earlier fault took for good, in a trial that reports the "
        "loss as a measured limit (a membership change after a power loss under the "
        "default sync took the stream), is *not applicable*: counted apart, not in the "
        "landed share.",
        "",
        "| fault kind | landed | skipped | landed % | not applicable | why skipped |",
        "|---|---|---|---|---|---|",
        *[
            f"| {k} | {row['landed']} | {row['skipped']} | {_pct(row['landed_pct'])} | "
            f"{row.get('not_applicable', 0)} | "
            + "; ".join(f"{why} ({n})" for why, n in row["reasons"].items())
            + " |"
            for k, row in summary["landing"].items()
        ],
        "",
        "Worker faults per target (`cli` is the `oncestream publish` CLI):",
        "",
        "| fault | landed | skipped | landed % | why skipped |",
        "|---|---|---|---|---|",
        *[
            f"| {k} | {row['landed']} | {row['skipped']} | {row['landed_pct']} | "
            + "; ".join(f"{why} ({n})" for why, n in row["reasons"].items())
            + " |"
            for k, row in summary["landing_workers"].items()
        ],
        "",
        *_kind_table(summary["per_kind"]),
        *_sync_comparison(summary["per_kind"]),
        *_durability_table(summary),
        *_held_lines(summary),
        *_option_table(summary["by_option"]),
        *[f"- warning: {w}" for w in summary["coverage_warnings"]],
        "",
        "| trial | kind | seed | records | acked | " + " | ".join(KEYS) + " |",
        "|---|---|---|---|---|" + "---|" * len(KEYS),
    ]
    for row in summary["per_trial"]:
        vals = " | ".join(str(row[k]) for k in KEYS)
        lines.append(
            f"| {row['index']} | {row['kind']} | {row['seed']} | {row['records']} "
            f"| {row['acked']} | {vals} |"
        )
    lines += ["", "Options per trial (the rest are the library's defaults):", ""]
    for row in summary["per_trial"]:
        words = " ".join(f"{k}={v}" for k, v in row.get("options", {}).items())
        limit = f" (measured limit: {row['limit']})" if row.get("limit") else ""
        lines.append(f"- trial {row['index']} ({row['kind']}): {words}{limit}")
    if summary.get("harness_failures"):
        lines += ["", "## Harness failures (the trial's verdict is unknown)", ""]
        for f in summary["harness_failures"]:
            lines += [f"- trial {f['trial']}: {f['error']}", "", "  ```text"]
            lines += [f"  {t}" for t in f.get("traceback", "").splitlines()[-25:]]
            lines += ["  ```"]
            for name, tail in f.get("logs", {}).items():
                lines += [f"  {name}:", "  ```text", *[f"  {t}" for t in tail[-10:]], "  ```"]
    if summary["failures"]:
        lines += ["", "## Worker failures", ""]
        for f in summary["failures"]:
            lines += [f"- trial {f['trial']} `{f['worker']}`: {f['why']} ({f['code']})", ""]
            lines += ["  ```text", *[f"  {t}" for t in f.get("log_tail", [])], "  ```"]
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


def _durability_table(summary: dict[str, Any]) -> list[str]:
    """Acknowledged writes lost per setting; the trials whose settings allowed it."""
    rows = summary.get("durability") or {}
    if not rows:
        return []
    lines = [
        "## Durability per setting (acknowledged writes lost)",
        "",
        "| setting | trials | acked | lost | trials with an OS crash (os-crash, power-loss) "
        "| crashes landed | acked in them | lost in them | measured limits (not counted) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['trials']} | {row['acked']} | {row['lost']} | "
            f"{row['crash_trials']} | {row['crashes']} | {row['crash_acked']} | "
            f"{row['crash_lost']} | {row['limit_trials']} trials |"
        )
    limits = summary.get("measured_limits") or {}
    if limits.get("trials"):
        found = []
        for t in limits["trials"]:
            counts = [f"{k} {v}" for k, v in t.items() if k not in ("trial", "setting", "why")]
            found.append(f"trial {t['trial']} ({t['setting']}, {t['why']}): "
                         + (", ".join(counts) or "nothing lost"))  # fmt: skip
        lines += [
            "",
            "Measured limits: trials whose settings allow acknowledged writes to be lost "
            "(nats-server's default `sync_interval` and an OS crash); what they found is the "
            "server's limit under that setting, not counted as a violation: " + "; ".join(found),
        ]
    return [*lines, ""]


def _held_lines(summary: dict[str, Any]) -> list[str]:
    """The CLI's re-sends held past the short window (checker.held_resends)."""
    held = summary.get("held_resends") or []
    if not held:
        return []
    found = [f"trial {h['trial']} {h['key']} ({h['why']})" for h in held]
    return [
        "Measured limit of the short window (4 s): records of `oncestream publish` stored "
        "twice because a re-send sent within its retry horizon was held on its way to "
        'the leader until the window had passed (docs/publishing.md, "Window guard"), '
        "not counted as a violation: " + "; ".join(found),
        "",
    ]


def _option_table(rows: dict[str, dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "## Faults landed per drawn option",
        "",
        "| option | trials | faults landed | violations | landed by kind |",
        "|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        kinds = ", ".join(f"{k} {n}" for k, n in row["by_kind"].items())
        lines.append(
            f"| `{name}` | {row['trials']} | {row['faults']} | {row['violations']} | {kinds} |"
        )
    return [*lines, ""]


def _kind_table(per: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| trial kind | trials | acked | violations | s per trial | acks/s | p99 latency ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, row in per.items():
        lines.append(
            f"| {kind} | {row['trials']} | {row['acked']} | {row['violations']} | "
            f"{row['wall_s_mean']} | {row['acks_per_s']} | {row['latency_p99_ms']} |"
        )
    return [*lines, ""]


def _sync_comparison(per: dict[str, dict[str, Any]]) -> list[str]:
    """The R3 cluster with the server's default sync vs ``sync_interval: always``."""
    if not {"cluster", "cluster-sync"} <= per.keys():
        return []
    a, b = per["cluster"], per["cluster-sync"]
    kinds = sorted(set(a["recovery_ack_s"]) | set(b["recovery_ack_s"]))
    lines = [
        "## Cluster: default sync vs `sync_interval: always`",
        "",
        "| | default sync (`cluster`) | `always` (`cluster-sync`) |",
        "|---|---|---|",
        f"| trials | {a['trials']} | {b['trials']} |",
        f"| violations | {a['violations']} | {b['violations']} |",
        f"| acked | {a['acked']} | {b['acked']} |",
        f"| acks/s (Publisher + ProducerSession) | {a['acks_per_s']} | {b['acks_per_s']} |",
        f"| publish latency p50 (ms, mean over trials) | {a['latency_p50_ms']} "
        f"| {b['latency_p50_ms']} |",
        f"| publish latency p99 (ms, mean over trials) | {a['latency_p99_ms']} "
        f"| {b['latency_p99_ms']} |",
        f"| s per trial | {a['wall_s_mean']} | {b['wall_s_mean']} |",
        f"| cluster-kill landed | {a['faults'].get('cluster-kill', 0)} "
        f"| {b['faults'].get('cluster-kill', 0)} |",
    ]
    for kind in kinds:
        lines.append(
            f"| s from {kind} heal to next ack (mean) | {a['recovery_ack_s'].get(kind)} "
            f"| {b['recovery_ack_s'].get(kind)} |"
        )
    lines += [
        "",
        "Every fault here is a process fault (SIGKILL, SIGSTOP) or a network one: a killed",
        "nats-server's writes not yet fsynced stay in the OS page cache, so the default",
        "sync is not expected to lose anything in this campaign; only a power loss or a",
        "kernel crash (not simulated) separates the two settings for safety.",
        "",
    ]
    return lines


def _plots(out: Path, results: list[dict[str, Any]]) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names: list[str] = []
    latencies: list[float] = []
    seen: set[str] = set()
    for r in results:
        tdir = next(out.glob(f"trial-{r['index']:03d}-*"), None)
        if tdir is None or not (tdir / "history.jsonl").exists():
            continue  # a trial the harness failed in before it wrote anything
        history = load_history(tdir / "history.jsonl")
        if not history:
            continue
        latencies += [h["latency"] for h in history if h["op"] == "ack" and "latency" in h]
        if r["kind"] in seen and not any(violations(r).values()):
            continue  # one picture per trial kind, plus every trial with a violation
        seen.add(r["kind"])
        start = next((h["mono"] for h in history if h["op"] == "trial"), history[0]["mono"])
        acks = [h for h in history if h["op"] == "ack" and "latency" in h]
        applies = [h for h in history if h["op"] == "apply"]
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
