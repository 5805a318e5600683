"""The signed session cookie that keeps a person signed in to the pages.

The cookie holds a small JSON document signed with the app's secret key
(itsdangerous, HMAC-SHA1 over a key derived with a salt): who signed in,
when, when they were last seen, a CSRF token, a mark of their password hash
(changing the password ends every other session), and flash messages. It is
signed, not encrypted: nothing secret goes in it.

Expiry is checked by the code that resolves the signed-in user, against the
app's clock (idle timeout and absolute lifetime, ``WebSettings``); this
module only reads and writes the cookie. Starlette's own SessionMiddleware is
not used because its expiry is one sliding max-age with no absolute
lifetime, and it reads the wall clock.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.datastructures import MutableHeaders
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.errors import ConfigError
from proctor.settings import Settings

log = logging.getLogger(__name__)

SESSION_COOKIE = "proctor_session"
SCOPE_KEY = "proctor.session"
# a signed-in session's "last seen" is rewritten at most this often, so that
# not every response carries a Set-Cookie
TOUCH_INTERVAL_S = 60
MAX_FLASHES = 5

# Used only when PROCTOR_SECRET_KEY is unset and PROCTOR_ENV is dev or test.
# Anyone who reads this file can forge sessions signed with it.
DEV_SECRET_KEY = "proctor-dev-only-secret-key-never-use-in-production"
MIN_SECRET_KEY_LENGTH = 32


def resolve_secret_key(settings: Settings) -> str:
    """The key that signs session cookies. Production refuses a missing,
    short or default key; dev and test fall back to a published default and
    say so loudly."""
    key = settings.secret_key.get_secret_value() if settings.secret_key else None
    if settings.env == "prod":
        if not key:
            raise ConfigError("PROCTOR_SECRET_KEY must be set when PROCTOR_ENV=prod")
        if key == DEV_SECRET_KEY:
            raise ConfigError(
                "PROCTOR_SECRET_KEY is the published development key; set a random one "
                "(`python -c 'import secrets; print(secrets.token_urlsafe(48))'`)"
            )
        if len(key) < MIN_SECRET_KEY_LENGTH:
            raise ConfigError(
                f"PROCTOR_SECRET_KEY is {len(key)} characters; use at least "
                f"{MIN_SECRET_KEY_LENGTH} random characters"
            )
        return key
    if not key:
        log.warning(
            "!!! PROCTOR_SECRET_KEY is not set: signing sessions with the published "
            "development key (PROCTOR_ENV=%s). Anyone can forge a session. "
            "Never expose this server; production refuses to start like this. !!!",
            settings.env,
        )
        return DEV_SECRET_KEY
    return key


def password_mark(secret: str, password_hash: str | None) -> str:
    """A short keyed digest of the password hash: a session whose mark no
    longer matches was opened before the password changed."""
    digest = hmac.new(secret.encode(), (password_hash or "").encode(), hashlib.sha256).hexdigest()
    return digest[:16]


class SessionState:
    """One request's view of its session cookie. Changes made here are
    written back on the response by ``SessionCookieMiddleware``."""

    def __init__(self, data: dict[str, Any] | None = None) -> None:
        data = data or {}
        self.user_id: int | None = _int_or_none(data.get("uid"))
        self.signed_in_at: float | None = _float_or_none(data.get("iat"))
        self.seen_at: float | None = _float_or_none(data.get("seen"))
        self.mark: str | None = data.get("pwm") if isinstance(data.get("pwm"), str) else None
        csrf = data.get("csrf")
        self._csrf: str | None = csrf if isinstance(csrf, str) and len(csrf) >= 32 else None
        flashes = data.get("flash")
        self._flashes: list[list[str]] = (
            [f for f in flashes if _is_flash(f)][:MAX_FLASHES] if isinstance(flashes, list) else []
        )
        self.modified = False

    # -- CSRF -------------------------------------------------------------
    @property
    def csrf_token(self) -> str:
        """The token forms must echo; created on first use."""
        if self._csrf is None:
            self._csrf = secrets.token_urlsafe(32)
            self.modified = True
        return self._csrf

    def csrf_matches(self, submitted: str | None) -> bool:
        if not submitted or self._csrf is None:
            return False
        return hmac.compare_digest(self._csrf.encode(), submitted.encode())

    # -- signing in and out -----------------------------------------------
    def sign_in(self, user_id: int, mark: str, now: float) -> None:
        """Start a fresh session: a new CSRF token, so nothing from before
        sign-in (a token planted by someone else) stays valid."""
        self.user_id = user_id
        self.mark = mark
        self.signed_in_at = now
        self.seen_at = now
        self._csrf = secrets.token_urlsafe(32)
        self.modified = True

    def sign_out(self) -> None:
        flashes = self._flashes
        self.__init__()  # type: ignore[misc]
        self._flashes = flashes
        self.modified = True

    def touch(self, now: float) -> None:
        if self.seen_at is None or now - self.seen_at >= TOUCH_INTERVAL_S:
            self.seen_at = now
            self.modified = True

    # -- flash messages (shown once, after a redirect) --------------------
    def flash(self, message: str, kind: str = "info") -> None:
        self._flashes = [*self._flashes, [kind, message]][-MAX_FLASHES:]
        self.modified = True

    def pop_flashes(self) -> list[tuple[str, str]]:
        out = [(k, m) for k, m in self._flashes]
        if out:
            self._flashes = []
            self.modified = True
        return out

    # -- encoding -----------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.user_id is not None:
            data |= {
                "uid": self.user_id,
                "iat": self.signed_in_at,
                "seen": self.seen_at,
                "pwm": self.mark,
            }
        if self._csrf is not None:
            data["csrf"] = self._csrf
        if self._flashes:
            data["flash"] = self._flashes
        return data


class SessionCookieMiddleware:
    """Decodes the session cookie into ``scope["proctor.session"]`` and writes
    it back (or deletes it) when the request changed it."""

    def __init__(self, app: ASGIApp, *, secret_key: str, secure: bool, max_age_s: int) -> None:
        self.app = app
        self.serializer = URLSafeSerializer(secret_key, salt="proctor.session")
        self.secure = secure
        self.max_age_s = max_age_s

    def decode(self, value: str | None) -> SessionState:
        if not value:
            return SessionState()
        try:
            data = self.serializer.loads(value)
        except BadSignature:
            return SessionState()
        return SessionState(data if isinstance(data, dict) else None)

    def encode(self, state: SessionState) -> str:
        return self.serializer.dumps(state.to_dict())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        state = self.decode(_read_cookie(scope, SESSION_COOKIE))
        scope[SCOPE_KEY] = state

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start" and state.modified:
                headers = MutableHeaders(scope=message)
                headers.append("set-cookie", self._set_cookie_header(state))
                # a response that sets a session cookie must never be cached
                headers["cache-control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _set_cookie_header(self, state: SessionState) -> str:
        data = state.to_dict()
        attrs = "; Path=/; HttpOnly; SameSite=Lax" + ("; Secure" if self.secure else "")
        if not data:
            return f"{SESSION_COOKIE}=; Max-Age=0{attrs}"
        return f"{SESSION_COOKIE}={self.encode(state)}; Max-Age={self.max_age_s}{attrs}"


def _read_cookie(scope: Scope, name: str) -> str | None:
    for key, value in scope.get("headers", []):
        if key == b"cookie":
            found = cookie_parser(value.decode("latin-1")).get(name)
            if found:
                return found
    return None


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _float_or_none(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _is_flash(f: Any) -> bool:
    return isinstance(f, list) and len(f) == 2 and all(isinstance(x, str) for x in f)
