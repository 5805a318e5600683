"""The station host's local API key: the secret the operator console and the
station daemon share, so that only they (and nothing else on the host, nor a
web page in its browser) drive the arm through the daemon's loopback API.

One file per host (``settings.station_key_file``, default
``<data dir>/station-api.key``), which both services read through the same
setting. The daemon makes it on start when it is absent; both refuse it unless
it is a regular file owned by the account reading it with no permission for
group or others (mode 0600): a key others can read proves nothing. The key is
never logged and never put in a message: only the file's path is.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path

from proctor.core.errors import ConfigError

# the request header that carries the key (the daemon's API refuses a request without it)
HEADER = "X-Proctor-Station-Key"
# fewer characters than this is not a key worth the name (token_urlsafe(32) gives 43)
MIN_LENGTH = 32
# the largest file read as a key: anything bigger is not one of ours
_MAX_BYTES = 4096


class KeyFileMissing(ConfigError):
    """No key file yet: the daemon has not started on this host."""


def ensure_station_key(path: Path) -> str:
    """The key in ``path``, made first (``secrets.token_urlsafe``, mode 0600)
    when the file does not exist: the daemon's start."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass  # made before (or by a racing start): read and check it like any other
    else:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return read_station_key(path)


def read_station_key(path: Path) -> str:
    """The key in ``path``, after checking that only this account can read it."""
    where = f"station key file {path}"
    try:
        # O_NOFOLLOW: a link planted in the key's place is refused, not followed
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise KeyFileMissing(
            f"{where}: not found (the station daemon, `proctor station run`, makes it on start)"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{where}: not a regular file")
        if info.st_uid != os.getuid():
            raise ConfigError(
                f"{where}: owned by uid {info.st_uid}, not by this account (uid {os.getuid()}); "
                "the console and the daemon must run as the account that owns it"
            )
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise ConfigError(
                f"{where}: mode {mode:04o} lets others read it; it must be 0600 (chmod 600)"
            )
        raw = f.read(_MAX_BYTES + 1)
    try:
        key = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{where}: not a key (expected printable ASCII)") from None
    if len(raw) > _MAX_BYTES or len(key) < MIN_LENGTH or not key.isprintable() or " " in key:
        raise ConfigError(
            f"{where}: not a key (expected one line of {MIN_LENGTH} to {_MAX_BYTES} "
            "printable characters)"
        )
    return key


def key_matches(given: str | None, key: str) -> bool:
    """Whether ``given`` is ``key``, in time that does not depend on where they differ."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8"), key.encode("ascii"))
