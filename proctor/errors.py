"""Errors a user can act on. The CLI prints them as one line, never a traceback."""

from __future__ import annotations


class ProctorError(Exception):
    """A failure with a message meant for the person at the keyboard."""

    exit_code = 1


class UsageError(ProctorError):
    """Bad input: a file, a field, an argument. Exit code 2, nothing written."""

    exit_code = 2


class ConfigError(ProctorError):
    exit_code = 2


class NotAvailableYet(ProctorError):
    """A command whose service has not landed yet, said plainly."""

    exit_code = 3


class AppendOnlyViolation(ProctorError):
    """An attempt to change or delete an append-only row."""


class IntegrityError(ProctorError):
    """Stored data failed a check (e.g. an artifact's sha256 on read)."""
