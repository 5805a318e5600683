"""Password hashing with argon2id (argon2-cffi).

Production uses RFC 9106's second recommended profile (argon2id, t=3,
m=64 MiB, p=4: ~0.13 s a hash on the 2-core reference machine). The test
environment uses the library's cheapest parameters so that the suite can
create hundreds of accounts; the algorithm and code path are the same, and a
hash made with other parameters is upgraded on the next successful sign-in.

Each hash costs 64 MiB and ~0.13 s of CPU, so one process computes at most
``web.max_concurrent_hashes`` at once; a caller that waits longer than
``web.hash_wait_s`` for a slot gets ``PasswordsBusy`` (the sign-in page
answers 503 with Retry-After) rather than piling up memory.
"""

from __future__ import annotations

import threading

from argon2 import PasswordHasher as _Argon2Hasher
from argon2 import profiles
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from proctor.core.errors import ProctorError
from proctor.core.settings import Settings

MIN_PASSWORD_LENGTH = 10
MAX_PASSWORD_LENGTH = 1024


class PasswordsBusy(ProctorError):
    """Every hashing slot stayed taken for the whole wait."""

    retry_after_s = 5
    http_status = 503  # a flood of sign-ins: come back shortly

    def __init__(self) -> None:
        super().__init__("the server is busy checking passwords; try again in a few seconds")

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class Passwords:
    """Hash and verify passwords; one instance per app or CLI command."""

    def __init__(
        self, *, cheap: bool = False, max_concurrent: int = 4, wait_s: float = 5.0
    ) -> None:
        params = profiles.CHEAPEST if cheap else profiles.RFC_9106_LOW_MEMORY
        self._hasher = _Argon2Hasher.from_parameters(params)
        self._slots = threading.BoundedSemaphore(max_concurrent)
        self._wait_s = wait_s
        # verified against when the username is unknown, so that a wrong
        # username takes as long as a wrong password
        self._dummy_hash = self._hasher.hash("proctor: no such account")

    @classmethod
    def for_settings(cls, settings: Settings) -> Passwords:
        return cls(
            cheap=settings.env == "test",
            max_concurrent=settings.web.max_concurrent_hashes,
            wait_s=settings.web.hash_wait_s,
        )

    def _slot(self) -> None:
        if not self._slots.acquire(timeout=self._wait_s):
            raise PasswordsBusy()

    def hash(self, password: str) -> str:
        self._slot()
        try:
            return self._hasher.hash(password)
        finally:
            self._slots.release()

    def verify(self, password_hash: str | None, password: str) -> bool:
        self._slot()
        try:
            matched = self._hasher.verify(password_hash or self._dummy_hash, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            matched = False
        finally:
            self._slots.release()
        return matched and password_hash is not None

    def burn(self, password: str) -> None:
        """Spend the time a verification takes, for an unknown account."""
        self.verify(None, password)

    def needs_rehash(self, password_hash: str) -> bool:
        try:
            return self._hasher.check_needs_rehash(password_hash)
        except InvalidHashError:
            return True


def password_problem(password: str, *, username: str = "") -> str | None:
    """Why a new password is refused, or None. Length is what matters
    (NIST SP 800-63B §5.1.1.2): no composition rules."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"must be at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"must be at most {MAX_PASSWORD_LENGTH} characters"
    if username and password.strip().lower() == username.lower():
        return "must not be the username"
    if "\x00" in password:
        return "must not contain NUL characters"
    return None
