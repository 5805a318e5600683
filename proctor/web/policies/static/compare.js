// The compare page: both policies' KM CDFs overlaid per object, and two
// matched episodes' videos played in sync. Both videos run on the episode
// clock (currentTime = seconds since the episode's start), so one slider
// and one play button drive both; the second follows the first within a
// frame or two while playing (re-seeked when it drifts more than 80 ms).
"use strict";

(() => {
  const dataEl = document.getElementById("compare-data");
  if (!dataEl) return;
  const d = JSON.parse(dataEl.textContent);
  const COLORS = { a: "#1f4e79", b: "#c0392b" };

  if (window.ProctorCharts) {
    document.querySelectorAll('[data-chart="overlay"]').forEach((box) => {
      const c = d.curves[Number(box.dataset.index)];
      const series = ["a", "b"].map((side) => ({
        name: d[side], x: c[side].t, y: c[side].cdf, lo: c[side].lo, hi: c[side].hi,
        step: true, xEnd: d.tau_s, color: COLORS[side],
      }));
      ProctorCharts.timeChart(box, {
        series, xLabel: "time to success t, s", yLabel: "F(t)", yDomain: [0, 1.02], height: 240,
      }, d.tau_s, null);
    });
  }

  const player = document.getElementById("player");
  const va = player.querySelector('video[data-side="a"]');
  const vb = player.querySelector('video[data-side="b"]');
  const scrub = player.querySelector('[data-act="scrub"]');
  const clock = player.querySelector('[data-testid="clock"]');
  const DRIFT_S = 0.08;

  function length() {
    return Math.max(va.duration || 0, vb.duration || 0);
  }

  function show(t) {
    clock.textContent = `t = ${t.toFixed(2)} s`;
    const n = length();
    if (n > 0) scrub.value = String(t / n);
    player.dataset.t = t.toFixed(3);
  }

  function seekBoth(t) {
    for (const v of [va, vb]) v.currentTime = Math.min(t, v.duration || t);
    show(t);
  }

  function load(k) {
    const m = d.matches[k];
    va.src = m.a.video_url;
    vb.src = m.b.video_url;
    player.hidden = false;
    player.dataset.match = String(k);
    seekBoth(0);
  }

  document.querySelectorAll("button[data-play]").forEach((b) => {
    b.addEventListener("click", () => load(Number(b.dataset.play)));
  });
  player.querySelector('[data-act="play"]').addEventListener("click", () => {
    if (va.paused) {
      vb.currentTime = va.currentTime;
      va.play().catch(() => {});
      vb.play().catch(() => {});
    } else {
      va.pause();
      vb.pause();
    }
  });
  scrub.addEventListener("input", () => {
    va.pause();
    vb.pause();
    seekBoth(Number(scrub.value) * length());
  });
  va.addEventListener("timeupdate", () => {
    // one episode may end before the other: the longer one plays on alone
    if (!va.paused && !vb.ended && Math.abs(vb.currentTime - va.currentTime) > DRIFT_S) {
      vb.currentTime = va.currentTime;
    }
    show(va.currentTime);
  });
})();
