"""scripts/venv.py: what a cached venv is keyed on, and that reusing one never changes the cache.

A copy shares its files with the cache (hard links); the scripts it re-points must be
written anew, or re-pointing one checkout's venv would re-point the cache and every
other copy. The full path (build, store, restore, pip) runs in every ``make setup``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("venv_script", ROOT / "scripts" / "venv.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["venv_script"] = module
    spec.loader.exec_module(module)
    return module


venv = _script()


def test_the_key_changes_with_each_input() -> None:
    base = venv.cache_key(b"[project]", "/py", ["pyspark==4.1.4"], "all", [])
    assert base == venv.cache_key(b"[project]", "/py", ["pyspark==4.1.4"], "all", [])
    others = {
        venv.cache_key(b"[project] ", "/py", ["pyspark==4.1.4"], "all", []),
        venv.cache_key(b"[project]", "/py2", ["pyspark==4.1.4"], "all", []),
        venv.cache_key(b"[project]", "/py", ["pyspark==4.2.0"], "all", []),
        venv.cache_key(b"[project]", "/py", ["pyspark==4.1.4"], "dev", []),
        venv.cache_key(b"[project]", "/py", ["pyspark==4.1.4"], "all", ["pyspark"]),
    }
    assert base not in others and len(others) == 5


def test_repointing_a_copy_leaves_the_cache_as_it_was(tmp_path: Path) -> None:
    cache, copy = tmp_path / "cache", tmp_path / "copy"
    (cache / "bin").mkdir(parents=True)
    script = cache / "bin" / "pytest"
    script.write_text(f"#!{cache}/bin/python\nimport pytest\n")
    script.chmod(0o755)
    (cache / "bin" / "activate").write_text(f'VIRTUAL_ENV="{cache}"\n')
    (cache / "bin" / "nats-server").write_bytes(b"\x7fELF\0\0" + str(cache).encode())
    (cache / "bin" / "python").symlink_to("/usr/bin/python3")
    venv._copy(cache, copy)
    assert os.stat(copy / "bin" / "pytest").st_ino == os.stat(script).st_ino  # hard links

    venv._repoint(copy, cache, copy)

    assert (copy / "bin" / "pytest").read_text().startswith(f"#!{copy}/bin/python\n")
    assert os.access(copy / "bin" / "pytest", os.X_OK)
    assert (copy / "bin" / "activate").read_text() == f'VIRTUAL_ENV="{copy}"\n'
    assert script.read_text().startswith(f"#!{cache}/bin/python\n")  # the cache's own
    assert (cache / "bin" / "activate").read_text() == f'VIRTUAL_ENV="{cache}"\n'
    assert (copy / "bin" / "nats-server").read_bytes().endswith(str(cache).encode())  # binary
    assert (copy / "bin" / "python").is_symlink()


def test_the_cache_can_be_turned_off_or_moved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCESTREAM_VENV_CACHE", "off")
    assert venv.cache_root() is None
    monkeypatch.setenv("ONCESTREAM_VENV_CACHE", "/somewhere")
    assert venv.cache_root() == Path("/somewhere")
    monkeypatch.delenv("ONCESTREAM_VENV_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert venv.cache_root() == Path("/xdg/oncestream/venvs")


def test_a_pin_the_project_replaced_or_a_forbidden_distribution_fails(tmp_path: Path) -> None:
    """check() runs the venv's python: this interpreter stands in for one."""
    fake = tmp_path / "v"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (fake / "bin" / "python").chmod(0o755)
    import pytest as installed_pytest

    have = f"pytest=={installed_pytest.__version__}"
    venv.check(fake, [have], ["no-such-distribution-x"])
    with pytest.raises(venv.StepFailed, match=r"replaced pytest 0\.0\.1 with "):
        venv.check(fake, ["pytest==0.0.1"], [])
    with pytest.raises(venv.StepFailed, match=r"has pytest .*must not have"):
        venv.check(fake, [], ["pytest"])
