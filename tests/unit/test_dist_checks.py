"""scripts/dist.py's checks of the sdist and wheel (``make dist``), on distributions made here.

The real build and ``twine check`` run in tests/dist/test_wheel_install.py; here each
check is shown to catch what it is for: a test folder in the wheel, a missing
``py.typed`` or module, a version that differs from pyproject's, an extra missing from the
metadata, a stray file in the sdist.
"""

from __future__ import annotations

import importlib.util
import io
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dist_script", ROOT / "scripts" / "dist.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["dist_script"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


dist = _script()
PROJECT = dist.Project(
    version="9.8.7",
    extras=frozenset({"spark", "dev"}),
    license="Apache-2.0",
    requires_python=">=3.11",
    sources=frozenset({"oncestream/__init__.py", "oncestream/py.typed", "oncestream/x/_y.py"}),
)
INFO = "oncestream-9.8.7.dist-info"


def _metadata(version: str = "9.8.7", extras: tuple[str, ...] = ("spark", "dev")) -> str:
    lines = [
        "Metadata-Version: 2.4",
        "Name: oncestream",
        f"Version: {version}",
        "License-Expression: Apache-2.0",
        "License-File: LICENSE",
        "Requires-Python: >=3.11",
        *(f"Provides-Extra: {extra}" for extra in extras),
    ]
    return "\n".join(lines) + "\n\nREADME\n"


def _wheel(tmp_path: Path, files: dict[str, str]) -> Path:
    path = tmp_path / "oncestream-9.8.7-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def _good_wheel() -> dict[str, str]:
    return {
        "oncestream/__init__.py": "",
        "oncestream/py.typed": "",
        "oncestream/x/_y.py": "",
        f"{INFO}/METADATA": _metadata(),
        f"{INFO}/entry_points.txt": "[console_scripts]\noncestream = oncestream.cli:main\n",
        f"{INFO}/licenses/LICENSE": "Apache License",
    }


def test_a_complete_wheel_passes(tmp_path: Path) -> None:
    assert dist.check_wheel(_wheel(tmp_path, _good_wheel()), PROJECT) == []


def test_a_wheel_with_test_code_or_without_its_files_is_refused(tmp_path: Path) -> None:
    files = _good_wheel()
    del files["oncestream/py.typed"], files["oncestream/x/_y.py"]
    files["tests/test_x.py"] = ""
    files["harness/__init__.py"] = ""
    files["oncestream/stray.json"] = "{}"
    found = "\n".join(dist.check_wheel(_wheel(tmp_path, files), PROJECT))
    assert "repository folders it must not" in found and "tests/test_x.py" in found
    assert "harness/__init__.py" in found
    assert "no oncestream/py.typed" in found
    assert "lacks files of src/oncestream" in found and "oncestream/x/_y.py" in found
    assert "oncestream/stray.json" in found


def test_a_wheel_with_other_metadata_is_refused(tmp_path: Path) -> None:
    files = _good_wheel()
    files[f"{INFO}/METADATA"] = _metadata(extras=("spark",))
    files[f"{INFO}/entry_points.txt"] = ""
    del files[f"{INFO}/licenses/LICENSE"]
    found = "\n".join(dist.check_wheel(_wheel(tmp_path, files), PROJECT))
    assert "Provides-Extra ['spark'] differs" in found
    assert "no `oncestream` command" in found
    assert "licenses/LICENSE" in found


def test_a_wheel_of_another_version_is_refused(tmp_path: Path) -> None:
    files = {n.replace(INFO, "oncestream-1.0.0.dist-info"): t for n, t in _good_wheel().items()}
    found = dist.check_wheel(_wheel(tmp_path, files), PROJECT)
    assert any("no oncestream-9.8.7.dist-info/METADATA" in line for line in found), found


def _sdist(tmp_path: Path, names: list[str], metadata: str) -> Path:
    path = tmp_path / "oncestream-9.8.7.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for name in names:
            data = (metadata if name.endswith("PKG-INFO") else "").encode()
            info = tarfile.TarInfo(f"oncestream-9.8.7/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def test_the_sdist_holds_the_package_and_nothing_else(tmp_path: Path) -> None:
    good = ["pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "setup.cfg"] + [
        f"src/{s}" for s in PROJECT.sources
    ]
    assert dist.check_sdist(_sdist(tmp_path, good, _metadata()), PROJECT) == []
    bad = [n for n in good if n not in ("LICENSE", "src/oncestream/py.typed")]
    bad += ["tests/test_x.py", "bench/run.py"]
    found = "\n".join(dist.check_sdist(_sdist(tmp_path, bad, _metadata("1.0")), PROJECT))
    assert "beyond the package" in found and "tests/test_x.py" in found
    assert "bench/run.py" in found
    assert "has no LICENSE" in found
    assert "oncestream/py.typed" in found
    assert "Version is '1.0', expected '9.8.7'" in found


def test_the_release_is_one_version_everywhere() -> None:
    """pyproject.toml's version is ``oncestream.__version__`` (what the Spark worker check
    compares; ``oncestream --version`` shows the installed metadata's, pyproject's)."""
    import oncestream

    project = dist.Project.read()
    assert dist.check_versions(project) == []
    assert oncestream.__version__ == project.version


def test_a_version_that_differs_from_pyprojects_is_named(tmp_path: Path) -> None:
    (tmp_path / "src" / "oncestream").mkdir(parents=True)
    (tmp_path / "src" / "oncestream" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    found = dist.check_versions(PROJECT, tmp_path)
    assert found == ["pyproject.toml says version 9.8.7, oncestream.__version__ 0.0.1"]
