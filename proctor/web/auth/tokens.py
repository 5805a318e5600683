"""API tokens: the credential scripts send as ``Authorization: Bearer``.

A token is ``prt_`` followed by 43 URL-safe characters (256 random bits).
Only its SHA-256 is stored: the token has full entropy, so a slow password
hash would add nothing but latency to every API call. Its first 12
characters are kept in clear (``prefix``) so that people can tell their
tokens apart in a list.

Scopes limit what a token may do, never widen it:

* a role name (``submitter``, ``operator``, ``reviewer``, ``admin``) lets the
  token act in that role, as long as its user still holds the role;
* ``read-only`` restricts it to GET/HEAD requests.

A token with no role scope still identifies its user: it reads what the
user owns and can do nothing that needs a role.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterable
from enum import StrEnum

from proctor.core.domain import Role

TOKEN_PREFIX = "prt_"
PREFIX_LENGTH = 12


class Scope(StrEnum):
    admin = Role.admin.value
    operator = Role.operator.value
    reviewer = Role.reviewer.value
    submitter = Role.submitter.value
    read_only = "read-only"


READ_ONLY = Scope.read_only.value


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def display_prefix(token: str) -> str:
    return token[:PREFIX_LENGTH]


def looks_like_token(value: str) -> bool:
    return value.startswith(TOKEN_PREFIX) and 20 <= len(value) <= 200


def role_scopes(scopes: Iterable[str]) -> frozenset[Role]:
    given = set(scopes)
    return frozenset(r for r in Role if r.value in given)


def is_read_only(scopes: Iterable[str]) -> bool:
    return READ_ONLY in scopes
