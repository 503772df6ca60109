"""Connection flags shared by every CLI command that talks to NATS.

Decorate a command with :func:`with_connect_options`: it gains every flag
below and receives them already validated as ``options: ConnectOptions``::

    @app.command("x")
    @cli_errors
    @with_connect_options
    def x(stream: str, options: ConnectOptions) -> None: ...
"""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer

from .._errors import ConfigError
from .._options import DEFAULT_SERVER, ConnectOptions

__all__ = [
    "ApiPrefixFlag",
    "CredsFlag",
    "DomainFlag",
    "NkeySeedFlag",
    "PasswordFlag",
    "ServerFlag",
    "TlsCaFlag",
    "TlsCertFlag",
    "TlsKeyFlag",
    "TokenFlag",
    "UserFlag",
    "connect_options",
    "with_connect_options",
]

T = TypeVar("T")

_SEED = re.compile(r"^S[A-Z][A-Z2-7]{50,}$")

_PANEL = "Connection"

ServerFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--server",
        "-s",
        envvar="NATS_URL",
        help=f"NATS URL; repeat or comma-separate for several (default {DEFAULT_SERVER}).",
        rich_help_panel=_PANEL,
    ),
]
UserFlag = Annotated[str | None, typer.Option("--user", help="User name.", rich_help_panel=_PANEL)]
PasswordFlag = Annotated[
    str | None,
    typer.Option("--password", envvar="NATS_PASSWORD", help="Password.", rich_help_panel=_PANEL),
]
TokenFlag = Annotated[
    str | None,
    typer.Option("--token", envvar="NATS_TOKEN", help="Auth token.", rich_help_panel=_PANEL),
]
CredsFlag = Annotated[
    str | None,
    typer.Option("--creds", help="User credentials (.creds) file.", rich_help_panel=_PANEL),
]
NkeySeedFlag = Annotated[
    str | None,
    typer.Option(
        "--nkey-seed", help="NKey seed file (or the seed itself).", rich_help_panel=_PANEL
    ),
]
TlsCaFlag = Annotated[
    str | None,
    typer.Option("--tls-ca", help="CA certificate file to trust.", rich_help_panel=_PANEL),
]
TlsCertFlag = Annotated[
    str | None,
    typer.Option("--tls-cert", help="Client certificate file.", rich_help_panel=_PANEL),
]
TlsKeyFlag = Annotated[
    str | None, typer.Option("--tls-key", help="Client key file.", rich_help_panel=_PANEL)
]
DomainFlag = Annotated[
    str | None, typer.Option("--domain", help="JetStream domain.", rich_help_panel=_PANEL)
]
ApiPrefixFlag = Annotated[
    str | None,
    typer.Option(
        "--api-prefix", help="JetStream API prefix (instead of --domain).", rich_help_panel=_PANEL
    ),
]


def connect_options(
    *,
    server: list[str] | None = None,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    creds: str | None = None,
    nkey_seed: str | None = None,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    domain: str | None = None,
    api_prefix: str | None = None,
    name: str = "oncestream-cli",
) -> ConnectOptions:
    """Build validated :class:`ConnectOptions` from the shared flags.

    Raises:
        ConfigError: a flag value is invalid (the CLI exits with code 2).
    """
    servers = ",".join(server or [])
    if server and not servers.replace(",", "").strip():
        raise ConfigError("--server (or $NATS_URL) is empty; give a URL like nats://host:4222")
    if nkey_seed is not None and not os.path.isfile(nkey_seed) and not _SEED.match(nkey_seed):
        # A path that is not there; a mistyped seed is a secret and is not echoed.
        shown = f" {nkey_seed!r}" if any(c in nkey_seed for c in "/\\.~") else ""
        raise ConfigError(
            f"--nkey-seed{shown} is neither a readable seed file nor an nkey seed (SU...)"
        )
    # One comma-separated string: ConnectOptions then never prints a piece of a
    # password that held a ',' (see ConnectOptions._normalise_url).
    listed: dict[str, Any] = {"servers": servers or DEFAULT_SERVER}
    return ConnectOptions(
        **listed,
        user=user,
        password=password,
        token=token,
        creds=creds,
        nkey_seed=nkey_seed,
        tls_ca_file=tls_ca,
        tls_cert_file=tls_cert,
        tls_key_file=tls_key,
        domain=domain,
        api_prefix=api_prefix,
        name=name,
    )


_FLAGS: dict[str, Any] = {
    "server": ServerFlag,
    "user": UserFlag,
    "password": PasswordFlag,
    "token": TokenFlag,
    "creds": CredsFlag,
    "nkey_seed": NkeySeedFlag,
    "tls_ca": TlsCaFlag,
    "tls_cert": TlsCertFlag,
    "tls_key": TlsKeyFlag,
    "domain": DomainFlag,
    "api_prefix": ApiPrefixFlag,
}


def with_connect_options(func: Callable[..., T]) -> Callable[..., T]:
    """Give a command every connection flag; it receives ``options: ConnectOptions``.

    The flags are appended to the command's own parameters (Typer reads the
    rewritten signature) and validated before the command body runs, so a bad
    value raises ConfigError (exit 2 under :func:`cli_errors`).
    """
    signature = inspect.signature(func, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != "options"]
    flags = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in _FLAGS.items()
    ]

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        values = {name: kwargs.pop(name, None) for name in _FLAGS}
        return func(*args, options=connect_options(**values), **kwargs)

    wrapper.__signature__ = signature.replace(parameters=[*own, *flags])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {
        **{p.name: p.annotation for p in own},
        **_FLAGS,
        "return": signature.return_annotation,
    }
    del wrapper.__wrapped__
    return wrapper
