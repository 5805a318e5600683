"""``proctor station enrol`` and ``proctor station token`` through
``proctor.cli.main``: the token printed once on stdout alone, only its hash
stored, rotation and revocation as the gateway will see them; both databases."""

from __future__ import annotations

import hashlib
import secrets

import sqlalchemy as sa

from proctor.core import station_credentials
from proctor.core.db.models import AuditLog, Station, StationToken
from tests.scheduler.conftest import CommittedDb


def test_enrol_rotate_revoke(proctor, committed_db: CommittedDb) -> None:
    name = f"cell-{secrets.token_hex(3)}"
    code, out, err = proctor("station", "enrol", name, "--profile", "sim")
    assert code == 0, err
    first = out.strip()
    assert station_credentials.looks_like_token(first) and out == first + "\n"
    assert "PROCTOR_STATION_TOKEN" in err and first not in err
    with committed_db.session() as s:
        station = s.scalars(sa.select(Station).where(Station.name == name)).one()
        assert station.profile == "sim"
        stored = s.scalars(
            sa.select(StationToken.token_hash).where(StationToken.station_id == station.id)
        ).all()
        assert stored == [hashlib.sha256(first.encode()).hexdigest()]
        audit = s.scalars(
            sa.select(AuditLog).where(
                AuditLog.action == "station.enrol", AuditLog.target_id == str(station.id)
            )
        ).one()
        assert audit.actor_label.startswith("cli:") and first not in repr(audit.details)

    code, _, err = proctor("station", "enrol", name)
    assert code == 2 and "already enrolled" in err
    code, _, err = proctor("station", "enrol", f"{name}-x", "--profile", "lab")
    assert code == 2 and "--profile" in err

    code, out, err = proctor("station", "token", "rotate", name, "--window-hours", "1")
    assert code == 0, err
    second = out.strip()
    with committed_db.session() as s:
        assert station_credentials.live_token(s, first) is not None  # in its window
        assert station_credentials.live_token(s, second) is not None
    code, out, err = proctor("station", "token", "list", name)
    assert code == 0, err
    assert second[:12] in out and first[:12] in out and "valid until" in out
    assert first not in out and second not in out

    code, out, err = proctor("station", "token", "revoke", name, "--prefix", first[:12])
    assert code == 0 and first[:12] in out, err
    with committed_db.session() as s:
        assert station_credentials.live_token(s, first) is None
        assert station_credentials.live_token(s, second) is not None
    code, _, err = proctor("station", "token", "revoke", name, "--prefix", first[:12])
    assert code == 2 and "no live token" in err
    code, _, err = proctor("station", "token", "revoke", f"{name}-nobody")
    assert code == 2 and "no station named" in err
