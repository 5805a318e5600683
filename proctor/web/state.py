"""What one app instance holds: built by ``create_app`` and kept on
``app.state.web``; routes reach it through the dependencies in ``proctor.web.deps``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from fastapi.templating import Jinja2Templates
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from proctor.core.artifacts import ArtifactStore
from proctor.core.db.engine import ProctorSession
from proctor.core.settings import Settings
from proctor.web.auth.passwords import Passwords
from proctor.web.auth.throttle import ThrottlePolicy

Clock = Callable[[], datetime]


@dataclass
class AppState:
    settings: Settings
    engine: Engine
    # /api/health's: no pool, so it never waits behind the requests (proctor.web.limits)
    health_engine: Engine
    session_factory: sessionmaker[ProctorSession]
    store: ArtifactStore
    templates: Jinja2Templates
    passwords: Passwords
    secret_key: str
    clock: Clock
    throttle: ThrottlePolicy
    static_version: str
