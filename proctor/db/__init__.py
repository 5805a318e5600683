"""Database: engine, sessions, schema (``proctor.db.models``), migrations."""

from proctor.db.engine import ProctorSession, make_engine, make_session_factory, session_scope

__all__ = ["ProctorSession", "make_engine", "make_session_factory", "session_scope"]
