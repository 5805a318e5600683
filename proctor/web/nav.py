"""The navigation shell: one list, filtered by the caller's roles.

Every entry points at a page a real route serves
(``tests/web/test_pages.py`` follows each link).
"""

from __future__ import annotations

from dataclasses import dataclass

from proctor.core.domain import Role
from proctor.web.auth.identity import Principal


@dataclass(frozen=True)
class NavItem:
    label: str
    path: str
    # None: everyone, signed in or not; () : anyone signed in; else any of these roles
    roles: tuple[Role, ...] | None = None


NAV: tuple[NavItem, ...] = (
    NavItem("Leaderboard", "/leaderboard"),
    NavItem("My policies", "/submit", (Role.submitter,)),
    NavItem("Operator console", "/console", (Role.operator,)),
    NavItem("Review", "/review", (Role.reviewer,)),
    NavItem("Campaigns", "/campaigns", (Role.admin,)),
    NavItem("Users", "/admin/users", (Role.admin,)),
    NavItem("Runners", "/admin/runners", (Role.admin,)),
    NavItem("API", "/api/docs"),
)


def nav_for(principal: Principal | None) -> list[NavItem]:
    def visible(item: NavItem) -> bool:
        if item.roles is None:
            return True
        if principal is None:
            return False
        return not item.roles or principal.has_role(*item.roles)

    return [item for item in NAV if visible(item)]
