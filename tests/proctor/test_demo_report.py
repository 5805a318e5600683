"""The demo's printed leaderboard written to a file or a pipe (not a
terminal): rich assumed 80 columns and cut every number to "…"."""

from __future__ import annotations

import dataclasses
import io
import re

import numpy as np
from rich.console import Console

from proctor.analysis.episodes import EpisodeTable
from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import to_json
from proctor.analysis.results import AnalysisProtocol
from proctor.analysis.synthetic import PHAIL_OBJECTS, cohort, phail_like_models
from proctor.demo import world
from proctor.demo.report import print_leaderboard


def _result() -> dict:
    names = list(world.POLICY_NAMES.values())
    models = [
        dataclasses.replace(m, name=n) for m, n in zip(phail_like_models(), names, strict=True)
    ]
    eps = cohort(models, PHAIL_OBJECTS, episodes_per_cell=4, rng=np.random.default_rng(3))
    lb = analyze(EpisodeTable(tuple(eps)), AnalysisProtocol(tau=240.0, bootstrap=60, seed=0))
    return to_json(lb, code_version="proctor-test/analysis-test")


def test_a_piped_leaderboard_prints_every_number_whole() -> None:
    result = _result()
    buf = io.StringIO()
    console = Console(file=buf, width=80)  # what a pipe gets: not a terminal, 80 columns
    assert not console.is_terminal
    print_leaderboard(console, result, title="Leaderboard · campaign demo")
    text = buf.getvalue()
    assert "…" not in text
    rows = {line.split("│")[2].strip(): line for line in text.splitlines() if line.count("│") > 8}
    for p in result["policies"]:
        line = rows[p["policy"]]
        lo, hi = p["rmst"]["ci"]
        assert f"{p['rmst']['estimate']:.1f} ({lo:.1f}–{hi:.1f})" in line
        if not p["reference"]:
            lo, hi = p["hrt"]["ci"]
            assert f"{p['hrt']['estimate']:.1f} ({lo:.1f}–{hi:.1f})" in line
    for pair in result["pairs"]:
        assert f"{pair['a']} · {pair['b']}" in text
    assert not re.search(r"\x1b\[", text)  # no colour codes in a file


def test_a_terminal_keeps_its_own_width() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=100, force_terminal=True)
    print_leaderboard(console, _result(), title="Leaderboard")
    widths = {len(line) for line in re.sub(r"\x1b\[[0-9;]*m", "", buf.getvalue()).splitlines()}
    assert max(widths) <= 100


def test_a_policy_that_never_succeeds_on_an_object_prints() -> None:
    """Issue 22's acceptance: the demo's printed board handles a policy with
    no success on one object (its RMST there is τ)."""
    names = list(world.POLICY_NAMES.values())
    models = [
        dataclasses.replace(m, name=n) for m, n in zip(phail_like_models(), names, strict=True)
    ]
    models[-1] = dataclasses.replace(
        models[-1], object_speed={**models[-1].object_speed, "towels": 1e6}
    )
    eps = cohort(models, PHAIL_OBJECTS, episodes_per_cell=3, rng=np.random.default_rng(4))
    lb = analyze(EpisodeTable(tuple(eps)), AnalysisProtocol(tau=240.0, bootstrap=40, seed=0))
    result = to_json(lb, code_version="proctor-test/analysis-test")
    stuck = next(p for p in result["policies"] if p["policy"] == names[-1])
    towels = next(o for o in stuck["per_object"] if o["object"] == "towels")
    assert towels["rmst"]["estimate"] == 240.0 and towels["median"]["estimate"] is None
    buf = io.StringIO()
    print_leaderboard(Console(file=buf, width=80), result, title="Leaderboard")
    assert names[-1] in buf.getvalue() and "…" not in buf.getvalue()


def test_envelope_interventions_print_beside_safety_stops() -> None:
    """The column follows the snapshot: a rate where episodes were counted, a
    dash where none was (unknown, not zero)."""
    names = list(world.POLICY_NAMES.values())
    models = [
        dataclasses.replace(m, name=n) for m, n in zip(phail_like_models(), names, strict=True)
    ]
    eps = cohort(models, PHAIL_OBJECTS, episodes_per_cell=3, rng=np.random.default_rng(5))
    # the first policy's stations counted 3 interventions an episode; the others none
    eps = [
        dataclasses.replace(e, envelope_interventions=3) if e.policy == names[1] else e for e in eps
    ]
    lb = analyze(EpisodeTable(tuple(eps)), AnalysisProtocol(tau=240.0, bootstrap=40, seed=0))
    result = to_json(lb, code_version="proctor-test/analysis-test")
    buf = io.StringIO()
    print_leaderboard(Console(file=buf, width=80), result, title="Leaderboard")
    lines = buf.getvalue().splitlines()
    header = next(line for line in lines if "stop/ep" in line)
    cells = [c.strip() for c in header.split("┃")]
    at = cells.index("env/ep")
    assert cells[at - 1] == "stop/ep"
    rows = {line.split("│")[2].strip(): line for line in lines if line.count("│") > 8}
    for p in result["policies"]:
        shown = rows[p["policy"]].split("│")[at].strip()
        assert shown == ("3.00" if p["policy"] == names[1] else "—"), p["policy"]
