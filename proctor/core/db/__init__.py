"""Database: engine, sessions, schema (``proctor.core.db.models``), migrations."""

from proctor.core.db.engine import ProctorSession, make_engine, make_session_factory, session_scope

__all__ = ["ProctorSession", "make_engine", "make_session_factory", "session_scope"]
