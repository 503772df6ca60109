"""The launcher that ties a child to this process (oncestream.server._lifeline), both kinds.

util-linux setpriv (then /bin/sh) where it knows --pdeathsig, else the interpreter:
each sets the parent-death signal, refuses to run the command when the parent
died before that (its PID is not the one given), and execs the command in the
child's PID. The tests of whole servers dying with their parent are in
tests/integration/test_server_parent_death.py.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from oncestream.server import _lifeline
from oncestream.server._internal import popen_tied

PYTHON = (sys.executable, "-I", "-S", "-c", _lifeline._PY_LAUNCHER)


@pytest.fixture(params=["setpriv", "python"])
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each launcher in turn (setpriv only where it has --pdeathsig)."""
    if request.param == "python":
        monkeypatch.setattr(_lifeline, "_launcher", PYTHON)
    else:
        setpriv = _lifeline._setpriv()
        assert setpriv is not None, "util-linux setpriv with --pdeathsig is not installed"
        monkeypatch.setattr(
            _lifeline, "_launcher", (setpriv, "--pdeathsig", "KILL", "--", "/bin/sh", "-c",
                                     _lifeline._SH_CHECK)
        )  # fmt: skip
    return str(request.param)


def test_the_command_runs_in_the_childs_pid_with_its_exit_status(kind: str) -> None:
    proc = popen_tied(["sh", "-c", "echo $$; exit 7"], stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=30)
    assert int(out) == proc.pid  # exec'd: the PID tracked is the command's own
    assert proc.returncode == 7


def test_the_parent_death_signal_is_set(kind: str) -> None:
    """/proc shows no parent-death signal; the child reads its own with prctl(2)."""
    probe = (
        "import ctypes, signal; v = ctypes.c_int(); "
        "ctypes.CDLL(None).prctl(2, ctypes.byref(v), 0, 0, 0); "  # PR_GET_PDEATHSIG
        "print(v.value == signal.SIGKILL)"
    )
    proc = popen_tied([sys.executable, "-I", "-S", "-c", probe], stdout=subprocess.PIPE)
    out, _ = proc.communicate(timeout=30)
    assert out.strip() == b"True"


def test_a_parent_that_died_before_the_prctl_runs_nothing(kind: str, tmp_path: Path) -> None:
    """The launcher is told another parent PID (as if its parent had died and it had
    been re-parented): it exits 1 without running the command."""
    marker = tmp_path / "ran"
    command = [*_lifeline.launcher(), "1", "touch", str(marker)]
    done = subprocess.run(command, check=False, timeout=30)
    assert done.returncode == 1 and not marker.exists()


def test_a_child_forked_from_a_thread_that_ended_lives_on(kind: str) -> None:
    """The parent-death signal follows the thread that forked: every tied child is forked
    by the spawner thread, which lives as long as the process."""
    box: list[subprocess.Popen[bytes]] = []
    worker = threading.Thread(target=lambda: box.append(popen_tied(["sleep", "600"])))
    worker.start()
    worker.join()
    proc = box[0]
    try:
        fd = os.pidfd_open(proc.pid)
        try:
            readable, _, _ = select.select([fd], [], [], 0.5)  # killed: readable at once
        finally:
            os.close(fd)
        assert not readable, "the child died with the thread that asked for it"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def test_shell_and_preexec_fn_are_refused() -> None:
    with pytest.raises(ValueError, match="shell="):
        popen_tied(["true"], shell=True)
    with pytest.raises(ValueError, match="preexec_fn="):
        popen_tied(["true"], preexec_fn=lambda: None)


def test_a_missing_command_fails_as_popen_does(kind: str) -> None:
    with pytest.raises(FileNotFoundError):
        popen_tied(["no-such-command-anywhere"])
