#!/usr/bin/env python3
"""Run ``make test``'s stages in lanes: the stages of a lane one after another, lanes at once.

    python3 scripts/stages.py --lane "test-main" --lane "test-fallback test-nats ..."

Each stage is a Makefile target, run as ``make --no-print-directory <stage>``. The first
lane's output is shown as it comes; every other lane's is kept in a file and shown,
whole and under the stage's name, when the stage ends. Every stage runs even after
one failed (the report is complete); at the end a table gives each stage's lane, start,
wall time, CPU time and exit status, and the run's wall time. A stage still running after
``--timeout`` seconds is stopped (SIGTERM to its process group, SIGKILL 30 s later) and
fails with exit 124: a hung stage must not eat the whole CI budget. Exit 0 when every
stage passed, 1 when one failed, 2 on bad usage.

Why lanes: most of the suite waits on JVMs, servers and timeouts, not on the CPU, so a
second lane of the small stages (other PySpark and nats-py releases, the thin client)
fits beside the main suite on 2 cores; ``TEST_LANES=1`` runs everything in one lane.
"""

from __future__ import annotations

import argparse
import os
import signal
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
    cpu: float  # user + system seconds of the stage's processes (those it waited for)
    code: int


def _run(argv: list[str], log: Path | None, timeout: float | None) -> tuple[int, float]:
    """Run ``argv`` (output to ``log``, else inherited); its exit code and CPU seconds.

    The stage runs in a process group of its own, so that a timeout stops all of it
    (make, pytest, its workers and what they started) and nothing else.
    """
    with open(log, "wb") if log is not None else open(os.devnull, "rb") as sink:
        out = sink if log is not None else None
        proc = subprocess.Popen(
            argv, cwd=ROOT, stdout=out, stderr=out and subprocess.STDOUT, start_new_session=True
        )
        fired = threading.Event()
        timer = threading.Timer(timeout, _stop, (proc.pid, fired)) if timeout else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        if timer is not None:
            timer.cancel()
    proc.returncode = 124 if fired.is_set() else os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime


def _stop(pgid: int, fired: threading.Event) -> None:
    """A stage past its timeout: SIGTERM to its group, SIGKILL to what is left 30 s later."""
    fired.set()
    sys.stderr.write(f"\nstages.py: a stage passed its timeout: stopping process group {pgid}\n")
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)  # polling another process group's exit: no event to await


def run_lane(
    lane: int,
    stages: list[str],
    t0: float,
    results: list[Result],
    out: Path | None,
    timeout: float | None = None,
) -> None:
    make = os.environ.get("MAKE", "make")
    for stage in stages:
        start = time.monotonic()
        # The first lane's output is shown as it comes; the others' once a stage ends.
        log = out / f"{stage}.log" if out is not None else None
        code, cpu = _run([make, "--no-print-directory", stage], log, timeout)
        wall = time.monotonic() - start
        results.append(Result(stage, lane, start - t0, wall, cpu, code))  # GIL-atomic
        if log is not None:
            text = log.read_text(errors="replace")
            sys.stdout.write(
                f"\n===== {stage} (lane {lane + 1}): exit {code}, {wall:.0f} s =====\n"
                f"{text}===== end of {stage} =====\n"
            )
            sys.stdout.flush()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scripts/stages.py", description=__doc__.split("\n")[0])
    parser.add_argument("--lane", action="append", default=[], help="stages, space-separated")
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds a stage may run (default: no limit)"
    )
    args = parser.parse_args(argv)
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of seconds, got {args.timeout:g}")
    lanes = [lane.split() for lane in args.lane if lane.split()]
    if not lanes:
        parser.error("give at least one --lane")
    results: list[Result] = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="oncestream-stages-") as tmp:
        threads = [
            threading.Thread(
                target=run_lane,
                args=(i, stages, t0, results, Path(tmp) if i else None, args.timeout),
            )
            for i, stages in enumerate(lanes)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    total = time.monotonic() - t0
    print("\nstage                          lane   start    wall     cpu  exit")
    for r in sorted(results, key=lambda r: r.start):
        print(
            f"{r.stage:<30} {r.lane + 1:>4} {r.start:>6.0f}s {r.wall:>6.0f}s {r.cpu:>6.0f}s"
            f" {r.code:>5}"
        )
    failed = [r.stage for r in results if r.code != 0]
    print(f"all stages: {total:.0f} s; " + (f"FAILED: {' '.join(failed)}" if failed else "passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
