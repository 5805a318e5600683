"""accounts: a per-user session nonce (revocable page sessions)

Every page session carries a mark keyed on the user's password hash and this
random nonce; rotating the nonce (sign-out, password change, deactivation)
ends every session opened before. Existing users get a random nonce each, so
their current sessions end once at upgrade.

Revision ID: e4a7c2d91b36
Revises: b7e2c41a9f30
Create Date: 2026-11-24
"""

import secrets
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "e4a7c2d91b36"
down_revision: str | None = "b7e2c41a9f30"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("session_nonce", sa.String(length=32), nullable=True))
    users = sa.table("users", sa.column("id", sa.Integer), sa.column("session_nonce", sa.String))
    conn = op.get_bind()
    for (user_id,) in conn.execute(sa.select(users.c.id)).all():
        conn.execute(
            users.update().where(users.c.id == user_id).values(session_nonce=secrets.token_hex(16))
        )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.alter_column("session_nonce", existing_type=sa.String(length=32), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("session_nonce")
