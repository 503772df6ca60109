"""`demo --data-dir`: never delete what the demo did not create (issue 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream import ConfigError
from oncestream.demo._datadir import MARKER, DemoDir


def _fill(path: Path) -> None:
    (path / "jetstream").mkdir()
    (path / "jetstream" / "x").write_text("x")
    (path / "checkpoints").mkdir()
    (path / "region_revenue.parquet").mkdir()


def test_new_directory_is_created_marked_and_removed_whole(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    demo = DemoDir.prepare(target)
    assert (target / MARKER).is_file() and demo.created == tmp_path / "a"
    _fill(target)
    demo.cleanup()
    assert not (tmp_path / "a").exists() and tmp_path.exists()


def test_empty_directory_keeps_existing_and_loses_only_demo_entries(tmp_path: Path) -> None:
    demo = DemoDir.prepare(tmp_path)
    _fill(tmp_path)
    demo.cleanup()
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []


def test_previous_demo_directory_is_reused_and_user_files_survive(tmp_path: Path) -> None:
    DemoDir.prepare(tmp_path)
    _fill(tmp_path)
    (tmp_path / "notes.txt").write_text("mine")
    demo = DemoDir.prepare(tmp_path)  # a second run: the old run's data is cleared
    assert not (tmp_path / "jetstream").exists()
    assert (tmp_path / "notes.txt").read_text() == "mine"
    _fill(tmp_path)
    demo.cleanup()
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_foreign_non_empty_directory_is_refused_untouched(tmp_path: Path) -> None:
    (tmp_path / "jetstream").mkdir()
    (tmp_path / "thesis.tex").write_text("years of work")
    with pytest.raises(ConfigError, match="not empty"):
        DemoDir.prepare(tmp_path)
    assert (tmp_path / "thesis.tex").read_text() == "years of work"
    assert not (tmp_path / MARKER).exists()


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError, match="not a directory"):
        DemoDir.prepare(tmp_path / "f")


def test_default_is_a_temporary_directory_removed_afterwards() -> None:
    demo = DemoDir.prepare(None)
    assert demo.created == demo.path and demo.path.is_dir()
    demo.cleanup()
    assert not demo.path.exists()
