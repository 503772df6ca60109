"""Shipping oncestream to executors that do not have it (docs/deploy.md, issue 12).

A standalone master and two 1-core workers whose own python (the system
``python3``) has no oncestream and no PYTHONPATH to this checkout. The
environment is packed with PEX from this venv's distributions (oncestream
installed from its wheel, as a user's venv has it) into ``env.tar.gz`` and submitted
with ``--archives env.tar.gz#environment`` and
``spark.pyspark.python=./environment/bin/python``. The job reads a stream in 4
partitions and writes it to another with the jetstream sink; the test checks
that both workers ran partitions and audits the output: every row exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncestream._connection import Connection
from oncestream.audit import OutputSpec, audit
from oncestream.server import NatsServer
from tests.spark._cluster import SPARK_HOME, standalone_cluster
from tests.spark._helpers import publish

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent
ROWS = 400
PARTITIONS = 4


def _bare_python() -> str:
    """A python on this machine without oncestream: the workers' own."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            probe = subprocess.run(
                [candidate, "-c", "import oncestream"], capture_output=True, check=False
            )
            if probe.returncode != 0:
                return candidate
    pytest.fail("no python3 without oncestream found for the workers")


def _worker_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_WORKER_DIR=str(tmp / "work"),
        PYSPARK_PYTHON=_bare_python(),
        PATH=os.pathsep.join(
            p for p in env.get("PATH", "").split(os.pathsep) if str(VENV) not in p
        ),
    )
    return env


@pytest.fixture
def bare_cluster(tmp_path: Path) -> Iterator[tuple[str, list[Path]]]:
    """Master + 2 workers (1 core each) on 127.0.0.1; yields (master URL, worker dirs)."""
    dirs = [tmp_path / "work" / f"w{i}" for i in range(2)]
    with standalone_cluster(tmp_path, _worker_env(tmp_path), dirs) as master_url:
        yield master_url, dirs


def installed_venv(tmp: Path) -> Path:
    """A venv holding this venv's distributions, with oncestream installed from its wheel.

    This venv has oncestream editable, which a user's venv does not: PEX would build
    it from the checkout, and its pip copies the whole directory, every test venv
    included (gigabytes, two minutes). So oncestream's wheel is built from a copy of
    the files it is made of and installed into a venv made without pip, whose other
    distributions are links to this venv's.
    """
    project = tmp / "project"
    project.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, project / name)
    shutil.copytree(
        ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = ["wheel", "--no-deps", "-w", str(tmp / "wheel"), str(project)]
    subprocess.run([*pip, *build], check=True, capture_output=True, timeout=120)
    repo = tmp / "repo"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(repo)], check=True)
    site = Path(sysconfig.get_paths()["purelib"])
    repo_site = repo / site.relative_to(VENV)
    for entry in site.iterdir():
        if not entry.name.startswith(("oncestream", "__editable__.oncestream")):
            (repo_site / entry.name).symlink_to(entry)
    (wheel,) = (tmp / "wheel").glob("oncestream-*.whl")
    into = ["--python", str(repo / "bin" / "python"), "install", "--no-deps", "--no-index"]
    subprocess.run([*pip, *into, str(wheel)], check=True, capture_output=True, timeout=120)
    return repo


def pack_environment(cwd: Path, repository: Path) -> Path:
    """docs/deploy.md's packing step, run in the directory spark-submit runs from.

    PEX builds ``./environment`` (a venv) from ``repository``'s distributions; tar
    packs it. The driver uses ``./environment`` itself: Spark plans Python data
    sources in Python workers on the driver, started with the same
    ``spark.pyspark.python``.
    """
    subprocess.run(
        [str(VENV / "bin" / "pex3"), "venv", "create", "--venv-repository", str(repository),
         "-d", "environment", "oncestream", "pyarrow"],
        cwd=cwd, check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    archive = cwd / "env.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as tar:
        tar.add(cwd / "environment", arcname=".")
    return archive


async def test_submit_with_packed_environment_uses_both_workers(
    bare_cluster: tuple[str, list[Path]],
    nats_server: NatsServer,
    conn: Connection,
    make_stream: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    master, worker_dirs = bare_cluster
    await make_stream("DEPLOY_IN", ("deploy.>",))
    await publish(conn, "deploy.a", ROWS)
    repository = installed_venv(tmp_path / "build")
    started = time.monotonic()
    archive = pack_environment(tmp_path, repository)
    packed = time.monotonic() - started
    env = _worker_env(tmp_path)
    env["PYTHONPATH"] = str(ROOT)  # the driver's own python finds tests/ (not the executors)
    proc = subprocess.run(  # noqa: ASYNC221 - the test has nothing else to do meanwhile
        [
            str(SPARK_HOME / "bin" / "spark-submit"),
            "--master", master,
            "--archives", f"{archive}#environment",
            "--conf", "spark.pyspark.python=./environment/bin/python",
            "--conf", f"spark.pyspark.driver.python={sys.executable}",
            "--conf", "spark.executor.cores=1",
            "--conf", "spark.executor.memory=512m",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
            "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=90s",
            str(ROOT / "tests" / "spark" / "_deploy_job.py"),
            nats_server.url, "DEPLOY_IN", "DEPLOY_OUT", str(PARTITIONS),
        ],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    (tmp_path / "submit.log").write_text(proc.stdout + proc.stderr)
    errors = [x for x in proc.stderr.splitlines() if "Error" in x and not x.startswith("\tat")]
    assert proc.returncode == 0, proc.stdout[-2000:] + "\n".join(errors[:40])
    tasks = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("TASKS "))[6:])
    by_worker: dict[str, list[int]] = {}
    for task in tasks:
        worker = next(f"w{i}" for i, d in enumerate(worker_dirs) if task["dir"].startswith(str(d)))
        by_worker.setdefault(worker, []).append(int(task["partition"]))
    lines = [
        f"packed {archive.stat().st_size / 1e6:.0f} MB in {packed:.1f} s; "
        f"job {time.monotonic() - started - packed:.1f} s"
    ]
    for task in sorted(tasks, key=lambda t: int(t["partition"])):
        worker = task["dir"].split("/work/")[1].split("/")[0]
        lines.append(
            f"partition {task['partition']}: {task['count']} rows on worker {worker} "
            f"executor {task['executor']} python {task['python']}"
        )
    lines.append(f"worker -> partitions: {dict(sorted(by_worker.items()))}")
    with capsys.disabled():  # shown in `make test` output too
        print("\n" + "\n".join(lines))
    assert sorted(by_worker) == ["w0", "w1"], by_worker  # both workers ran tasks
    assert sorted(p for ps in by_worker.values() for p in ps) == list(range(PARTITIONS))
    # the executors ran the shipped environment, unpacked in their own work dirs
    assert all("/environment/bin/python oncestream" in t["python"] for t in tasks), tasks
    assert all(t["python"].startswith(str(tmp_path / "work")) for t in tasks), tasks
    report = await audit(conn, "DEPLOY_IN", [OutputSpec.parse("stream:DEPLOY_OUT")], key="lineage")
    assert report.ok, report.to_dict()
    assert report.input_rows == ROWS
