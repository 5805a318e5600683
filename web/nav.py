"""The navigation shell: one list, filtered by the caller's roles.

An entry for a page that another issue will build points at a placeholder
page (``web.placeholders``) that says which issue fills it, until a real
route takes over the same path.
"""

from __future__ import annotations

from dataclasses import dataclass

from proctor.domain import Role
from web.auth.identity import Principal


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
