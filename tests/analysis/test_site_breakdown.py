"""Each policy's results broken down by the site and the station its
episodes ran at, on a table small enough to score by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proctor.analysis.episodes import Episode, EpisodeTable
from proctor.analysis.interchange import read_interchange, write_interchange
from proctor.analysis.leaderboard import analyze
from proctor.analysis.report import RESULT_KEYS, to_json
from proctor.analysis.results import AnalysisProtocol, Breakdown

PROTOCOL = AnalysisProtocol(tau=10.0, bootstrap=200, seed=1)


def one(eid: str, policy: str, obj: str, t: float | None, where: str | None, **kw) -> Episode:
    """A one-item episode at ``where`` ("site/station"): success at t, or (t
    None) a dropped item (a ghost: it counts τ in RMST)."""
    site, station = where.split("/") if where else (None, None)
    if t is None:
        return Episode(eid, policy, obj, 1, 5.0, (), 0, 1, "success", site=site, station=station)
    return Episode(eid, policy, obj, 1, t, (t,), 0, 0, "success", site=site, station=station, **kw)


def table() -> EpisodeTable:
    return EpisodeTable(
        episodes=(
            one("r1", "human", "o1", 2.0, "lab-a/cell-a", reference=True),
            one("r2", "human", "o1", 4.0, "lab-b/cell-b", reference=True),
            one("r3", "human", "o2", 1.0, "lab-a/cell-a", reference=True),
            one("r4", "human", "o2", 1.0, "lab-b/cell-c", reference=True),
            one("m1", "bot", "o1", 6.0, "lab-a/cell-a"),
            one("m2", "bot", "o1", None, "lab-b/cell-b"),
            one("m3", "bot", "o2", 4.0, "lab-a/cell-a"),
            one("m4", "bot", "o2", 6.0, "lab-b/cell-c"),
            # a station that declared nothing: scored overall, in no site's row
            one("m5", "bot", "o1", 1.0, None),
        )
    )


def _by_key(rows: tuple[Breakdown, ...]) -> dict[str, Breakdown]:
    return {b.key: b for b in rows}


def test_per_site_and_per_station_scores_by_hand() -> None:
    lb = analyze(table(), PROTOCOL)
    assert lb.sites == ("lab-a", "lab-b") and lb.stations == ("cell-a", "cell-b", "cell-c")
    by = {p.policy: p for p in lb.policies}
    bot, human = by["bot"], by["human"]
    # the yardstick is the whole reference cell: RMST(10) o1 (2+4)/2 = 3, o2 (1+1)/2 = 1
    site = _by_key(bot.per_site)
    # lab-a: o1 {6} RMST 6, o2 {4} RMST 4; macro 5; HRT (3/6 + 1/4)/2 = 37.5 %
    a = site["lab-a"]
    assert (a.episodes, a.objects) == (2, ("o1", "o2"))
    assert a.rmst.estimate == pytest.approx(5.0)
    assert a.hrt is not None and a.hrt.estimate == pytest.approx(37.5)
    assert a.completion.estimate == pytest.approx(1.0)
    # lab-b: o1 {ghost} RMST τ = 10, o2 {6}; macro 8; HRT (3/10 + 1/6)/2 = 23.33 %;
    # one item of two placed
    b = site["lab-b"]
    assert b.rmst.estimate == pytest.approx(8.0)
    assert b.hrt is not None and b.hrt.estimate == pytest.approx(100 * (0.3 + 1 / 6) / 2)
    assert b.completion.estimate == pytest.approx(0.5)
    # m5 declared no site: in neither row, but in the policy's own count
    assert a.episodes + b.episodes == 4 and bot.episodes == 5

    station = _by_key(bot.per_station)
    assert station["cell-a"].rmst.estimate == pytest.approx(5.0)
    assert station["cell-b"].objects == ("o1",)
    assert station["cell-b"].rmst.estimate == pytest.approx(10.0)
    assert station["cell-b"].hrt.estimate == pytest.approx(30.0)  # type: ignore[union-attr]
    assert station["cell-b"].completion.estimate == pytest.approx(0.0)
    assert station["cell-c"].objects == ("o2",)
    assert station["cell-c"].hrt.estimate == pytest.approx(100 / 6)  # type: ignore[union-attr]

    # the reference's own rows show how much a site moves the human:
    # lab-a o1 {2}, o2 {1} → HRT (3/2 + 1/1)/2 = 125 %; lab-b o1 {4}, o2 {1} → 87.5 %
    h = _by_key(human.per_site)
    assert h["lab-a"].hrt.estimate == pytest.approx(125.0)  # type: ignore[union-attr]
    assert h["lab-b"].hrt.estimate == pytest.approx(87.5)  # type: ignore[union-attr]


def test_the_breakdowns_carry_intervals() -> None:
    lb = analyze(table(), PROTOCOL)
    bot = next(p for p in lb.policies if p.policy == "bot")
    for row in (*bot.per_site, *bot.per_station):
        for iv in (row.rmst, row.hrt, row.completion):
            assert iv is not None and iv.lo is not None and iv.hi is not None
            assert iv.estimate is not None and iv.lo <= iv.estimate <= iv.hi
    # one episode per sub-cell: every replicate is that episode, a point interval
    a = _by_key(bot.per_site)["lab-a"]
    assert a.rmst.lo == pytest.approx(5.0) and a.rmst.hi == pytest.approx(5.0)
    # two at one station: a replicate draws {2, 2}, {2, 6} or {6, 6}, RMST 2, 4 or 6
    # (a quarter each at the ends), so the 95 % interval is [2, 6] around 4
    two = EpisodeTable(
        episodes=(
            one("x1", "bot", "o1", 2.0, "lab-a/cell-a"),
            one("x2", "bot", "o1", 6.0, "lab-a/cell-a"),
        )
    )
    (row,) = analyze(two, PROTOCOL).policies[0].per_station
    assert (row.rmst.estimate, row.rmst.lo, row.rmst.hi) == pytest.approx((4.0, 2.0, 6.0))


def test_the_leaderboard_json_has_them() -> None:
    doc = to_json(analyze(table(), PROTOCOL))
    assert doc["sites"] == ["lab-a", "lab-b"]
    assert doc["stations"] == ["cell-a", "cell-b", "cell-c"]
    bot = next(p for p in doc["policies"] if p["policy"] == "bot")
    assert [b["key"] for b in bot["per_site"]] == ["lab-a", "lab-b"]
    assert bot["per_station"][1]["rmst"] == {"estimate": 10.0, "ci": [10.0, 10.0]}
    assert bot["per_site"][0]["hrt"]["estimate"] == pytest.approx(37.5)
    assert {"sites", "stations", "per_site", "per_station"} <= RESULT_KEYS
    json.dumps(doc, allow_nan=False)


def test_the_interchange_file_carries_the_site(tmp_path: Path) -> None:
    path = tmp_path / "episodes.csv"
    write_interchange(table().episodes, path)
    back = read_interchange(path)
    assert [(e.site, e.station) for e in back.episodes] == [
        (e.site, e.station) for e in table().episodes
    ]
    # a file written before the column existed still reads: no site
    old = tmp_path / "old.csv"
    old.write_text(
        "episode_id,policy,object,items,duration_s,placements_s,lost,dropped,outcome,station\n"
        "e1,bot,o1,1,2.0,2.0,0,0,success,cell-a\n"
    )
    (ep,) = read_interchange(old).episodes
    assert (ep.site, ep.station) == (None, "cell-a")
