"""``proctor campaign`` through ``proctor.cli.main`` (argument parsing, one
transaction per command, one-line errors, exit codes), on both databases."""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa

from proctor.core.db.models import Assignment, AuditLog, Campaign
from proctor.core.domain import CampaignStatus
from tests.scheduler import builders
from tests.scheduler.conftest import CommittedDb


def test_campaign_commands_end_to_end(proctor, committed_db: CommittedDb, tmp_path: Path) -> None:
    with committed_db.session() as s:
        w = builders.world(s, 2)
    names = [p.name for p in w.arms]
    protocol = tmp_path / "protocol.toml"
    protocol.write_text(
        f"""
name = "cli-{w.objects[0].name}"
items_per_episode = 6
per_item_cap_s = 30
tau_s = 90
episodes_per_cell = 2
reference = "{w.reference.name}"
policies = ["{w.policies[0].name}", {{ name = "{w.policies[1].name}" }}]
objects = ["{w.objects[0].name}", "{w.objects[1].name}"]
spatial_configs = [{{ tote = "left", camera = "left" }}, {{ tote = "right", camera = "left" }}]
cell_profiles = ["sim-droid", "droid-fr3"]
""",
        encoding="utf-8",
    )
    code, out, err = proctor("campaign", "create", str(protocol), "--episodes-per-cell", "4")
    assert code == 0, err
    assert "3 arms incl. the reference × 2 objects × 4 episodes = 24 episodes" in out
    name = f"cli-{w.objects[0].name}"

    code, out, err = proctor("campaign", "start", name)
    assert code == 0, err
    commitment = re.search(r"seed commitment \(SHA-256\): ([0-9a-f]{64})", out).group(1)

    code, out, _ = proctor("campaign", "status", name)
    assert code == 0
    assert "0/4" in out and "arm A" in out and commitment in out
    assert not any(n in out for n in names)
    assert "tote left / camera left" in out and "tote right / camera left" in out
    assert "stations of cell profile droid-fr3, sim-droid only" in out

    code, out, _ = proctor("campaign", "status", name, "--identities")
    assert code == 0 and all(n in out for n in names)

    code, _, err = proctor("campaign", "reveal", name)
    assert code == 1 and "revealing the seed needs it to be closed" in err
    assert err.count("\n") == 1  # one line, no traceback

    code, out, _ = proctor("campaign", "close", name)
    seed = re.search(r"allocation seed: ([0-9a-f]{64})", out).group(1)
    code, out, _ = proctor("campaign", "reveal", name)
    assert code == 0 and seed in out and "24 slots re-derived, all match the log" in out

    code, out, _ = proctor("campaign", "unblind", name, "--reason", "spot check")
    assert code == 0 and all(n in out for n in names)
    code, out, _ = proctor("campaign", "release", name)
    assert code == 0
    code, out, _ = proctor("campaign", "list")
    assert name in out and "released" in out

    with committed_db.session() as s:
        c = s.scalars(sa.select(Campaign).where(Campaign.name == name)).one()
        assert c.status == CampaignStatus.released and c.seed_commitment == commitment
        # this campaign's rows: another kind of row may carry the same id (a
        # policy or user made by the web tests before this one on the shared database)
        labels = set(
            s.scalars(
                sa.select(AuditLog.actor_label).where(
                    AuditLog.target_type == "campaign", AuditLog.target_id == str(c.id)
                )
            ).all()
        )
        assert labels
        assert all(label.startswith("cli:") for label in labels)

        # a tampered log fails the reveal with exit 1
        a = s.scalars(
            sa.select(Assignment).where(Assignment.campaign_id == c.id, Assignment.sequence == 0)
        ).one()
        a.object_type_id = next(o.id for o in w.objects if o.id != a.object_type_id)
    code, out, err = proctor("campaign", "reveal", name)
    assert code == 1 and "mismatch: sequence 0" in out and "does not match" in err


def test_bad_input_is_one_line_with_the_field(proctor, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nitems_per_episode = "many"\n', encoding="utf-8")
    code, _, err = proctor("campaign", "create", str(bad))
    assert code == 2
    assert "items_per_episode" in err and "per_item_cap_s: Field required" in err
    assert err.count("\n") == 1

    code, _, err = proctor("campaign", "create", str(tmp_path / "missing.toml"))
    assert code == 2 and "not found" in err

    code, _, err = proctor("campaign", "create", "--name", "x", "--config", "left")
    assert code == 2 and "--config: 'left' must be TOTE:CAMERA" in err

    code, _, err = proctor("campaign", "status", "no-such-campaign")
    assert code == 1 and "no campaign named 'no-such-campaign'" in err
