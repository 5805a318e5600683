"""Issue 15 item 8: the teleoperated human reference works as deployed.

The deploy steps register the human reference as the teleop server that
`proctor station teleop` serves on each station host's loopback. With the
production settings (`deploy/server/proctor.toml`: env prod, private endpoints
refused) that address can never be reached through the server's gateway — the
server refuses loopback for every submitter, and the station host's loopback
is not the server's anyway. So the reference is its own kind of submission
(`teleop`), registered by an admin with `proctor submission reference`, and
the scheduler hands its loopback URL to the claiming station, which connects
to it on its own host.

Everything real and on loopback: the CLI in prod settings, the gateway with
private endpoints refused, the teleop policy server (`TeleopPolicy` with a
scripted input standing in for the SpaceMouse), the station daemon on the
simulated cell working the campaign.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from typer.testing import CliRunner

from proctor.cli import app
from proctor.core.artifacts import open_store
from proctor.core.db.models import Assignment, Episode, ObjectType, Policy, Submission, User
from proctor.core.db.types import utcnow
from proctor.core.domain import (
    AssignmentStatus,
    ConformanceStatus,
    EndpointDialect,
    EpisodeState,
    PolicyKind,
    SubmissionKind,
)
from proctor.core.recording import keys
from proctor.core.recording.reader import load_telemetry
from proctor.core.settings import load_settings
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.scheduler import service
from proctor.scheduler.endpoint_keys import generate_encryption_key
from proctor.scheduler.gateway import GatewayConfig, gateway_router, resolve_handle
from proctor.scheduler.protocol import parse_protocol
from proctor.scheduler.service import Actor
from proctor.station.teleop.policy import TeleopPolicy
from proctor.station.teleop.source import TeleopCommand
from proctor.web.submissions import endpoints
from proctor.web.submissions.reference import register_teleop_reference
from tests.scheduler import builders
from tests.scheduler.conftest import (
    CommittedDb,
    Gateway,
    ServerThread,
    sim_station,
    work_the_campaign,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PROD_CONFIG = DEPLOY / "server" / "proctor.toml"
TWIST_Y = 0.04  # m/s: the operator pushes the tool sideways, gently
BUDGET_S = 4.0  # one item, 4 s per item


class ScriptedInput:
    """The operator's hand on the SpaceMouse: a steady sideways push."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()

    def command(self) -> TeleopCommand:
        with self._lock:
            self.calls += 1
        return TeleopCommand(
            t=time.monotonic(), twist=np.array([0.0, TWIST_Y, 0.0, 0.0, 0.0, 0.0]), gripper=0.0
        )


@pytest.fixture(scope="module")
def prod_gateway(committed_db: CommittedDb) -> Iterator[Gateway]:
    """The gateway as production runs it: private and loopback endpoints refused."""
    key = generate_encryption_key()
    app_ = FastAPI()
    app_.include_router(
        gateway_router(
            GatewayConfig(
                session_factory=committed_db.factory,
                encryption_key=key,
                connect_timeout_s=2.0,
                allow_private_endpoints=False,
            )
        )
    )
    with ServerThread(app_) as server:
        yield Gateway(f"ws://127.0.0.1:{server.port}", key, committed_db)


def _prod_env(db: CommittedDb, tmp_path: Path) -> dict[str, str | None]:
    """`deploy/server/proctor.toml` as a server host reads it, pointed at the test
    database (the environment overrides the file, as on a real host)."""
    return {
        "PROCTOR_CONFIG": str(PROD_CONFIG),
        "PROCTOR_ENV": "prod",
        "PROCTOR_SECRET_KEY": secrets.token_urlsafe(48),
        "PROCTOR_DATABASE_URL": db.url,
        "PROCTOR_DATA_DIR": str(tmp_path / "server"),
        "PROCTOR_ARTIFACTS": str(tmp_path / "server-artifacts"),
        "PROCTOR_SUBMISSIONS__ALLOW_PRIVATE_ENDPOINTS": None,  # unset: prod's default
    }


def _register_reference(env: dict[str, str | None], name: str, url: str) -> None:
    result = CliRunner().invoke(app, ["submission", "reference", name, "--url", url], env=env)
    assert result.exit_code == 0, result.output
    assert f"human reference '{name}'" in result.output


def _submitter_policy(db: CommittedDb, name: str, url: str) -> None:
    """A submitter's endpoint whose name resolves to loopback by the time it runs
    (registration judged it public; the gateway judges it again at every connection)."""
    with db.session() as s:
        owner = User(username=f"lab-{name}")
        s.add(owner)
        s.flush()
        policy = Policy(name=name, kind=PolicyKind.policy, owner_id=owner.id)
        s.add(policy)
        s.flush()
        s.add(
            Submission(
                policy_id=policy.id,
                kind=SubmissionKind.endpoint,
                endpoint_url=url,
                endpoint_dialect=EndpointDialect.openpi,
                conformance_status=ConformanceStatus.passed,
            )
        )


def _campaign(db: CommittedDb, tag: str, reference: str, policy: str) -> int:
    with db.session() as s:
        obj = "spoons"  # an object the simulated cell knows; shared with other tests
        if s.scalar(sa.select(ObjectType.id).where(ObjectType.name == obj)) is None:
            s.add(ObjectType(name=obj, prompt="put the spoons into the target bin"))
            s.flush()
        c = service.create_campaign(
            s,
            protocol=parse_protocol(
                {
                    "name": f"teleop-{tag}",
                    "items_per_episode": 1,
                    "per_item_cap_s": BUDGET_S,
                    "tau_s": BUDGET_S,
                    "episodes_per_cell": 1,
                    "reference": reference,
                    "policies": [policy],
                    "objects": [obj],
                    "spatial_configs": [{"tote": "left", "camera": "left"}],
                }
            ),
            actor=Actor(label="test"),
        )
        service.start_campaign(s, campaign=c.id, actor=Actor(label="test"))
        return c.id


def test_an_admin_registered_teleop_reference_drives_a_sim_episode_in_prod_settings(
    prod_gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tag = secrets.token_hex(3)
    db = prod_gateway.db
    operator = ScriptedInput()
    teleop = PolicyServer(TeleopPolicy(operator)).start()  # on loopback, as deployed
    submitter = PolicyServer(DemoPolicy("swift", seed=1)).start()
    try:
        env = _prod_env(db, tmp_path)
        _register_reference(env, f"human-{tag}", teleop.url)
        for k, v in env.items():
            if v is None:
                monkeypatch.delenv(k, raising=False)
            else:
                monkeypatch.setenv(k, v)
        prod = load_settings()
        assert prod.env == "prod"
        # the very same address is refused for any submitter under these settings
        with pytest.raises(endpoints.EndpointProblem, match="non-public address"):
            endpoints.check_reachable_publicly(teleop.url, prod)

        _submitter_policy(db, f"acme-{tag}", submitter.url)
        cid = _campaign(db, tag, f"human-{tag}", f"acme-{tag}")
        daemon = sim_station(prod_gateway, cid, f"cell-{tag}", tmp_path)
        daemon.open()
        try:
            skipped = work_the_campaign(daemon, skip_unreachable=True)
        finally:
            daemon.close()
        teleop_connections, submitter_connections = teleop.connections, submitter.connections
    finally:
        teleop.stop()
        submitter.stop()

    with db.session() as s:
        rows = s.execute(
            sa.select(Assignment, Policy.kind)
            .join(Policy, Policy.id == Assignment.policy_id)
            .where(Assignment.campaign_id == cid, Assignment.replaces_id.is_(None))
        ).all()
        by_kind = {kind: a for a, kind in rows}
        ref_slot = by_kind[PolicyKind.reference]
        episode = s.scalar(sa.select(Episode).where(Episode.assignment_id == ref_slot.id))
        assert episode is not None and episode.state == EpisodeState.closed
        assert ref_slot.status == AssignmentStatus.done
        # the submitter's loopback endpoint stayed refused: pre-flight failure, skipped
        assert by_kind[PolicyKind.policy].status == AssignmentStatus.skipped
        telemetry = load_telemetry(s, open_store(str(tmp_path / "artifacts")), episode)

    assert len(skipped) == 1
    assert submitter_connections == 0  # the gateway never connected to loopback
    # the station reached the operator's teleop server on its own host, and the
    # operator's input drove the episode
    assert teleop_connections >= 1
    assert operator.calls >= 5
    kinds = np.array(telemetry.column(keys.ACTION_KIND).to_pylist())
    moving = kinds == "cartesian_velocity"
    assert moving.sum() > 10
    requested_vy = telemetry.column(keys.ACTION_REQUESTED[1]).to_numpy()[moving]
    assert np.allclose(requested_vy, TWIST_Y, atol=1e-6)
    ee_y = telemetry.column(keys.EE_POSE[1]).to_numpy()
    # the tool went the way the operator pushed, at least half the 16 cm commanded
    assert ee_y.max() - ee_y[0] > 0.5 * TWIST_Y * BUDGET_S


def test_the_gateway_never_relays_a_teleop_reference(gateway: Gateway) -> None:
    """Even where private endpoints are allowed (tests, the demo), a claimed
    reference run's handle resolves to nothing, so the server never connects to
    a station's teleop server; a submitter's claimed run still resolves."""
    tag = secrets.token_hex(3)
    db = gateway.db
    with db.session() as s:
        register_teleop_reference(s, name=f"human-{tag}", actor=Actor(label="test"), now=utcnow())
    _submitter_policy(db, f"acme-{tag}", "ws://127.0.0.1:9")
    cid = _campaign(db, tag, f"human-{tag}", f"acme-{tag}")
    with db.session() as s:
        station = builders.station(s)
        slots = s.execute(
            sa.select(Assignment, Policy.kind)
            .join(Policy, Policy.id == Assignment.policy_id)
            .where(Assignment.campaign_id == cid)
        ).all()
        for a, _ in slots:
            a.status, a.station_id = AssignmentStatus.claimed, station.id
        s.flush()
        resolved = {
            kind: resolve_handle(s, a.endpoint_handle, encryption_key=gateway.encryption_key)
            for a, kind in slots
        }
    assert resolved[PolicyKind.reference] is None
    assert resolved[PolicyKind.policy] is not None
