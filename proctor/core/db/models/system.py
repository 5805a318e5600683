"""Bookkeeping the server's processes share through the database."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from proctor.core.db.models.base import Base


class CacheGeneration(Base):
    """One row (id 1) whose ``value`` goes up in the same transaction as every
    write made through a ``ProctorSession`` (``proctor.core.db.generation``): the
    web processes compare it with the value their caches were filled at, so
    a write from any process (another server worker, the CLI, a station) is
    seen by all of them."""

    __tablename__ = "cache_generation"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    value: Mapped[int] = mapped_column(sa.BigInteger(), nullable=False, default=0)
