"""Accounts, roles, API tokens and the append-only audit log."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column, relationship

from proctor.core.db.models.base import Base, created_at_column
from proctor.core.db.types import JSONType, UTCDateTime, enum_column
from proctor.core.domain import Role


def new_session_nonce() -> str:
    return secrets.token_hex(16)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(sa.String(64), unique=True)
    display_name: Mapped[str] = mapped_column(sa.String(128), default="")
    email: Mapped[str | None] = mapped_column(sa.String(256))
    # argon2 hash; None for accounts that only use API tokens
    password_hash: Mapped[str | None] = mapped_column(sa.String(256))
    is_active: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = created_at_column()
    # random, part of every page session's mark: a new one (sign-out, password
    # change, deactivation) ends every session opened before it
    session_nonce: Mapped[str] = mapped_column(sa.String(32), default=new_session_nonce)

    roles: Mapped[list[UserRole]] = relationship(
        back_populates="user", cascade="all, delete-orphan", lazy="selectin"
    )
    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user")

    def has_role(self, role: Role) -> bool:
        return any(r.role == role for r in self.roles)


class UserRole(Base):
    __tablename__ = "user_roles"

    user_id: Mapped[int] = mapped_column(
        sa.ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    role: Mapped[Role] = mapped_column(enum_column(Role, "role"), primary_key=True)

    user: Mapped[User] = relationship(back_populates="roles")


class ApiToken(Base):
    """A script's credential. Only a hash is stored; the token is shown once."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(sa.String(128))
    # first characters of the token, so a user can tell their tokens apart
    prefix: Mapped[str] = mapped_column(sa.String(16))
    token_hash: Mapped[str] = mapped_column(sa.String(128), unique=True)
    scopes: Mapped[list[str]] = mapped_column(JSONType, default=list)
    created_at: Mapped[datetime] = created_at_column()
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    user: Mapped[User] = relationship(back_populates="tokens")


class AuditLog(Base):
    """Who did what, when. Append-only: rows are never updated or deleted
    (enforced by the ORM guard in ``proctor.core.db.append_only`` and by database
    triggers created in the migration)."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(primary_key=True)
    at: Mapped[datetime] = created_at_column()
    actor_id: Mapped[int | None] = mapped_column(sa.ForeignKey("users.id"))
    # "system", "cli", a station name: who acted when no user did
    actor_label: Mapped[str] = mapped_column(sa.String(128), default="")
    action: Mapped[str] = mapped_column(sa.String(64), index=True)
    target_type: Mapped[str] = mapped_column(sa.String(64), default="")
    target_id: Mapped[str] = mapped_column(sa.String(64), default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
