"""The curated public API: everything in ``__all__`` exists, nothing private leaks."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import oncestream
from oncestream import _errors


def test_all_names_resolve_and_are_sorted() -> None:
    for name in oncestream.__all__:
        assert hasattr(oncestream, name), name
    assert list(oncestream.__all__) == sorted(oncestream.__all__)
    assert len(set(oncestream.__all__)) == len(oncestream.__all__)
    assert not [n for n in oncestream.__all__ if n.startswith("_") and n != "__version__"]


def test_every_error_is_exported_and_rooted() -> None:
    for name in _errors.__all__:
        obj = getattr(_errors, name)
        if isinstance(obj, type):
            assert issubclass(obj, oncestream.OncestreamError)
            assert name in oncestream.__all__


def test_py_typed_marker_ships() -> None:
    spec = importlib.util.find_spec("oncestream")
    assert spec is not None and spec.origin is not None
    from pathlib import Path

    assert (Path(spec.origin).parent / "py.typed").is_file()


def test_message_type_is_public() -> None:
    """Handlers and pulls hand out oncestream's own message type, not nats-py's ``Msg``."""
    import typing

    from oncestream.process import Handler

    assert {"Message", "MessageMetadata"} <= set(oncestream.__all__)
    assert typing.get_args(Handler)[0][0] is oncestream.Message
    assert oncestream.MessageStream.next_batch.__annotations__["return"] == "list[Message]"


#: Every public module: the package and each component's face.
PUBLIC_MODULES = (
    "oncestream",
    "oncestream.audit",
    "oncestream.cli",
    "oncestream.demo",
    "oncestream.doctor",
    "oncestream.ledger",
    "oncestream.load",
    "oncestream.metrics",
    "oncestream.process",
    "oncestream.publish",
    "oncestream.read",
    "oncestream.server",
    "oncestream.spark",
    "oncestream.streams",
)


def _public_names(module: object) -> set[str]:
    """What ``from module import *`` would bind without ``__all__``: no modules, no future flags."""
    import __future__

    import types

    names = set()
    for name, value in vars(module).items():
        if name.startswith("_"):
            continue
        if isinstance(value, types.ModuleType | __future__._Feature):
            continue
        names.add(name)
    return names


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_equals_the_public_names(name: str) -> None:
    """Both ways: every name in ``__all__`` exists, every public name is in ``__all__``."""
    module = importlib.import_module(name)
    exported = set(module.__all__)
    missing = {n for n in exported if not hasattr(module, n)}
    assert missing == set(), f"{name}.__all__ names what it lacks: {missing}"
    unlisted = _public_names(module) - exported
    assert unlisted == set(), f"{name} has public names outside __all__: {unlisted}"


def test_every_public_class_lives_in_a_private_file() -> None:
    """httpx's convention: classes are defined in ``_x.py`` files and re-exported by faces."""
    import inspect

    for name in PUBLIC_MODULES:
        module = importlib.import_module(name)
        for export in module.__all__:
            obj = getattr(module, export)
            if inspect.isclass(obj) and obj.__module__.startswith("oncestream"):
                leaf = obj.__module__.rsplit(".", 1)[-1]
                assert leaf.startswith("_"), f"{name}.{export} is defined in {obj.__module__}"


def test_the_everyday_names_are_at_the_root() -> None:
    everyday = {
        "StreamSpec",
        "ensure_stream",
        "audit",
        "read_stream",
        "iter_messages",
        "replay_dead_letters",
        "list_dead_letters",
        "Publisher",
        "Processor",
        "ProducerSession",
        "connect",
    }
    assert everyday <= set(oncestream.__all__)


def test_no_test_skips_itself_on_an_import() -> None:
    """``importorskip`` of our own modules turned into silent skips when a module moved."""
    from pathlib import Path

    tests = Path(__file__).resolve().parents[1]
    offenders = [
        str(p.relative_to(tests))
        for p in tests.rglob("*.py")
        if "importorskip(" in p.read_text(encoding="utf-8") and p.name != "test_public_api.py"
    ]
    assert offenders == []


def test_the_package_loads_its_components_on_first_use() -> None:
    """``import oncestream`` (and the Spark data source's module, which a Spark worker
    unpickles) loads neither nats-py nor the Processor nor a ledger; a name does when
    first used, and ``oncestream.<component>`` still works after a bare import."""
    import subprocess
    import sys

    probe = (
        "import sys, oncestream, oncestream.spark._datasource\n"
        "heavy = ('nats', 'pyarrow', 'oncestream.process', 'oncestream.ledger',"
        " 'oncestream.audit', 'oncestream.publish', 'oncestream.read')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "oncestream.Processor\n"
        "print('oncestream.process' in sys.modules, oncestream.ledger.__name__)\n"
        "import oncestream.audit\n"
        "print(type(oncestream.audit).__name__)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    # The submodule imported before the name was used: ``audit`` is still the function.
    assert out == ["[]", "True oncestream.ledger", "function"]


def test_every_lazy_name_is_public_and_found_where_it_is_said_to_be() -> None:
    lazy = oncestream._LAZY
    assert set(lazy) <= set(oncestream.__all__)
    assert set(oncestream.__all__) - set(lazy) - {"__version__"} == set(_errors.__all__) & set(
        oncestream.__all__
    )
    for name, module in lazy.items():
        assert getattr(importlib.import_module(module, "oncestream"), name) is getattr(
            oncestream, name
        )
    assert set(oncestream.__all__) <= set(dir(oncestream))
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        oncestream.Nope  # noqa: B018


def test_a_function_naming_the_package_pickles_for_spark() -> None:
    """A Spark UDF or ``foreachBatch`` function whose body names ``oncestream`` is
    cloudpickled with the package in its globals: the package pickles by reference,
    as a plain module does, and the function runs in a fresh process."""
    import subprocess
    import sys

    probe = (
        "import sys, oncestream\n"
        "from pyspark import cloudpickle\n"
        "def udf(x):\n"
        "    return oncestream.lineage_id('S', x), type(oncestream.audit).__name__\n"
        "sys.stdout.buffer.write(cloudpickle.dumps((udf, oncestream)))\n"
    )
    data = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, check=True, timeout=60
    ).stdout
    load = (
        "import pickle, sys; f, m = pickle.loads(sys.stdin.buffer.read()); print(f(7), m.__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", load], input=data, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    assert out.strip() == "('S:7', 'function') oncestream"


def test_a_misspelt_name_is_a_type_error(tmp_path: Path) -> None:
    """Type checkers see the package's names, not a catch-all ``__getattr__``."""
    import subprocess
    import sys

    user = tmp_path / "user.py"
    user.write_text("import oncestream\nfrom oncestream import Processor\n\noncestream.Procesor\n")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
         "--follow-imports=silent", str(user)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout
    assert 'has no attribute "Procesor"; maybe "Processor"?' in result.stdout
