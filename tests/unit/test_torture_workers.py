"""How the fault campaign accounts a worker's exits (torture/nemesis.py ``Worker``).

Plain processes stand in for the workers: an exit the harness did not cause is
a failure with the run's log tail; a producer's exit 0 is "done"; a SIGKILL by
the nemesis is expected; a CLI run that failed before publishing is a start-up
retry.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from torture.nemesis import Worker


def _worker(tmp_path: Path, code: str, *, producer: bool = True, cli: bool = False) -> Worker:
    argv = [sys.executable, "-c", code]
    return Worker("w", argv, tmp_path / "w.log", restart_until_done=producer, cli=cli)


def _exited(worker: Worker) -> None:
    assert worker.proc is not None
    worker.proc.wait(timeout=30)


def test_a_producer_that_exits_0_is_done(tmp_path: Path) -> None:
    worker = _worker(tmp_path, "pass")
    worker.start()
    _exited(worker)
    worker.supervise(in_fault=False)
    assert worker.done and worker.failures == []


def test_an_error_exit_is_a_failure_with_the_log_tail_and_the_worker_restarts(
    tmp_path: Path,
) -> None:
    worker = _worker(tmp_path, "import sys; print('PublishFailed: no PubAck'); sys.exit(1)")
    worker.start()
    _exited(worker)
    first = worker.proc
    worker.supervise(in_fault=False)
    assert [(f["code"], f["why"]) for f in worker.failures] == [(1, "exit code")]
    assert worker.failures[0]["log_tail"] == ["PublishFailed: no PubAck"]
    assert worker.proc is not first and not worker.done  # started again
    worker.kill()


def test_a_processor_ending_unasked_is_a_failure_and_a_stop_is_not(tmp_path: Path) -> None:
    ended = _worker(tmp_path, "pass", producer=False)
    ended.start()
    _exited(ended)
    ended.supervise(in_fault=False)
    assert [f["why"] for f in ended.failures] == ["exited unasked"]
    ended.kill()
    stopped = _worker(tmp_path, "import time; time.sleep(60)", producer=False)
    stopped.start()
    stopped.stop(timeout=10)
    # Python's default SIGTERM action ends it with -15: not the clean exit 0 a
    # Processor gives after request_stop, so it counts.
    assert [f["code"] for f in stopped.failures] == [-signal.SIGTERM]


def test_sigterm_ignored_is_a_failure(tmp_path: Path) -> None:
    code = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('up', flush=True); time.sleep(60)"
    )
    worker = _worker(tmp_path, code, producer=False)
    worker.start()
    deadline = time.monotonic() + 20
    while "up" not in worker.run_log() and time.monotonic() < deadline:
        time.sleep(0.05)  # its output file: nothing to await on
    worker.stop(timeout=1)
    assert [f["why"] for f in worker.failures] == ["still running 1s after SIGTERM; SIGKILLed"]


def test_the_nemesis_kill_is_expected(tmp_path: Path) -> None:
    worker = _worker(tmp_path, "import time; time.sleep(60)")
    worker.start()
    assert worker.nemesis_kill() == -signal.SIGKILL
    worker.supervise(in_fault=True)  # while the fault lasts
    assert worker.failures == [] and not worker.alive()


def test_a_cli_run_failing_before_it_published_is_a_start_up_retry(tmp_path: Path) -> None:
    startup = (
        "import sys; print('error: ConnectError: cannot connect to NATS at nats://x'); sys.exit(1)"
    )
    worker = _worker(tmp_path, startup, cli=True)
    worker.start()
    _exited(worker)
    worker.supervise(in_fault=False)
    assert worker.startup_retries == 1 and worker.failures == []
    worker.kill()
    # Once it published (its summary line is there), exit 1 is a give-up: a failure.
    gave_up = (
        "import sys; print(\"publish 'f.jsonl': stored 3, duplicates 0\"); "
        "print('error: gave up'); sys.exit(1)"
    )
    worker = _worker(tmp_path, gave_up, cli=True)
    worker.start()
    _exited(worker)
    worker.supervise(in_fault=False)
    assert worker.startup_retries == 0 and [f["code"] for f in worker.failures] == [1]
    worker.kill()


#: A worker that needs a moment to start (imports), then stops cleanly on SIGTERM
#: once its handler is installed, as torture.workers' processor does.
_SLOW_STARTER = """
import asyncio, signal, sys, time
time.sleep(0.5)
async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    await stop.wait()
asyncio.run(main())
"""


def test_a_sigterm_during_a_workers_start_up_waits_for_its_handler(tmp_path: Path) -> None:
    """A stop right after a (re)start: exit 0, not -15 (trials 42 and 64 of the seed-7 run)."""
    argv = [sys.executable, "-c", _SLOW_STARTER, "torture.workers"]
    worker = Worker("pg1", argv, tmp_path / "pg1.log", restart_until_done=False)
    worker.start()
    worker.stop(timeout=20)  # at once: the child is still sleeping, its handler not set
    assert worker.failures == []
    assert worker.proc is not None and worker.proc.returncode == 0


def test_a_producer_that_gave_up_past_its_retry_horizon_is_re_run_not_failed(
    tmp_path: Path,
) -> None:
    """Its contract on the defaults: an outage longer than 5 s x 5 attempts fails the
    publish for good, the worker asks to be re-run and resumes (the checker still checks
    every record stored once); any other exit 1 stays a failure."""
    from torture.nemesis import RERUN
    from torture.workers import GAVE_UP

    assert {e.__name__ for e in GAVE_UP} == {"PublishFailed", "NoResponders", "OperationTimeout"}
    gave_up = _worker(
        tmp_path, f"import sys; print('gave up (PublishFailed); {RERUN}'); sys.exit(1)"
    )
    gave_up.rerun_ok = True
    gave_up.start()
    _exited(gave_up)
    gave_up.supervise(in_fault=False)
    assert gave_up.failures == [] and gave_up.reruns == 1
    gave_up.kill()
    other = _worker(tmp_path, "import sys; print('StreamNotFound: no stream'); sys.exit(1)")
    other.rerun_ok = True
    other.start()
    _exited(other)
    other.supervise(in_fault=False)
    assert [f["why"] for f in other.failures] == ["exit code"]
    other.kill()
