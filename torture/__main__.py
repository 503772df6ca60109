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
import math
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import cachefs, report
from .checker import check, load_history
from .nemesis import CONSUMER_RESET, STACK_FAULTS, fault_menu, stack_menu
from .netns import cleanup_stale
from .options import SPARK_VALUES, VALUES, TrialOptions, draw
from .spark import ALL_KINDS as SPARK_KINDS
from .spark import describe_mode, java_available, oldest_python, runs_spark, spark_mode
from .storefaults import CRASH_KINDS
from .topology import KINDS
from .trial import SABOTAGE, Trial, planned_faults

RESULTS = Path(__file__).resolve().parent / "results"
EXIT_HARNESS, EXIT_INTERRUPTED = 2, 130
#: Seconds a trial may run before the harness takes it for hung: cancelled (its clean-up
#: runs), then reported as the harness's failure in that trial. The longest trial of the
#: a7bda06 campaign took 375 s (a Spark trial whose streams a power loss took).
TRIAL_DEADLINE = 1200.0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m torture", description=__doc__)
    p.add_argument("--trials", type=int, default=3, help="how many trials to run (>= 1)")
    p.add_argument(
        "--seed",
        type=int,
        default=int(time.time()) % 100000,
        help="campaign seed: every trial's schedule and options follow from it and the "
        "trial's index (default: from the clock)",
    )
    p.add_argument("--duration", type=float, default=12.0, help="run phase per trial (s)")
    p.add_argument("--first", type=int, default=0, help="index of the first trial (rerun one)")
    p.add_argument("--faults", type=int, default=5, help="faults per trial (start-up, run, drain)")
    p.add_argument(
        "--stack-faults",
        type=int,
        default=None,
        help="faults per trial on PostgreSQL, the SQLite ledger's disk and (R3) the servers' "
        "storage and membership, from a cycle of their own (default: "
        + ", ".join(f"{k} {v}" for k, v in STACK_FAULTS.items())
        + ")",
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="pin a drawn option in every trial (e.g. dead_letters=replay, window=short, "
        "spark_out=sqlite); repeatable",
    )
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
        "(drop-row needs a Spark trial, drop-letter dead letters, drop-pg-effect PostgreSQL)",
    )
    p.add_argument(
        "--schedule", action="store_true", help="print each trial's fault schedule and exit"
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if args.spark_every < 0:
        p.error("need --spark-every >= 0")
    if args.trials < 1:
        p.error(f"--trials {args.trials}: need 1 or more")
    # Written so that nan and inf fail too (every comparison with nan is false).
    if not (5 <= args.duration < math.inf):
        p.error(f"--duration {args.duration}: need a finite number of seconds >= 5")
    if not (0 < args.rate < math.inf):
        p.error(f"--rate {args.rate}: need a finite number of messages per second > 0")
    if not kinds or set(kinds) - set(KINDS):
        p.error(f"--kinds {args.kinds!r}: need a comma-separated list from {','.join(KINDS)}")
    if args.faults < 0 or args.first < 0:
        p.error(f"need --faults >= 0, --first >= 0 (got {args.faults}, {args.first})")
    if args.stack_faults is not None and args.stack_faults < 0:
        p.error(f"need --stack-faults >= 0 (got {args.stack_faults})")
    values = {**VALUES, **SPARK_VALUES}
    args.pinned = {}
    for item in args.option:
        name, sep, value = item.partition("=")
        if not sep or name not in values or value not in values[name]:
            allowed = "; ".join(f"{n}={'|'.join(v)}" for n, v in values.items())
            p.error(f"--option {item!r}: expected NAME=VALUE from {allowed}")
        if args.pinned.get(name, value) != value:
            p.error(f"--option {name}: given twice ({args.pinned[name]}, {value}); pin one value")
        args.pinned[name] = value
    only = tuple(k for k in args.fault_kinds.split(",") if k)
    known = {k for kind in KINDS for k, _ in (*fault_menu(kind), *stack_menu(kind, crashes=True))}
    known |= set(SPARK_KINDS)
    if set(only) - known:
        p.error(f"unknown --fault-kinds {sorted(set(only) - known)}; known: {sorted(known)}")
    if only:
        spark = set(only) & set(SPARK_KINDS)  # every trial kind can run Spark
        kinds = tuple(
            k
            for k in kinds
            if spark or {f for f, _ in (*fault_menu(k), *stack_menu(k, crashes=True))} & set(only)
        )
        if not kinds:
            p.error(f"no trial kind of --kinds has any of --fault-kinds {','.join(only)}")
    args.kinds, args.fault_kinds = kinds, only
    indices = range(args.first, args.first + args.trials)
    args.spark_trials = [i for i in indices if runs_spark(i, args.spark_every)]
    spark_pins = sorted(set(args.pinned) & set(SPARK_VALUES))
    if spark_pins and not args.spark_trials:
        p.error(f"--option {','.join(spark_pins)} pins a Spark option, but no trial of the run "
                "runs Spark (--spark-every)")  # fmt: skip
    # A Spark trial runs only where --fault-kinds leaves it a Spark fault (trial_plan).
    spark_faults = not only or bool(set(only) & set(SPARK_KINDS))
    if only and set(only) <= set(SPARK_KINDS) and not args.spark_trials:
        p.error(f"--fault-kinds {','.join(only)}: Spark faults only, but no trial of the run "
                "runs Spark (--spark-every)")  # fmt: skip
    if args.sabotage == "drop-row" and not (args.spark_trials and spark_faults):
        p.error("--sabotage drop-row needs a Spark trial in the run (e.g. --spark-every 1)")
    if args.sabotage == "drop-letter" and args.pinned.get("dead_letters", "keep") == "none":
        p.error("--sabotage drop-letter needs dead letters (not --option dead_letters=none)")
    if args.sabotage == "drop-letter":
        args.pinned.setdefault("dead_letters", "keep")
    if args.sabotage == "drop-pg-effect" and not args.postgres:
        p.error("--sabotage drop-pg-effect needs PostgreSQL (not --no-postgres)")
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
    spark_ordinal = index // args.spark_every if spark and args.spark_every else None
    options = trial_options(args, index, kind, spark_ordinal)
    stack = STACK_FAULTS[kind] if args.stack_faults is None else args.stack_faults
    mode = spark_mode(index, args.spark_every, kind == "leaf") if spark else None
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
        stack_faults=stack,
        spark_mode=mode,
    )
    plan = {"index": index, "kind": kind, "seed": seed, "spark": spark, "faults": faults,
            "options": options, "stack_faults": stack}  # fmt: skip
    if mode is not None:
        plan["spark_mode"] = mode
    return plan


def trial_options(
    args: argparse.Namespace, index: int, kind: str, spark_ordinal: int | None
) -> TrialOptions:
    """The options trial ``index`` draws (:func:`torture.options.draw`), ``--option`` pins
    applied. A leaf trial's processors read the hub's sourced stream, which has no
    subjects to replay into and cannot be partitioned (a partitioned stream has no
    sources): ``replay`` becomes ``keep`` there, ``partitioned`` ``pinned-pair``. A
    dead letter of a partitioned stream names its stored subject (``<p>.t.sess``), which
    the stream does not capture, so ``dlq replay`` refuses it: ``replay`` becomes
    ``keep`` in ``partitioned`` trials too."""
    drawn = draw(args.seed, index, spark_ordinal).as_dict()
    spark = spark_ordinal is not None
    drawn |= {k: v for k, v in args.pinned.items() if k not in SPARK_VALUES or spark}
    if kind == "leaf" and drawn.get("members") == "partitioned":
        drawn["members"] = "pinned-pair"
    if (kind == "leaf" or drawn.get("members") == "partitioned") and drawn.get(
        "dead_letters"
    ) == "replay":
        drawn["dead_letters"] = "keep"
    if drawn.get("dead_letters", "none") != "none" and not drawn.get("fail_share"):
        drawn["fail_share"] = draw(args.seed, index, None).fail_share or 0.005
    if drawn.get("dead_letters") == "none":
        drawn["fail_share"] = 0.0
    return TrialOptions(**drawn)


def _plan_json(plan: dict[str, Any]) -> dict[str, Any]:
    return {**plan, "faults": [f.as_dict() for f in plan["faults"]],
            "options": plan["options"].as_dict()}  # fmt: skip


def schedule_digest(plans: list[dict[str, Any]]) -> str:
    rows = [_plan_json(p) for p in plans]
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
            print(json.dumps(_plan_json(plan)))
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
    crashes = [p["index"] for p in plans if {f.kind for f in p["faults"]} & set(CRASH_KINDS)]
    missing = cachefs.unavailable() if crashes else None
    if missing:
        print(f"error: trials {crashes} schedule an OS crash (os-crash, power-loss), which "
              f"needs the page-cache file system: {missing}", file=sys.stderr)  # fmt: skip
        return EXIT_HARNESS
    oldest = [p["index"] for p in plans if p["spark"] and p["options"].pyspark == "oldest"]
    if oldest and oldest_python() is None:
        print(
            f"error: Spark trials {oldest} run the oldest PySpark, whose venv is missing: "
            "run `make setup-oldest` (or pin --option pyspark=newest)",
            file=sys.stderr,
        )
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
        summary = report.write(out, results, args.seed, run_id, args.fault_kinds, about)
    except KeyboardInterrupt as exc:
        if results:  # the trials that ran keep their verdicts: a partial report
            report.write(out, results, args.seed, run_id, args.fault_kinds,
                         {**about, "status": "interrupted", "error": str(exc)})  # fmt: skip
            print(f"interrupted ({exc}) after {len(results)} trials; their report: "
                  f"{out / 'report.md'} (no verdict on the campaign)")  # fmt: skip
        else:
            _write_status(args.out, {"status": "interrupted", "error": str(exc), **about,
                                     "trials_done": 0})  # fmt: skip
            print(f"interrupted ({exc}) before a trial ended; nothing concluded")
        return EXIT_INTERRUPTED
    except BaseException as exc:  # a crash outside the trials: no verdict, and it says so
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
    print(f"report: {out / 'report.md'}")
    keys = ("trials", "records", "acked", *report.KEYS, "faults", "skipped")
    print(json.dumps({k: summary[k] for k in keys}))
    for warning in summary["coverage_warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    for t in summary["measured_limits"]["trials"]:
        counts = ", ".join(f"{k}={v}" for k, v in t.items() if k not in ("trial", "setting", "why"))
        print(f"measured limit (not a violation): trial {t['trial']}, {t['setting']} "
              f"({t['why']}): {counts or 'nothing lost'}")  # fmt: skip
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
    template = None
    try:
        if args.postgres:
            from .postgres import make_template

            template = make_template()  # one initdb; every trial starts a copy
        for plan in plans:
            started = time.monotonic()
            try:
                state, history = _trial(args, plan, out, run_id, template)
                result = check(history, state)
            except KeyboardInterrupt:
                raise
            except BaseException as exc:  # the harness failed in this trial (SystemExit, a
                result = _failed(plan, out, exc)  # stray CancelledError too): reported
            result["wall_s"] = round(time.monotonic() - started, 1)
            results.append(result)
            # Each verdict is on disk as soon as it is known: a harness killed outright
            # (SIGKILL, out of memory) loses no trial that ended.
            try:
                with (out / "results.jsonl").open("a") as done:
                    done.write(json.dumps(result) + "\n")
            except OSError as exc:  # the verdicts are still in memory, for the report
                print(f"warning: results.jsonl not written: {exc}", file=sys.stderr)
            print(json.dumps(_trial_line(plan, result)), flush=True)
    finally:
        if template is not None:
            shutil.rmtree(template, ignore_errors=True)
        cleanup_stale()  # also this run's own state, if a signal hit between setup steps


def _trial(
    args: argparse.Namespace,
    plan: dict[str, Any],
    out: Path,
    run_id: str,
    template: Path | None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
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
        pg_template=template,
        campaign_seed=args.seed,
        ordinal=ordinal(args.kinds, i),
        fault_kinds=args.fault_kinds,
        spark=plan["spark"],
        sabotage=args.sabotage,
        spark_mode=plan.get("spark_mode"),
        options=plan["options"],
        stack_faults=plan["stack_faults"],
    )
    assert trial.faults == plan["faults"]
    state = asyncio.run(_bounded(trial.run(), TRIAL_DEADLINE, i))
    return state, load_history(trial.history)


async def _bounded(run: Any, deadline: float, index: int) -> dict[str, Any]:
    """``run`` awaited for ``deadline`` s at most; a hung trial is cancelled (its clean-up
    runs) and raises :class:`TrialHung`, which the caller reports as a harness failure."""
    # No task of its own (asyncio.timeout, not wait_for): a ^C reaches the trial as is.
    bound = asyncio.timeout(deadline)
    try:
        async with bound:
            return dict(await run)
    except TimeoutError as exc:
        if bound.expired():  # the deadline's, not one raised inside the trial
            raise TrialHung(f"trial {index} ran past its {deadline:g} s deadline") from exc
        raise


class TrialHung(RuntimeError):
    """A trial ran past :data:`TRIAL_DEADLINE`."""


def _failed(plan: dict[str, Any], out: Path, exc: BaseException) -> dict[str, Any]:
    """:func:`harness_failure`, or, when writing that failure fails too, a bare one: the
    trial is still reported."""
    try:
        return harness_failure(plan, out, exc)
    except Exception as again:
        failure = {"error": f"{type(exc).__name__} (its report failed: {type(again).__name__})",
                   "traceback": "", "logs": {}}  # fmt: skip
        return _failure_result(plan, failure)


def harness_failure(plan: dict[str, Any], out: Path, exc: BaseException) -> dict[str, Any]:
    """The result of a trial the harness itself failed in: a failure with the traceback and
    the tail of every log of the trial, so the campaign still ends with a verdict."""
    error = "".join(traceback.format_exception(exc))
    logs: dict[str, list[str]] = {}
    for tdir in out.glob(f"trial-{plan['index']:03d}-*"):
        for log in sorted(tdir.glob("*.log")):
            try:
                logs[log.name] = log.read_text(errors="replace").splitlines()[-20:]
            except OSError:
                continue
        (tdir / "harness-failure.txt").write_text(error)
    print(f"trial {plan['index']}: the harness failed: {type(exc).__name__}: {exc}",
          file=sys.stderr)  # fmt: skip
    failure = {"error": error.splitlines()[-1][:500], "traceback": error[-4000:], "logs": logs}
    return _failure_result(plan, failure)


def _failure_result(plan: dict[str, Any], failure: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": plan["index"],
        "kind": plan["kind"],
        "seed": plan["seed"],
        "records": 0,
        "acked": 0,
        "stored": {},
        "lost": [],
        "unstored": [],
        "missing_at_hub": [],
        "duplicated": [],
        "applied_twice": {},
        "missing_effects": {},
        "unexpected": [],
        "worker_failures": [],
        "reader_mismatch": {},
        "unreadable": {},
        "spark": plan["spark"],
        "spark_mode": describe_mode(plan["spark_mode"]) if plan["spark"] else None,
        "spark_missing": {},
        "spark_duplicated": {},
        "dead_letters": {},
        "replays": [],
        "options": plan["options"].as_dict(),
        "limit": None,
        "harness_failures": [failure],
        "notes": [f"the harness failed: {failure['error']}"],
        "faults": [],
        "skipped": [],
        "recovery": [],
        "timing": {},
        "load": {"acks_per_s": None, "latency_p50_ms": None, "latency_p99_ms": None},
    }


def _trial_line(plan: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {
        "trial": plan["index"],
        "kind": plan["kind"],
        "spark": describe_mode(plan["spark_mode"]) if plan["spark"] else False,
        "options": " ".join(plan["options"].words()),
        "records": result["records"],
        "acked": result["acked"],
        "wall_s": result["wall_s"],
        **report.violations(result),
        **({"limit": result["limit"]} if result.get("limit") else {}),
        "landed": len(result["faults"]),
        "skipped": len(result["skipped"]),
        "resets": sum(1 for f in result["faults"] if f["kind"] == CONSUMER_RESET),
        "pg_switches": (result.get("pg_active") or {}).get("switches"),
    }


if __name__ == "__main__":
    sys.exit(main())
