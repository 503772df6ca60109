"""The demo's data directory: never delete what the demo did not create.

``--data-dir DIR`` may name a new directory (created, removed afterwards
unless ``--keep``), an empty one (only what the demo puts in it is removed),
or the directory of a previous demo run, recognised by the marker file
:data:`MARKER` (the previous run's entries are cleared first, nothing else).
Any other non-empty directory is refused.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .._errors import ConfigError

__all__ = ["ENTRIES", "MARKER", "DemoDir"]

MARKER = ".oncestream-demo"
#: Everything the demo creates inside its data directory (and so may delete).
ENTRIES = ("jetstream", "server", "checkpoints", "region_revenue.parquet", MARKER)

_MARKER_TEXT = (
    "This directory was created by `oncestream demo`. A later demo run with\n"
    "--data-dir here deletes only: " + ", ".join(ENTRIES) + "\n"
)


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


@dataclass(frozen=True)
class DemoDir:
    """Where the demo puts its data, and what it may delete afterwards.

    Attributes:
        path: the data directory.
        created: the top-most directory this run created (removed whole by
            :meth:`cleanup`), or None when the directory existed before.
    """

    path: Path
    created: Path | None

    @classmethod
    def prepare(cls, data_dir: Path | None) -> DemoDir:
        """Check ``data_dir`` and make it ready (a new temporary directory when None).

        Raises:
            ConfigError: ``data_dir`` is a file, cannot be created, or is a non-empty
                directory that is not a previous demo's.
        """
        if data_dir is None:
            path = Path(tempfile.mkdtemp(prefix="oncestream-demo-"))
            cls._mark(path)
            return cls(path, path)
        path = data_dir.expanduser().absolute()
        try:
            if path.exists() or path.is_symlink():
                if not path.is_dir():
                    raise ConfigError(f"--data-dir {path} is not a directory")
                if (path / MARKER).is_file():
                    for name in ENTRIES:
                        _remove(path / name)  # the previous demo run's data, nothing else
                elif any(path.iterdir()):
                    raise ConfigError(
                        f"--data-dir {path} is not empty and is not a previous demo's directory "
                        f"(no {MARKER} file); give a new or empty directory"
                    )
                created = None
            else:
                created = path
                while not created.parent.exists():
                    created = created.parent
                path.mkdir(parents=True)
            cls._mark(path)
        except OSError as exc:
            raise ConfigError(f"--data-dir {path}: {exc.strerror or exc}") from None
        return cls(path, created)

    @staticmethod
    def _mark(path: Path) -> None:
        (path / MARKER).write_text(_MARKER_TEXT)

    def cleanup(self) -> None:
        """Remove what the demo created: the whole directory if it made it, else its entries."""
        if self.created is not None:
            shutil.rmtree(self.created, ignore_errors=True)
            return
        for name in ENTRIES:
            _remove(self.path / name)
