"""A newcomer's first hour: the blocks of README.md and docs/walkthrough.md, in order, twice.

Every ```sh and ```python block of each page runs as a newcomer pastes it:
in document order, in one working directory, against one nats-server (its
URL replaces ``nats://127.0.0.1:4222``), each Python block in a fresh
interpreter (the Spark one starts its own JVM, as it does for a user). The
whole sequence then runs a second time, as someone trying again would. Each
page runs against a server of its own.

What a block prints is checked against the ```text block(s) the page shows
after it: the first is what the first run prints, a second one what a re-run
prints (one alone: both). Each shown line must appear, in order, as a whole
output line; ``...`` in a shown line stands for anything (a time, a size),
and a line that is only ``...`` for any number of lines. No block may print a
Python traceback, nor Java or Spark start-up noise.

The ``make demo`` / ``make test`` block is not run here (tests/spark/test_demo.py).
docs/walkthrough.md marks its blocks ``not-run`` for tests/integration/test_docs_snippets.py,
which would run each alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness import free_port
from oncestream.server import NatsServer

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
#: The pages whose blocks run in order, twice, their output checked.
PAGES = (README, ROOT / "docs" / "walkthrough.md")
URL = "nats://127.0.0.1:4222"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
#: What a newcomer must not see: tracebacks, Java and Spark start-up noise, object reprs.
NOISE = (
    "Traceback (most recent call last)",
    "Using incubator modules",
    "log4j",
    "NativeCodeLoader",
    " WARN ",
    "WARNING: ",
    "PythonTable@",
)


@dataclass
class Step:
    """One block of the README and the output shown after it."""

    line: int
    lang: str
    code: str
    shown: list[str] = field(default_factory=list)

    def expected(self, run: int) -> str | None:
        if not self.shown:
            return None
        return self.shown[min(run, len(self.shown) - 1)]


def steps(page: Path = README) -> list[Step]:
    text = page.read_text(encoding="utf-8")
    found: list[Step] = []
    for match in FENCE.finditer(text):
        lang, body = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if lang in ("sh", "python"):
            if "make demo" in body:
                continue  # covered by tests/spark/test_demo.py
            found.append(Step(line, lang, body))
        elif lang == "text" and found:
            found[-1].shown.append(body)
    return found


def _pattern(line: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in line.strip().split("...")))


def missing_lines(shown: str, output: str) -> list[str]:
    """The shown lines that do not appear, in order, in ``output`` (empty: all do)."""
    lines = [line.strip() for line in output.splitlines()]
    position = 0
    missing = []
    for want in (w for w in shown.splitlines() if w.strip() and w.strip() != "..."):
        pattern = _pattern(want)
        for index in range(position, len(lines)):
            if pattern.fullmatch(lines[index]):
                position = index + 1
                break
        else:
            missing.append(want)
    return missing


def test_the_matcher_can_fail() -> None:
    output = "created stream ORDERS\n#1  2026-11-24T10:00:00Z  orders.eu  x\nbye\n"
    assert missing_lines("created stream ORDERS\n#1  ...  orders.eu  x", output) == []
    assert missing_lines("#1  ...  orders.eu  x\ncreated stream ORDERS", output) == [
        "created stream ORDERS"  # out of order
    ]
    assert missing_lines("#1  ...  orders.us  x", output) == ["#1  ...  orders.us  x"]
    assert missing_lines("created stream", output) == ["created stream"]  # whole lines only


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "COLUMNS"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def _run(step: Step, code: str, work: Path, env: dict[str, str]) -> str:
    cmd = [sys.executable, "-c", code] if step.lang == "python" else ["bash", "-e", "-c", code]
    # One stream, as a terminal shows it: stderr lines where they happened. Its own
    # process group: a worker the block started in the background (`&`) and left
    # running because a later line failed would otherwise hold the pipe open.
    proc = subprocess.Popen(
        cmd,
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            proc.communicate()
    assert proc.returncode == 0, f"line {step.line}: exit {proc.returncode}\n{output}"
    return output


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_blocks_run_in_order_twice(
    page: Path, nats_server: NatsServer, tmp_path: Path
) -> None:
    found = steps(page)
    if page == README:
        assert len(found) >= 4 and any("oncestream.spark" in s.code for s in found)
    else:
        assert len(found) >= 2 and all(s.shown for s in found)
    where = page.relative_to(ROOT)
    work, home, topo = tmp_path / "cwd", tmp_path / "home", tmp_path / "topo"
    work.mkdir()
    home.mkdir()
    env = _env(home)
    port = str(free_port())
    try:
        for run in (0, 1):
            for step in found:
                code = step.code.replace(URL, nats_server.url).replace("/tmp/topo", str(topo))
                code = code.replace(".venv/bin/activate", f"{sys.prefix}/bin/activate")
                code = code.replace("9464", port)
                output = _run(step, code, work, env)
                noise = [n for n in NOISE if n in output]
                assert noise == [], f"{where} line {step.line}, run {run + 1}: {noise}\n{output}"
                shown = step.expected(run)
                shown = shown and shown.replace("/tmp/topo", str(topo))
                if shown is not None:
                    missing = missing_lines(shown, output)
                    assert missing == [], (
                        f"{where} line {step.line}, run {run + 1}: the page shows lines the "
                        f"block did not print: {missing}\n--- printed ---\n{output}"
                    )
    finally:
        if (topo / "topology.json").exists():
            subprocess.run(
                [
                    str(Path(sys.executable).parent / "oncestream"),
                    "topology",
                    "down",
                    "--dir",
                    str(topo),
                ],
                env=env,
                capture_output=True,
                timeout=60,
                check=False,
            )
