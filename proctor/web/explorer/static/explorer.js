// The run explorer: both cameras in sync, telemetry with a cursor that
// follows playback, and markers that seek to their exact frame.
//
// Every time here is seconds since the episode started: the MP4s'
// presentation times (pts_s in the recorder's frame tables), placement
// events, detector candidates and re-based telemetry share that clock.
// Seeking to a time t shows frame k = the last frame with pts_k <= t, by
// setting currentTime to the middle of that frame's display interval (a
// time exactly on pts_k may round to the frame before).
"use strict";

(() => {
  const COLORS = {
    placement: "#27ae60",
    failure: "#b42318",
    candidate: "#d68910",
    event: "#7f8c8d",
    intervention: "#c0392b",
  };
  const ENVELOPE = "envelope"; // proctor.core.recording.keys.ENVELOPE_EVENT
  const EPS = 1e-6;

  function lastAtOrBefore(arr, v) {
    let lo = 0;
    let hi = arr.length - 1;
    let ans = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (arr[mid] <= v) { ans = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return ans;
  }

  function start() {
    const dataEl = document.getElementById("episode-data");
    if (!dataEl) return;
    const data = JSON.parse(dataEl.textContent);
    const videos = Array.from(document.querySelectorAll("video[data-camera]"));
    const primary = videos[0] || null;
    const frames = {}; // camera → pts_s[]
    const charts = [];
    const state = { lastSeek: null, frame: 0, ready: false, telemetryRows: 0 };
    const clock = document.getElementById("clock");
    const scrub = document.getElementById("scrub");
    const playButton = document.getElementById("play");
    const duration = data.duration_s || 0;

    function fps(camera) {
      const c = data.cameras.find((x) => x.name === camera);
      return c?.fps || 30;
    }

    // the frame shown at episode time t, and the currentTime that shows it
    function frameFor(camera, t) {
      const pts = frames[camera];
      if (!pts?.length) return { k: null, time: Math.max(0, t) };
      const k = Math.max(0, lastAtOrBefore(pts, t + EPS));
      const next = k + 1 < pts.length ? pts[k + 1] : pts[k] + 1 / fps(camera);
      return { k, time: (pts[k] + next) / 2 };
    }

    function updateClock(t) {
      const cam = primary ? primary.dataset.camera : null;
      const k = cam && frames[cam] ? Math.max(0, lastAtOrBefore(frames[cam], t + EPS)) : null;
      state.frame = k;
      if (clock) clock.textContent = `t = ${t.toFixed(3)} s${k !== null ? ` · frame ${k}` : ""}`;
      if (scrub && document.activeElement !== scrub) scrub.value = String(t);
      for (const c of charts) c.setCursor(t);
    }

    function seekTo(t, source) {
      t = Math.min(Math.max(0, t), duration || t);
      let shown = t;
      for (const v of videos) {
        const f = frameFor(v.dataset.camera, t);
        v.currentTime = f.time;
        if (v === primary) {
          shown = f.time;
          state.lastSeek = { t, frame: f.k, time: f.time, source: source || null };
        }
      }
      updateClock(shown);
      document.querySelectorAll("tr.active[data-marker-row]").forEach((r) => {
        r.classList.remove("active");
      });
      if (source) {
        document.querySelectorAll(`tr[data-marker-row="${source}"]`).forEach((r) => {
          r.classList.add("active");
        });
      }
    }

    function step(delta) {
      if (!primary) return;
      primary.pause();
      const cam = primary.dataset.camera;
      const pts = frames[cam];
      if (!pts) return;
      const k = Math.max(0, lastAtOrBefore(pts, primary.currentTime + EPS));
      const j = Math.min(pts.length - 1, Math.max(0, k + delta));
      seekTo(pts[j]);
    }

    // ---- playback: the primary drives, the others follow
    let raf = null;
    let lastSync = 0;
    function tick() {
      if (!primary) return;
      const t = primary.currentTime;
      updateClock(t);
      const now = performance.now();
      if (now - lastSync > 250) {
        lastSync = now;
        for (const v of videos) {
          if (v !== primary && Math.abs(v.currentTime - t) > 0.08) v.currentTime = t;
        }
      }
      if (!primary.paused && !primary.ended) raf = requestAnimationFrame(tick);
      else raf = null;
    }
    if (primary) {
      primary.addEventListener("play", () => {
        for (const v of videos) if (v !== primary) { v.currentTime = primary.currentTime; v.play().catch(() => {}); }
        if (playButton) { playButton.textContent = "❚❚ Pause"; playButton.setAttribute("aria-label", "Pause"); }
        if (raf === null) raf = requestAnimationFrame(tick);
      });
      primary.addEventListener("pause", () => {
        for (const v of videos) if (v !== primary) v.pause();
        if (playButton) { playButton.textContent = "▶ Play"; playButton.setAttribute("aria-label", "Play"); }
      });
      primary.addEventListener("ended", () => primary.dispatchEvent(new Event("pause")));
      primary.addEventListener("seeked", () => { if (primary.paused) updateClock(primary.currentTime); });
      primary.addEventListener("ratechange", () => { for (const v of videos) v.playbackRate = primary.playbackRate; });
      if (playButton) playButton.addEventListener("click", () => { if (primary.paused) primary.play(); else primary.pause(); });
      const rate = document.getElementById("rate");
      if (rate) rate.addEventListener("change", () => { primary.playbackRate = Number(rate.value); });
      document.getElementById("prev-frame").addEventListener("click", () => step(-1));
      document.getElementById("next-frame").addEventListener("click", () => step(1));
      if (scrub) scrub.addEventListener("input", () => { primary.pause(); seekTo(Number(scrub.value)); });
      document.addEventListener("keydown", (ev) => {
        if (ev.target.closest?.("input, select, textarea, button")) return;
        if (ev.key === " ") { ev.preventDefault(); if (primary.paused) primary.play(); else primary.pause(); }
        if (ev.key === ",") step(-1);
        if (ev.key === ".") step(1);
      });
    }
    document.querySelectorAll("#event-table button.seek, #intervention-table button.seek").forEach((b) => {
      b.addEventListener("click", () => { if (primary) primary.pause(); seekTo(Number(b.dataset.t), b.dataset.marker); });
    });

    // ---- markers shared by every plot
    function markers() {
      const out = [];
      for (const p of data.placements) {
        if (p.status === "superseded" || p.status === "rejected") continue;
        out.push({ id: `placement-${p.id}`, x: p.t_s, color: COLORS.placement, width: 2, label: `placement at ${p.t_s.toFixed(3)} s (${p.source}, ${p.status})` });
      }
      for (const c of data.candidates) {
        out.push({ id: `candidate-${c.id}`, x: c.t_s, color: COLORS.candidate, dash: "4 3", label: `candidate at ${c.t_s.toFixed(3)} s: ${c.kind} over ${c.zone || "?"} → ${c.verdict}` });
      }
      data.events.forEach((e, i) => {
        if (e.t_s === null) return;
        if (e.kind === ENVELOPE) {
          const why = e.reason ? ` (${e.reason})` : "";
          out.push({ id: `event-${i}`, x: e.t_s, color: COLORS.intervention, width: 1.5, label: `envelope intervention${why} at ${e.t_s.toFixed(3)} s: ${e.message}` });
          return;
        }
        out.push({ id: `event-${i}`, x: e.t_s, color: COLORS.event, dash: "2 3", label: `${e.kind} at ${e.t_s.toFixed(3)} s: ${e.message}` });
      });
      for (const f of data.failure_tags || []) {
        out.push({ id: `failure-${f.id}`, x: f.t_s, color: COLORS.failure, width: 2, label: `failure mode at ${f.t_s.toFixed(3)} s: ${f.label}${f.automatic ? " (proposed)" : ""}` });
      }
      for (const m of out) m.onClick = (mk) => { if (primary) primary.pause(); seekTo(mk.x, mk.id); };
      return out;
    }

    function plot(key, opts) {
      const box = document.querySelector(`[data-plot="${key}"]`);
      if (!box) return;
      const chart = ProctorCharts.line(box, Object.assign({
        xLabel: "t, s since start", xDomain: [0, Math.max(duration, 0.001)], height: 170,
        markers: markers(), onClick: (x) => { if (primary) primary.pause(); seekTo(x); },
        onZoom: (domain) => { for (const c of charts) if (c !== chart) c.setXDomain(domain); },
      }, opts));
      charts.push(chart);
      const bar = document.querySelector(`.chart-toolbar[data-export="${key}"]`);
      if (bar) ProctorCharts.exportButtons(bar, chart, `${data.uid}-${key}`);
    }

    function drawTelemetry(tel) {
      const t = tel.t;
      const col = (name) => tel.columns[name] || [];
      plot("gripper", {
        series: [
          { name: "target (policy)", x: t, y: col("gripper_target_req"), color: "#d68910", step: true },
          { name: "target (gripper)", x: t, y: col("gripper_target"), color: "#c0392b", dash: "5 3", step: true },
          { name: "measured", x: t, y: col("gripper_position"), color: "#1f4e79" },
        ],
        yLabel: "0 open … 1 closed", yDomain: [-0.05, 1.05],
      });
      plot("height", { series: [{ name: "ee height", x: t, y: col("ee_z"), color: "#2e8b57" }], yLabel: "m", legend: false });
      plot("speed", { series: [{ name: "ee speed", x: t, y: col("ee_speed"), color: "#8e44ad" }], yLabel: "m/s", legend: false });
      plot("latency", {
        series: [{ name: "policy latency", x: t, y: col("policy_latency_s").map((v) => (v === null ? null : 1000 * v)), color: "#b03a2e", step: true }],
        yLabel: "ms", legend: false, yMin: 0,
      });
      state.telemetryRows = tel.rows;
      document.getElementById("telemetry").dataset.loading = "false";
    }

    function markReady() {
      if (state.ready) return;
      state.ready = true;
      updateClock(primary ? primary.currentTime : 0);
      // ?t=SECONDS (a tagged moment's link): open the episode at that moment
      const at = Number(new URLSearchParams(window.location.search).get("t"));
      if (primary && Number.isFinite(at) && at > 0) seekTo(Math.min(at, duration));
      document.body.dataset.explorerReady = "1";
      if (window.performance && performance.mark) performance.mark("explorer-ready");
    }

    const pending = [];
    for (const c of data.cameras) {
      pending.push(fetch(c.frames_url, { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : null))
        .then((j) => { if (j) frames[c.name] = j.pts_s; }));
    }
    if (data.telemetry_sha256) {
      const section = document.querySelector("[data-points]");
      const points = section ? Number(section.dataset.points) : 2400;  // the URL the page preloads
      pending.push(fetch(`${data.links.telemetry}?max_points=${points}`, { credentials: "same-origin" })
        .then((r) => (r.ok ? r.json() : null))
        .then((tel) => { if (tel) drawTelemetry(tel); }));
    } else {
      document.getElementById("telemetry").dataset.loading = "false";
    }
    if (primary) {
      pending.push(new Promise((resolve) => {
        if (primary.readyState >= 2) resolve();
        else {
          primary.addEventListener("loadeddata", () => resolve(), { once: true });
          primary.addEventListener("error", () => resolve(), { once: true });
        }
      }));
    }
    Promise.all(pending).then(markReady, markReady);

    window.proctorExplorer = { seekTo, step, state, frames, charts, frameFor, videos };
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
