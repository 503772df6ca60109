"""``python -m torture --trials N --seed S``: run a campaign, write the report.

Exit 0 only when every violation count is 0 (2 on bad usage). Teardown of
namespaces, mounts and processes happens on normal exit, on exceptions, and on
SIGTERM/SIGINT; leftovers of a crashed earlier run are removed at the start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import report
from .checker import check, load_history
from .nemesis import fault_menu
from .netns import cleanup_stale
from .spark import KINDS as SPARK_KINDS
from .spark import java_available, runs_spark
from .topology import KINDS
from .trial import Trial

RESULTS = Path(__file__).resolve().parent / "results"


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m torture", description=__doc__)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    p.add_argument("--duration", type=float, default=12.0, help="fault phase per trial (s)")
    p.add_argument("--first", type=int, default=0, help="index of the first trial (rerun one)")
    p.add_argument("--faults", type=int, default=5, help="faults per trial")
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
        help="msgs/s of the Publisher (the ProducerSession: half; the CLI: a file of "
        "rate * duration / 2 lines); per trial 2 * rate * duration acked publishes",
    )
    p.add_argument("--kinds", default=",".join(KINDS), help="trial kinds, rotated")
    p.add_argument(
        "--spark-every",
        type=int,
        default=10,
        help="run the Spark job in one trial of every N (0: never); the position rotates",
    )
    p.add_argument("--postgres", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    kinds = tuple(k for k in args.kinds.split(",") if k)
    if args.spark_every < 0:
        p.error("need --spark-every >= 0")
    if args.trials < 1 or args.duration < 5 or not kinds or set(kinds) - set(KINDS):
        p.error(f"need --trials >= 1, --duration >= 5, --kinds from {','.join(KINDS)}")
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
    return args


def ordinal(kinds: tuple[str, ...], index: int) -> int:
    """How many trials of the same kind come before trial ``index`` in the rotation."""
    kind = kinds[index % len(kinds)]
    rounds, offset = divmod(index, len(kinds))
    return rounds * kinds.count(kind) + kinds[:offset].count(kind)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if os.geteuid() != 0:
        print("torture needs root (network namespaces, tmpfs mounts)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    removed = cleanup_stale()
    if removed:
        print(f"removed leftovers of crashed runs: {removed}")
    out = args.out / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    run_id = secrets.token_hex(2)
    pg = None
    results: list[dict[str, Any]] = []
    try:
        pg_admin = None
        if args.postgres:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from tests._postgres import PostgresServer

            pg = PostgresServer().start()
            pg_admin = pg.url
        spark_ok = args.spark_every > 0 and java_available()
        if args.spark_every > 0 and not spark_ok:
            print("no Java 17+ or pyspark: the Spark part of the workload is left out")
        # --fault-kinds naming no Spark kind: the Spark job would run without its faults
        spark_faults = not args.fault_kinds or bool(set(args.fault_kinds) & set(SPARK_KINDS))
        for i in range(args.first, args.first + args.trials):
            kind = args.kinds[i % len(args.kinds)]
            trial = Trial(
                index=i,
                seed=args.seed * 1000 + i,
                kind=kind,
                out=out,
                run_id=run_id,
                duration=args.duration,
                faults=args.faults,
                rate=args.rate,
                pg_admin=pg_admin,
                campaign_seed=args.seed,
                ordinal=ordinal(args.kinds, i),
                fault_kinds=args.fault_kinds,
                spark=spark_ok and runs_spark(i, args.spark_every) and spark_faults,
            )
            started = time.monotonic()
            state = asyncio.run(trial.run())
            result = check(load_history(trial.history), state)
            result["wall_s"] = round(time.monotonic() - started, 1)
            results.append(result)
            print(
                json.dumps(
                    {
                        "trial": i,
                        "kind": kind,
                        "spark": trial.spark is not None,
                        "acked": result["acked"],
                        "wall_s": result["wall_s"],
                        **report.violations(result),
                    }
                ),
                flush=True,
            )
    finally:
        if pg is not None:
            pg.stop()
        cleanup_stale()  # also this run's own state, if a signal hit between setup steps
    summary = report.write(out, results, args.seed, run_id, args.fault_kinds)
    print(f"report: {out / 'report.md'}")
    print(json.dumps({k: summary[k] for k in ("trials", "acked", *report.KEYS, "faults")}))
    for warning in summary["coverage_warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0 if all(summary[k] == 0 for k in report.KEYS) else 1


if __name__ == "__main__":
    sys.exit(main())
