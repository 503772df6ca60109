"""Spark's Java requirement is checked up front with a clear message."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from oncestream import ConfigError
from oncestream.spark._internal import check_java


def test_java_17_is_found_here() -> None:
    assert os.access(check_java(), os.X_OK)


def test_missing_java_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match=r"Java 17\+.*openjdk-17"):
        check_java()


def test_old_java_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(ConfigError, match=r"found Java 11 at"):
        check_java()


@pytest.mark.parametrize("shown", ["21-ea", "17+35", "1.8.0_392"])
def test_early_access_and_vendor_versions_are_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shown: str
) -> None:
    """``make``'s scripts/check-java and check_java() read the same major version."""
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho 'openjdk version \"{shown}\" 2023-09-19' >&2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    script = Path(__file__).resolve().parents[2] / "scripts" / "check-java"
    done = subprocess.run([str(script)], capture_output=True, text=True, check=False)
    if shown.startswith("1."):
        assert done.returncode == 1 and "found Java '1.8.0_392'" in done.stderr
        with pytest.raises(ConfigError, match=r"found Java 8 at"):
            check_java()
    else:
        assert done.returncode == 0, done.stderr
        assert check_java() == str(fake)
