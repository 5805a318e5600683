"""Submitters' endpoint API keys, encrypted at rest.

Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) under the server's
``PROCTOR_ENCRYPTION_KEY`` (environment only; generate one with
``generate_encryption_key()``). Whoever stores a key (submission
registration) calls ``encrypt_api_key``; only the gateway decrypts, server
side, to authenticate to the submitter's server. A key is never logged,
returned by the API, or sent to a station.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken
from pydantic import SecretStr

from proctor.core.errors import ConfigError, IntegrityError


def generate_encryption_key() -> str:
    """A fresh key for ``PROCTOR_ENCRYPTION_KEY``."""
    return Fernet.generate_key().decode("ascii")


def _fernet(encryption_key: SecretStr | str | None) -> Fernet:
    if encryption_key is None:
        raise ConfigError(
            "PROCTOR_ENCRYPTION_KEY is not set: endpoint API keys cannot be encrypted or read"
        )
    raw = (
        encryption_key.get_secret_value()
        if isinstance(encryption_key, SecretStr)
        else encryption_key
    )
    try:
        return Fernet(raw.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise ConfigError(
            "PROCTOR_ENCRYPTION_KEY is not a valid key (32 url-safe base64-encoded bytes)"
        ) from None


def encrypt_api_key(api_key: str, *, encryption_key: SecretStr | str | None) -> bytes:
    if not api_key:
        raise ValueError("an empty API key is stored as None, not encrypted")
    return _fernet(encryption_key).encrypt(api_key.encode("utf-8"))


def decrypt_api_key(token: bytes, *, encryption_key: SecretStr | str | None) -> str:
    try:
        return _fernet(encryption_key).decrypt(token).decode("utf-8")
    except InvalidToken:
        raise IntegrityError(
            "a stored endpoint API key does not decrypt with PROCTOR_ENCRYPTION_KEY "
            "(was the key rotated?)"
        ) from None
