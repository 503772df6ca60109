#!/usr/bin/env python3
"""Make one of the venvs of ``make setup`` / ``make test``, reusing a copy built before.

    python3 scripts/venv.py DIR [--first REQ ...] [--extras a,b] [--absent DIST ...]

What a build does (the cache's miss; what a fresh machine does): ``python -m venv DIR``,
``pip install --upgrade pip``, ``pip install REQ`` for each ``--first`` requirement (a
release the project must then keep, e.g. ``pyspark==4.1.4``), ``pip install -e
".[extras]"``. Then, always, the checks: each ``--first`` pin is still what is installed
(the project's ranges did not replace it) and no ``--absent`` distribution is.

The cache (a clean clone, as CI makes, otherwise builds every venv anew, 1-2 minutes
each): after a build, DIR is copied (hard links) to
``~/.cache/oncestream/venvs/<DIR's name>-<key>``, where the key hashes pyproject.toml,
the python and the arguments. When DIR does not exist and that copy does, and is less
than :data:`MAX_AGE_DAYS` days old, DIR is made from it (hard links, else a full copy),
its scripts are re-pointed at DIR, and oncestream alone is installed again, editable,
from this checkout, without dependencies: those are the copy's, resolved from the same
pyproject.toml at most :data:`MAX_AGE_DAYS` days ago (a build picks up releases made
since; the age bounds how late). An existing DIR is updated with pip as before.
``ONCESTREAM_VENV_CACHE=off`` builds without the cache; ``=PATH`` puts it elsewhere.
Older copies of the same venv are removed when a new one is stored.

Exit 0 when DIR is ready, 1 when a step or check failed (named) or the python is older
than 3.11 (``PYTHON=python3.12 make ...`` picks another), 2 on bad usage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: A cached venv older than this is rebuilt, so upstream releases reach the tests.
MAX_AGE_DAYS = 3
#: Bumped when what a build does changes, so old copies are not reused.
RECIPE = "1"
DONE = ".oncestream-venv.json"


class StepFailed(Exception):
    """A build step or a check failed; the message names it."""


def cache_root() -> Path | None:
    """Where copies are kept, or None when ``ONCESTREAM_VENV_CACHE=off``."""
    setting = os.environ.get("ONCESTREAM_VENV_CACHE", "")
    if setting.lower() in ("off", "0", "no"):
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "oncestream" / "venvs"


def cache_key(
    pyproject: bytes, python: str, first: list[str], extras: str, absent: list[str]
) -> str:
    """What a venv is made from: pyproject.toml, the python, the arguments, the recipe."""
    parts = [RECIPE, sys.version, python, *first, "|", extras, "|", *absent]
    digest = hashlib.sha256(pyproject)
    digest.update("\0".join(parts).encode())
    return digest.hexdigest()[:16]


def run(argv: list[str], what: str) -> None:
    print(" ".join(argv), flush=True)
    done = subprocess.run(argv, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise StepFailed(f"{what} failed (exit {done.returncode})")


def _pip(venv: Path, *args: str) -> list[str]:
    return [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *args]


def build(venv: Path, first: list[str], extras: str) -> None:
    """Create or update ``venv`` with pip (nothing cached but pip's own cache)."""
    if not (venv / "bin" / "python").exists():
        run([sys.executable, "-m", "venv", str(venv)], "python -m venv")
    run(_pip(venv, "--upgrade", "pip"), "upgrading pip")
    for requirement in first:
        run(_pip(venv, requirement), f"installing {requirement}")
    run(_pip(venv, "-e", f".[{extras}]" if extras else "."), "installing oncestream")


def _repoint(venv: Path, old: Path, new: Path) -> None:
    """Point the scripts in ``venv/bin`` (shebangs, activate) from ``old`` to ``new``.

    Each is written anew, never in place: a copy shares its files with the cache.
    """
    old_b, new_b = str(old).encode(), str(new).encode()
    for path in (venv / "bin").iterdir():
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old_b not in data or b"\0" in data[:4096]:
            continue
        fresh = path.with_name(path.name + ".repoint")
        fresh.write_bytes(data.replace(old_b, new_b))
        fresh.chmod(path.stat().st_mode)
        fresh.replace(path)


def _copy(source: Path, target: Path) -> None:
    """``cp -al`` (hard links: fast, no space), else a full copy (another file system)."""
    done = subprocess.run(["cp", "-al", str(source), str(target)], capture_output=True, check=False)
    if done.returncode != 0:
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True)


def usable(cached: Path | None) -> bool:
    """Whether ``cached`` is a complete copy, stored less than MAX_AGE_DAYS ago."""
    if cached is None or not (cached / DONE).exists():
        return False
    return time.time() - (cached / DONE).stat().st_mtime < MAX_AGE_DAYS * 86400


def copy_of(cached: Path, venv: Path) -> None:
    """Make ``venv`` a copy of ``cached`` (hard links), its scripts pointing at ``venv``."""
    _copy(cached, venv)
    (venv / DONE).unlink(missing_ok=True)
    _repoint(venv, cached, venv)


def restore(cached: Path, venv: Path) -> None:
    """Make ``venv`` from the cached copy and install this checkout into it."""
    copy_of(cached, venv)
    run(_pip(venv, "--no-deps", "-e", "."), "installing oncestream (cached venv)")


#: Copies of one venv kept (older ones are removed, once unused for an hour).
KEEP = 3


def store(venv: Path, cached: Path, meta: dict[str, object]) -> None:
    """Keep a copy of ``venv`` as ``cached`` (atomically); prune old copies of that venv."""
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=cached.name + ".", dir=cached.parent))
    try:
        _copy(venv, tmp / "venv")
        stamp = tmp / "venv" / ".installed-stamp"
        stamp.unlink(missing_ok=True)
        (tmp / "venv" / DONE).write_text(json.dumps(meta))
        _repoint(tmp / "venv", venv, cached)
        try:
            (tmp / "venv").rename(cached)
        except OSError:  # another run stored the same one first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    name = cached.name.rsplit("-", 1)[0]
    copies = sorted(
        (
            p
            for p in cached.parent.iterdir()
            if p.name.rsplit("-", 1)[0] == name and (p / DONE).exists()
        ),
        key=lambda p: (p / DONE).stat().st_mtime,
        reverse=True,
    )
    for old in copies[KEEP:]:
        # Stored over an hour ago: no restore of it can still be copying.
        if time.time() - (old / DONE).stat().st_mtime > 3600:
            shutil.rmtree(old, ignore_errors=True)


def check(venv: Path, first: list[str], absent: list[str]) -> None:
    """Each ``--first`` pin is still installed, no ``--absent`` distribution is."""
    probe = (
        "import importlib.metadata as m, json, sys\n"
        "out = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try: out[name] = m.version(name)\n"
        "    except m.PackageNotFoundError: out[name] = None\n"
        "print(json.dumps(out))\n"
    )
    names = [r.split("==")[0] for r in first] + absent
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe, *names],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise StepFailed(f"{venv}/bin/python cannot run: {done.stderr.strip()[-500:]}")
    found = json.loads(done.stdout)
    for requirement in first:
        name, _, version = requirement.partition("==")
        if found[name] != version:
            raise StepFailed(f"installing oncestream replaced {name} {version} with {found[name]}")
    for name in absent:
        if found[name] is not None:
            raise StepFailed(f"{venv} has {name} {found[name]}, which it must not have")


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 (run by any python3, before a venv exists)
        found = sys.version.split()[0]
        print(
            f"error: Python >= 3.11 is required, found {found} ({sys.executable})", file=sys.stderr
        )
        return 1
    parser = argparse.ArgumentParser(prog="scripts/venv.py", description=__doc__.split("\n")[0])
    parser.add_argument("venv", type=Path)
    parser.add_argument("--first", action="append", default=[], metavar="NAME==VERSION")
    parser.add_argument("--extras", default="")
    parser.add_argument("--absent", action="append", default=[], metavar="DIST")
    args = parser.parse_args(argv)
    bad = [r for r in args.first if r.count("==") != 1]
    if bad:
        parser.error(f"--first takes NAME==VERSION, got {', '.join(bad)}")
    venv = (ROOT / args.venv).absolute() if not args.venv.is_absolute() else args.venv
    root = cache_root()
    key = cache_key(
        (ROOT / "pyproject.toml").read_bytes(),
        os.path.realpath(sys.executable),
        args.first,
        args.extras,
        args.absent,
    )
    cached = root / f"{venv.name}-{key}" if root else None
    fresh = usable(cached)
    started = time.monotonic()
    try:
        if fresh and cached is not None and not venv.exists():
            restore(cached, venv)
            how = f"from {cached}"
        else:
            build(venv, args.first, args.extras)
            how = "built"
        check(venv, args.first, args.absent)
        if cached is not None and not fresh:
            meta = {"first": args.first, "extras": args.extras, "python": sys.version}
            store(venv, cached, meta)
    except StepFailed as exc:
        print(f"error: {venv.name}: {exc}", file=sys.stderr)
        return 1
    print(f"{venv.name}: ready ({how}, {time.monotonic() - started:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
