"""Connection flags shared by every CLI command that talks to NATS.

Declare them as parameters with these annotated types and turn them into
:class:`ConnectOptions` with :func:`connect_options`::

    @app.command("x")
    def x(server: ServerFlag = None, user: UserFlag = None, ...) -> None:
        options = connect_options(server=server, user=user, ...)
"""

from __future__ import annotations

from typing import Annotated

import typer

from .._options import ConnectOptions

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
]

_PANEL = "Connection"

ServerFlag = Annotated[
    list[str] | None,
    typer.Option(
        "--server",
        "-s",
        envvar="NATS_URL",
        help="NATS URL; repeat or comma-separate for several (default nats://127.0.0.1:4222).",
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
    servers = tuple(
        part.strip() for value in (server or []) for part in value.split(",") if part.strip()
    )
    return ConnectOptions(
        servers=servers or ("nats://127.0.0.1:4222",),
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
