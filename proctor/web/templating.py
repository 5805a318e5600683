"""Jinja2 templates: the shared layout in ``proctor/web/templates/`` and each
domain's own templates in ``proctor/web/<domain>/templates/``, addressed as
``"<domain>/<file>.html"`` (``"accounts/login.html"`` is
``proctor/web/accounts/templates/login.html``).

Render pages with ``render(request, name, context)``: it adds what the
layout needs (the signed-in principal, the navigation, flash messages, a
``csrf_token()`` function for forms, ``static_url()``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jinja2
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from proctor.web.auth.sessions import SCOPE_KEY, SessionState
from proctor.web.nav import nav_for

WEB_DIR = Path(__file__).resolve().parent
SHARED_TEMPLATES = WEB_DIR / "templates"
SHARED_STATIC = WEB_DIR / "static"


def make_templates(domain_dirs: Mapping[str, Path], static_version: str) -> Jinja2Templates:
    loaders: list[jinja2.BaseLoader] = [jinja2.FileSystemLoader(SHARED_TEMPLATES)]
    prefixed = {
        name: jinja2.FileSystemLoader(path / "templates")
        for name, path in domain_dirs.items()
        if (path / "templates").is_dir()
    }
    if prefixed:
        loaders.append(jinja2.PrefixLoader(prefixed))
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(loaders),
        autoescape=jinja2.select_autoescape(["html", "xml"], default_for_string=True),
        # a misspelt variable is an error in tests, not an empty string in production
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )

    def static_url(path: str) -> str:
        return f"/static/{path.lstrip('/')}?v={static_version}"

    env.globals["static_url"] = static_url
    return Jinja2Templates(env=env)


def compile_all(templates: Jinja2Templates) -> list[str]:
    """Compile every page template now (Jinja compiles on first use, and the
    first visitor of each page would otherwise wait for it: 0.3 s for all of
    them here). A template with a syntax error fails here, at start-up."""
    env = templates.env
    names = [n for n in env.list_templates() if n.endswith(".html")]
    for name in names:
        env.get_template(name)
    return names


def static_fingerprint(dirs: Iterable[Path]) -> str:
    """Changes whenever a static file does, so browsers fetch the new one."""
    h = hashlib.sha256()
    for d in dirs:
        for path in sorted(p for p in d.rglob("*") if p.is_file()):
            stat = path.stat()
            h.update(f"{path}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return h.hexdigest()[:10]


def render(
    request: Request,
    name: str,
    context: Mapping[str, Any] | None = None,
    *,
    status_code: int = 200,
    headers: Mapping[str, str] | None = None,
) -> HTMLResponse:
    templates: Jinja2Templates = request.app.state.web.templates
    principal = getattr(request.state, "principal", None)
    session = request.scope.get(SCOPE_KEY)
    flashes = session.pop_flashes() if isinstance(session, SessionState) else []

    def csrf_token() -> str:
        # created on first use: pages without forms set no cookie
        return session.csrf_token if isinstance(session, SessionState) else ""

    served: frozenset[str] = request.app.state.web.served_paths

    def serves(path: str) -> bool:
        # a console-only host serves a few pages: link to no other
        return path in served

    base: dict[str, Any] = {
        "principal": principal,
        "nav": [item for item in nav_for(principal) if serves(item.path)],
        "serves": serves,
        "current_path": request.url.path,
        "flashes": flashes,
        "csrf_token": csrf_token,
        "env": request.app.state.web.settings.env,
    }
    return templates.TemplateResponse(
        request, name, {**base, **(context or {})}, status_code=status_code, headers=headers
    )
