"""Every ```python and ```sh block of docs/*.md runs (CONVENTIONS.md).

README.md's and docs/walkthrough.md's blocks run in
tests/integration/test_readme_first_hour.py: in order, twice, against one
server, their output checked against the page.

- A fresh embedded nats-server per block; ``nats://127.0.0.1:4222`` in the block
  is replaced by its URL. Each block runs in its own temp directory.
- ```python blocks are complete programs. Plain ones run in a subprocess with this
  interpreter; Spark ones (they mention ``oncestream.spark``) are exec'd in this
  process, where ``oncestream.spark.local_session()`` returns the test session's
  shared SparkSession, so they cost no JVM start.
- ```sh blocks run with ``bash -e`` (line by line, stopping at the first failing
  line), ``oncestream`` and ``python`` on PATH.
- A block preceded by ``<!-- not-run: covered by tests/<path>.py::<test_name> -->``
  is not run; the test checks that the named test exists.
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from oncestream.server import NatsServer

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]
URL = "nats://127.0.0.1:4222"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
RELATIVE_PATH = re.compile(
    r"""\.(?:option\("(?:checkpointLocation|path)",\s*|save\(|parquet\()"[^/"{]"""
)
NOT_RUN = re.compile(r"<!--\s*not-run:\s*covered by\s+(tests/[\w/]+\.py)::(\w+)\s*-->")


@dataclass(frozen=True, kw_only=True)
class Block:
    file: str
    line: int
    lang: str
    code: str
    covered_by: tuple[str, str] | None

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}:{self.lang}"

    @property
    def spark(self) -> bool:
        return self.lang == "python" and "oncestream.spark" in self.code


def _blocks() -> list[Block]:
    found: list[Block] = []
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text()
        for match in FENCE.finditer(text):
            lang = match.group(1)
            if lang not in ("python", "sh"):
                continue
            before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
            marker = NOT_RUN.search(before)
            found.append(
                Block(
                    file=str(path.relative_to(ROOT)),
                    line=text.count("\n", 0, match.start()) + 1,
                    lang=lang,
                    code=match.group(2),
                    covered_by=(marker.group(1), marker.group(2)) if marker else None,
                )
            )
    return found


BLOCKS = _blocks()


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # The repo first; a PYTHONPATH already set (e.g. a worktree's src) is kept after it.
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["HOME"] = str(tmp)  # nothing a snippet writes lands in the real home
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return env


def _check_covered(block: Block) -> None:
    assert block.covered_by is not None
    path, name = block.covered_by
    source = ROOT / path
    assert source.is_file(), f"{block.id}: not-run names {path}, which does not exist"
    assert re.search(rf"^(async )?def {name}\(", source.read_text(), re.M), (
        f"{block.id}: not-run names {path}::{name}, which does not exist"
    )


def _run_spark(block: Block, code: str, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp / "snippet.py"
    script.write_text(code)
    monkeypatch.chdir(tmp)
    spark = _spark_session()
    active = list(spark.streams.active)
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        for query in _spark_session().streams.active:
            if query not in active:
                query.stop()
                pytest.fail(f"{block.id}: the block left a streaming query running")


def _spark_session() -> Any:
    from oncestream.spark import local_session

    return local_session("oncestream-tests")


def test_every_block_is_found() -> None:
    assert len(BLOCKS) >= 10
    assert any(b.spark for b in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_docs_block_runs(
    block: Block, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if block.covered_by is not None:
        _check_covered(block)
        return
    assert "127.0.0.1:4222" not in block.code.replace(URL, ""), (
        f"{block.id}: use exactly {URL} so the test can point it at its server"
    )
    server: NatsServer = request.getfixturevalue("nats_server")
    code = block.code.replace(URL, server.url)
    work = tmp_path / "cwd"
    work.mkdir()
    if block.spark:
        # The shared JVM resolves relative paths against its own cwd (the repo), not tmp.
        relative = RELATIVE_PATH.search(code)
        assert relative is None, f"{block.id}: use an absolute path, not {relative.group(0)}"
        request.getfixturevalue("spark")  # the shared session; local_session() returns it
        _run_spark(block, code, work, monkeypatch)
        return
    cmd = [sys.executable, "-c", code] if block.lang == "python" else ["bash", "-e", "-c", code]
    proc = subprocess.run(
        cmd, cwd=work, env=_env(tmp_path), capture_output=True, text=True, timeout=180, check=False
    )
    assert proc.returncode == 0, (
        f"{block.id} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
