"""The leaderboard and policy pages in headless Chromium: the numbers the
browser shows are the snapshot's, the charts render (SVG drawn by the
page's script), export as SVG and PNG, and the pages fit a tablet. Every
request stays on loopback (the ``page`` fixture fails the test otherwise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from proctor.core.domain import LabelStream
from proctor.web.leaderboard.format import num, pct
from proctor.web.snapshots import service
from tests.browser import LiveServer
from tests.web.leaderboard_data import ALL_STREAMS, seed_campaign

pytestmark = pytest.mark.browser


def _seed(server: LiveServer) -> tuple[int, dict[str, Any]]:
    with server.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=6, seed=17, streams=ALL_STREAMS)
    with server.db() as s:
        row = service.latest_row(
            s, campaign_id=seeded.campaign_id, stream=LabelStream.auto_and_reviewed
        )
        return seeded.campaign_id, row.result


def test_the_leaderboard_shows_the_snapshots_numbers(page: Any, live_server: LiveServer) -> None:
    cid, result = _seed(live_server)
    page.goto("/leaderboard")
    page.wait_for_selector("#hrt-chart svg")
    shown = page.eval_on_selector_all(
        "#board-table tbody tr",
        """rows => rows.map(tr => ({
            policy: tr.dataset.policy,
            cells: Object.fromEntries(Array.from(tr.querySelectorAll('span.num[data-key]')).map(
                s => [s.dataset.key,
                      {value: Number(s.dataset.value), text: s.textContent.trim()}])),
            letters: tr.querySelector('[data-cell=letters]').textContent.trim()}))""",
    )
    assert [r["policy"] for r in shown] == [p["policy"] for p in result["policies"]]
    for row, p in zip(shown, result["policies"], strict=True):
        want = {
            "hrt": (p["hrt"]["estimate"], num),
            "rmst": (p["rmst"]["estimate"], num),
            "completion": (p["completion"]["estimate"], pct),
            "drops": (p["failure_modes"]["drops_per_operation"]["estimate"], pct),
            "safety": (p["failure_modes"]["safety_stops_per_episode"]["estimate"], num),
            "envelope": (p["failure_modes"]["envelope_interventions_per_episode"]["estimate"], num),
            "interventions": (p["failure_modes"]["operator_stops_per_episode"]["estimate"], num),
            "episodes": (p["episodes"], str),
            "own_faults": (p["policy_faults"]["share"]["estimate"], pct),
        }
        for key, (value, fmt) in want.items():
            if value is None:  # not defined: no number cell (the dash is checked below)
                assert key not in row["cells"], (p["policy"], key)
                continue
            assert row["cells"][key]["value"] == pytest.approx(value, rel=1e-12), (p["policy"], key)
            assert row["cells"][key]["text"] == fmt(value)
        assert row["letters"] == p["letters"]
    envelope = page.eval_on_selector_all(
        "#board-table tbody tr",
        "rows => rows.map(tr => tr.querySelector('[data-cell=envelope]').textContent.trim())",
    )
    for text, p in zip(envelope, result["policies"], strict=True):
        if p["failure_modes"]["envelope_interventions_per_episode"]["estimate"] is None:
            assert text == "—", p["policy"]
    assert "—" in envelope and len(set(envelope)) > 1
    # the chart: one row per policy with an HRT, each linking to its page
    rows = page.eval_on_selector_all(
        "#hrt-chart svg g[data-row]", "gs => gs.map(g => g.dataset.row)"
    )
    assert rows == [p["policy"] for p in result["policies"] if p["hrt"] is not None]
    page.check("input[name=metric][value=rmst]")
    page.wait_for_selector("#hrt-chart[data-metric=rmst] svg")
    page.click(f"#hrt-chart svg g[data-row='{result['policies'][1]['policy']}'] rect:last-of-type")
    page.wait_for_url(
        f"**/leaderboard/{cid}/policies/{quote(result['policies'][1]['policy'], safe='')}"
    )
    assert page.page_errors == []


@pytest.mark.parametrize("width", [1400, 1280, 800])
def test_the_board_opens_with_what_was_evaluated_and_the_ranking(
    page: Any, live_server: LiveServer, width: int
) -> None:
    """At 1280×900 (and 1400, and a tablet's 800) the first screen says what was
    evaluated and shows the ranking; the protocol's details are folded away."""
    cid, result = _seed(live_server)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/leaderboard/{cid}")
    summary = page.locator("[data-testid=board-summary]")
    text = " ".join(summary.inner_text().split())
    n = sum(not p["reference"] for p in result["policies"])
    assert f"{n} policies against the human reference" in text, text
    objects = sorted({o["object"] for p in result["policies"] for o in p["per_object"]})
    assert f"on {len(objects)} objects" in text and all(o in text for o in objects), text
    first = next(p for p in result["policies"] if p["rank"] == 1)
    assert page.locator("[data-testid=board-first]").inner_text() == first["policy"]
    # tied: every policy sharing a group letter with the first (not only identical letters)
    tied = [
        p["policy"]
        for p in result["policies"]
        if not p["reference"] and p is not first and set(p["letters"]) & set(first["letters"])
    ]
    if tied:
        assert f"tied with {', '.join(tied)}" in text, text
    else:
        assert "tied with" not in text, text
    # the ranking: the header and every policy row inside the first viewport
    rows = page.locator("#board-table tbody tr")
    assert rows.count() == len(result["policies"])
    for i in range(rows.count()):
        box = rows.nth(i).bounding_box()
        assert box is not None and box["y"] + box["height"] <= 900, (width, i, box)
    assert not page.locator("#protocol-details").evaluate("d => d.open")
    assert page.locator("dl.protocol").is_hidden()
    page.click("#protocol-details summary")
    assert page.locator("dl.protocol").is_visible()


def test_the_leaderboard_chart_exports_and_fits_a_tablet(
    page: Any, live_server: LiveServer
) -> None:
    cid, _ = _seed(live_server)
    page.set_viewport_size({"width": 820, "height": 1180})  # a tablet in portrait
    page.goto(f"/leaderboard/{cid}")
    page.wait_for_selector("#hrt-chart svg")
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    chart_width = page.eval_on_selector("#hrt-chart svg", "s => s.getBoundingClientRect().width")
    assert chart_width <= 820
    with page.expect_download() as dl:
        page.click("button[data-export=svg]")
    svg = Path(dl.value.path()).read_text()
    assert svg.startswith("<?xml") and "HRT with 95 % intervals" in svg
    with page.expect_download() as dl:
        page.click("button[data-export=png]")
    assert Path(dl.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # touch-sized controls
    heights = page.eval_on_selector_all(
        ".tabs a", "as => as.map(a => a.getBoundingClientRect().height)"
    )
    assert heights and min(heights) >= 34
    assert page.page_errors == []


def test_the_policy_pages_charts_render(page: Any, live_server: LiveServer) -> None:
    cid, result = _seed(live_server)
    policy = result["policies"][1]
    page.goto(f"/leaderboard/{cid}/policies/{quote(policy['policy'], safe='')}")
    page.wait_for_selector("[data-chart=tradeoff] svg")
    n_objects = len(policy["per_object"])
    # a CDF per object: this policy and the reference, each with a band
    for i in range(n_objects):
        paths = page.eval_on_selector_all(
            f"[data-chart=cdf][data-index='{i}'] svg path[data-series]",
            "ps => ps.map(p => p.dataset.series)",
        )
        assert paths == [policy["policy"], result["protocol"]["reference"]]
        bands = page.eval_on_selector_all(
            f"[data-chart=cdf][data-index='{i}'] svg path[fill-opacity]", "ps => ps.length"
        )
        assert bands == 2
    assert page.locator("[data-chart=pp] svg").count() == n_objects
    assert page.locator("[data-chart=qq] svg circle").count() > 0
    # six rates in the chart; envelope interventions (a count) only in the table
    assert page.locator("[data-chart=failures] svg g[data-row]").count() == 6
    envelope = policy["failure_modes"]["envelope_interventions_per_episode"]["estimate"]
    cell = page.locator("tr[data-mode=envelope_interventions_per_episode] span.num")
    assert float(cell.get_attribute("data-value")) == pytest.approx(envelope, rel=1e-12)
    assert cell.text_content() == num(envelope)

    # the time axis fits the data: the curves span at least half the plot's width
    # (a 0–τ axis squeezed them into its left few percent), τ named in the label
    def spans(i: int) -> float:
        """How far across the plot the curves rise: the last success's x, as a
        share of the plot area's width (a step drawn flat to τ does not count)."""
        return page.evaluate(
            """i => {
                const c = window.proctorPolicyCharts[`cdf-${i}`];
                let last = 0;
                for (const s of c.series) {
                    for (let k = 1; k < s.x.length; k++) {
                        if (s.y[k] > s.y[k - 1]) last = Math.max(last, s.x[k]);
                    }
                }
                const plotWidth = c.width - c.m.l - c.m.r;
                return (c.sx(last) - c.m.l) / plotWidth;
            }""",
            i,
        )

    tau = result["protocol"]["tau"]
    for i in range(n_objects):
        assert spans(i) >= 0.5, (i, spans(i))
        label = page.text_content(f"[data-chart=cdf][data-index='{i}'] svg")
        assert f"τ = {tau:g} s" in label
    fitted = float(page.get_attribute("[data-chart=cdf][data-index='0']", "data-fitted"))
    assert fitted < tau  # this campaign's successes all come well before τ
    toggle = page.locator(".chart-toolbar[data-export='cdf-0'] button[data-act=time-range]")
    toggle.click()  # the whole 0–τ, τ's line at the right edge
    assert toggle.get_attribute("aria-pressed") == "true"
    assert spans(0) < fitted / tau
    assert page.locator("[data-chart=cdf][data-index='0'] svg line[data-vline='τ']").count() == 1
    toggle.click()
    assert spans(0) >= 0.5
    # hovering a CDF reads its values out
    box = page.locator("[data-chart=cdf][data-index='0'] svg").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    tip = page.locator("[data-chart=cdf][data-index='0'] .chart-tip")
    assert tip.is_visible() and policy["policy"] in tip.text_content()
    # a legend entry hides its series
    page.click(f"[data-chart=cdf][data-index='0'] g[data-legend='{policy['policy']}']")
    assert (
        page.locator(
            f"[data-chart=cdf][data-index='0'] path[data-series='{policy['policy']}']"
        ).count()
        == 0
    )
    # compare with another policy instead of the reference
    other = result["policies"][2]["policy"]
    page.select_option("#vs", other)
    page.click("form.compare button")
    page.wait_for_selector("[data-chart=cdf] svg")
    series = page.eval_on_selector_all(
        "[data-chart=cdf][data-index='0'] svg path[data-series]",
        "ps => ps.map(p => p.dataset.series)",
    )
    assert series == [policy["policy"], other]
    # the P-P and Q-Q follow the comparator too: the plotted points are the ones computed
    # from the two stored curves (the API's), not the stored plots against the reference
    assert page.get_attribute("#pp", "data-comparator") == other
    assert other in page.text_content("#pp-title")
    want = page.evaluate(
        "async (u) => (await (await fetch(u)).json()).per_object",
        f"/api/leaderboard/{cid}/policies/{quote(policy['policy'], safe='')}?vs={quote(other)}",
    )
    for i, o in enumerate(want):
        plotted = page.evaluate(
            "k => { const s = window.proctorPolicyCharts[k].series[0]; return [s.x, s.y]; }",
            f"pp-{i}",
        )
        assert plotted == [o["pp"]["ref"], o["pp"]["model"]]
        assert plotted[0] != policy["per_object"][i]["pp"]["ref"]
        labels = page.eval_on_selector_all(
            f"[data-chart=pp][data-index='{i}'] svg text", "ts => ts.map(t => t.textContent)"
        )
        assert f"F_c(t) ({other})" in labels
        qq_x = page.evaluate("k => window.proctorPolicyCharts[k].series[0].x", f"qq-{i}")
        assert qq_x == [
            x
            for x, y in zip(o["qq"]["ref"], o["qq"]["model"], strict=True)
            if x is not None and y is not None
        ]
    # the headline numbers are the snapshot's
    hrt = page.eval_on_selector("[data-score=hrt] span.num", "s => Number(s.dataset.value)")
    assert hrt == pytest.approx(policy["hrt"]["estimate"], rel=1e-12)
    with page.expect_download() as dl:
        page.click(".chart-toolbar[data-export=tradeoff] button[data-export=svg]")
    assert "UPH (units per hour)" in Path(dl.value.path()).read_text()
    assert page.page_errors == []
