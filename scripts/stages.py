#!/usr/bin/env python3
"""Run ``make test``'s stages in lanes: the stages of a lane one after another, lanes at once.

    python3 scripts/stages.py --lane "test-main" --lane "test-fallback test-nats ..."

Each stage is a Makefile target, run as ``make --no-print-directory <stage>``. The first
lane's output is shown as it comes; every other lane's is kept in a file and shown,
whole and under the stage's name, when the stage ends. Every stage runs even after
one failed (the report is complete); at the end a table gives each stage's lane, start,
wall time and exit status, and the run's wall time. Exit 0 when every stage passed, 1
when one failed, 2 on bad usage.

Why lanes: most of the suite waits on JVMs, servers and timeouts, not on the CPU, so a
second lane of the small stages (other PySpark and nats-py releases, the thin client)
fits beside the main suite on 2 cores; ``TEST_LANES=1`` runs everything in one lane.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Result:
    stage: str
    lane: int
    start: float
    wall: float
    code: int


def run_lane(
    lane: int, stages: list[str], t0: float, results: list[Result], out: Path | None
) -> None:
    make = os.environ.get("MAKE", "make")
    for stage in stages:
        start = time.monotonic()
        argv = [make, "--no-print-directory", stage]
        log = out / f"{stage}.log" if out is not None else None
        if log is None:  # the first lane: shown as it comes
            done = subprocess.run(argv, cwd=ROOT, check=False)
        else:
            with open(log, "wb") as sink:
                done = subprocess.run(
                    argv, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT, check=False
                )
        wall = time.monotonic() - start
        results.append(Result(stage, lane, start - t0, wall, done.returncode))  # GIL-atomic
        if log is not None:
            text = log.read_text(errors="replace")
            sys.stdout.write(
                f"\n===== {stage} (lane {lane + 1}): exit {done.returncode}, {wall:.0f} s =====\n"
                f"{text}===== end of {stage} =====\n"
            )
            sys.stdout.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/stages.py", description=__doc__.split("\n")[0])
    parser.add_argument("--lane", action="append", default=[], help="stages, space-separated")
    args = parser.parse_args(argv)
    lanes = [lane.split() for lane in args.lane if lane.split()]
    if not lanes:
        parser.error("give at least one --lane")
    results: list[Result] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="oncestream-stages-") as tmp:
        threads = [
            threading.Thread(
                target=run_lane, args=(i, stages, t0, results, Path(tmp) if i else None)
            )
            for i, stages in enumerate(lanes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    total = time.monotonic() - t0
    print("\nstage                          lane   start    wall  exit")
    for r in sorted(results, key=lambda r: r.start):
        print(f"{r.stage:<30} {r.lane + 1:>4} {r.start:>6.0f}s {r.wall:>6.0f}s {r.code:>5}")
    failed = [r.stage for r in results if r.code != 0]
    print(f"all stages: {total:.0f} s; " + (f"FAILED: {' '.join(failed)}" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
