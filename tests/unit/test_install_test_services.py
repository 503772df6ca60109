"""scripts/install-test-services: what it finds missing, and what it does as root or not.

The decision logic runs against a faked system (:class:`Probe`); the script itself runs
as a user without root (``runuser -u nobody`` when the tests run as root) on a PATH
where prometheus is not found: it must install nothing, exit 1 and name the one
command to run.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-test-services"


def _script() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("install_test_services", str(SCRIPT))
    spec = importlib.util.spec_from_loader("install_test_services", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["install_test_services"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


its = _script()
EVERYTHING = {"initdb", "prometheus", "promtool", "curl", "ip", "tc"}


def probe(
    *,
    on_path: set[str] = EVERYTHING,
    pg_dir: bool = True,
    postgres_user: bool = True,
    java: bool = True,
) -> object:
    return its.Probe(
        which=lambda name: f"/usr/bin/{name}" if name in on_path else None,
        exists=lambda pattern: pg_dir,
        has_user=lambda name: postgres_user,
        java_ok=lambda: java,
    )


def packages(needs: Sequence[object]) -> list[str]:
    return [n.package for n in needs]  # type: ignore[attr-defined]


def test_nothing_missing_means_nothing_to_do() -> None:
    for root in (True, False):
        needs = its.missing(probe(), root=root)
        assert needs == []
        assert its.plan(needs, root=root) == (0, "")


def test_a_fresh_machine_without_prometheus() -> None:
    needs = its.missing(probe(on_path=EVERYTHING - {"prometheus", "promtool"}), root=True)
    assert packages(needs) == ["prometheus"]
    assert needs[0].missing == "prometheus and promtool"
    assert its.plan(needs, root=True) == (-1, "")  # root: install


def test_a_user_is_told_the_one_command_and_make_test_stops() -> None:
    lacking = probe(on_path=EVERYTHING - {"promtool", "initdb"}, pg_dir=False)
    needs = its.missing(lacking, root=False)
    assert packages(needs) == ["postgresql", "prometheus"]
    code, message = its.plan(needs, root=False)
    assert code == 1
    assert "sudo scripts/install-test-services" in message
    assert "postgresql (initdb" in message and "prometheus (promtool" in message


def test_postgres_binaries_found_on_path_or_in_the_debian_directory() -> None:
    assert its.missing(probe(pg_dir=False), root=False) == []  # initdb on PATH
    assert its.missing(probe(on_path=EVERYTHING - {"initdb"}), root=False) == []
    both_gone = probe(on_path=EVERYTHING - {"initdb"}, pg_dir=False)
    assert packages(its.missing(both_gone, root=False)) == ["postgresql"]


def test_root_needs_the_postgres_user_and_iproute2() -> None:
    # As root the PostgreSQL tests run the server as `postgres`; the fault-injection
    # tests (network namespaces) run only as root, so only root needs ip and tc.
    bare = probe(on_path=EVERYTHING - {"ip", "tc"}, postgres_user=False)
    assert packages(its.missing(bare, root=True)) == ["postgresql", "iproute2"]
    assert its.missing(bare, root=False) == []


def test_java_and_curl() -> None:
    needs = its.missing(probe(on_path=EVERYTHING - {"curl"}, java=False), root=False)
    assert packages(needs) == ["curl", "java"]


def test_the_java_package_is_the_first_one_apt_has() -> None:
    def policy(candidates: dict[str, str]) -> object:
        def run(argv: Sequence[str]) -> str:
            version = candidates.get(argv[-1])
            if version is None:
                return ""  # apt-cache policy prints nothing for a package it does not know
            return f"{argv[-1]}:\n  Installed: (none)\n  Candidate: {version}\n"

        return run

    assert its.java_package(policy({"openjdk-17-jre-headless": "17.0.15"})) == (
        "openjdk-17-jre-headless"
    )
    trixie = {"openjdk-17-jre-headless": "(none)", "openjdk-21-jre-headless": "21.0.8"}
    assert its.java_package(policy(trixie)) == "openjdk-21-jre-headless"
    assert its.java_package(policy({})) == "default-jre-headless"


def _bare_path(tmp_path: Path) -> str:
    """A PATH holding only what the script itself runs: python3 and check-java's tools."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The system's python3 where there is one: another user may not reach this venv's.
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    for tool in ("python3", "java", "awk", "cut", "bash", "env"):
        found = python if tool == "python3" else shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def test_the_script_run_by_a_user_without_prometheus_names_the_command() -> None:
    # Not under pytest's tmp_path: its parent is private to the user running the tests.
    with tempfile.TemporaryDirectory(prefix="oncestream-its-") as tmp:
        Path(tmp).chmod(0o755)
        _run_as_a_user(Path(tmp))


def _run_as_a_user(tmp_path: Path) -> None:
    path = _bare_path(tmp_path)
    # Run by root (CI), the script runs as nobody: the path a developer takes.
    user = [shutil.which("runuser") or "runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
    done = subprocess.run(
        [*user, str(SCRIPT)],
        env={"PATH": path, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "prometheus (prometheus and promtool" in done.stderr
    assert "sudo scripts/install-test-services" in done.stderr
    assert "installing" not in done.stdout


def test_the_script_as_this_user_with_everything_there_changes_nothing() -> None:
    # What `make test` runs on a machine already set up: exit 0, no apt-get.
    done = subprocess.run(
        [str(SCRIPT), "--check"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "everything the tests need is installed" in done.stdout


def test_unknown_arguments_are_refused() -> None:
    done = subprocess.run(
        [str(SCRIPT), "--yes"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "unknown: --yes" in done.stderr
