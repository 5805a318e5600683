"""Endpoint registration, the conformance queue and its worker, role
boundaries on the portal's routes, the opt-in to the public board, and
campaign progress with private results — over HTTP into the real app, with
real policy servers on loopback."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from proctor.core.db.models import (
    AnalysisSnapshot,
    AuditLog,
    Campaign,
    CampaignPolicy,
    ConformanceRun,
    Policy,
    Submission,
)
from proctor.core.domain import (
    AssignmentStatus,
    CampaignStatus,
    ConformanceRunStatus,
    ConformanceStatus,
    LabelStream,
    Role,
)
from proctor.policywire.serving.demo import DemoPolicy
from proctor.policywire.serving.openpi import Fault, PolicyServer
from proctor.policywire.serving.positronic import PositronicServer
from proctor.scheduler.endpoint_keys import decrypt_api_key
from proctor.web.submissions import queue, worker
from proctor.web.submissions.names import name_key
from tests import factories
from tests.loopback import TcpWitness, redirecting_server
from tests.web.conftest import Web, login, page_csrf
from tests.web.submissions_support import (
    ENCRYPTION_KEY,
    audit_actions,
    bearer,
    good_checkpoint,
    portal_app,
    portal_settings,
    submitter,
    upload,
)


@pytest.fixture
def portal(web_db_url: str, tmp_path: Path) -> Iterator[Web]:
    yield from portal_app(web_db_url, tmp_path)


@pytest.fixture
def demo_server() -> Iterator[Any]:
    servers: list[PolicyServer] = []

    def start(profile: str = "reference", fault: str | None = None) -> str:
        s = PolicyServer(DemoPolicy(profile), fault=Fault.parse(fault) if fault else None).start()
        servers.append(s)
        return s.url

    yield start
    for s in servers:
        s.stop()


def endpoint_body(url: str, **kw: Any) -> dict[str, Any]:
    return {
        "policy_name": "acme-server",
        "url": url,
        "dialect": "roboarena",
        "action_space": "cartesian_position",
        "chunk_length": 4,
        "deterministic": True,
        **kw,
    }


def run_worker(web: Web) -> list[worker.Outcome]:
    """What `proctor submission work` does, run here (the test, not the app)."""
    return worker.work(web.app.state.web.session_factory, web.settings, clock=web.clock)


# -- registering and checking ----------------------------------------------------------------
def test_a_registered_endpoint_is_checked_by_a_worker_and_passes(
    portal: Web, demo_server: Any
) -> None:
    h = submitter(portal)
    c = portal.client()
    url = demo_server("reference")
    r = c.post(
        "/api/submissions/endpoints", json=endpoint_body(url, api_key="s3cret-key"), headers=h
    )
    assert r.status_code == 201, r.text
    sub = r.json()
    assert "s3cret-key" not in r.text
    assert sub["kind"] == "endpoint" and sub["endpoint_url"] == url and sub["has_api_key"]
    assert sub["conformance_status"] == "pending"
    assert sub["conformance_report"]["verdict"] == "pending"
    assert sub["check"]["status"] == "queued"
    with portal.db() as s:
        row = s.get(Submission, sub["id"])
        assert row is not None and row.endpoint_api_key_encrypted is not None
        assert b"s3cret-key" not in row.endpoint_api_key_encrypted
        assert decrypt_api_key(row.endpoint_api_key_encrypted, encryption_key=ENCRYPTION_KEY) == (
            "s3cret-key"
        )
    # the web app only queued it; the worker runs it
    outcomes = run_worker(portal)
    assert [(o.submission_id, o.verdict) for o in outcomes] == [(sub["id"], "passed")]
    r = c.get(f"/api/submissions/{sub['id']}", headers=h)
    out = r.json()
    assert out["conformance_status"] == "passed"
    report = out["conformance_report"]
    assert report["verdict"] == "passed" and report["format"] == "proctor.conformance/1"
    assert report["run_id"] == out["check"]["id"] and out["check"]["status"] == "done"
    assert url not in str(report)
    assert {f["check"] for f in report["findings"]} >= {"identity", "chunk_length", "determinism"}
    assert audit_actions(portal)[-2:] == ["submission.endpoint", "submission.conformance"]
    # a second run of the worker finds nothing to do
    assert run_worker(portal) == []


def test_a_failing_server_gets_advice_and_stays_out_of_campaigns(
    portal: Web, demo_server: Any
) -> None:
    h = submitter(portal)
    c = portal.client()
    url = demo_server("reference", fault="bad-shape")
    sid = c.post("/api/submissions/endpoints", json=endpoint_body(url), headers=h).json()["id"]
    assert [o.verdict for o in run_worker(portal)] == ["failed"]
    out = c.get(f"/api/submissions/{sid}", headers=h).json()
    assert out["conformance_status"] == "failed"
    assert out["conformance_report"]["summary"] == (
        "Failed: Your server returned actions of shape (4, 4); the cartesian_position action "
        "space needs 7 columns (x, y, z (m), roll, pitch, yaw, gripper), so a chunk of shape "
        "(H, 7)."
    )
    # the scheduler will not put it in a campaign
    from proctor.core.domain import PolicyKind
    from proctor.scheduler.protocol import parse_protocol
    from proctor.scheduler.service import Actor, create_campaign

    with portal.db() as s:
        factories.policy(s, "human", kind=PolicyKind.reference)
        factories.object_type(s, "spoons")
        protocol = parse_protocol(
            {
                "name": "spring",
                "items_per_episode": 4,
                "per_item_cap_s": 30,
                "tau_s": 60,
                "episodes_per_cell": 2,
                "policies": ["acme-server"],
                "reference": "human",
                "objects": ["spoons"],
            }
        )
        with pytest.raises(Exception, match="has no endpoint or checkpoint submission that passed"):
            create_campaign(s, protocol=protocol, actor=Actor(label="test"))
        s.rollback()


def test_a_check_again_is_queued_once_and_the_status_holds_until_it_reports(
    portal: Web, demo_server: Any
) -> None:
    h = submitter(portal)
    c = portal.client()
    sid = c.post(
        "/api/submissions/endpoints", json=endpoint_body(demo_server("reference")), headers=h
    ).json()["id"]
    r = c.post(f"/api/submissions/{sid}/check", headers=h)
    assert r.status_code == 409
    assert (
        r.json()["detail"] == "a conformance check of this submission is already queued or running"
    )
    run_worker(portal)
    r = c.post(f"/api/submissions/{sid}/check", headers=h)
    assert r.status_code == 202 and r.json()["check"]["status"] == "queued"
    assert r.json()["conformance_status"] == "passed"  # the last verdict holds meanwhile
    assert [o.verdict for o in run_worker(portal)] == ["passed"]


def test_a_crashing_checker_marks_the_run_not_the_submission(portal: Web, demo_server: Any) -> None:
    h = submitter(portal)
    sid = (
        portal.client()
        .post("/api/submissions/endpoints", json=endpoint_body(demo_server()), headers=h)
        .json()["id"]
    )

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("checker bug")

    outcomes = worker.work(
        portal.app.state.web.session_factory, portal.settings, clock=portal.clock, check=broken
    )
    assert [o.verdict for o in outcomes] == ["error"]
    out = portal.client().get(f"/api/submissions/{sid}", headers=h).json()
    assert out["conformance_status"] == "pending"
    assert (
        out["check"]["status"] == "error" and "RuntimeError: checker bug" in out["check"]["error"]
    )


def test_workers_claim_each_run_once_and_requeue_a_dead_workers_run(
    portal: Web, demo_server: Any
) -> None:
    h = submitter(portal)
    portal.client().post("/api/submissions/endpoints", json=endpoint_body(demo_server()), headers=h)
    sessions = portal.app.state.web.session_factory
    with portal.db() as s:
        run_id = s.scalars(sa.select(ConformanceRun.id)).one()
        assert queue.claim(s, now=portal.clock(), run_id=run_id) == run_id
    with portal.db() as s:
        assert queue.claim(s, now=portal.clock(), run_id=run_id) is None
        assert queue.claim(s, now=portal.clock()) is None
    # its worker dies; after a while another worker takes it over
    assert worker.work(sessions, portal.settings, clock=portal.clock) == []
    portal.clock.advance(minutes=21)
    outcomes = worker.work(sessions, portal.settings, clock=portal.clock)
    assert [(o.run_id, o.verdict) for o in outcomes] == [(run_id, "passed")]


# -- Positronic endpoints ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("ws://policy.example.org:1234", "ws://policy.example.org:1234/api/v1/session"),
        ("ws://policy.example.org:1234/", "ws://policy.example.org:1234/api/v1/session"),
        ("wss://policy.example.org/api/v1/session/", "wss://policy.example.org/api/v1/session"),
        # a model id (which may hold slashes) and the session parameters are kept as written
        (
            "wss://policy.example.org/api/v1/session/GEAR/dz-10000?codec.fps=10",
            "wss://policy.example.org/api/v1/session/GEAR/dz-10000?codec.fps=10",
        ),
    ],
)
def test_a_positronic_endpoint_is_stored_with_its_session_path(
    portal: Web, given: str, stored: str
) -> None:
    h = submitter(portal)
    r = portal.client().post(
        "/api/submissions/endpoints",
        json=endpoint_body(given, dialect="positronic_v1", api_key="bearer-secret"),
        headers=h,
    )
    assert r.status_code == 201, r.text
    sub = r.json()
    assert sub["endpoint_url"] == stored and "bearer-secret" not in r.text
    with portal.db() as s:
        row = s.get(Submission, sub["id"])
        assert row is not None and row.endpoint_url == stored
        assert row.endpoint_dialect is not None and row.endpoint_dialect.value == "positronic_v1"


def test_a_positronic_endpoint_is_checked_with_its_bearer_key_and_passes(portal: Web) -> None:
    h = submitter(portal)
    with PositronicServer(DemoPolicy("reference"), auth_token="bearer-secret") as server:
        r = portal.client().post(
            "/api/submissions/endpoints",
            json=endpoint_body(
                server.url,  # as a submitter gives it: the host, no path
                dialect="positronic_v1",
                api_key="bearer-secret",
                chunk_length=None,
                deterministic=False,
            ),
            headers=h,
        )
        assert r.status_code == 201, r.text
        sub = r.json()
        assert sub["endpoint_url"] == server.session_url()
        outcomes = run_worker(portal)
        assert server.sessions >= 1  # the server refuses a session without the Bearer key
    assert [(o.submission_id, o.verdict) for o in outcomes] == [(sub["id"], "passed")], outcomes
    report = portal.client().get(f"/api/submissions/{sub['id']}", headers=h).json()
    assert report["conformance_status"] == "passed"
    assert report["conformance_report"]["dialect"] == "positronic_v1"


def test_a_positronic_endpoint_with_the_wrong_key_fails_its_check(portal: Web) -> None:
    h = submitter(portal)
    with PositronicServer(DemoPolicy("reference"), auth_token="bearer-secret") as server:
        r = portal.client().post(
            "/api/submissions/endpoints",
            json=endpoint_body(server.url, dialect="positronic_v1", api_key="wrong"),
            headers=h,
        )
        assert r.status_code == 201, r.text
        outcomes = run_worker(portal)
        assert server.sessions == 0
    assert [o.verdict for o in outcomes] == ["failed"]


# -- what registration refuses -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"url": "http://policy.example.org"}, "url", "must be a WebSocket URL (ws:// or wss://)"),
        ({"url": "ws://user:pw@policy.example.org"}, "url", "must not carry credentials"),
        ({"url": "ws://"}, "url", "names no host"),
        ({"url": "ws://policy.example.org:0"}, "url", "port 0 is not a port"),
        (
            {"dialect": "positronic_v1", "url": "ws://policy.example.org/other"},
            "url",
            "the path must be /api/v1/session or /api/v1/session/<model_id>",
        ),
        (
            {"dialect": "positronic_v1", "url": "ws://policy.example.org/api/v1/sessions"},
            "url",
            "the path must be /api/v1/session",
        ),
        (
            {"policy_name": "Arm B"},
            "policy_name",
            "Value error, must not begin with 'arm ': that is how the leaderboard labels",
        ),
    ],
)
def test_endpoint_fields_are_validated_by_name(
    portal: Web, change: dict[str, Any], field: str, message: str
) -> None:
    h = submitter(portal)
    r = portal.client().post(
        "/api/submissions/endpoints",
        json={**endpoint_body("ws://127.0.0.1:9"), **change},
        headers=h,
    )
    assert r.status_code == 422, r.text
    (detail,) = r.json()["detail"]
    assert detail["loc"] == ["body", field]
    assert detail["msg"].startswith(message), detail["msg"]
    with portal.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Policy)) == 0


def test_private_addresses_are_refused_where_configured(web_db_url: str, tmp_path: Path) -> None:
    from proctor.web.app import create_app

    settings = portal_settings(web_db_url, tmp_path, allow_private_endpoints=False)
    web = Web(app=create_app(settings), clock=lambda: None, settings=settings)  # type: ignore[arg-type]
    from tests.web.conftest import FakeClock

    web.clock = FakeClock()
    try:
        h = submitter(web)
        for url in (
            "ws://127.0.0.1:8000",
            "ws://10.1.2.3:8000",
            "wss://[::1]:9000",
            "ws://localhost:1",
            # IPv6 literals carrying a loopback or private IPv4 address (proctor/core/netguard.py)
            "ws://[64:ff9b::7f00:1]:5432",  # NAT64
            "ws://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the cloud metadata service
            "ws://[2002:7f00:1::]:5432",  # 6to4
            "ws://[2001:0:4136:e378:8000:63bf:80ff:fffe]:5432",  # Teredo, client 127.0.0.1
            "ws://[2001:0:4136:e378:8000:63bf:f5ff:fffe]:5432",  # Teredo, client 10.0.0.1
            "ws://[::ffff:127.0.0.1]:5432",  # IPv4-mapped
            "ws://[::7f00:1]:5432",  # IPv4-compatible
        ):
            r = web.client().post("/api/submissions/endpoints", json=endpoint_body(url), headers=h)
            assert r.status_code == 422, url
            msg = r.json()["detail"][0]["msg"]
            assert "resolves to a non-public address" in msg, url
            # the refusal names the setting a lab's dry run on its own machine needs
            assert "PROCTOR_SUBMISSIONS__ALLOW_PRIVATE_ENDPOINTS=true" in msg, url
    finally:
        web.app.state.web.engine.dispose()


def test_the_worker_checks_the_address_again_before_it_connects(
    portal: Web, demo_server: Any
) -> None:
    h = submitter(portal)
    sid = (
        portal.client()
        .post("/api/submissions/endpoints", json=endpoint_body(demo_server()), headers=h)
        .json()["id"]
    )
    strict = portal.settings.model_copy(
        update={
            "submissions": portal.settings.submissions.model_copy(
                update={"allow_private_endpoints": False}
            )
        }
    )
    outcomes = worker.work(portal.app.state.web.session_factory, strict, clock=portal.clock)
    assert [o.verdict for o in outcomes] == ["failed"]
    report = portal.client().get(f"/api/submissions/{sid}", headers=h).json()["conformance_report"]
    assert "resolves to a non-public address" in report["summary"]


def test_the_worker_report_never_maps_a_private_network(portal: Web) -> None:
    """Private endpoints allowed (as in tests and the demo), the targets on
    loopback: a closed port, an HTTP error and a redirect give one and the
    same finding, and the redirect is not followed."""

    def forbid(connection: Any, request: Any) -> Any:
        return connection.respond(403, "no\n")

    h = submitter(portal)
    with TcpWitness() as target, contextlib.ExitStack() as stack:
        closed = free_port()
        forbidding = stack.enter_context(_raw_ws_server(forbid))
        redirecting = stack.enter_context(redirecting_server(f"ws://127.0.0.1:{target.port}/"))
        names = ("closed-port", "forbidding-http", "redirecting-server")
        urls = (f"ws://127.0.0.1:{closed}", forbidding, redirecting)
        ids = []
        for name, url in zip(names, urls, strict=True):
            r = portal.client().post(
                "/api/submissions/endpoints",
                json=endpoint_body(url, policy_name=name),
                headers=h,
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        outcomes = run_worker(portal)
    assert [o.verdict for o in outcomes] == ["failed"] * 3
    reports = [
        portal.client().get(f"/api/submissions/{i}", headers=h).json()["conformance_report"]
        for i in ids
    ]
    findings = [r["findings"] for r in reports]
    assert findings[0] == findings[1] == findings[2], findings
    (connect,) = findings[0]
    assert connect["check"] == "connect" and connect["details"] == {}
    assert "Could not open a WebSocket connection" in connect["message"]
    assert target.connections == 0


@contextlib.contextmanager
def _raw_ws_server(process_request: Any) -> Iterator[str]:
    from websockets.sync.server import serve

    server = serve(lambda ws: None, "127.0.0.1", 0, process_request=process_request)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
    finally:
        server.shutdown()
        thread.join(5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_api_key_needs_the_servers_encryption_key(web_db_url: str, tmp_path: Path) -> None:
    from proctor.web.app import create_app
    from tests.web.conftest import FakeClock

    settings = portal_settings(web_db_url, tmp_path).model_copy(update={"encryption_key": None})
    web = Web(app=create_app(settings), clock=FakeClock(), settings=settings)
    try:
        h = submitter(web)
        r = web.client().post(
            "/api/submissions/endpoints",
            json=endpoint_body("ws://127.0.0.1:9", api_key="k"),
            headers=h,
        )
        assert r.status_code == 503 and "PROCTOR_ENCRYPTION_KEY is not set" in r.json()["detail"]
        with web.db() as s:
            assert s.scalar(sa.select(sa.func.count()).select_from(Submission)) == 0
        # without a key it is fine
        r = web.client().post(
            "/api/submissions/endpoints", json=endpoint_body("ws://127.0.0.1:9"), headers=h
        )
        assert r.status_code == 201
    finally:
        web.app.state.web.engine.dispose()


def test_a_policy_name_belongs_to_its_owner(portal: Web) -> None:
    h_ada, h_bob = submitter(portal, "ada"), submitter(portal, "bob")
    c = portal.client()
    body = endpoint_body("ws://127.0.0.1:9")
    assert c.post("/api/submissions/endpoints", json=body, headers=h_ada).status_code == 201
    assert c.post("/api/submissions/endpoints", json=body, headers=h_ada).status_code == 201
    # someone else's name, exactly or but for case: one answer that neither
    # repeats the existing name nor tells the two cases apart (no name oracle)
    unavailable = "policy_name: this policy name is not available; choose another"
    for probe in ("acme-server", "ACME-Server", "Acme-server"):
        r = c.post("/api/submissions/endpoints", json={**body, "policy_name": probe}, headers=h_bob)
        assert (r.status_code, r.json()["detail"]) == (409, unavailable), probe
    # its owner may be told which of their own names is too close
    r = c.post(
        "/api/submissions/endpoints", json={**body, "policy_name": "ACME-Server"}, headers=h_ada
    )
    assert r.status_code == 409
    assert r.json()["detail"] == (
        "policy_name: 'ACME-Server' reads like your policy 'acme-server' (they differ only "
        "in case, spacing, punctuation or look-alike characters); use that name or "
        "choose another"
    )


def test_a_look_alike_of_someone_elses_name_is_not_available(portal: Web) -> None:
    """``ste ady`` and ``st.eady`` beside ``steady`` would read as one policy on
    the board: refused with the answer a taken name gets, naming neither."""
    h_ada, h_bob = submitter(portal, "ada"), submitter(portal, "bob")
    c = portal.client()
    body = endpoint_body("ws://127.0.0.1:9")
    steady = {**body, "policy_name": "steady"}
    assert c.post("/api/submissions/endpoints", json=steady, headers=h_ada).status_code == 201
    unavailable = "policy_name: this policy name is not available; choose another"
    for probe in ("ste ady", "st.eady", "st_eady", "St-Eady", "STEADY", "STEA DY", "ste(ady)"):
        r = c.post("/api/submissions/endpoints", json={**body, "policy_name": probe}, headers=h_bob)
        assert (r.status_code, r.json().get("detail")) == (409, unavailable), (probe, r.text)
    # its owner is told which of their names it reads like
    r = c.post("/api/submissions/endpoints", json={**body, "policy_name": "st.eady"}, headers=h_ada)
    assert r.status_code == 409 and "reads like your policy 'steady'" in r.json()["detail"]
    # a name that only shares letters is a name of its own
    for other in ("steady-2", "steadier"):
        r = c.post("/api/submissions/endpoints", json={**body, "policy_name": other}, headers=h_bob)
        assert r.status_code == 201, (other, r.text)
    with portal.db() as s:
        names = set(s.scalars(sa.select(Policy.name)))
    assert names == {"steady", "steady-2", "steadier"}


def test_policy_name_keys_fold_what_a_reader_cannot_tell_apart() -> None:
    assert name_key("Ste ady") == name_key("st.eady") == name_key("steady")
    # compatibility forms (full-width letters, ligatures) read as the plain ones
    assert name_key("\uff53teady") == name_key("steady")
    assert name_key("\ufb01ne") == name_key("fine")
    # digits and letters a reader confuses
    assert name_key("p0l1cy") == name_key("POLICY") == name_key("pol-Icy")
    assert name_key("steady2") != name_key("steady")


def test_names_the_results_use_for_something_else_are_refused(portal: Web) -> None:
    """A policy named like a key of the result ("policy", "estimate"), an
    object or a reserved word could be mistaken for it: refused at
    registration, naming the field, with nothing written."""
    with portal.db() as s:
        factories.object_type(s, "spoons-deep", display_name="Deep Spoons")
    h = submitter(portal)
    c = portal.client()
    for name in (
        "policy",
        "estimate",
        "rmst",
        "Reference",
        "letters_completion",
        "NULL",
        "withheld",
        "arm B",
        "spoons-deep",
        "SPOONS-DEEP",
        "deep spoons",
    ):
        r = c.post(
            "/api/submissions/endpoints",
            json=endpoint_body("ws://127.0.0.1:9", policy_name=name),
            headers=h,
        )
        assert r.status_code == 422, (name, r.text)
        [problem] = r.json()["detail"]
        assert problem["loc"] == ["body", "policy_name"], (name, problem)
        assert name in problem["msg"] or "'arm '" in problem["msg"], (name, problem)
    with portal.db() as s:
        assert s.scalar(sa.select(sa.func.count()).select_from(Policy)) == 0
        assert s.scalar(sa.select(sa.func.count()).select_from(Submission)) == 0
    # ... while names that merely contain such words are fine
    for name in ("policy-estimate-v2", "spoons-deep-net"):
        r = c.post(
            "/api/submissions/endpoints",
            json=endpoint_body("ws://127.0.0.1:9", policy_name=name),
            headers=h,
        )
        assert r.status_code == 201, (name, r.text)


# -- role boundaries on these routes ------------------------------------------------------------
def test_role_boundaries_on_the_portal(portal: Web) -> None:
    h_ada = submitter(portal, "ada")
    h_bob = submitter(portal, "bob")
    portal.add_user("op", Role.operator)
    portal.add_user("root", Role.admin)
    h_op = bearer(portal.token("op", ("operator",)))
    h_root = bearer(portal.token("root", ("admin",)))
    h_read = bearer(portal.token("ada", ("submitter", "read-only")))
    c = portal.client()
    sub = c.post(
        "/api/submissions/endpoints", json=endpoint_body("ws://127.0.0.1:9"), headers=h_ada
    ).json()
    ckpt = upload(c, h_ada, good_checkpoint("acme-ckpt")).json()
    pid, sid = sub["policy_id"], sub["id"]
    reads = [
        f"/api/submissions/{sid}",
        f"/api/submissions/{ckpt['id']}",
        f"/api/submissions/policies/{pid}",
    ]
    writes = [
        ("POST", f"/api/submissions/{sid}/check", None),
        ("PATCH", f"/api/submissions/policies/{pid}", {"visibility": "public"}),
    ]
    # another submitter: as if none of it existed
    for path in reads:
        r = c.get(path, headers=h_bob)
        assert r.status_code == 404, path
    for method, path, body in writes:
        assert c.request(method, path, json=body, headers=h_bob).status_code == 404, path
    assert c.get("/api/submissions/policies", headers=h_bob).json() == []
    # an operator: not a submitter at all (and never learns endpoints or names)
    for path in [*reads, "/api/submissions/policies", "/api/uploads"]:
        r = c.get(path, headers=h_op)
        assert r.status_code == 403, path
        assert "acme" not in r.text and "127.0.0.1" not in r.text
    r = c.post("/api/submissions/endpoints", json=endpoint_body("ws://127.0.0.1:9"), headers=h_op)
    assert r.status_code == 403
    # anonymous
    for path in reads:
        assert c.get(path).status_code == 401
    # a read-only token of the owner reads but cannot write
    assert c.get(reads[0], headers=h_read).status_code == 200
    assert c.post(f"/api/submissions/{sid}/check", headers=h_read).status_code == 403
    # admins see and may ask for a check
    for path in reads:
        assert c.get(path, headers=h_root).status_code == 200, path
    assert len(c.get("/api/submissions/policies", headers=h_root).json()) == 2
    # the owner sees both, newest first
    names = [p["name"] for p in c.get("/api/submissions/policies", headers=h_ada).json()]
    assert names == ["acme-ckpt", "acme-server"]
    # nobody but an admin gets a checkpoint's bytes, not even another submitter or an operator
    art = f"/api/artifacts/{ckpt['checkpoint_sha256']}"
    for headers in (h_bob, h_op, {}):
        assert c.get(art, headers=headers).status_code == 404
    assert c.get(art, headers=h_root).status_code == 200
    # a checkpoint's check was queued at upload (a runner host serves it first)
    r = c.post(f"/api/submissions/{ckpt['id']}/check", headers=h_ada)
    assert r.status_code == 409 and "already queued" in r.json()["detail"]
    # pages follow the same rules
    login(c, "bob")
    assert c.get(f"/submit/submissions/{sid}").status_code == 404
    assert c.get(f"/submit/policies/{pid}").status_code == 404
    op = portal.client()
    login(op, "op")
    assert op.get("/submit").status_code == 403


def test_opting_in_to_the_public_board(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    pid = c.post(
        "/api/submissions/endpoints", json=endpoint_body("ws://127.0.0.1:9"), headers=h
    ).json()["policy_id"]
    assert c.get(f"/api/submissions/policies/{pid}", headers=h).json()["visibility"] == "private"
    r = c.patch(f"/api/submissions/policies/{pid}", json={"visibility": "public"}, headers=h)
    assert r.status_code == 200 and r.json()["visibility"] == "public"
    assert portal.audit("policy.update")[-1][4] == {"visibility": ["private", "public"]}
    r = c.patch(f"/api/submissions/policies/{pid}", json={"visibility": "everyone"}, headers=h)
    assert r.status_code == 422
    # and through the page
    login(c, "ada")
    r = c.post(
        f"/submit/policies/{pid}/visibility",
        data={"visibility": "private", "csrf_token": page_csrf(c, f"/submit/policies/{pid}")},
    )
    assert r.status_code == 303
    page = c.get(r.headers["location"]).text
    assert "it stays off the public board" in page and "Opt in to the public board" in page


# -- campaign progress and private results ---------------------------------------------------------
def _stored_result() -> dict[str, Any]:
    """A real result JSON (proctor.analysis.report.to_json) of two policies,
    the submitter's with the intervals the assertions below read."""
    import dataclasses

    import numpy as np

    from proctor.analysis.episodes import EpisodeTable
    from proctor.analysis.leaderboard import analyze
    from proctor.analysis.report import to_json
    from proctor.analysis.results import AnalysisProtocol
    from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models

    models = [
        dataclasses.replace(m, name=n)
        for m, n in zip(phail_like_models()[1:3], ("acme-server", "other-policy"), strict=True)
    ]
    eps = cohort(models, PHAIL_OBJECTS, episodes_per_cell=2, rng=np.random.default_rng(2))
    result = to_json(
        analyze(EpisodeTable(tuple(eps)), AnalysisProtocol(tau=240.0, bootstrap=30, seed=1))
    )
    mine = next(p for p in result["policies"] if p["policy"] == "acme-server")
    mine.update(
        rank=1,
        episodes=3,
        operations=24,
        completion={"estimate": 0.9, "ci": [0.8, 0.95]},
        rmst={"estimate": 12.5, "ci": [11.0, 14.0]},
    )
    return result


def _campaign(portal: Web, pid: int, sid: int) -> int:
    with portal.db() as s:
        other = factories.policy(s, "other-policy")
        obj = factories.object_type(s, "spoons")
        camp = factories.campaign(s, "spring", status=CampaignStatus.running)
        s.add_all(
            [
                CampaignPolicy(campaign_id=camp.id, policy_id=pid, submission_id=sid),
                CampaignPolicy(campaign_id=camp.id, policy_id=other.id),
            ]
        )
        mine = s.get(Policy, pid)
        assert mine is not None
        for i in range(8):
            a = factories.assignment(s, camp, mine if i % 2 == 0 else other, obj, i)
            a.status = AssignmentStatus.done if i < 5 else AssignmentStatus.pending
        s.add(
            AnalysisSnapshot(
                campaign_id=camp.id,
                label_stream=LabelStream.auto_and_reviewed,
                code_version="test",
                data_version="v1",
                result=_stored_result(),
            )
        )
        return camp.id


def test_campaign_progress_hides_my_count_until_the_campaign_closes(portal: Web) -> None:
    h = submitter(portal)
    c = portal.client()
    sub = c.post(
        "/api/submissions/endpoints", json=endpoint_body("ws://127.0.0.1:9"), headers=h
    ).json()
    cid = _campaign(portal, sub["policy_id"], sub["id"])
    (progress,) = c.get(f"/api/submissions/policies/{sub['policy_id']}", headers=h).json()[
        "campaigns"
    ]
    assert progress["status"] == "running"
    assert (progress["slots_done"], progress["slots_total"]) == (5, 8)
    assert progress["my_episodes"] is None and progress["results"] is None
    assert "hidden until the campaign closes" in progress["note"]
    with portal.db() as s:
        camp = s.get(Campaign, cid)
        assert camp is not None
        camp.status = CampaignStatus.closed
    (progress,) = c.get(f"/api/submissions/policies/{sub['policy_id']}", headers=h).json()[
        "campaigns"
    ]
    assert progress["my_episodes"] == 3
    results = progress["results"]
    assert (results["rank"], results["of"], results["episodes"]) == (1, 2, 3)
    assert results["completion"] == {"estimate": 0.9, "lo": 0.8, "hi": 0.95}
    assert progress["leaderboard"] is None and "private to you" in progress["note"]
    login(c, "ada")
    page = c.get(f"/submit/policies/{sub['policy_id']}").text
    assert "5 of 8 episodes of the campaign counted; 3 of them yours" in page
    assert "12.5 s (11–14)" in page
    with portal.db() as s:
        camp = s.get(Campaign, cid)
        assert camp is not None
        camp.status = CampaignStatus.released
    (progress,) = c.get(f"/api/submissions/policies/{sub['policy_id']}", headers=h).json()[
        "campaigns"
    ]
    # private (the default): public under its blinded arm label, the name withheld
    assert progress["leaderboard"].startswith(f"/leaderboard/{cid}/policies/arm%20")
    assert "withheld" in progress["note"] and "acme-server" not in progress["leaderboard"]
    r = c.patch(
        f"/api/submissions/policies/{sub['policy_id']}", json={"visibility": "public"}, headers=h
    )
    assert r.status_code == 200, r.text
    (progress,) = c.get(f"/api/submissions/policies/{sub['policy_id']}", headers=h).json()[
        "campaigns"
    ]
    assert progress["leaderboard"] == f"/leaderboard/{cid}/policies/acme-server"
    assert "under your policy's name" in progress["note"]


def test_an_admin_does_not_see_a_named_policys_results_before_release(portal: Web) -> None:
    """Before release a named policy's rank and scores are its blinded arm's
    row of the preview: showing them to an admin would unblind it without the
    audited unblind. Its owner sees them; everyone sees them once released."""
    h = submitter(portal)
    portal.add_user("root", Role.admin)
    h_root = bearer(portal.token("root", ("admin",)))
    c = portal.client()
    sub = c.post(
        "/api/submissions/endpoints", json=endpoint_body("ws://127.0.0.1:9"), headers=h
    ).json()
    cid = _campaign(portal, sub["policy_id"], sub["id"])
    with portal.db() as s:
        camp = s.get(Campaign, cid)
        assert camp is not None
        camp.status = CampaignStatus.closed
        audited = s.scalar(sa.select(sa.func.max(AuditLog.id)))
    path = f"/api/submissions/policies/{sub['policy_id']}"
    (mine,) = c.get(path, headers=h).json()["campaigns"]
    assert mine["results"]["rank"] == 1 and mine["my_episodes"] == 3
    r = c.get(path, headers=h_root)
    assert r.status_code == 200
    (seen,) = r.json()["campaigns"]
    assert seen["results"] is None and seen["my_episodes"] is None
    assert "sealed until the release" in seen["note"]
    assert (seen["slots_done"], seen["slots_total"]) == (5, 8)  # the campaign's own progress
    login(c, "root")
    page = c.get(f"/submit/policies/{sub['policy_id']}").text
    assert "sealed until the release" in page and "12.5 s" not in page
    with portal.db() as s:
        # nothing unblinded, so nothing to audit (but the sign-in: its reserved
        # attempt, then its success)
        new = s.scalars(sa.select(AuditLog.action).where(AuditLog.id > audited)).all()
        assert new == ["login.attempt", "login.success"]
        camp = s.get(Campaign, cid)
        assert camp is not None
        camp.status = CampaignStatus.released
    (seen,) = c.get(path, headers=h_root).json()["campaigns"]
    assert seen["results"]["rank"] == 1 and seen["my_episodes"] == 3


# -- pages ------------------------------------------------------------------------------
def test_the_portal_pages(portal: Web, demo_server: Any) -> None:
    portal.add_user("ada", Role.submitter)
    c = portal.client()
    login(c, "ada")
    page = c.get("/submit")
    assert page.status_code == 200
    assert "No policies yet" in page.text and 'id="upload-form"' in page.text
    csrf = page_csrf(c, "/submit")
    # a form with mistakes comes back with them, by field, and the key is not echoed
    r = c.post(
        "/submit/endpoints",
        data={
            "csrf_token": csrf,
            "policy_name": "acme-server",
            "url": "http://nope",
            "dialect": "openpi",
            "api_key": "do-not-echo",
            "chunk_length": "",
        },
    )
    assert r.status_code == 422
    assert "must be a WebSocket URL" in r.text and "do-not-echo" not in r.text
    assert 'value="acme-server"' in r.text
    url = demo_server("reference")
    r = c.post(
        "/submit/endpoints",
        data={
            "csrf_token": csrf,
            "policy_name": "acme-server",
            "url": url,
            "dialect": "roboarena",
            "action_space": "cartesian_position",
            "chunk_length": "4",
            "deterministic": "on",
        },
    )
    assert r.status_code == 303
    sub_page = c.get(r.headers["location"])
    assert "A check is queued" in sub_page.text and 'data-checking="true"' in sub_page.text
    run_worker(portal)
    sub_page = c.get(r.headers["location"]).text
    assert (
        'data-verdict="passed"' in sub_page
        and "Passed: the station can run your policy." in sub_page
    )
    assert "Determinism" in sub_page
    listing = c.get("/submit").text
    assert "acme-server" in listing and "verdict-passed" in listing


# -- the web process never runs a check ---------------------------------------------------
def test_the_web_app_never_imports_the_checker(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from proctor.core.settings import load_settings\n"
        "from proctor.web.app import create_app\n"
        f"create_app(load_settings(env='test', data_dir={str(tmp_path)!r}))\n"
        "print('proctor.policywire.conformance.check' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split()[0] == "False", out.stdout + out.stderr


def test_the_check_runs_in_a_worker_process_the_app_spawns(
    web_db_url: str, tmp_path: Path, demo_server: Any
) -> None:
    from proctor.web.app import create_app
    from tests.web.conftest import FakeClock

    settings = portal_settings(web_db_url, tmp_path, conformance_dispatch="subprocess")
    web = Web(app=create_app(settings), clock=FakeClock(), settings=settings)
    try:
        h = submitter(web)
        url = demo_server("reference")
        r = web.client().post("/api/submissions/endpoints", json=endpoint_body(url), headers=h)
        assert r.status_code == 201
        children = web.app.state.web.conformance_workers.running()
        assert children, "no worker process was started"
        for child in children:
            child.wait(120)
        deadline = time.monotonic() + 10
        while web.app.state.web.conformance_workers.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        with web.db() as s:
            run = s.scalars(sa.select(ConformanceRun)).one()
            assert run.status == ConformanceRunStatus.done, Path(
                settings.data_dir, "logs", "conformance.log"
            ).read_text()
            assert run.worker is not None and not run.worker.endswith(f":{os.getpid()}")
            sub = s.get(Submission, run.submission_id)
            assert sub is not None and sub.conformance_status == ConformanceStatus.passed
        log = Path(settings.data_dir, "logs", "conformance.log").read_text()
        assert f"run {run.id} (submission {sub.id}): passed" in log
    finally:
        web.app.state.web.engine.dispose()
