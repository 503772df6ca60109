"""docs/cli.md's command table is generated from the CLI: it lists every command and option."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cli_table", ROOT / "scripts" / "cli_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_page_command_table_matches_the_cli() -> None:
    script = _script()
    page = (ROOT / "docs" / "cli.md").read_text()
    assert script.current(page) == script.section(), (
        "docs/cli.md's command table differs from the CLI: "
        "run `python scripts/cli_table.py --write`"
    )


def test_table_lists_every_option_of_every_command() -> None:
    import typer.main

    from oncestream.cli import app

    table = _script().table()
    root = typer.main.get_command(app)
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        leaves = getattr(command, "commands", None) or {"": command}
        for sub, leaf in leaves.items():
            row = next(
                line for line in table.splitlines()
                if line.startswith(f"| `oncestream {name}{' ' + sub if sub else ''} ")
                or line.startswith(f"| `oncestream {name}{' ' + sub if sub else ''}`")
            )  # fmt: skip
            for param in leaf.params:
                if getattr(param, "rich_help_panel", None) == "Connection":
                    continue
                if type(param).__name__.endswith("Option"):
                    assert param.opts[0] in row or param.opts[-1] in row, (name, sub, param.opts)
    demo = next(line for line in table.splitlines() if "`oncestream demo" in line)
    assert demo.count("[--") == 9  # --output parquet|delta|iceberg is the ninth
