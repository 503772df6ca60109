"""``python -m torture --trials N --seed S``: run a campaign, write the report.

Exit 0 when every violation count is 0, 1 when any is not (the summary and
``latest.json`` name them), 2 on bad usage and when the harness itself failed
(the report then says ``"status": "crashed"`` with the error; the verdict is
unknown), 130 when interrupted. ``latest.json`` says ``"status": "running"``
while a campaign runs, so an old verdict is never mistaken for a new one.
Teardown of namespaces, mounts and processes happens on normal exit, on
exceptions, and on SIGTERM/SIGINT; leftovers of a crashed earlier run are
removed at the start.

``--sabotage KIND`` is the negative control: it breaks the system under test
once per trial (see :data:`torture.trial.SABOTAGE`), and the run must exit 1
naming the violation. ``--schedule`` prints every trial's fault schedule (from
the seed and the options alone) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import report
from .checker import check, load_history
from .nemesis import CONSUMER_RESET, fault_menu
from .netns import cleanup_stale
from .spark import KINDS as SPARK_KINDS
from .spark import describe_mode, java_available, runs_spark, spark_mode
from .topology import KINDS
from .trial import SABOTAGE, Trial, planned_faults

RESULTS = Path(__file__).resolve().parent / "results"
EXIT_HARNESS, EXIT_INTERRUPTED = 2, 130


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m torture", description=__doc__)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--duration", type=float, default=12.0, help="run phase per trial (s)")
    p.add_argument("--first", type=int, default=0, help="index of the first trial (rerun one)")
    p.add_argument("--faults", type=int, default=5, help="faults per trial (start-up, run, drain)")
    p.add_argument(
        "--fault-kinds",
        default="",
        help="only these fault kinds (comma-separated, e.g. partition-pair,cluster-kill); "
        "trial kinds with none of them are left out",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=440.0,
        help="msgs/s of the Publisher (the ProducerSession and the CLI: half each, over the "
        "same time); per trial 2 * rate * duration input records",
    )
    p.add_argument("--kinds", default=",".join(KINDS), help="trial kinds, rotated")
    p.add_argument(
        "--spark-every",
        type=int,
        default=10,
        help="run the Spark job in one trial of every N (0: never); the position rotates. "
        "Spark trials need Java 17+ and pyspark: without them the run stops (exit 2)",
    )
    p.add_argument("--postgres", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--sabotage",
        choices=SABOTAGE,
        default=None,
        help="negative control: break the system once per trial; the run must exit 1 "
        "(drop-row needs a Spark trial)",
    )
    p.add_argument(
        "--schedule", action="store_true", help="print each trial's fault schedule and exit"
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if args.spark_every < 0:
        p.error("need --spark-every >= 0")
    if args.trials < 1 or args.duration < 5 or not kinds or set(kinds) - set(KINDS):
        p.error(f"need --trials >= 1, --duration >= 5, --kinds from {','.join(KINDS)}")
    if args.faults < 0 or args.rate <= 0 or args.first < 0:
        p.error(f"need --faults >= 0, --rate > 0, --first >= 0 (got {args.faults}, "
                f"{args.rate}, {args.first})")  # fmt: skip
    only = tuple(k for k in args.fault_kinds.split(",") if k)
    known = {k for kind in KINDS for k, _ in fault_menu(kind)} | set(SPARK_KINDS)
    if set(only) - known:
        p.error(f"unknown --fault-kinds {sorted(set(only) - known)}; known: {sorted(known)}")
    if only:
        spark = set(only) & set(SPARK_KINDS)  # every trial kind can run Spark
        kinds = tuple(k for k in kinds if spark or {f for f, _ in fault_menu(k)} & set(only))
        if not kinds:
            p.error(f"no trial kind of --kinds has any of --fault-kinds {','.join(only)}")
    args.kinds, args.fault_kinds = kinds, only
    indices = range(args.first, args.first + args.trials)
    args.spark_trials = [i for i in indices if runs_spark(i, args.spark_every)]
    if args.sabotage == "drop-row" and not args.spark_trials:
        p.error("--sabotage drop-row needs a Spark trial in the run (e.g. --spark-every 1)")
    return args


def ordinal(kinds: tuple[str, ...], index: int) -> int:
    """How many trials of the same kind come before trial ``index`` in the rotation."""
    kind = kinds[index % len(kinds)]
    rounds, offset = divmod(index, len(kinds))
    return rounds * kinds.count(kind) + kinds[:offset].count(kind)


def trial_plan(args: argparse.Namespace, index: int) -> dict[str, Any]:
    """What trial ``index`` is: its kind, seed, whether it runs Spark, its faults."""
    kind = args.kinds[index % len(args.kinds)]
    # --fault-kinds naming no Spark kind: the Spark job would run without its faults
    spark_faults = not args.fault_kinds or bool(set(args.fault_kinds) & set(SPARK_KINDS))
    spark = index in args.spark_trials and spark_faults
    seed = args.seed * 1000 + index
    faults = planned_faults(
        seed=seed,
        kind=kind,
        duration=args.duration,
        faults=args.faults,
        campaign_seed=args.seed,
        ordinal=ordinal(args.kinds, index),
        fault_kinds=args.fault_kinds,
        spark=spark,
        sabotage=args.sabotage,
    )
    plan = {"index": index, "kind": kind, "seed": seed, "spark": spark, "faults": faults}
    if spark:
        plan["spark_mode"] = spark_mode(index, args.spark_every, kind == "leaf")
    return plan


def schedule_digest(plans: list[dict[str, Any]]) -> str:
    rows = [{**p, "faults": [f.as_dict() for f in p["faults"]]} for p in plans]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()[:16]


def _code_version() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root,
                              capture_output=True, text=True, timeout=10, check=True)  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src", "torture"],
                               cwd=root, capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def _write_status(base: Path, status: dict[str, Any]) -> None:
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / "latest.json.tmp"
    tmp.write_text(json.dumps(status, indent=2))
    tmp.replace(base / "latest.json")


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    plans = [trial_plan(args, i) for i in range(args.first, args.first + args.trials)]
    if args.schedule:
        for plan in plans:
            print(json.dumps({**plan, "faults": [f.as_dict() for f in plan["faults"]]}))
        print(json.dumps({"schedule_sha256": schedule_digest(plans)}))
        return 0
    if any(p["spark"] for p in plans) and not java_available():
        print(
            "error: this run has Spark trials (--spark-every "
            f"{args.spark_every}: trials {[p['index'] for p in plans if p['spark']]}) but "
            "Java 17+ or pyspark is missing; install them, or run without Spark: "
            "--spark-every 0 (make torture SPARK_EVERY=0)",
            file=sys.stderr,
        )
        return EXIT_HARNESS
    if os.geteuid() != 0:
        print("torture needs root (network namespaces, tmpfs mounts)", file=sys.stderr)
        return EXIT_HARNESS
    previous = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _campaign(args, plans, argv)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _campaign(args: argparse.Namespace, plans: list[dict[str, Any]], argv: list[str] | None) -> int:
    removed = cleanup_stale()
    if removed:
        print(f"removed leftovers of crashed runs: {removed}")
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    run_id = secrets.token_hex(2)
    about = {
        "seed": args.seed,
        "first": args.first,
        "sabotage": args.sabotage,
        "argv": sys.argv[1:] if argv is None else argv,
        "code": _code_version(),
        "schedule_sha256": schedule_digest(plans),
        "run_dir": str(out),
    }
    _write_status(args.out, {"status": "running", **about})
    results: list[dict[str, Any]] = []
    try:
        _run(args, plans, out, run_id, results)
    except KeyboardInterrupt as exc:
        _write_status(args.out, {"status": "interrupted", "error": str(exc), **about,
                                 "trials_done": len(results)})  # fmt: skip
        print(f"interrupted ({exc}); {len(results)} trials done; nothing concluded")
        return EXIT_INTERRUPTED
    except Exception as exc:
        error = "".join(traceback.format_exception(exc))
        _write_status(args.out, {"status": "crashed", "error": error, **about,
                                 "trials_done": len(results)})  # fmt: skip
        print(error, file=sys.stderr)
        print(
            f"harness crashed after {len(results)} trials: the campaign's verdict is unknown "
            f"(see {args.out / 'latest.json'})",
            file=sys.stderr,
        )
        return EXIT_HARNESS
    summary = report.write(out, results, args.seed, run_id, args.fault_kinds, about)
    print(f"report: {out / 'report.md'}")
    keys = ("trials", "records", "acked", *report.KEYS, "faults", "skipped")
    print(json.dumps({k: summary[k] for k in keys}))
    for warning in summary["coverage_warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    if args.sabotage and not summary["sabotaged"]:
        print(f"warning: --sabotage {args.sabotage} found nothing to break", file=sys.stderr)
    if summary["violations"]:
        named = ", ".join(f"{k}={v}" for k, v in summary["violations"].items())
        print(f"VIOLATIONS: {named}" + (f" (sabotage {args.sabotage})" if args.sabotage else ""))
        return 1
    print(
        "no violations" + (f" (sabotage {args.sabotage} went unnoticed)" if args.sabotage else "")
    )
    return 0


def _run(
    args: argparse.Namespace,
    plans: list[dict[str, Any]],
    out: Path,
    run_id: str,
    results: list[dict[str, Any]],
) -> None:
    pg = None
    try:
        pg_admin = None
        if args.postgres:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from harness import PostgresServer

            pg = PostgresServer().start()
            pg_admin = pg.url
        for plan in plans:
            i = plan["index"]
            trial = Trial(
                index=i,
                seed=plan["seed"],
                kind=plan["kind"],
                out=out,
                run_id=run_id,
                duration=args.duration,
                faults=args.faults,
                rate=args.rate,
                pg_admin=pg_admin,
                campaign_seed=args.seed,
                ordinal=ordinal(args.kinds, i),
                fault_kinds=args.fault_kinds,
                spark=plan["spark"],
                sabotage=args.sabotage,
                spark_mode=plan.get("spark_mode"),
            )
            assert trial.faults == plan["faults"]
            started = time.monotonic()
            state = asyncio.run(trial.run())
            result = check(load_history(trial.history), state)
            result["wall_s"] = round(time.monotonic() - started, 1)
            results.append(result)
            print(
                json.dumps(
                    {
                        "trial": i,
                        "kind": plan["kind"],
                        "spark": describe_mode(plan["spark_mode"]) if plan["spark"] else False,
                        "records": result["records"],
                        "acked": result["acked"],
                        "wall_s": result["wall_s"],
                        **report.violations(result),
                        "landed": len(result["faults"]),
                        "skipped": len(result["skipped"]),
                        "resets": sum(1 for f in result["faults"] if f["kind"] == CONSUMER_RESET),
                        "pg_switches": (state.get("pg_active") or {}).get("switches"),
                    }
                ),
                flush=True,
            )
    finally:
        if pg is not None:
            pg.stop()
        cleanup_stale()  # also this run's own state, if a signal hit between setup steps


if __name__ == "__main__":
    sys.exit(main())
