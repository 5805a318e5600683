"""Migrations go up and down on both databases, and the migrated schema is
exactly what the ORM declares (no drift)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from proctor.core.db import migrate
from proctor.core.db.engine import make_engine
from proctor.core.db.models import Base


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names()) - {"alembic_version"}
    finally:
        engine.dispose()


def test_upgrade_to_head_then_down_to_base(fresh_db_url: str) -> None:
    assert _tables(fresh_db_url) == set()

    migrate.upgrade(fresh_db_url)
    assert migrate.current(fresh_db_url) == migrate.head()
    assert _tables(fresh_db_url) == set(Base.metadata.tables)

    migrate.downgrade(fresh_db_url, "base")
    assert migrate.current(fresh_db_url) is None
    assert _tables(fresh_db_url) == set()

    # and up again: downgrade left nothing behind that blocks a re-run
    migrate.upgrade(fresh_db_url)
    assert _tables(fresh_db_url) == set(Base.metadata.tables)


def test_migrated_schema_matches_orm_metadata(fresh_db_url: str) -> None:
    migrate.upgrade(fresh_db_url)
    engine = make_engine(fresh_db_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            diff = compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()
    assert diff == [], f"ORM and migrations disagree: {diff}"


def test_every_revision_steps_down_and_up(fresh_db_url: str) -> None:
    """Each migration's downgrade undoes exactly its upgrade."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(migrate.alembic_config(fresh_db_url))
    revisions = [r.revision for r in reversed(list(script.walk_revisions()))]
    for rev in revisions:
        migrate.upgrade(fresh_db_url, rev)
        before = _tables(fresh_db_url)
        migrate.downgrade(fresh_db_url, "-1")
        migrate.upgrade(fresh_db_url, rev)
        assert _tables(fresh_db_url) == before


def test_existing_users_get_a_random_session_nonce_each(fresh_db_url: str) -> None:
    """The session-nonce migration fills the new column for users that exist:
    a different random value each (a shared one would tie their sessions)."""
    migrate.upgrade(fresh_db_url, "b7e2c41a9f30")
    engine = make_engine(fresh_db_url)
    try:
        with engine.begin() as conn:
            for name in ("ada", "bob"):
                conn.execute(
                    sa.text(
                        "INSERT INTO users (username, display_name, is_active, created_at) "
                        "VALUES (:n, '', true, CURRENT_TIMESTAMP)"
                    ),
                    {"n": name},
                )
        migrate.upgrade(fresh_db_url)
        with engine.connect() as conn:
            nonces = [n for (n,) in conn.execute(sa.text("SELECT session_nonce FROM users"))]
    finally:
        engine.dispose()
    assert len(nonces) == 2 and len(set(nonces)) == 2
    assert all(isinstance(n, str) and len(n) == 32 for n in nonces)


def _envelope_columns(url: str) -> dict[str, dict]:
    engine = make_engine(url)
    try:
        cols = sa.inspect(engine).get_columns("episodes")
    finally:
        engine.dispose()
    return {c["name"]: c for c in cols if c["name"] == "envelope_interventions"}


def test_episodes_recorded_before_the_envelope_count_are_unknown_not_zero(
    fresh_db_url: str,
) -> None:
    """The envelope-interventions column comes in NULL for the episodes that
    exist (they were never counted), refuses a negative count, and goes away
    again on downgrade with the rows intact."""
    migrate.upgrade(fresh_db_url, "8d3f6b2a1c57")
    engine = make_engine(fresh_db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO object_types (id, name, display_name, tags, description, "
                    "prompt, created_at) VALUES (1, 'cup', 'Cup', '[]', '', '', "
                    "CURRENT_TIMESTAMP)"
                )
            )
            conn.execute(
                sa.text(
                    "INSERT INTO episodes (id, uid, object_type_id, items, budget_s, tote_side, "
                    "camera_side, state, outcome_reason, operator_notes, label_status, "
                    "created_at) VALUES (1, 'old-episode', 1, 3, 90, 'left', 'left', 'closed', "
                    "'', '', 'pending', CURRENT_TIMESTAMP)"
                )
            )
        assert _envelope_columns(fresh_db_url) == {}
        migrate.upgrade(fresh_db_url)
        (col,) = _envelope_columns(fresh_db_url).values()
        assert col["nullable"] is True and col["default"] is None
        with engine.connect() as conn:
            value = conn.execute(
                sa.text("SELECT envelope_interventions FROM episodes WHERE uid = 'old-episode'")
            ).scalar_one()
        assert value is None
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE episodes SET envelope_interventions = 4"))
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(sa.text("UPDATE episodes SET envelope_interventions = -1"))
        engine.dispose()
        migrate.downgrade(fresh_db_url, "8d3f6b2a1c57")
        assert _envelope_columns(fresh_db_url) == {}
        with engine.connect() as conn:
            uids = conn.execute(sa.text("SELECT uid FROM episodes")).scalars().all()
        assert uids == ["old-episode"]
    finally:
        engine.dispose()


def test_failure_mode_tags_widen_the_review_action_check_and_narrow_back(
    fresh_db_url: str,
) -> None:
    """Before the migration a tag record is refused by the CHECK; after it, it
    is kept, and the table is still append-only (SQLite rebuilds the table);
    the downgrade refuses to drop existing tags."""
    migrate.upgrade(fresh_db_url, "f2b8d4a6c913")
    engine = make_engine(fresh_db_url)
    insert = sa.text(
        "INSERT INTO review_actions (episode_id, reviewer_label, at, action, before, after, "
        "note) VALUES (1, 'x', CURRENT_TIMESTAMP, 'tag_failure', '{}', '{}', '')"
    )
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO object_types (id, name, display_name, tags, description, "
                    "prompt, created_at) VALUES (1, 'cup', 'Cup', '[]', '', '', "
                    "CURRENT_TIMESTAMP)"
                )
            )
            conn.execute(
                sa.text(
                    "INSERT INTO episodes (id, uid, object_type_id, items, budget_s, tote_side, "
                    "camera_side, state, outcome_reason, operator_notes, label_status, "
                    "created_at) VALUES (1, 'ep', 1, 3, 90, 'left', 'left', 'closed', "
                    "'', '', 'pending', CURRENT_TIMESTAMP)"
                )
            )
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(insert)
        engine.dispose()
        migrate.upgrade(fresh_db_url, "f2a9c4e7b1d3")
        with engine.begin() as conn:
            conn.execute(insert)
        for statement in (
            "UPDATE review_actions SET note = 'edited'",
            "DELETE FROM review_actions",
        ):
            with pytest.raises(sa.exc.DBAPIError, match="append-only"), engine.begin() as conn:
                conn.execute(sa.text(statement))
        engine.dispose()
        with pytest.raises(RuntimeError, match="failure-mode tag record"):
            migrate.downgrade(fresh_db_url, "f2b8d4a6c913")
    finally:
        engine.dispose()
