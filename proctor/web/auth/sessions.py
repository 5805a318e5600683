"""The signed session cookie that keeps a person signed in to the pages.

The cookie holds a small JSON document signed with the app's secret key
(itsdangerous, HMAC-SHA1 over a key derived with a salt): who signed in,
when, when they were last seen, a CSRF token, a mark, and flash messages.
It is signed, not encrypted: nothing secret goes in it.

The mark is a keyed digest of the user's password hash and their random
``session_nonce``: a session whose mark no longer matches the user row is
over. So sessions are revocable on the server without a session table (the
user row is read anyway to resolve the signed-in user): signing out,
changing the password and deactivation give the user a new nonce, which
ends *every* page session of that user (all devices). An account without a
password has no mark and never gets a page session: knowing the signing key
alone is not enough to forge one.

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
import math
import os
import secrets
from collections import Counter
from pathlib import Path
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.datastructures import MutableHeaders
from starlette.requests import cookie_parser
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proctor.core.db.models import User
from proctor.core.errors import ConfigError
from proctor.core.settings import Settings

log = logging.getLogger(__name__)

SESSION_COOKIE = "proctor_session"
# over HTTPS (secure cookies: prod by default) the cookie is named with the
# __Host- prefix: browsers then accept it only with Secure, Path=/ and no
# Domain, so neither plain HTTP nor a sibling subdomain can plant or shadow it
HOST_SESSION_COOKIE = "__Host-" + SESSION_COOKIE
SESSION_COOKIE_NAMES = (SESSION_COOKIE, HOST_SESSION_COOKIE)
SCOPE_KEY = "proctor.session"
# a signed-in session's "last seen" is rewritten at most this often, so that
# not every response carries a Set-Cookie
TOUCH_INTERVAL_S = 60
MAX_FLASHES = 5

# Used only when PROCTOR_SECRET_KEY is unset and PROCTOR_ENV is dev or test.
# Anyone who reads this file can forge sessions signed with it.
DEV_SECRET_KEY = "proctor-dev-only-secret-key-never-use-in-production"
MIN_SECRET_KEY_LENGTH = 32
# Production also refuses keys that are long but guessable ("a" * 32, spaces,
# "abab…", "Passw0rd!" four times, with or without a tail): it wants at least
# this many distinct characters and this many bits by ``estimated_key_bits``,
# which reads a repeated stretch as a copy (a key that repeats a word is worth
# about one copy of it) and counts the rest by the smaller of their Shannon
# entropy and their character classes' alphabet (lower case, upper case,
# digits, the rest). A random 32-character hex key (secrets.token_hex(16))
# scores about 115 bits and 14 distinct characters (in 200,000 draws never
# under 89 bits or 9 characters); the suggested token_urlsafe(48) about 350.
MIN_SECRET_KEY_DISTINCT = 8
MIN_SECRET_KEY_BITS = 80
# character classes and how many characters each holds (printable ASCII;
# anything else counts as the last, which makes the estimate a low one)
_CHARACTER_CLASSES: tuple[tuple[str, int], ...] = (
    ("abcdefghijklmnopqrstuvwxyz", 26),
    ("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 26),
    ("0123456789", 10),
)
_OTHER_CHARACTERS = 33
# a stretch this long seen before is a copy, not new characters
_MIN_COPY = 3
# `proctor demo` keeps its own random key here, in its data folder
DATA_DIR_KEY_FILE = "secret_key"


def literals_and_copies(key: str) -> tuple[str, int]:
    """The key read left to right as a compressor would (greedy LZ77): each
    stretch of at least ``_MIN_COPY`` characters that already occurred (it may
    overlap itself, as in "abab…") is a copy; the rest are literals."""
    literals: list[str] = []
    copies, i, n = 0, 0, len(key)
    while i < n:
        longest = 0
        for j in range(i):
            k = 0
            while i + k < n and key[j + k] == key[i + k]:
                k += 1
            longest = max(longest, k)
        if longest >= _MIN_COPY:
            copies, i = copies + 1, i + longest
        else:
            literals.append(key[i])
            i += 1
    return "".join(literals), copies


def estimated_key_bits(key: str) -> float:
    """A rough upper bound on the key's randomness, enough to catch patterns:
    its literals (``literals_and_copies``) at the smaller of the Shannon
    entropy of their character frequencies and log2 of their character
    classes' alphabet, each, plus an offset and a length for each copy."""
    literals, copies = literals_and_copies(key)
    n = len(literals)
    if not n:
        return 0.0
    shannon = -n * sum(c / n * math.log2(c / n) for c in Counter(literals).values())
    alphabet = sum(size for chars, size in _CHARACTER_CLASSES if any(c in chars for c in literals))
    if any(not any(c in chars for chars, _ in _CHARACTER_CLASSES) for c in literals):
        alphabet += _OTHER_CHARACTERS
    return min(shannon, n * math.log2(alphabet)) + copies * 2 * math.log2(len(key))


def resolve_secret_key(settings: Settings) -> str:
    """The key that signs session cookies. Production refuses a missing,
    short, low-entropy or default key; dev and test use the data folder's own
    key when it has one (``data_dir_secret_key``), else fall back to a
    published default and say so loudly."""
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
        distinct = len(set(key))
        bits = estimated_key_bits(key)
        if distinct < MIN_SECRET_KEY_DISTINCT or bits < MIN_SECRET_KEY_BITS:
            raise ConfigError(
                f"PROCTOR_SECRET_KEY looks guessable ({distinct} distinct characters, about "
                f"{bits:.0f} bits); use at least {MIN_SECRET_KEY_DISTINCT} distinct characters "
                f"and {MIN_SECRET_KEY_BITS} bits, e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(48))'`"
            )
        return key
    if not key and (settings.data_dir / DATA_DIR_KEY_FILE).exists():
        # a data folder that made its own key (`proctor demo` does) keeps signing
        # with it when served again: its sessions stay valid, and are never signed
        # with the published key
        log.info("signing sessions with the data folder's own key (%s)", DATA_DIR_KEY_FILE)
        return data_dir_secret_key(settings.data_dir)
    if not key:
        log.warning(
            "!!! PROCTOR_SECRET_KEY is not set: signing sessions with the published "
            "development key (PROCTOR_ENV=%s). Anyone can forge a session. "
            "Never expose this server; production refuses to start like this. !!!",
            settings.env,
        )
        return DEV_SECRET_KEY
    return key


def data_dir_secret_key(data_dir: Path) -> str:
    """A random signing key kept in ``data_dir`` (mode 0600): made on first
    use, read back after. For `proctor demo`, whose data folder is its own
    small deployment: its sessions must not be signed with the published key."""
    path = data_dir / DATA_DIR_KEY_FILE
    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        # O_EXCL: two demos starting at once agree on one key
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text(encoding="ascii").strip()
        if len(key) < MIN_SECRET_KEY_LENGTH:
            raise ConfigError(
                f"{path}: the stored session key is shorter than {MIN_SECRET_KEY_LENGTH} "
                "characters; delete the file to make a new one"
            ) from None
        return key
    key = secrets.token_urlsafe(48)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(key + "\n")
    return key


def session_mark(secret: str, user: User) -> str | None:
    """A short keyed digest of the user's password hash and session nonce; a
    session whose mark no longer matches was opened before the password
    changed or before the user's sessions were ended. None for an account
    without a password: it signs in with API tokens only, never to pages."""
    if not user.password_hash or not user.session_nonce:
        return None
    material = f"{user.password_hash}\x00{user.session_nonce}".encode()
    return hmac.new(secret.encode(), material, hashlib.sha256).hexdigest()[:32]


def marks_match(expected: str | None, presented: str | None) -> bool:
    if expected is None or presented is None:
        return False
    return hmac.compare_digest(expected.encode(), presented.encode())


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
        self.cookie_name = HOST_SESSION_COOKIE if secure else SESSION_COOKIE
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
        state = self.decode(_read_cookie(scope, self.cookie_name))
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
            return f"{self.cookie_name}=; Max-Age=0{attrs}"
        return f"{self.cookie_name}={self.encode(state)}; Max-Age={self.max_age_s}{attrs}"


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
