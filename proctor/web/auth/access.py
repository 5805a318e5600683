"""Access checks for resources that belong to someone (a policy, a
submission, a token): the owner may see them, and so may the roles a route
names as privileged (by default: admins). Everyone else gets a 404, not a
403, so that nobody can learn which ids exist by probing.

Use ``check_owner_access`` when you hold one row, ``owner_filter`` to narrow
a query to what the caller may see.
"""

from __future__ import annotations

from collections.abc import Iterable

import sqlalchemy as sa

from proctor.core.domain import Role
from proctor.core.errors import NotFound
from proctor.web.auth.identity import Principal

DEFAULT_PRIVILEGED: tuple[Role, ...] = (Role.admin,)


def can_access(
    principal: Principal | None,
    owner_id: int | None,
    *,
    privileged: Iterable[Role] = DEFAULT_PRIVILEGED,
) -> bool:
    if principal is None:
        return False
    if owner_id is not None and principal.id == owner_id:
        return True
    return principal.has_role(*privileged)


def check_owner_access(
    principal: Principal | None,
    owner_id: int | None,
    *,
    what: str = "resource",
    privileged: Iterable[Role] = DEFAULT_PRIVILEGED,
) -> None:
    """Raise 404 "<what> not found" unless ``principal`` owns the resource or
    holds one of the ``privileged`` roles. Call it after loading the row and
    before using it; a missing row should raise the same 404."""
    if not can_access(principal, owner_id, privileged=privileged):
        raise NotFound(f"{what} not found")


def owner_filter(
    principal: Principal | None,
    owner_column: sa.ColumnElement[int | None] | sa.orm.InstrumentedAttribute[int | None],
    *,
    privileged: Iterable[Role] = DEFAULT_PRIVILEGED,
) -> sa.ColumnElement[bool]:
    """A WHERE clause keeping only rows the caller may see."""
    if principal is None:
        return sa.false()
    if principal.has_role(*privileged):
        return sa.true()
    return owner_column == principal.id
