"""The demo's latency plot: end-to-end latency of each order over the run (PNG)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .._errors import ConfigError

__all__ = ["check_plot_path", "save_latency_plot"]


def check_plot_path(path: Path) -> Path:
    """A path the plot may be written to: ``.png``, in an existing directory, not there yet.

    Raises:
        ConfigError: naming the path and the rule (an existing file is never overwritten).
    """
    if path.suffix.lower() != ".png":
        raise ConfigError(f"--plot must name a .png file, got {str(path)!r}")
    if path.exists():
        raise ConfigError(f"--plot {str(path)!r} exists already; name a new file")
    if not path.parent.is_dir():
        raise ConfigError(f"--plot {str(path)!r}: directory {str(path.parent)!r} does not exist")
    return path


def save_latency_plot(points: Sequence[tuple[float, float]], path: Path, title: str) -> str | None:
    """Write the plot; return None, or why it was not written (no matplotlib, no points)."""
    if not points:
        return "no latency measured"
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    start = points[0][0]
    xs = [t - start for t, _ in points]
    ys = [lag / 1000 for _, lag in points]
    fig, ax = plt.subplots(figsize=(6, 2.5), dpi=100)
    try:
        ax.plot(xs, ys, ",", alpha=0.5)
        ax.set_xlabel("seconds into the run (output time)")
        ax.set_ylabel("latency (s)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)
    return None
