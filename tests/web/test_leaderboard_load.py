"""Anonymous filtered boards cannot slow the unfiltered one (security review
round three, [N2]: 200 anonymous distinct-filter requests, 40 at a time, took
the unfiltered board from 0.04 s to 1.2–3.9 s, each filter a fresh analysis).

The app runs under uvicorn on loopback; a second process
(``tests.web.subset_load``) measures the unfiltered board's latency alone
(idle), then while 200 requests run 40 at a time: 200 distinct anonymous
filters (every combination of the campaign's factors and label streams,
then unknown stations), and, for comparison, 200 requests for the
unfiltered board itself — what 40 ordinary readers cost. Each burst runs
twice and the better round counts: the machine is small and shared, and
another process's burst must not decide it.

The bar: the unfiltered board's p99 under the filters stays within twice its
p99 without them — twice the larger of its idle p99 and its p99 under the
burst of ordinary reads, because on two shared cores any 40 concurrent
requests to one Python process (static files too) raise the p99 of a
millisecond-cheap page well past twice its idle value — plus 50 ms, so that
scheduling noise of a few milliseconds does not decide it. Before the fix
the filters held the p99 at 1.9–2.2 s against 0.05–0.2 s for the ordinary
burst; after, they cost what the ordinary reads cost.

The server's own CPU for each burst is held too (read from /proc by the
load process, so whatever else the machine runs does not move it): the 200
filters may cost at most twice the ordinary burst plus one second — one
analysis alone cost 0.1–0.7 s before."""

from __future__ import annotations

import gc
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from proctor.core.domain import LabelStream
from tests.browser import serve_app
from tests.web.conftest import Web
from tests.web.leaderboard_data import ALL_STREAMS, seed_campaign

REQUESTS = 200
CONCURRENCY = 40
ROUNDS = 2
FLOOR_S = 0.05
CPU_FLOOR_S = 1.0


def _filters(cid: int, station: str) -> list[str]:
    """200 distinct anonymous filters of the campaign's board."""
    from urllib.parse import urlencode

    factors = {
        "tote_side": (None, "left", "right"),
        "camera_side": (None, "left", "right"),
        "object_tag": (None, "rigid", "deformable"),
        "station": (None, station),
        "stream": (None, *(s.value for s in LabelStream if s != LabelStream.auto_and_reviewed)),
    }
    paths = []
    for values in itertools.product(*factors.values()):
        given = {k: v for k, v in zip(factors, values, strict=True) if v is not None}
        if set(given) - {"stream"}:
            paths.append(f"/api/leaderboard/{cid}?{urlencode(given)}")
    paths += [f"/api/leaderboard/{cid}?station=nonexistent{i}" for i in range(REQUESTS)]
    return paths[:REQUESTS]


@pytest.mark.slow
def test_anonymous_filters_leave_the_unfiltered_board_fast(web: Web, tmp_path: Path) -> None:
    with web.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=6, seed=41, streams=ALL_STREAMS)
    cid = seeded.campaign_id
    with web.db() as s:
        from proctor.core.db.models import Station

        station = s.query(Station.name).filter(Station.name.like("cell-%")).scalar()
    paths = _filters(cid, station)
    assert len(set(paths)) == REQUESTS
    control = f"/api/leaderboard/{cid}"
    # the server runs in this process, whose CPU the load process reads: late in
    # the suite its heap is large, and a full collection of it falling inside a
    # burst (1-2 s of CPU, seen once in a full run) is not what the filters cost.
    # Frozen, the suite's objects are left out of every collection until the end
    gc.collect()
    gc.freeze()
    try:
        got = _measure(web, control, paths)
    finally:
        gc.unfreeze()

    def p99(times: list[float]) -> float:
        return float(np.percentile(times, 99))

    idle = p99(got["idle"])
    ordinary = min(p99(r["ordinary"]["control"]) for r in got["rounds"])
    filtered = min(p99(r["filters"]["control"]) for r in got["rounds"])
    # the server's CPU for each burst: what the filters cost, whatever else the machine runs
    cpu = {
        name: [r[name]["server_cpu_s"] for r in got["rounds"]] for name in ("ordinary", "filters")
    }
    figures = (
        f"unfiltered board p99: idle {idle * 1000:.1f} ms, under ordinary reads "
        f"{ordinary * 1000:.1f} ms, under the filters {filtered * 1000:.1f} ms; "
        + "; ".join(
            f"{name} {r[name]['load_s']:.1f} s, server CPU {r[name]['server_cpu_s']:.2f} s, "
            f"{r[name]['codes']}"
            for r in got["rounds"]
            for name in ("ordinary", "filters")
        )
    )
    print(figures)
    for r in got["rounds"]:  # every request answered before the deadline
        assert "0" not in r["filters"]["codes"], figures
    # the better round, as for the latencies: a round's CPU also holds whatever
    # else this process's threads did meanwhile (the filters' own cost, once a
    # fresh analysis each, was in both rounds)
    assert min(cpu["filters"]) <= 2 * max(cpu["ordinary"]) + CPU_FLOOR_S, figures
    assert filtered <= 2 * max(idle, ordinary) + FLOOR_S, figures


def _measure(web: Web, control: str, paths: list[str]) -> dict:  # type: ignore[type-arg]
    """Both bursts, ``ROUNDS`` times, against the app served in this process."""
    plan = {"rounds": ROUNDS, "phases": {"ordinary": [control] * REQUESTS, "filters": paths}}
    with serve_app(web.app, web.settings) as server:
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.web.subset_load",
                server.base_url,
                control,
                str(CONCURRENCY),
                str(os.getpid()),  # the server runs in this process
            ],
            input=json.dumps(plan),
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        )
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout)
    return got  # type: ignore[no-any-return]
