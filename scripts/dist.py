#!/usr/bin/env python3
"""Build oncestream's sdist and wheel and check them: what ``make dist`` runs.

    python scripts/dist.py             # into dist/
    python scripts/dist.py --out DIR   # into DIR (tests/dist builds its wheel so)

1. ``python -m build``: the sdist, then the wheel built from that sdist in an isolated
   environment (as a clean machine builds it, so a file missing from the sdist fails here).
2. ``twine check --strict`` on both: the metadata PyPI reads, the README renders.
3. What they carry (:func:`check_wheel`, :func:`check_sdist`): the wheel holds exactly the
   files under ``src/oncestream`` (``py.typed`` and any package data included) plus its
   ``.dist-info``, nothing from tests, bench, torture, harness, examples or docs; its
   version is pyproject's and ``oncestream.__version__``; it declares pyproject's extras,
   the license and the ``oncestream`` command. The sdist holds the same sources, the
   README, pyproject.toml and LICENSE, and nothing else.

Exit 0 when everything holds (the two file names are printed), 1 naming each finding, 2 on
bad usage. Only the two files named ``oncestream-<version>`` are written to the output
folder; a previous build of the same version is replaced, nothing else is touched.
"""

from __future__ import annotations

import argparse
import ast
import email.parser
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "oncestream"
#: Folders of the repository that no distribution may carry.
NEVER_SHIPPED = ("tests", "bench", "torture", "harness", "examples", "docs", "deploy", "scripts")
#: What the sdist carries besides the package's sources (setuptools writes the rest).
SDIST_FILES = {"pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "setup.cfg"}


@dataclass(frozen=True)
class Project:
    """What pyproject.toml and the sources say the distributions must be."""

    version: str
    extras: frozenset[str]
    license: str
    requires_python: str
    sources: frozenset[str]  # paths relative to src/, e.g. "oncestream/py.typed"

    @classmethod
    def read(cls, root: Path = ROOT) -> Project:
        project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
        return cls(
            version=project["version"],
            extras=frozenset(project.get("optional-dependencies", {})),
            license=project["license"],
            requires_python=project["requires-python"],
            sources=frozenset(source_files(root / "src")),
        )


def source_files(src: Path) -> Iterable[str]:
    """The package's files under ``src`` (caches and build leftovers excluded)."""
    for path in sorted((src / PACKAGE).rglob("*")):
        rel = path.relative_to(src)
        if path.is_file() and "__pycache__" not in rel.parts and path.suffix != ".pyc":
            yield rel.as_posix()


def package_version(root: Path = ROOT) -> str:
    """``oncestream.__version__`` as written in the sources (read, not imported)."""
    tree = ast.parse((root / "src" / PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    return "(no __version__ in src/oncestream/__init__.py)"


def check_versions(project: Project, root: Path = ROOT) -> list[str]:
    """pyproject's version and ``oncestream.__version__`` must be one."""
    found = package_version(root)
    if found != project.version:
        return [f"pyproject.toml says version {project.version}, oncestream.__version__ {found}"]
    return []


def _metadata_findings(text: str, project: Project, where: str) -> list[str]:
    meta = email.parser.Parser().parsestr(text)
    findings = []
    expected = {
        "Name": PACKAGE,
        "Version": project.version,
        "License-Expression": project.license,
        "Requires-Python": project.requires_python,
    }
    for field, value in expected.items():
        if meta.get(field) != value:
            findings.append(f"{where}: {field} is {meta.get(field)!r}, expected {value!r}")
    extras = set(meta.get_all("Provides-Extra") or [])
    if extras != project.extras:
        findings.append(
            f"{where}: Provides-Extra {sorted(extras)} differs from pyproject's "
            f"{sorted(project.extras)}"
        )
    if "LICENSE" not in (meta.get_all("License-File") or []):
        findings.append(f"{where}: no License-File LICENSE")
    return findings


def check_wheel(wheel: Path, project: Project) -> list[str]:
    """What the wheel carries and declares, against :class:`Project`; one line per finding."""
    info = f"{PACKAGE}-{project.version}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"{info}/METADATA").decode() if f"{info}/METADATA" in names else ""
        entry_points = (
            zf.read(f"{info}/entry_points.txt").decode()
            if f"{info}/entry_points.txt" in names
            else ""
        )
    findings = []
    if not metadata:
        findings.append(f"{wheel.name}: no {info}/METADATA (is the version {project.version}?)")
    else:
        findings += _metadata_findings(metadata, project, wheel.name)
    strays = sorted(n for n in names if n.split("/")[0] not in (PACKAGE, info))
    shipped = sorted(n for n in strays if n.split("/")[0] in NEVER_SHIPPED)
    if shipped:
        findings.append(f"{wheel.name} carries repository folders it must not: {shipped[:10]}")
    if set(strays) - set(shipped):
        findings.append(f"{wheel.name} carries files outside {PACKAGE}/: {strays[:10]}")
    package = {n for n in names if n.split("/")[0] == PACKAGE and not n.endswith("/")}
    if f"{PACKAGE}/py.typed" not in package:
        findings.append(f"{wheel.name} has no {PACKAGE}/py.typed (typed package marker)")
    missing = sorted(project.sources - package)
    if missing:
        findings.append(f"{wheel.name} lacks files of src/{PACKAGE}: {missing[:10]}")
    extra = sorted(package - project.sources)
    if extra:
        findings.append(f"{wheel.name} has files that src/{PACKAGE} has not: {extra[:10]}")
    if f"{info}/licenses/LICENSE" not in names:
        findings.append(f"{wheel.name} has no {info}/licenses/LICENSE")
    if "oncestream = oncestream.cli:main" not in entry_points:
        findings.append(f"{wheel.name} declares no `oncestream` command (entry_points.txt)")
    return findings


def check_sdist(sdist: Path, project: Project) -> list[str]:
    """What the sdist carries, against :class:`Project`; one line per finding."""
    top = f"{PACKAGE}-{project.version}"
    with tarfile.open(sdist) as tf:
        members = [m for m in tf.getmembers() if m.isfile()]
        names = {m.name for m in members}
        pkg_info = tf.extractfile(f"{top}/PKG-INFO") if f"{top}/PKG-INFO" in names else None
        metadata = pkg_info.read().decode() if pkg_info is not None else ""
    findings = []
    outside = sorted(n for n in names if not n.startswith(f"{top}/"))
    if outside:
        findings.append(f"{sdist.name}: files outside {top}/: {outside[:10]}")
    rel = {n[len(top) + 1 :] for n in names if n.startswith(f"{top}/")}
    sources = {n[len("src/") :] for n in rel if n.startswith(f"src/{PACKAGE}/")}
    egg_info = {n for n in rel if n.startswith(f"src/{PACKAGE}.egg-info/")}
    strays = sorted(rel - SDIST_FILES - egg_info - {f"src/{s}" for s in sources})
    if strays:
        findings.append(f"{sdist.name} carries files beyond the package: {strays[:10]}")
    for needed in ("pyproject.toml", "README.md", "LICENSE"):
        if needed not in rel:
            findings.append(f"{sdist.name} has no {needed}")
    missing = sorted(project.sources - sources)
    if missing:
        findings.append(f"{sdist.name} lacks files of src/{PACKAGE}: {missing[:10]}")
    if not metadata:
        findings.append(f"{sdist.name} has no PKG-INFO")
    else:
        findings += _metadata_findings(metadata, project, sdist.name)
    return findings


def build(out: Path, project: Project) -> tuple[Path, Path]:
    """Build the sdist and wheel into ``out``; return their paths (raises CalledProcessError)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="oncestream-dist-") as tmp:
        done = subprocess.run(
            [sys.executable, "-m", "build", "--outdir", tmp, str(ROOT)],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            print(done.stdout[-3000:] + done.stderr[-3000:], file=sys.stderr)
            done.check_returncode()
        built = sorted(Path(tmp).iterdir())
        mine = f"{PACKAGE}-{project.version}"
        wheel = next((p for p in built if p.name == f"{mine}-py3-none-any.whl"), None)
        sdist = next((p for p in built if p.name == f"{mine}.tar.gz"), None)
        if wheel is None or sdist is None:
            names = [p.name for p in built]
            raise SystemExit(f"error: build made {names}, expected {mine}.tar.gz and a wheel")
        targets = (out / sdist.name, out / wheel.name)
        for made, target in zip((sdist, wheel), targets, strict=True):
            shutil.move(made, target)  # replaces only a previous build of this version
    return targets


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/dist.py", description="Build and check the sdist and wheel."
    )
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="output folder")
    args = parser.parse_args(argv)  # exits 2 on bad usage
    if args.out.exists() and not args.out.is_dir():
        print(f"error: --out {args.out} exists and is not a folder", file=sys.stderr)
        return 2
    project = Project.read()
    findings = check_versions(project)
    try:
        sdist, wheel = build(args.out, project)
        subprocess.run(
            [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        print(f"error: {' '.join(map(str, exc.cmd))} failed (exit {exc.returncode})")
        return 1
    findings += check_sdist(sdist, project) + check_wheel(wheel, project)
    for finding in findings:
        print(f"error: {finding}")
    if findings:
        return 1
    print(f"built and checked: {sdist}\n                   {wheel}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
