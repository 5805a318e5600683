"""Errors a user can act on. The CLI prints them as one line, never a traceback.

Each class says how it is answered over HTTP (``http_status``) and, for bad
input, which field was wrong (``field``, an attribute: never parsed back out
of the message). The web app (``proctor/web/errors.py``) and the station API
(``proctor/station/console_api.py``) both answer through ``http_answer``, so a service raises
``NotFound``/``Forbidden``/``Conflict``/``FieldError`` and never maps
exceptions to statuses itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field


class ProctorError(Exception):
    """A failure with a message meant for the person at the keyboard."""

    exit_code = 1
    # a refused request, unless a subclass says otherwise
    http_status = 400
    # what HTTP clients are told instead of the message, when the message
    # names more than they may learn (e.g. which campaign names exist)
    http_detail: str | None = None
    # the input field that was wrong, for the subclasses that know it
    field: str | None = None

    def http_headers(self) -> dict[str, str]:
        """Headers the answer carries (e.g. ``Retry-After``)."""
        return {}

    def field_message(self) -> str:
        """What is wrong with ``field``, without the field's name in front."""
        return str(self)


class UsageError(ProctorError):
    """Bad input: a file, a field, an argument. Exit code 2, nothing written."""

    exit_code = 2
    http_status = 422


class NamesField(ProctorError):
    """An error about one named field: the message reads ``"<field>: <message>"``,
    as every other usage error does, and ``field`` names it for HTTP answers."""

    field: str  # always named here

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    def field_message(self) -> str:
        return self.message


class FieldError(NamesField, UsageError):
    """Bad input in one named field (422)."""


class NotFound(ProctorError):
    """No such thing, or none the caller may see (404)."""

    exit_code = 2
    http_status = 404


class Forbidden(ProctorError):
    """The caller is known but may not do this (403)."""

    exit_code = 2
    http_status = 403


class Conflict(UsageError):
    """The request clashes with what is stored (409): a taken name, the last
    admin, a state that does not allow it."""

    http_status = 409


class FieldForbidden(NamesField, Forbidden):
    """403 naming the field whose value the caller may not use (another
    station's run, episode or upload)."""


class FieldNotFound(NamesField, NotFound):
    """404 naming the field whose value matched nothing."""


class FieldConflict(NamesField, Conflict):
    """409 naming the field whose value clashes with what is stored."""


class ConfigError(ProctorError):
    exit_code = 2


class RateLimited(ProctorError):
    """Too many of something in a window: 429 with ``Retry-After``, the
    message naming what was limited and the setting that limits it."""

    http_status = 429

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, retry_after_s)

    def http_headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_s)}


class NotAvailableYet(ProctorError):
    """A command whose service has not landed yet, said plainly."""

    exit_code = 3
    http_status = 501


class AppendOnlyViolation(ProctorError):
    """An attempt to change or delete an append-only row."""

    http_status = 409


class IntegrityError(ProctorError):
    """Stored data failed a check (e.g. an artifact's sha256 on read)."""

    http_status = 500


@dataclass(frozen=True)
class HttpAnswer:
    """How one ``ProctorError`` is answered over HTTP: read from the
    exception's attributes, the same for every app that serves it."""

    status: int
    detail: str
    field: str | None = None
    # the message without the field's name in front (for bad input)
    field_message: str = ""
    headers: dict[str, str] = dc_field(default_factory=dict)


def http_answer(exc: ProctorError) -> HttpAnswer:
    return HttpAnswer(
        status=exc.http_status,
        detail=exc.http_detail if exc.http_detail is not None else str(exc),
        field=exc.field,
        field_message=exc.field_message(),
        headers=exc.http_headers(),
    )
