"""The demo's latency plot: where it may be written, and the PNG itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncestream import ConfigError
from oncestream.demo._internal import DemoConfig
from oncestream.demo._plot import check_plot_path, save_latency_plot


def test_plot_path_rules(tmp_path: Path) -> None:
    existing = tmp_path / "mine.png"
    existing.write_bytes(b"not ours")
    with pytest.raises(ConfigError, match="exists already"):
        DemoConfig(plot=existing)
    assert existing.read_bytes() == b"not ours"
    with pytest.raises(ConfigError, match=r"must name a \.png file"):
        check_plot_path(tmp_path / "plot.jpg")
    with pytest.raises(ConfigError, match="does not exist"):
        check_plot_path(tmp_path / "missing" / "plot.png")
    assert check_plot_path(tmp_path / "new.png") == tmp_path / "new.png"


def test_the_plot_is_a_png_of_the_points(tmp_path: Path) -> None:
    path = tmp_path / "lat.png"
    points = [(1000.0 + i / 10, 50.0 + i) for i in range(200)]
    assert save_latency_plot(points, path, "end-to-end latency") is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert save_latency_plot([], tmp_path / "none.png", "x") == "no latency measured"
    assert not (tmp_path / "none.png").exists()
