"""Credential and TLS files checked before connecting: option errors, never a driver's traceback.

nats-py reads a ``.creds`` file, an nkey seed and the TLS files only while it
connects, and fails there with errors that name neither the option nor the
problem (a ``.creds`` file without a seed: ``TypeError: object of type
'NoneType' has no len()``; without a JWT it loops forever; a key file given as
CA: an ``ssl.SSLError`` traceback). These checks run when
:class:`~oncestream.ConnectOptions` is built, so the CLI, the Python API and
the Spark options all refuse such values up front with a :class:`ConfigError`
naming the option and the file, and never the secret in it.
"""

from __future__ import annotations

import base64
import binascii
import re
import ssl

import nkeys

from ._errors import ConfigError

__all__ = ["check_creds_file", "check_nkey_seed", "check_tls_files"]

_JWT_MARK = "BEGIN NATS USER JWT"
_SEED_MARK = "BEGIN USER NKEY SEED"
_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$")


def is_user_seed(text: str) -> bool:
    """Whether ``text`` is a valid user nkey seed (``SU...``, its CRC-16 checksum included).

    nkeys' own ``from_seed`` does not verify the checksum, so a mistyped seed
    would only fail at the server, as rejected credentials.
    """
    value = text.strip()
    if not value.startswith("SU") or not value.isascii():
        return False
    try:
        raw = base64.b32decode(value + "=" * (-len(value) % 8))
        prefix, _ = nkeys.decode_seed(bytearray(value.encode()))
    except (binascii.Error, ValueError, nkeys.NkeysError):
        return False
    return (
        len(raw) == 36
        and prefix == nkeys.PREFIX_BYTE_USER
        and bytes(nkeys.crc16_checksum(raw[:-2])) == raw[-2:]
    )


def check_nkey_seed(value: str, name: str = "nkey_seed") -> None:
    """An nkey seed given as text or as a file holding one.

    Raises:
        ConfigError: naming the option (and the file), never the seed.
    """
    try:
        with open(value, encoding="utf-8") as handle:
            content, where = handle.read(), f" file {value!r}"
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, OSError, ValueError):
        content, where = value, ""
    except UnicodeDecodeError:
        raise ConfigError(f"{name} file {value!r} holds no nkey seed (not text)") from None
    if not is_user_seed(content):
        raise ConfigError(
            f"{name}{where} is not a valid user nkey seed (SU..., 58 characters with a "
            "checksum: a mistyped seed fails it); the value is not shown"
        )


def _line_after(lines: list[str], mark: str) -> str | None:
    for index, line in enumerate(lines):
        if mark in line:
            return lines[index + 1].strip() if index + 1 < len(lines) else ""
    return None


def check_creds_file(path: str, name: str = "creds") -> None:
    """A ``.creds`` file: a user JWT block and a user nkey seed block, as nats-py reads them.

    Raises:
        ConfigError: naming the option, the file and what is missing, never its content.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except UnicodeDecodeError:
        raise ConfigError(f"{name} file {path!r} is not a .creds file (not text)") from None
    jwt = _line_after(lines, _JWT_MARK)
    if jwt is None or not _JWT.match(jwt):
        raise ConfigError(
            f"{name} file {path!r} is not a .creds file: it needs a user JWT after a "
            f"'-----{_JWT_MARK}-----' line (as `nsc generate creds` writes it)"
        )
    seed = _line_after(lines, _SEED_MARK)
    if seed is None or not is_user_seed(seed):
        raise ConfigError(
            f"{name} file {path!r} is not a .creds file: it needs a valid user nkey seed "
            f"after a '-----{_SEED_MARK}-----' line (the seed is not shown)"
        )


def check_tls_files(ca_file: str | None, cert_file: str | None, key_file: str | None) -> None:
    """The CA bundle and the client certificate/key load as PEM.

    Raises:
        ConfigError: naming the option and the file (e.g. a key file given as the CA).
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=ca_file)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"tls_ca_file {ca_file!r} holds no CA certificate in PEM format "
                f"({exc.reason or exc})"
            ) from None
    if cert_file is not None and key_file is not None:
        try:
            context.load_cert_chain(cert_file, key_file)
        except ssl.SSLError as exc:
            raise ConfigError(
                f"tls_cert_file {cert_file!r} and tls_key_file {key_file!r} are not a PEM "
                f"certificate and its private key ({exc.reason or exc})"
            ) from None
