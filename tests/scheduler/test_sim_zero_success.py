"""Issue 22 acceptance, end to end: a policy that never succeeds on one
object, through the demo's machinery.

A small campaign runs on the simulated cell (virtual clock) through the
scheduler and the blinded gateway, as in ``test_sim_campaign``: the human
reference and a policy that plays like the reference on spoons but never
picks up a towel, so every towels episode runs out of time and the cell has
no success at all. Then the demo's own pipeline annotates, reviews, closes,
releases and scores it; the leaderboard, the policy page and its JSON are
fetched from the real app on loopback; ``proctor export`` writes the dataset
and ``proctor analyze`` re-analyses it. Every step must answer (200, exit 0)
and the empty cell must report RMST = τ and no median (analysis README).
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest
import sqlalchemy as sa

from proctor.core.artifacts import open_store
from proctor.core.db.models import Assignment, Episode, ObjectType, Policy, Submission, User
from proctor.core.domain import (
    ConformanceStatus,
    EndpointDialect,
    LabelStream,
    Outcome,
    PolicyKind,
    SubmissionKind,
    Visibility,
)
from proctor.core.settings import load_settings
from proctor.demo import pipeline
from proctor.policywire.serving.demo import DOWN, DemoPolicy
from proctor.policywire.serving.openpi import PolicyServer
from proctor.policywire.wire import keys
from proctor.scheduler import service
from proctor.scheduler.protocol import parse_protocol
from proctor.scheduler.service import Actor
from proctor.web.snapshots.service import latest_row
from tests.scheduler.conftest import Gateway, ServerThread, sim_station, work_the_campaign

pytestmark = pytest.mark.slow

OBJECTS = ("spoons", "towels")
NEVER_ON = "towels"
EPISODES_PER_CELL = 3
PER_ITEM_CAP_S = 20.0  # one item per episode: the budget and τ


class NeverOn:
    """A ``ServedPolicy``: the reference's play, except on one object, where
    it holds the arm still with open fingers until the time budget runs out
    (the prompt names the object, as a real policy would read it)."""

    def __init__(self, inner: DemoPolicy, object_name: str) -> None:
        self.inner = inner
        self.object_name = object_name

    def metadata(self) -> dict[str, Any]:
        return self.inner.metadata()

    def new_session(self) -> _NeverOnSession:
        return _NeverOnSession(self.inner.new_session(), self.object_name)


class _NeverOnSession:
    def __init__(self, inner: Any, object_name: str) -> None:
        self.inner = inner
        self.object_name = object_name

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        prompt = str(np.asarray(observation.get(keys.OBS_PROMPT, "")).ravel()[0])
        if self.object_name not in prompt:
            return self.inner.infer(observation)
        here = np.asarray(observation[keys.OBS_CARTESIAN_POSITION], dtype=np.float64)[:3]
        rows = np.tile(np.array([*here, *DOWN, 0.0]), (5, 1))
        return {keys.REPLY_ACTIONS: rows}

    def reset(self, message: dict[str, Any]) -> None:
        self.inner.reset(message)


def _register(gateway: Gateway, servers: dict[str, PolicyServer], tag: str) -> dict[str, str]:
    names = {}
    with gateway.db.session() as s:
        for arm, kind in (("reference", PolicyKind.reference), ("stuck", PolicyKind.policy)):
            owner = User(username=f"lab-{arm}-{tag}")
            s.add(owner)
            s.flush()
            # public, as the demo registers its policies: the pages name them after release
            policy = Policy(
                name=f"{arm}-{tag}", kind=kind, owner_id=owner.id, visibility=Visibility.public
            )
            s.add(policy)
            s.flush()
            s.add(
                Submission(
                    policy_id=policy.id,
                    kind=SubmissionKind.endpoint,
                    endpoint_url=servers[arm].url,
                    endpoint_dialect=EndpointDialect.openpi,
                    conformance_status=ConformanceStatus.passed,
                )
            )
            names[arm] = policy.name
        for name in OBJECTS:
            if s.scalar(sa.select(ObjectType.id).where(ObjectType.name == name)) is None:
                s.add(ObjectType(name=name, prompt=f"put the {name} into the target bin"))
    return names


def _run_campaign(gateway: Gateway, tmp_path: Path, tag: str) -> tuple[int, dict[str, str]]:
    servers = {
        "reference": PolicyServer(DemoPolicy("reference", seed=0)).start(),
        "stuck": PolicyServer(NeverOn(DemoPolicy("reference", seed=1), NEVER_ON)).start(),
    }
    try:
        names = _register(gateway, servers, tag)
        with gateway.db.session() as s:
            c = service.create_campaign(
                s,
                protocol=parse_protocol(
                    {
                        "name": f"zero-{tag}",
                        "items_per_episode": 1,
                        "per_item_cap_s": PER_ITEM_CAP_S,
                        "tau_s": PER_ITEM_CAP_S,
                        "episodes_per_cell": EPISODES_PER_CELL,
                        "reference": names["reference"],
                        "policies": [names["stuck"]],
                        "objects": list(OBJECTS),
                        "spatial_configs": [{"tote": "left", "camera": "left"}],
                    }
                ),
                actor=Actor(label="test"),
            )
            cid = c.id
            service.start_campaign(s, campaign=cid, actor=Actor(label="test"))
        daemon = sim_station(gateway, cid, f"cell-{tag}", tmp_path)
        daemon.open()
        try:
            work_the_campaign(daemon, timeout=300)
        finally:
            daemon.close()
    finally:
        for server in servers.values():
            server.stop()
    return cid, names


def _cell(result: dict[str, Any], policy: str, object_name: str) -> dict[str, Any]:
    row = next(p for p in result["policies"] if p["policy"] == policy)
    return next(o for o in row["per_object"] if o["object"] == object_name)


def test_a_policy_that_never_succeeds_on_one_object_goes_through_the_demo_pipeline(
    gateway: Gateway, tmp_path: Path
) -> None:
    tag = secrets.token_hex(3)
    cid, names = _run_campaign(gateway, tmp_path, tag)
    stuck = names["stuck"]
    tau = PER_ITEM_CAP_S

    # what ran: the stuck policy never placed a towel, and did place spoons
    with gateway.db.session() as s:
        policy_id = s.scalar(sa.select(Policy.id).where(Policy.name == stuck))
        towels_id = s.scalar(sa.select(ObjectType.id).where(ObjectType.name == NEVER_ON))
        ran = list(
            s.execute(
                sa.select(Episode.object_type_id, Episode.outcome)
                .join(Assignment, Assignment.id == Episode.assignment_id)
                .where(Episode.campaign_id == cid, Assignment.policy_id == policy_id)
            )
        )
    towels = [o for obj, o in ran if obj == towels_id]
    assert towels == [Outcome.ran_out_of_time] * EPISODES_PER_CELL
    assert Outcome.success in [o for obj, o in ran if obj != towels_id]

    # the demo's pipeline after the rollouts: annotate, review, close, release, score
    store = open_store(str(tmp_path / "artifacts"))
    pipeline.annotate_campaign(gateway.db.factory, store, campaign_id=cid, tick=lambda _: None)
    pipeline.review_campaign(gateway.db.factory, store, campaign_id=cid, tick=lambda _: None)
    pipeline.close_and_release(gateway.db.factory, campaign_id=cid)
    # a crash in the analysis raises here; a stream it cannot score is reported
    outcomes = pipeline.score_campaign(gateway.db.factory, campaign_id=cid)
    by_stream = {o.stream: o for o in outcomes}  # type: ignore[attr-defined]
    assert by_stream[LabelStream.auto_and_reviewed].status == "created", by_stream
    with gateway.db.session() as s:
        row = latest_row(s, campaign_id=cid, stream=LabelStream.auto_and_reviewed)
        assert row is not None
        snapshot = row.result
    empty = _cell(snapshot, stuck, NEVER_ON)
    assert empty["rmst"] == {"estimate": tau, "ci": [tau, tau]}
    assert empty["median"] == {"estimate": None, "ci": [None, None]}
    assert _cell(snapshot, stuck, "spoons")["median"]["estimate"] is not None

    # the pages, from the real app on loopback
    settings = load_settings(
        env="test",
        data_dir=tmp_path / "web",
        database_url=gateway.db.url,
        artifacts=str(tmp_path / "artifacts"),
        secret_key="test-secret-key-" + "x" * 32,
    )
    from proctor.web.app import create_app

    app = create_app(settings)
    try:
        with (
            ServerThread(app) as server,
            httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=60) as http,
        ):
            board = http.get(f"/leaderboard/{cid}")
            assert board.status_code == 200 and stuck in board.text
            page = http.get(f"/leaderboard/{cid}/policies/{quote(stuck, safe='')}")
            assert page.status_code == 200 and NEVER_ON in page.text
            api = http.get(f"/api/leaderboard/{cid}/policies/{quote(stuck, safe='')}")
            assert api.status_code == 200
            cell = next(o for o in api.json()["per_object"] if o["object"] == NEVER_ON)
            assert cell["median"] == {"estimate": None, "lo": None, "hi": None}
    finally:
        app.state.web.engine.dispose()

    # the export, and the analysis anyone can re-run from it
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_")}
    env.update(
        PROCTOR_ENV="test",
        PROCTOR_DATA_DIR=str(tmp_path / "cli"),
        PROCTOR_DATABASE_URL=gateway.db.url,
        PROCTOR_ARTIFACTS=str(tmp_path / "artifacts"),
    )
    out = tmp_path / "dataset"
    export = subprocess.run(
        [sys.executable, "-m", "proctor", "export", str(cid), str(out), "--no-media"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert export.returncode == 0, export.stdout[-2000:] + export.stderr[-2000:]
    redo = tmp_path / "redo.json"
    analysed = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor",
            "analyze",
            str(out / "episodes.csv"),
            "--tau",
            str(tau),
            "--bootstrap",
            "200",
            "--json",
            str(redo),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert analysed.returncode == 0, analysed.stdout[-2000:] + analysed.stderr[-2000:]
    again = _cell(json.loads(redo.read_text()), stuck, NEVER_ON)
    assert again["rmst"] == {"estimate": tau, "ci": [tau, tau]}
    assert again["median"]["estimate"] is None
