"""Operator-mode JWTs and ``.creds`` files, signed with nkeys.

Just enough of the nats-io/jwt (v2) claims format for local development and
tests: an operator, accounts (JetStream limits unlimited when enabled) and
users, served to the server by a memory resolver (see
:class:`~oncestream.server.OperatorConfig`).

Example::

    setup = OperatorSetup.create(accounts=("APP",), jetstream=("APP",))
    creds = setup.write_creds(tmp / "app.creds", account="APP", user="alice")
    config = ServerConfig(blocks=(setup.config(),), jetstream=...)
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nkeys
import orjson

from .._errors import ConfigError
from .._private import write_private
from ._topology import OperatorConfig

__all__ = ["KeyPair", "OperatorSetup", "encode_jwt", "format_creds", "new_keypair"]

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
_UNLIMITED = -1
_PREFIXES = {
    "operator": nkeys.PREFIX_BYTE_OPERATOR,
    "account": nkeys.PREFIX_BYTE_ACCOUNT,
    "user": nkeys.PREFIX_BYTE_USER,
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass(frozen=True)
class KeyPair:
    """An nkey: public key and seed (the seed is a secret: not in ``repr()``)."""

    public: str
    seed: str = field(repr=False)

    def sign(self, data: bytes) -> bytes:
        """Sign ``data`` with the seed."""
        kp = nkeys.from_seed(self.seed.encode())
        try:
            return bytes(kp.sign(data))
        finally:
            kp.wipe()


def new_keypair(kind: str) -> KeyPair:
    """Create a fresh operator, account or user nkey."""
    if kind not in _PREFIXES:
        raise ConfigError(f"nkey kind must be one of {sorted(_PREFIXES)}, got {kind!r}")
    seed = nkeys.encode_seed(os.urandom(32), _PREFIXES[kind])
    kp = nkeys.from_seed(bytearray(seed))
    public = kp.public_key.decode()
    return KeyPair(public=public, seed=bytes(seed).decode())


def encode_jwt(issuer: KeyPair, subject: str, name: str, nats: dict[str, Any]) -> str:
    """Sign a nats-io/jwt v2 claim set ``{iss, sub, name, iat, jti, nats}``."""
    claims: dict[str, Any] = {
        "jti": "",
        "iat": int(time.time()),
        "iss": issuer.public,
        "name": name,
        "sub": subject,
        "nats": {**nats, "version": 2},
    }
    digest = hashlib.new("sha512_256", orjson.dumps(claims)).digest()
    claims["jti"] = base64.b32encode(digest).decode().rstrip("=")
    signing_input = f"{_b64(orjson.dumps(_HEADER))}.{_b64(orjson.dumps(claims))}"
    signature = issuer.sign(signing_input.encode())
    return f"{signing_input}.{_b64(signature)}"


def format_creds(user_jwt: str, seed: str) -> str:
    """The text of a ``.creds`` file (the format ``nsc`` writes)."""
    return (
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n"
        "NKEY Seed printed below can be used to sign and prove identity.\n"
        "NKEYs are sensitive and should be treated as secrets.\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{seed}\n"
        "------END USER NKEY SEED------\n\n"
        "*************************************************************\n"
    )


def _account_claims(jetstream: bool) -> dict[str, Any]:
    storage = _UNLIMITED if jetstream else 0
    return {
        "type": "account",
        "limits": {
            "subs": _UNLIMITED,
            "data": _UNLIMITED,
            "payload": _UNLIMITED,
            "imports": _UNLIMITED,
            "exports": _UNLIMITED,
            "wildcards": True,
            "conn": _UNLIMITED,
            "leaf": _UNLIMITED,
            "mem_storage": storage,
            "disk_storage": storage,
            "streams": _UNLIMITED if jetstream else 0,
            "consumer": _UNLIMITED if jetstream else 0,
        },
        "default_permissions": {"pub": {}, "sub": {}},
    }


@dataclass(frozen=True)
class OperatorSetup:
    """An operator, its system account and further accounts, with their JWTs.

    Create with :meth:`create`; add users (signed by their account) with
    :meth:`user_creds` / :meth:`write_creds`.
    """

    operator: KeyPair
    operator_jwt: str = field(repr=False)
    system_account: str
    accounts: dict[str, KeyPair] = field(repr=False)
    account_jwts: dict[str, str] = field(repr=False)

    @classmethod
    def create(
        cls, *, accounts: tuple[str, ...] = ("APP",), jetstream: tuple[str, ...] = ("APP",)
    ) -> OperatorSetup:
        """A new operator with a ``SYS`` account plus ``accounts``.

        Args:
            accounts: names of the non-system accounts.
            jetstream: which of them get (unlimited) JetStream.
        """
        unknown = set(jetstream) - set(accounts)
        if unknown:
            raise ConfigError(f"jetstream names unknown accounts {sorted(unknown)}")
        operator = new_keypair("operator")
        keys = {name: new_keypair("account") for name in ("SYS", *accounts)}
        operator_jwt = encode_jwt(
            operator,
            operator.public,
            "oncestream",
            {"type": "operator", "system_account": keys["SYS"].public},
        )
        jwts = {
            name: encode_jwt(operator, kp.public, name, _account_claims(name in jetstream))
            for name, kp in keys.items()
        }
        return cls(
            operator=operator,
            operator_jwt=operator_jwt,
            system_account=keys["SYS"].public,
            accounts=keys,
            account_jwts=jwts,
        )

    def config(self) -> OperatorConfig:
        """The server block: operator JWT, system account, memory resolver preload."""
        return OperatorConfig(
            operator_jwt=self.operator_jwt,
            system_account=self.system_account,
            account_jwts={self.accounts[n].public: jwt for n, jwt in self.account_jwts.items()},
        )

    def user_creds(self, *, account: str, user: str) -> str:
        """A new user in ``account``; returns the ``.creds`` file text."""
        if account not in self.accounts:
            raise ConfigError(f"unknown account {account!r}; have {sorted(self.accounts)}")
        user_key = new_keypair("user")
        claims = {"type": "user", "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1}
        user_jwt = encode_jwt(self.accounts[account], user_key.public, user, claims)
        return format_creds(user_jwt, user_key.seed)

    def write_creds(self, path: Path, *, account: str, user: str) -> Path:
        """Write a new user's ``.creds`` file (mode 0600) and return its path."""
        return write_private(path, self.user_creds(account=account, user=user))
