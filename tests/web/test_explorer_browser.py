"""The run explorer in headless Chromium: the videos play in sync, the
telemetry cursor follows playback, and clicking an event shows exactly its
frame — read back from the pixels (each synthetic frame carries its index as
a bar code), not from the page's own bookkeeping. Every request stays on
loopback (the ``page`` fixture fails the test otherwise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from proctor.core.db.models import Episode, PlacementEvent
from proctor.core.domain import PlacementSource, Role
from tests.browser import LiveServer, sign_in
from tests.web.leaderboard_data import seed_campaign
from tests.web.recordings import CODE_BITS, RecordingSpec, attach_recording, read_code

pytestmark = pytest.mark.browser

SPEC = RecordingSpec(fps=15, width=320, height=240, telemetry_hz=100.0)

# the frame a video is showing, read from its stripes
READ_FRAME = f"""(video) => {{
  const c = document.createElement('canvas');
  c.width = video.videoWidth; c.height = video.videoHeight;
  const g = c.getContext('2d');
  g.drawImage(video, 0, 0);
  const stripe = c.width / {CODE_BITS};
  const y = Math.floor(c.height * 3 / 8);
  const out = [];
  for (let i = 0; i < {CODE_BITS}; i++) {{
    const px = g.getImageData(Math.floor((i + 0.5) * stripe), y, 1, 1).data;
    out.push((px[0] + px[1] + px[2]) / 3);
  }}
  return out;
}}"""


def _episode(server: LiveServer, tmp_path: Path) -> tuple[str, list[tuple[int, float]]]:
    with server.db() as s:
        seeded = seed_campaign(s, released=True, episodes_per_cell=2, seed=5)
    # a policy episode with several placements
    with server.db() as s:
        uid = next(
            u
            for u in seeded.episode_uids
            if not seeded.episode_policy[u].startswith("human")
            and s.scalar(sa.select(Episode.placed).where(Episode.uid == u)) >= 2
        )
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        duration = ep.duration_s
        placements = [
            (p.id, p.t_s)
            for p in s.scalars(
                sa.select(PlacementEvent)
                .where(
                    PlacementEvent.episode_id == ep.id,
                    PlacementEvent.source == PlacementSource.reviewer,
                )
                .order_by(PlacementEvent.t_s)
            )
        ]
    if not placements:
        with server.db() as s:
            ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
            placements = [
                (p.id, p.t_s)
                for p in s.scalars(
                    sa.select(PlacementEvent)
                    .where(PlacementEvent.episode_id == ep.id)
                    .order_by(PlacementEvent.t_s)
                )
            ]
    spec = RecordingSpec(
        duration_s=float(np.ceil(duration + 1.0)),
        fps=SPEC.fps,
        width=SPEC.width,
        height=SPEC.height,
        telemetry_hz=SPEC.telemetry_hz,
    )
    attach_recording(
        sessions=server.app.state.web.session_factory,
        store=server.app.state.web.store,
        uid=uid,
        spool=tmp_path / "spool",
        spec=spec,
    )
    return uid, placements


def _wait_settled(page: Any) -> None:
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('video'))"
        ".every(v => !v.seeking && v.readyState >= 2)"
    )


def test_the_explorer_plays_seeks_and_follows(
    page: Any, live_server: LiveServer, tmp_path: Path
) -> None:
    uid, placements = _episode(live_server, tmp_path)
    page.goto(f"/episodes/{uid}")
    page.wait_for_selector("body[data-explorer-ready='1']", timeout=20_000)
    assert page.locator("video").count() == 2
    assert page.locator("[data-plot] svg").count() == 4
    # every plot carries every marker
    n_markers = page.locator("[data-plot='gripper'] .chart-marker").count()
    assert n_markers >= len(placements)

    # click a placement marker: both videos show the frame of its time
    pid, t = placements[-1]
    expected = int(np.floor(t * SPEC.fps + 1e-9))  # frames at k / fps: the last one at or before t
    marker = page.locator(f"[data-plot='height'] .chart-marker[data-marker='placement-{pid}']")
    marker.click(force=True)  # a candidate at the same time may sit on top: same time either way
    _wait_settled(page)
    seek = page.evaluate("() => window.proctorExplorer.state.lastSeek")
    assert seek["t"] == pytest.approx(t, abs=1e-9) and seek["frame"] == expected
    for camera in ("exterior", "wrist"):
        pixels = page.eval_on_selector(f"video[data-camera='{camera}']", READ_FRAME)
        assert read_code(pixels) == expected, camera
    assert page.locator("#clock").text_content().endswith(f"frame {expected}")
    # the event's row is highlighted (the placement's, or its candidate's at the same time)
    assert page.locator("#event-table tr.active td").first.text_content() == f"{t:.3f}"

    # a row of the events table seeks too
    pid0, t0 = placements[0]
    page.click(f"#event-table button[data-marker='placement-{pid0}']")
    _wait_settled(page)
    first = int(np.floor(t0 * SPEC.fps + 1e-9))
    assert read_code(page.eval_on_selector("video[data-camera='exterior']", READ_FRAME)) == first

    # the next-frame button steps exactly one frame
    page.click("#next-frame")
    _wait_settled(page)
    assert (
        read_code(page.eval_on_selector("video[data-camera='exterior']", READ_FRAME)) == first + 1
    )

    # play: the cursor follows the video
    page.click("#play")
    page.wait_for_function(
        f"() => document.querySelector('video').currentTime > {t0 + 0.6}", timeout=15_000
    )
    sample = page.evaluate(
        """() => {
          const v = document.querySelector("video[data-camera='exterior']");
          const w = document.querySelector("video[data-camera='wrist']");
          const cursor = document.querySelector("[data-plot='gripper'] .chart-cursor");
          return {t: v.currentTime, wrist: w.currentTime, paused: v.paused,
                  wristPaused: w.paused, x: Number(cursor.getAttribute('data-x')),
                  visible: cursor.getAttribute('visibility')};
        }"""
    )
    assert sample["paused"] is False and sample["wristPaused"] is False
    assert sample["visible"] == "visible"
    assert sample["x"] == pytest.approx(sample["t"], abs=0.3)
    assert sample["wrist"] == pytest.approx(sample["t"], abs=0.3)
    page.wait_for_function(
        "(x) => Number(document.querySelector(\"[data-plot='latency'] .chart-cursor\")"
        ".getAttribute('data-x')) > x",
        arg=sample["x"] + 0.3,
        timeout=15_000,
    )
    page.click("#play")  # pause
    page.wait_for_function("() => document.querySelector('video').paused")
    assert page.page_errors == []


def test_a_chart_exports_as_svg_and_png(page: Any, live_server: LiveServer, tmp_path: Path) -> None:
    uid, _ = _episode(live_server, tmp_path)
    page.set_viewport_size({"width": 820, "height": 1180})  # the tablet at the robot
    page.goto(f"/episodes/{uid}")
    page.wait_for_selector("body[data-explorer-ready='1']", timeout=20_000)
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    heights = page.eval_on_selector_all(
        ".transport button", "bs => bs.map(b => b.getBoundingClientRect().height)"
    )
    assert min(heights) >= 32  # touch-sized
    with page.expect_download() as dl:
        page.click(".chart-toolbar[data-export='gripper'] button[data-export='svg']")
    svg = Path(dl.value.path()).read_text()
    assert dl.value.suggested_filename == f"{uid}-gripper.svg"
    assert svg.startswith("<?xml") and "<svg" in svg and "measured" in svg
    with page.expect_download() as dl:
        page.click(".chart-toolbar[data-export='gripper'] button[data-export='png']")
    png = Path(dl.value.path()).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 2000
    assert page.page_errors == []


def test_a_reviewer_explores_an_unreleased_episode_without_the_policy_timing(
    page: Any, live_server: LiveServer, tmp_path: Path
) -> None:
    """Before release a reviewer's explorer has no policy-latency plot (the
    column is withheld: proctor.web.artifacts.redaction); the rest works as usual."""
    with live_server.db() as s:
        seeded = seed_campaign(s, released=False, episodes_per_cell=2, seed=7)
    uid = seeded.episode_uids[0]
    attach_recording(
        sessions=live_server.app.state.web.session_factory,
        store=live_server.app.state.web.store,
        uid=uid,
        spool=tmp_path / "spool",
        spec=RecordingSpec(duration_s=6.0, fps=5, width=160, height=120, telemetry_hz=20.0),
    )
    live_server.add_user("rev", Role.reviewer)
    sign_in(page, "rev")
    page.goto(f"/episodes/{uid}")
    page.wait_for_selector("body[data-explorer-ready='1']", timeout=20_000)
    page.wait_for_selector("#telemetry[data-loading='false']")
    plots = page.eval_on_selector_all("[data-plot]", "els => els.map(e => e.dataset.plot)")
    assert plots == ["gripper", "height", "speed"]
    assert page.locator("[data-plot] svg").count() == 3
    assert page.page_errors == []


# the station-side envelope's events (issue 15 item 3): one per intervention, its
# reason in the details beside the command as asked and as sent
INTERVENTIONS = ((1.4, "workspace"), (3.2, "speed"), (3.6, "speed"))


def _add_interventions(server: LiveServer, uid: str) -> None:
    from proctor.station import episodes as station_episodes

    with server.db() as s:
        ep = s.scalar(sa.select(Episode).where(Episode.uid == uid))
        for t, reason in INTERVENTIONS:
            station_episodes.add_event(
                s,
                episode=ep,
                kind="envelope",
                t_s=t,
                message=f"{reason}: clamped joint_velocity [0.9, 0.2] → [0.3, 0.1]",
                details={"reason": reason, "requested": [0.9, 0.2], "sent": [0.3, 0.1]},
            )
        ep.envelope_interventions = len(INTERVENTIONS)


def test_envelope_interventions_are_marked_listed_and_seek_to_their_frame(
    page: Any, live_server: LiveServer, tmp_path: Path
) -> None:
    uid, _ = _episode(live_server, tmp_path)
    _add_interventions(live_server, uid)
    page.goto(f"/episodes/{uid}")
    page.wait_for_selector("body[data-explorer-ready='1']", timeout=20_000)
    page.wait_for_selector("#telemetry[data-loading='false']")
    assert page.locator("[data-fact=envelope]").text_content().strip() == "3 interventions"
    # listed, in time order, with their reasons
    rows = page.eval_on_selector_all(
        "#intervention-table tbody tr[data-marker-row]",
        "trs => trs.map(tr => [tr.dataset.markerRow, tr.cells[0].textContent.trim(), "
        "tr.querySelector('[data-key=reason]').textContent.trim()])",
    )
    assert [(t, why) for _, t, why in rows] == [(f"{t:.3f}", r) for t, r in INTERVENTIONS]
    # marked on every plot, in the intervention colour, each once
    for plot in ("gripper", "height", "speed", "latency"):
        marks = page.eval_on_selector_all(
            f"[data-plot='{plot}'] .chart-marker",
            "gs => gs.filter(g => g.querySelector('line').getAttribute('stroke') === '#c0392b')"
            ".map(g => g.dataset.marker)",
        )
        assert marks == [mid for mid, _, _ in rows], plot
    # the events table lists them as interventions, not as plain events
    assert page.locator("#event-table tr.ev-intervention").count() == len(INTERVENTIONS)
    # clicking a mark shows its frame (read from the pixels) and highlights its row
    mid, _, _ = rows[1]
    t = INTERVENTIONS[1][0]
    page.locator(f"[data-plot='height'] .chart-marker[data-marker='{mid}']").click(force=True)
    _wait_settled(page)
    expected = int(np.floor(t * SPEC.fps + 1e-9))
    for camera in ("exterior", "wrist"):
        pixels = page.eval_on_selector(f"video[data-camera='{camera}']", READ_FRAME)
        assert read_code(pixels) == expected, camera
    assert page.locator("#intervention-table tr.active").get_attribute("data-marker-row") == mid
    # and the list's own button seeks too
    mid0, _, _ = rows[0]
    page.click(f"#intervention-table button[data-marker='{mid0}']")
    _wait_settled(page)
    first = int(np.floor(INTERVENTIONS[0][0] * SPEC.fps + 1e-9))
    assert read_code(page.eval_on_selector("video[data-camera='exterior']", READ_FRAME)) == first
    assert page.page_errors == []
