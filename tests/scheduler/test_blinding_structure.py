"""Blinding is structural (docs/architecture.md): the code that runs at the
robot — the station daemon, its local API, and the operator console — has
no way to read who a run belongs to. Checked by walking its source:

* it never names the tables that hold identity: ``Policy``, ``Submission``,
  ``CampaignPolicy``, ``Assignment`` (whose ``policy_id`` / ``submission_id``
  columns are the sealed mapping), ``RunnerServer`` (a checkpoint's server:
  its host, url and failure) — not by import, not as an attribute
  (``models.Policy``), not as a string (``getattr(models, "Policy")``);
* it never reads the identity columns (``.policy_id``, ``.submission_id``,
  ``.endpoint_url``, ``.endpoint_api_key_encrypted``, ``.owner_id``);
* it never queries the identity tables in raw SQL;
* it never imports the scheduler: the campaign's work reaches the station
  through ``proctor.core.work.WorkSource``, plugged in by a config string, and
  carries only an opaque run code and gateway URL.

``BLIND_PACKAGES`` lists the packages under the rule: the station (its local
API is ``proctor/station/console_api.py``, inside it) and the operator console
(``proctor/web/console``); ``BLIND_MODULES`` the kernel's contract of what a
station is handed (``proctor/core/work.py``). Each must exist, so a moved or
renamed package fails the walk instead of silently leaving it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLIND_PACKAGES = ("proctor/station", "proctor/web/console")
# what a station is handed lives in the kernel, below the station: under the rule too
BLIND_MODULES = ("proctor/core/work.py",)
IDENTITY_CLASSES = {"Policy", "Submission", "CampaignPolicy", "Assignment", "RunnerServer"}
IDENTITY_ATTRS = {
    "policy_id",
    "submission_id",
    "endpoint_url",
    "endpoint_api_key_encrypted",
    "owner_id",
}
IDENTITY_TABLES = {
    "policies",
    "submissions",
    "campaign_policies",
    "assignments",
    "runner_servers",
}
# a table name right after a SQL keyword: `FROM policies`, `JOIN "assignments"`
_SQL = re.compile(
    r"\b(from|join|update|into)\s+\"?(" + "|".join(sorted(IDENTITY_TABLES)) + r")\b",
    re.IGNORECASE,
)


def violations(source: str, where: str) -> list[str]:
    tree = ast.parse(source)
    # prose (docstrings, bare string statements) may talk about policies freely
    prose = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    out = []
    for node in ast.walk(tree):
        if id(node) in prose:
            continue
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module == "proctor.scheduler" or module.startswith("proctor.scheduler."):
                out.append(f"{line} imports {module}")
            for alias in node.names:
                if alias.name in IDENTITY_CLASSES:
                    out.append(f"{line} imports {alias.name} from {module}")
                if module == "proctor.scheduler" or (
                    module == "proctor" and alias.name == "scheduler"
                ):
                    out.append(f"{line} imports scheduler")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "proctor.scheduler" or alias.name.startswith("proctor.scheduler."):
                    out.append(f"{line} imports {alias.name}")
        elif isinstance(node, ast.Attribute):
            if node.attr in IDENTITY_CLASSES:
                out.append(f"{line} uses .{node.attr}")
            if node.attr in IDENTITY_ATTRS:
                out.append(f"{line} reads .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in IDENTITY_CLASSES:
            out.append(f"{line} names {node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in IDENTITY_CLASSES or text in IDENTITY_ATTRS:
                out.append(f"{line} spells {text!r}")
            elif _SQL.search(text):
                out.append(f"{line} queries an identity table in SQL")
    return out


def _blind_files() -> list[Path]:
    packages = [p for package in BLIND_PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    return packages + [ROOT / m for m in BLIND_MODULES]


def test_every_blind_package_exists() -> None:
    assert [p for p in BLIND_PACKAGES if not (ROOT / p / "__init__.py").is_file()] == []
    assert [m for m in BLIND_MODULES if not (ROOT / m).is_file()] == []


def test_the_walk_sees_the_station() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _blind_files()}
    assert "proctor/core/work.py" in names and "proctor/station/work_source.py" in names
    assert "proctor/station/cli.py" in names
    assert "proctor/station/console_api.py" in names  # the station's local API
    assert "proctor/web/console/routes.py" in names  # the operator console


def test_blind_code_cannot_read_policy_identity() -> None:
    bad = []
    for path in _blind_files():
        bad += violations(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    assert bad == []


@pytest.mark.parametrize(
    "snippet",
    [
        "from proctor.core.db.models import Policy",
        "from proctor.core.db.models.campaigns import Assignment as A",
        "import proctor.core.db.models as m\nx = m.Submission",
        "x = getattr(models, 'CampaignPolicy')",
        "def f(a):\n    return a.policy_id",
        "def f(s):\n    return s.endpoint_url",
        "q = 'SELECT name FROM policies WHERE id = 1'",
        "q = 'select * from episodes join assignments on true'",
        'q = """UPDATE "submissions" SET x = 1"""',
        "from proctor.core.db.models import RunnerServer",
        "q = 'SELECT url FROM runner_servers'",
        "from proctor.scheduler.claims import claim_next",
        "import proctor.scheduler.gateway",
        "from proctor import scheduler",
    ],
)
def test_the_checker_catches_each_way_in(snippet: str) -> None:
    assert violations(snippet, "snippet") != []


@pytest.mark.parametrize(
    "snippet",
    [
        "from proctor.core.db.models import Episode, ObjectType, Station",
        "from proctor.core.work import Work\nw.policy_url",
        "msg = 'the policy server returned actions of shape (10, 7)'",
        "x = 'policies'",  # a word is not a query
        "m = 'never from the browser; policies and submissions stay sealed'",
        '"""A docstring may say: SELECT name FROM policies."""',
    ],
)
def test_the_checker_lets_ordinary_station_code_through(snippet: str) -> None:
    assert violations(snippet, "snippet") == []


def test_the_work_a_station_receives_carries_no_identity() -> None:
    """The scheduler's side of the contract: what crosses to the station."""
    from proctor.core.work import Work
    from proctor.scheduler.claims import Claim

    for cls in (Claim, Work):
        names = {f.name for f in fields(cls)}
        assert not names & (IDENTITY_ATTRS | {"policy", "policy_name", "owner", "checkpoint"})


def test_the_station_apis_replies_carry_no_identity() -> None:
    """The station API's side of it: every model the server sends a station
    host (``proctor.core.station_api_wire``) has no field that could name the
    policy; a run's policy is reached through the gateway path's handle."""
    from pydantic import BaseModel

    from proctor.core import station_api_wire as wire

    replies = [
        m
        for m in vars(wire).values()
        if isinstance(m, type) and issubclass(m, BaseModel) and m.__module__ == wire.__name__
    ]
    assert {"WorkWire", "ClaimReply", "HelloReply", "EpisodeReply"} <= {m.__name__ for m in replies}
    for model in replies:
        names = set(model.model_fields)
        assert not names & (IDENTITY_ATTRS | {"policy", "policy_name", "owner", "checkpoint"}), (
            model
        )
