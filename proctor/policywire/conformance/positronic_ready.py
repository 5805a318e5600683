"""Whether a Positronic model server is ready, before the conformance check
opens a session: ``POST /api/v1/keepalive``.

positronic-model-server (≥ 0.3) answers the call only once its model is
loaded and warm (its listeners bind after loading), with
``{"alive_seconds": <int> | null}``; it answers 401 without its bearer token.
A server behind a proxy, or one of the field's own, may answer 503 while it
loads: the check waits through that, up to the load limit. A server without
the call (404: ``positronic.offboard``'s v1 servers) is ready when its
session handshake says so, and is not held to it.
"""

from __future__ import annotations

import http.client
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from proctor.core.netguard import http_get
from proctor.policywire.conformance.state import Status
from proctor.policywire.dialects import positronic_frames as positronic

if TYPE_CHECKING:
    from proctor.policywire.conformance.state import CheckState

TITLE = "Readiness (POST /api/v1/keepalive)"
POLL_S = 0.25  # between two calls while the server says it is not ready
MAX_BODY = 16 * 1024
# answers that say "not yet": the server (or the proxy in front of it) is up, the model is not
NOT_READY = frozenset({502, 503, 504})


@dataclass
class _Waiting:
    """What the calls so far said, for the finding."""

    calls: int = 0
    not_ready: int = 0
    last: str = "nothing answered"


def check_ready(check: CheckState) -> bool:
    """Call the keepalive until the server is ready; a finding says how it went.
    False: the check stops here (the finding says why)."""
    o = check.options
    url = positronic.keepalive_url(check.url)
    started = time.monotonic()
    waiting = _Waiting()
    while True:
        check.progress(
            "waiting for your server to be ready (POST /api/v1/keepalive"
            + (f", {waiting.calls} calls so far)" if waiting.calls else ")")
        )
        waiting.calls += 1
        waited = time.monotonic() - started
        try:
            answer = http_get(
                url,
                pinned=o.pinned,
                headers=dict(o.headers),
                timeout_s=o.connect_timeout_s,
                max_bytes=MAX_BODY,
                method="POST",
            )
        except (OSError, http.client.HTTPException) as exc:
            waiting.last = f"no answer ({type(exc).__name__})"
            # a model server binds only once loaded, but an address nothing listens
            # on looks the same: waited for as long as a connection may take, then
            # the WebSocket handshake says what is wrong
            if waited >= o.connect_timeout_s:
                return _unanswered(check, waiting)
        else:
            done = _judged(check, answer.status, answer.body, waiting, waited)
            if done is not None:
                return done
            if waited >= o.load_timeout_s:
                return _not_ready(check, waiting, o.load_timeout_s)
        time.sleep(POLL_S)


def _judged(
    check: CheckState, status: int, body: bytes, waiting: _Waiting, waited: float
) -> bool | None:
    """One answer judged: True / False (a finding made), or None (not ready yet)."""
    if status in NOT_READY:
        waiting.not_ready += 1
        waiting.last = f"HTTP {status}"
        return None
    if not check.options.connect_detail and not (status == 200 and positronic.alive_answer(body)):
        # where a failed connection may not say why (CheckOptions.connect_detail), the
        # keepalive's answer may not either: the handshake's neutral finding follows
        return True
    if status in (401, 403):
        return _refused(check, status)
    if status in (404, 405):
        check.add(
            "readiness",
            TITLE,
            Status.passed,
            f"Your server has no keepalive call (HTTP {status}): the station waits for "
            "'ready' in the session handshake instead, as Positronic's v1 servers have it.",
            http_status=status,
        )
        return True
    if status == 200 and positronic.alive_answer(body):
        check.add(
            "readiness",
            TITLE,
            Status.passed,
            f"Your server answered ready after {waited:.1f} s"
            + (
                f", having said it was not ready {waiting.not_ready} time(s) first."
                if waiting.not_ready
                else "."
            ),
            waited_s=round(waited, 3),
            not_ready_answers=waiting.not_ready,
        )
        return True
    check.add(
        "readiness",
        TITLE,
        Status.warning,
        f"POST /api/v1/keepalive answered HTTP {status}"
        + (" without {'alive_seconds': …}" if status == 200 else "")
        + ". positronic-model-server answers {'alive_seconds': <seconds or null>} once its "
        "model is loaded; the station goes on to the session handshake.",
        http_status=status,
    )
    return True


def _refused(check: CheckState, status: int) -> bool:
    sent = next((v for k, v in check.options.headers.items() if k.lower() == "authorization"), None)
    if sent is None:
        why = "no key is registered with the endpoint"
    elif not sent.startswith("Bearer "):
        why = "the key registered with the endpoint is not sent as a bearer token"
    else:
        why = "it refused the key registered with the endpoint"
    check.add(
        "readiness",
        TITLE,
        Status.failed,
        f"Your server refused POST /api/v1/keepalive with HTTP {status}: it wants a bearer "
        f"token, and {why}. Register the endpoint with the token your server was started "
        "with (its auth_token); the station sends it as 'Authorization: Bearer <key>', as "
        "Positronic's client does, on the keepalive and the session alike.",
        http_status=status,
    )
    return False


def _not_ready(check: CheckState, waiting: _Waiting, limit_s: float) -> bool:
    check.add(
        "readiness",
        TITLE,
        Status.failed,
        f"Your server was not ready within {limit_s:g} s: POST /api/v1/keepalive answered "
        + (
            f"{waiting.last} {waiting.not_ready} time(s)"
            if check.options.connect_detail
            else "that it was not ready"
        )
        + ". Load the model before the check "
        "(positronic-model-server binds its listeners only once loaded), or answer 200 "
        "{'alive_seconds': …} once it is warm.",
        calls=waiting.calls,
        not_ready_answers=waiting.not_ready,
    )
    return False


def _unanswered(check: CheckState, waiting: _Waiting) -> bool:
    """Nothing answered the keepalive: not a finding of its own. The session
    handshake comes next and says what is wrong (in the words the check may use)."""
    if waiting.not_ready:  # it had answered "not yet", then went away
        return _not_ready(check, waiting, check.options.load_timeout_s)
    return True
