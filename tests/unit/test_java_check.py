"""Spark's Java requirement is checked up front with a clear message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncestream import ConfigError
from oncestream.spark import check_java


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
