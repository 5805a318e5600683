"""Acceptance: hostile ``command`` checkpoints, uploaded through the API and
served by one real runner host (``RunnerWorker``, bubblewrap) beside a
benign one, checked by the conformance worker.

* one probes at start-up — the database and the web app over loopback, the
  data folder, the config, the artifact store and the other checkpoints'
  folders, writes outside its temp, secrets in its environment — then
  serves the wire properly: every probe fails, the check passes, and the
  admin sees what it tried (the output tail and the tripwire's attempts on
  its runner row);
* one forks without bound: ``sandbox_refused``, the submitter's fault, its
  check failed naming it;
* one allocates past its memory limit: ``out_of_memory``, the same;
* the benign checkpoint's check passes, and passes again after the hostile
  ones failed, at the same server: the host kept serving it throughout.

The checkpoints are the demo's ``command`` arm (``proctor.demo.checkpoint``)
with a ``serve.py`` that runs ``tests/runner/sandbox/scripts/hostile.py``
first (its environment is the demo's, cached host-wide).
"""

from __future__ import annotations

import json
import secrets
import tarfile
from pathlib import Path

import httpx
import pytest

from proctor.core.domain import RunnerFailure, RunnerFault, RunnerStatus
from proctor.core.settings import Settings
from proctor.demo.checkpoint import build_archive
from proctor.web.app import create_app
from proctor.web.submissions import queue as checks
from proctor.web.submissions import worker as conformance
from tests.browser import serve_app
from tests.runner.system import (
    WorkerThread,
    runner_rows,
    submission_of,
    system_settings,
    tar_folder,
)
from tests.scheduler.conftest import CommittedDb
from tests.web.conftest import FakeClock, Web
from tests.web.submissions_support import submitter, upload

pytestmark = pytest.mark.slow  # the first run on a machine builds the arm's environment

HOSTILE = Path(__file__).resolve().parent / "sandbox" / "scripts" / "hostile.py"
SECRET = "the-host-secret-7f3a"
MEMORY = 256 * 2**20

SERVE = """\
import pathlib, runpy, sys
here = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(here))
import hostile
{action}
runpy.run_path(str(here / "demo_serve.py"), run_name="__main__")
"""


def _archive(base: Path, name: str, action: str | None, tmp: Path) -> bytes:
    """The demo arm's archive, renamed; with ``action`` its serve.py runs it first."""
    files: dict[str, bytes | Path] = {}
    with tarfile.open(build_archive(tmp / f"{name}.tgz", seed=1, name=name)) as tar:
        for member in tar.getmembers():
            f = tar.extractfile(member)
            assert f is not None
            files[member.name] = f.read()
    if action is not None:
        files["demo_serve.py"] = files["serve.py"]
        files["serve.py"] = SERVE.format(action=action).encode()
        files["hostile.py"] = HOSTILE
    return tar_folder(files)


def _probe_config(settings: Settings, web_port: int) -> dict[str, object]:
    data = Path(settings.data_dir)
    return {
        "web_port": web_port,
        "host_addresses": [],
        "read": [
            str(data),
            str(settings.artifacts_location),
            str(data / "runner"),  # every unpacked checkpoint of this host
            "/etc/proctor/proctor.toml",
            "/root",
        ],
        "write": [str(data / "pwned"), "/checkpoint/pwned", "/opt/proctor/pwned", "/pwned"],
    }


def _probes(tail: list[str]) -> dict[str, object]:
    out = {}
    for line in tail:
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "probe" in found:
            out[found["probe"]] = found["result"]
    return out


def test_hostile_checkpoints_are_contained_attributed_and_the_host_keeps_serving(
    committed_db: CommittedDb, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the worker's (this process's) environment holds a secret the sandbox must not see
    monkeypatch.setenv("PROCTOR_SECRET_KEY", SECRET)
    db = committed_db
    tag = secrets.token_hex(3)
    settings = system_settings(
        db.url, tmp_path / "data", memory_bytes=MEMORY, max_processes=32, max_servers=4
    )
    app = create_app(settings)
    web = Web(app=app, clock=FakeClock(), settings=settings)
    good_h = submitter(web, f"good-{tag}")
    bad_h = submitter(web, f"evil-{tag}")
    ids: dict[str, int] = {}
    with serve_app(app, settings) as live, httpx.Client(base_url=live.base_url) as http:
        port = int(live.base_url.rsplit(":", 1)[1])
        probe = f"hostile.probes({_probe_config(settings, port)!r})"
        plan = {
            "benign": (good_h, None),
            "probes": (bad_h, probe),
            "fork": (bad_h, "hostile.fork()"),
            "memory": (bad_h, "hostile.memory(1024)"),
        }
        for kind, (h, action) in plan.items():
            archive = _archive(tmp_path, f"{kind}-{tag}", action, tmp_path)
            r = upload(http, h, archive, chunk=1 << 20)
            assert r.status_code in (200, 201), r.text
            ids[kind] = int(r.json()["id"])

        with WorkerThread(settings) as host:
            verdicts = {
                o.submission_id: o for o in conformance.work(db.factory, settings, poll_s=0.2)
            }
            assert {k: verdicts[i].verdict for k, i in ids.items()} == {
                "benign": "passed",
                "probes": "passed",
                "fork": "failed",
                "memory": "failed",
            }, {k: verdicts[i].summary for k, i in ids.items()}

            # the benign server is asked again, after the hostile ones failed
            with db.session() as s:
                checks.enqueue(
                    s, submission=submission_of(s, ids["benign"]), requested_by_id=None, now=_now()
                )
            (again,) = conformance.work(db.factory, settings, poll_s=0.2)
            assert (again.submission_id, again.verdict) == (ids["benign"], "passed")
            with db.session() as s:
                (benign,) = runner_rows(s, ids["benign"])
                assert benign.status == RunnerStatus.ready  # the same server, still up
            bad_page = http.get(f"/api/submissions/{ids['fork']}", headers=bad_h).json()
        # the worker stopped: its servers' rows end with their diagnostics
        assert not host.thread.is_alive()

    with db.session() as s:
        for kind, failure in (
            ("fork", RunnerFailure.sandbox_refused),
            ("memory", RunnerFailure.out_of_memory),
        ):
            # one server per check: a failed one is not started again
            (row,) = runner_rows(s, ids[kind])
            assert (row.status, row.failure, row.fault) == (
                RunnerStatus.failed,
                failure,
                RunnerFault.submitter,
            ), row.message
            report = submission_of(s, ids[kind]).conformance_report
            (finding,) = report["findings"]
            assert finding["check"] == "runner"
            assert finding["details"]["failure"] == failure.value
            assert finding["details"]["fault"] == "submitter"
        (fork_row,) = runner_rows(s, ids["fork"])
        assert fork_row.diagnostics["process_limit_hit"] is True
        (memory_row,) = runner_rows(s, ids["memory"])
        assert memory_row.diagnostics["oom_killed"] is True
        assert memory_row.diagnostics["memory_peak_bytes"] <= MEMORY + 2**20

        (probe_row,) = runner_rows(s, ids["probes"])
        assert probe_row.status == RunnerStatus.stopped  # by the worker's shutdown, not failed
        diag = probe_row.diagnostics
        (benign,) = runner_rows(s, ids["benign"])
        assert benign.status == RunnerStatus.stopped

    assert bad_page["runner"]["failure"] == "sandbox_refused"
    found = _probes(diag["output_tail"])
    # nothing it tried worked: no database, no web app, no host file, no write
    # outside its temp, no secret; its own checkpoint and temp work
    # (the database's port inside is the bridge's tripwire: it closes at once,
    # where PostgreSQL would answer the SSL request with "N" or "S")
    assert found["postgres"].get("value", "") == "", found["postgres"]
    for name in ("host_web_loopback", "dns"):
        assert found[name]["ok"] is False, (name, found[name])
    config = _probe_config(settings, 0)
    for path in config["read"]:  # type: ignore[attr-defined]
        assert found[f"read {path}"]["ok"] is False, (path, found[f"read {path}"])
    for path in config["write"]:  # type: ignore[attr-defined]
        assert found[f"write {path}"]["ok"] is False, (path, found[f"write {path}"])
    assert not (tmp_path / "data" / "pwned").exists()
    assert found["secret_env"] is None
    assert not any("PROCTOR" in n for n in found["env_names"])
    assert found["own_checkpoint"]["ok"] is True and found["tmp_writable"]["ok"] is True
    # and the admin sees what it tried: the tripwire on the database's port
    assert any("5432" in str(a) for a in diag["attempts"]), diag["attempts"]
    assert SECRET not in json.dumps(diag)


def _now():  # type: ignore[no-untyped-def]
    from proctor.core.db.types import utcnow

    return utcnow()
