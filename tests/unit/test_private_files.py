"""Files holding secrets: 0600 from creation, in 0700 directories (issue 10)."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream._private import private_dir, write_private


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_new_file_and_directories_are_private(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "secret.conf"
    write_private(target, "password: x")
    assert _mode(target) == 0o600 and target.read_text() == "password: x"
    assert _mode(tmp_path / "a") == 0o700 and _mode(tmp_path / "a" / "b") == 0o700


def test_existing_open_file_is_tightened_before_writing(tmp_path: Path) -> None:
    target = tmp_path / "old.conf"
    target.write_text("old")
    target.chmod(0o644)
    (tmp_path).chmod(0o755)
    write_private(target, b"new")
    assert _mode(target) == 0o600 and target.read_bytes() == b"new"
    assert _mode(tmp_path) == 0o700


def test_a_symlink_is_not_followed(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("keep")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "link").symlink_to(elsewhere)
    with pytest.raises(OSError):
        write_private(tmp_path / "d" / "link", "x")
    assert elsewhere.read_text() == "keep"


def test_a_file_in_the_way_is_left_alone(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("mine")
    blocker.chmod(0o644)
    with pytest.raises(NotADirectoryError):
        private_dir(blocker)
    assert _mode(blocker) == 0o644 and blocker.read_text() == "mine"
