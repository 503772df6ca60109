"""The campaign's page-cache file system (torture/pagecache, torture/cachefs.py) itself.

Writes not synced are held (reads see them, the folder below does not) and a drop
loses them, as an OS crash loses dirty pages; fsync, fdatasync and an O_SYNC handle
write through, so a drop keeps what they wrote; metadata (the file's creation, a
rename) passes through at once. The campaign's power-loss control
(test_torture_durability.py) runs nats-server on it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from torture.cachefs import CacheMount, build


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[CacheMount]:
    if os.geteuid() != 0 or not Path("/dev/fuse").exists():
        pytest.fail("the page-cache file system needs root and /dev/fuse (CI runs as root)")
    build()  # make pagecache: fails with make's message when Go is missing
    m = CacheMount(tmp_path / "mnt", tmp_path / "work")
    m.start()
    try:
        yield m
    finally:
        m.stop()
    assert not m.mounted()


def _write(path: Path, data: bytes, *, sync: str = "", flags: int = 0) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | flags, 0o644)
    try:
        os.write(fd, data)
        if sync == "fsync":
            os.fsync(fd)
        elif sync == "fdatasync":
            os.fdatasync(fd)
    finally:
        os.close(fd)


def test_a_drop_loses_what_was_not_synced_and_keeps_what_was(mount: CacheMount) -> None:
    m, below = mount.mount, mount.root
    _write(m / "lost", b"not synced")
    _write(m / "kept", b"x" * 5000, sync="fsync")  # more than a page
    _write(m / "kept", b"tail", flags=os.O_APPEND)  # after the sync: held again
    _write(m / "datasync", b"fdatasynced", sync="fdatasync")
    _write(m / "osync", b"O_SYNC", flags=os.O_SYNC)
    _write(m / "renamed.tmp", b"renamed")
    os.rename(m / "renamed.tmp", m / "renamed")
    # Held: readers of the mount see it, the folder below does not have it yet.
    assert (m / "lost").read_bytes() == b"not synced"
    assert (m / "kept").read_bytes() == b"x" * 5000 + b"tail"
    assert (below / "lost").stat().st_size == 0
    assert (below / "kept").read_bytes() == b"x" * 5000
    held = mount.unsynced_bytes()
    assert held == len(b"not synced") + len(b"renamed") + 5004 - 4096, held

    assert mount.drop() == held
    assert mount.unsynced_bytes() == 0
    # Lost: the unsynced data (the files stay: their creation was metadata).
    assert (m / "lost").read_bytes() == b""
    assert (m / "renamed").read_bytes() == b""
    assert not (m / "renamed.tmp").exists()
    # Kept: whatever a sync wrote through, and only that.
    assert (m / "kept").read_bytes() == b"x" * 5000
    assert (m / "datasync").read_bytes() == b"fdatasynced"
    assert (m / "osync").read_bytes() == b"O_SYNC"


def test_writes_over_synced_data_are_merged_then_lost_alone(mount: CacheMount) -> None:
    path = mount.mount / "block"
    _write(path, bytes(range(256)) * 40, sync="fsync")  # 10,240 bytes on disk
    fd = os.open(path, os.O_WRONLY)
    try:
        os.pwrite(fd, b"NEW", 4095)  # across the first page boundary
        os.ftruncate(fd, 9000)  # metadata: passes through at once
    finally:
        os.close(fd)
    expected = bytearray(bytes(range(256)) * 40)[:9000]
    expected[4095:4098] = b"NEW"
    assert path.read_bytes() == bytes(expected)
    mount.drop()
    assert path.read_bytes() == (bytes(range(256)) * 40)[:9000]
