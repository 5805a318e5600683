"""Request and response bodies of the accounts API (separate from the tables)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from proctor.core.domain import Role
from proctor.web.auth.passwords import MAX_PASSWORD_LENGTH, MIN_PASSWORD_LENGTH
from proctor.web.auth.tokens import Scope

USERNAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{1,63}$"
# printable text: no control characters (PostgreSQL also refuses NUL)
_PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


def _normalize_username(value: Any) -> Any:
    # usernames are case-insensitive: stored and compared in lower case
    return value.strip().lower() if isinstance(value, str) else value


Username = Annotated[
    str,
    BeforeValidator(_normalize_username),
    StringConstraints(pattern=USERNAME_PATTERN),
    Field(description="2–64 characters: letters, digits, '.', '_', '-' (stored in lower case)"),
]
DisplayName = Annotated[
    str, StringConstraints(strip_whitespace=True, max_length=128, pattern=_PRINTABLE)
]
Email = Annotated[
    str,
    StringConstraints(
        strip_whitespace=True,
        max_length=256,
        pattern=r"^[^\s@\x00-\x1f]+@[^\s@\x00-\x1f]+\.[^\s@\x00-\x1f]+$",
    ),
]
Password = Annotated[str, Field(min_length=MIN_PASSWORD_LENGTH, max_length=MAX_PASSWORD_LENGTH)]
TokenName = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128, pattern=_PRINTABLE)
]


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class UserOut(_Out):
    id: int
    username: str
    display_name: str
    email: str | None
    is_active: bool
    roles: list[Role]
    created_at: datetime


class MeOut(UserOut):
    authenticated_via: Literal["session", "token"]
    # the roles this request may use: a token's scopes narrow the user's roles
    effective_roles: list[Role]
    token_scopes: list[Scope] | None = None


class UserCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    username: Username
    display_name: DisplayName = ""
    email: Email | None = None
    # omit for an account that only uses API tokens
    password: Password | None = None
    roles: list[Role] = Field(default_factory=list, max_length=len(Role))


class UserUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    display_name: DisplayName | None = None
    email: Email | None = None
    is_active: bool | None = None
    password: Password | None = None


class RolesIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    roles: list[Role] = Field(max_length=len(Role))


class TokenStatus(StrEnum):
    active = "active"
    expired = "expired"
    revoked = "revoked"


class TokenCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: TokenName
    scopes: list[Scope] = Field(default_factory=list, max_length=len(Scope))
    # omit for the server's default (web.token_expiry_days, 90 days unless set);
    # tokens made through the API always expire (only the server's CLI makes
    # tokens that never do)
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)


class TokenOut(_Out):
    id: int
    user_id: int
    name: str
    prefix: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    status: TokenStatus


class TokenCreated(TokenOut):
    token: str = Field(description="The token itself. Shown this once; only its hash is kept.")


class AuditOut(_Out):
    id: int
    at: datetime
    actor_id: int | None
    actor_label: str
    action: str
    target_type: str
    target_id: str
    details: dict[str, Any]
