// The review page: both videos side by side, scrubbed frame by frame from
// the recorded per-frame timestamp tables; gripper and height traces with
// the detector's candidates and the confirmed placements; the reviewer's
// decisions (each one a POST to /api/review/episodes/{uid}/...).
//
// Time base: seconds since the episode's start. A frame's pts_s (from its
// camera's frame table) is the same number as the video's currentTime, so
// seeking to a frame sets currentTime a quarter frame past its pts (never
// on a boundary, where rounding could show the previous frame). The
// displayed frame is read back with requestVideoFrameCallback.
"use strict";

(() => {
  const root = document.getElementById("review");
  if (!root) return;
  const uid = root.dataset.uid;
  const isAdmin = root.dataset.admin === "true";
  const base = `/api/review/episodes/${encodeURIComponent(uid)}`;
  const $ = (sel) => root.querySelector(sel);
  const VERDICT_COLORS = {
    success: "#1e7a46",
    unknown: "#9a6200",
    failure: "#b42318",
    neutral: "#5b6675",
  };

  const S = {
    state: null,
    cams: [], // {camera, video, pts: number[], label}
    timeline: [], // the master timeline: frame times of the first camera (or telemetry)
    k: 0,
    tel: null, // {t: number[], columns: {...}}
    zoom: 3,
    busy: false,
  };

  // -- small helpers --------------------------------------------------------
  function lastAtOrBefore(arr, t) {
    // the index of the last element <= t (0 if none)
    let lo = 0;
    let hi = arr.length - 1;
    if (hi < 0) return 0;
    if (t < arr[0]) return 0;
    while (lo < hi) {
      const mid = (lo + hi + 1) >> 1;
      if (arr[mid] <= t + 1e-9) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
  function nearest(arr, t) {
    const i = lastAtOrBefore(arr, t);
    if (i + 1 < arr.length && Math.abs(arr[i + 1] - t) < Math.abs(arr[i] - t)) return i + 1;
    return i;
  }
  const fmt = (t) => (t === null || t === undefined ? "—" : Number(t).toFixed(3));
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") node.className = v;
      else if (k === "text") node.textContent = v;
      else if (k.startsWith("data-") || k === "title" || k === "type" || k === "aria-label") node.setAttribute(k, v);
      else node[k] = v;
    }
    for (const c of children) node.append(c);
    return node;
  }
  function showError(message) {
    const box = $('[data-testid="error"]');
    box.textContent = message;
    box.hidden = !message;
  }
  const currentT = () => (S.timeline.length ? S.timeline[S.k] : 0);

  // -- loading ------------------------------------------------------------
  async function load() {
    const state = await window.Proctor.api(base);
    S.state = state;
    await loadMedia(state);
    render();
    seek(0);
  }

  async function loadMedia(state) {
    const box = $('[data-testid="videos"]');
    box.replaceChildren();
    S.cams = [];
    for (const cam of state.cameras) {
      let table;
      try {
        table = await window.Proctor.api(cam.frames_url);
      } catch (e) {
        showError(`camera ${cam.camera}: frame table unavailable (${e.message})`);
        continue;
      }
      const video = el("video", {
        preload: "auto",
        muted: true,
        playsInline: true,
        "data-camera": cam.camera,
        "aria-label": `${cam.camera} camera`,
      });
      video.src = cam.video_url;
      const label = el("figcaption", { class: "small muted", "data-testid": `shown-${cam.camera}` });
      box.append(el("figure", { class: "video" }, video, el("figcaption", { text: cam.camera }), label));
      const c = { camera: cam.camera, video, pts: table.pts_s, label, shown: null };
      watchFrames(c);
      S.cams.push(c);
    }
    if (!S.cams.length) {
      box.append(el("p", { class: "muted", text: "No video recorded for this episode: scrub by telemetry sample." }));
    }
    if (state.telemetry_url) {
      try {
        S.tel = await window.Proctor.api(state.telemetry_url);
      } catch (e) {
        showError(`telemetry unavailable (${e.message})`);
      }
    }
    if (S.cams.length) S.timeline = S.cams[0].pts;
    else if (S.tel) S.timeline = S.tel.t;
    else {
      const n = Math.max(2, Math.round(state.duration_s * 100) + 1);
      S.timeline = Array.from({ length: n }, (_, i) => i / 100);
    }
    root.dataset.frames = String(S.timeline.length);
  }

  function watchFrames(c) {
    // the frame the browser actually shows, from its presentation time
    if (!("requestVideoFrameCallback" in HTMLVideoElement.prototype)) return;
    const onFrame = (_now, meta) => {
      const i = nearest(c.pts, meta.mediaTime);
      c.shown = i;
      c.video.dataset.shownFrame = String(i);
      c.label.textContent = `showing frame ${i} · ${fmt(c.pts[i])} s`;
      c.video.requestVideoFrameCallback(onFrame);
    };
    c.video.requestVideoFrameCallback(onFrame);
  }

  // -- scrubbing ----------------------------------------------------------
  function seek(k) {
    if (!S.timeline.length) return;
    S.k = Math.max(0, Math.min(S.timeline.length - 1, k));
    const t = S.timeline[S.k];
    for (const c of S.cams) {
      const j = lastAtOrBefore(c.pts, t);
      const next = j + 1 < c.pts.length ? c.pts[j + 1] : c.pts[j] + 0.04;
      c.target = j;
      c.video.dataset.frame = String(j);
      if (!c.video.paused) continue;
      c.video.currentTime = c.pts[j] + (next - c.pts[j]) / 4;
    }
    root.dataset.frame = String(S.k);
    root.dataset.t = t.toFixed(4);
    $('[data-testid="clock"]').textContent =
      `t = ${fmt(t)} s · frame ${S.k + 1} of ${S.timeline.length}`;
    draw();
    markRows();
  }
  const seekTime = (t) => seek(nearest(S.timeline, t));

  function jumpCandidate(direction) {
    const times = (S.state.candidates || []).map((c) => c.t_s);
    const t = currentT();
    const next =
      direction > 0
        ? times.find((x) => S.timeline[nearest(S.timeline, x)] > t + 1e-6)
        : [...times].reverse().find((x) => S.timeline[nearest(S.timeline, x)] < t - 1e-6);
    if (next !== undefined) seekTime(next);
  }

  function togglePlay() {
    if (!S.cams.length) return;
    const master = S.cams[0].video;
    const button = $('[data-act="play"]');
    if (master.paused) {
      for (const c of S.cams) c.video.play().catch(() => {});
      button.textContent = "Pause";
      const follow = () => {
        if (master.paused) return;
        seekFollow(master.currentTime);
        requestAnimationFrame(follow);
      };
      requestAnimationFrame(follow);
    } else {
      for (const c of S.cams) c.video.pause();
      button.textContent = "Play";
      seek(lastAtOrBefore(S.timeline, master.currentTime));
    }
  }
  function seekFollow(t) {
    S.k = lastAtOrBefore(S.timeline, t);
    $('[data-testid="clock"]').textContent = `t = ${fmt(S.timeline[S.k])} s · frame ${S.k + 1} of ${S.timeline.length}`;
    draw();
  }

  // -- traces ------------------------------------------------------------
  function draw() {
    const canvas = $('[data-testid="traces"]');
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 800;
    const height = 260;
    if (canvas.width !== Math.round(width * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const duration = Math.max(S.state.duration_s, S.timeline.length ? S.timeline[S.timeline.length - 1] : 0);
    let t0 = 0;
    let t1 = duration || 1;
    if (S.zoom > 0 && S.zoom < duration) {
      const t = currentT();
      t0 = Math.max(0, Math.min(duration - S.zoom, t - S.zoom / 2));
      t1 = t0 + S.zoom;
    }
    S.view = { t0, t1, width };
    const left = 44;
    const right = width - 8;
    const x = (t) => left + ((t - t0) / (t1 - t0)) * (right - left);
    const topY = (v) => 14 + (1 - v) * 130; // gripper panel: 0 open (bottom) … 1 closed (top)
    g.font = "11px system-ui, sans-serif";
    g.fillStyle = "#5b6675";
    g.fillText("closed", 2, 18);
    g.fillText("open", 2, 144);
    g.fillText("height", 2, 176);
    g.strokeStyle = "#d9dee5";
    g.beginPath();
    g.moveTo(left, 150.5);
    g.lineTo(right, 150.5);
    g.stroke();
    // time ticks
    const span = t1 - t0;
    const step = [0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60].find((s) => span / s <= 10) || 120;
    g.fillStyle = "#5b6675";
    for (let tt = Math.ceil(t0 / step) * step; tt <= t1 + 1e-9; tt += step) {
      const xx = x(tt);
      g.fillRect(xx, 246, 1, 4);
      g.fillText(`${tt.toFixed(step < 1 ? 1 : 0)} s`, xx + 3, 258);
    }
    if (S.tel) {
      const t = S.tel.t;
      const i0 = Math.max(0, lastAtOrBefore(t, t0) - 1);
      const i1 = Math.min(t.length - 1, lastAtOrBefore(t, t1) + 1);
      const cols = S.tel.columns;
      const obj = cols.gripper_object;
      if (obj) {
        g.fillStyle = "rgba(30, 122, 70, 0.12)";
        for (let i = i0; i < i1; i++) if (obj[i]) g.fillRect(x(t[i]), 14, Math.max(1, x(t[i + 1]) - x(t[i])), 130);
      }
      const line = (values, color, y, stepped) => {
        if (!values) return;
        g.strokeStyle = color;
        g.lineWidth = 1.5;
        g.beginPath();
        let started = false;
        for (let i = i0; i <= i1; i++) {
          const v = values[i];
          if (v === null || v === undefined) { started = false; continue; }
          if (!started) { g.moveTo(x(t[i]), y(v)); started = true; }
          else {
            if (stepped) g.lineTo(x(t[i]), y(values[i - 1] ?? v));
            g.lineTo(x(t[i]), y(v));
          }
        }
        g.stroke();
      };
      line(cols.gripper_target, "#1f4e79", topY, true);
      line(cols.gripper_position, "#e07b00", topY, false);
      const z = cols.ee_z ? cols.ee_z.filter((v) => v !== null) : [];
      if (z.length) {
        const lo = Math.min(...z);
        const hi = Math.max(...z);
        const zy = (v) => 244 - ((v - lo) / Math.max(hi - lo, 1e-6)) * 84;
        line(cols.ee_z, "#6b3fa0", zy, false);
      }
    }
    // candidates and placements
    const marks = (S.state.candidates || []).map((c, i) => ({ ...c, n: i + 1 }));
    for (const c of marks) {
      if (c.t_s < t0 || c.t_s > t1) continue;
      g.strokeStyle = VERDICT_COLORS[c.verdict] || "#5b6675";
      g.setLineDash([4, 3]);
      g.lineWidth = 1.5;
      g.beginPath();
      g.moveTo(x(c.t_s) + 0.5, 10);
      g.lineTo(x(c.t_s) + 0.5, 248);
      g.stroke();
      g.setLineDash([]);
      g.fillStyle = g.strokeStyle;
      g.fillText(`#${c.n}`, x(c.t_s) + 3, 10);
    }
    for (const p of S.state.confirmed || []) {
      if (p.t_s < t0 || p.t_s > t1) continue;
      g.strokeStyle = "#1e7a46";
      g.lineWidth = 3;
      g.beginPath();
      g.moveTo(x(p.t_s), 150);
      g.lineTo(x(p.t_s), 248);
      g.stroke();
      g.fillStyle = "#1e7a46";
      g.fillText("✓", x(p.t_s) - 3, 160);
    }
    const tc = currentT();
    if (tc >= t0 && tc <= t1) {
      g.strokeStyle = "#d7263d";
      g.lineWidth = 1;
      g.beginPath();
      g.moveTo(x(tc) + 0.5, 6);
      g.lineTo(x(tc) + 0.5, 250);
      g.stroke();
    }
  }

  // -- tables ------------------------------------------------------------
  function button(label, act, attrs = {}) {
    return el("button", { type: "button", class: "button small", text: label, "data-act": act, ...attrs });
  }

  function render() {
    const s = S.state;
    $('[data-testid="label-status"]').textContent = s.label_status.replace("_", " ");
    const done = !s.in_queue;
    $('[data-testid="progress"]').textContent = done
      ? (s.label_status === "reviewed"
          ? `review complete: ${s.confirmed.length} placement(s) confirmed; the episode left the queue`
          : "")
      : s.label_status === "flagged"
        ? "the operator's count is flagged: an admin decides"
        : `${s.confirmed.length} of ${s.placed} placements confirmed (${s.remaining} to go)`;
    const editable = s.label_status === "needs_review";
    root.classList.toggle("locked", !editable);

    const cbody = $('[data-testid="candidates"] tbody');
    cbody.replaceChildren();
    s.candidates.forEach((c, i) => {
      const actions = el("td", { class: "actions" });
      actions.append(button("Jump", "jump", { "data-t": String(c.t_s) }));
      if (editable) {
        if (c.state !== "confirmed") actions.append(button("Confirm", "confirm", { "data-candidate": String(c.id) }));
        if (c.state === "confirmed") actions.append(button("Move here", "move", { "data-placement": String(c.placement_id) }));
        else actions.append(button("Move here", "move", { "data-candidate": String(c.id) }));
        if (c.state === "confirmed") actions.append(button("Reject", "reject", { "data-placement": String(c.placement_id) }));
        else if (c.state !== "rejected") actions.append(button("Reject", "reject", { "data-candidate": String(c.id) }));
      }
      const verdict = el("span", { class: `verdict verdict-${c.verdict}`, text: c.verdict, title: c.rule });
      const row = el(
        "tr",
        { "data-candidate-row": String(c.id), "data-t": String(c.t_s), "data-state": c.state },
        el("td", { text: `#${i + 1} · ${fmt(c.t_s)}` }),
        el("td", { text: c.kind === "slump" ? "slip" : "release" }),
        el("td", { text: c.zone }),
        el("td", {}, verdict, el("div", { class: "small muted", text: c.rule })),
        el("td", { text: c.state }),
        actions,
      );
      cbody.append(row);
    });
    if (!s.candidates.length) cbody.append(el("tr", {}, el("td", { colSpan: 6, class: "muted", text: "The detector found no release in this episode." })));

    const pbody = $('[data-testid="confirmed"] tbody');
    pbody.replaceChildren();
    for (const p of s.confirmed) {
      const actions = el("td", { class: "actions" }, button("Jump", "jump", { "data-t": String(p.t_s) }));
      if (editable) {
        actions.append(button("Move here", "move", { "data-placement": String(p.id) }));
        actions.append(button("Reject", "reject", { "data-placement": String(p.id) }));
      }
      const idx = s.candidates.findIndex((c) => c.id === p.candidate_id);
      pbody.append(
        el(
          "tr",
          { "data-placement-row": String(p.id), "data-t": String(p.t_s) },
          el("td", { text: fmt(p.t_s) }),
          el("td", { text: idx >= 0 ? `candidate #${idx + 1}` : "added by reviewer" }),
          actions,
        ),
      );
    }
    if (!s.confirmed.length) pbody.append(el("tr", {}, el("td", { colSpan: 3, class: "muted", text: "None yet." })));
    $('[data-act="add"]').disabled = !editable;
    const flagForm = $('[data-testid="flag-form"]');
    flagForm.querySelector("button").disabled = !editable;

    renderTags(s);

    const hbody = $('[data-testid="history"] tbody');
    hbody.replaceChildren();
    for (const a of [...s.actions].reverse()) {
      hbody.append(
        el(
          "tr",
          { "data-action": a.action },
          el("td", { text: a.at.replace("T", " ").slice(0, 19) }),
          el("td", { text: a.automatic ? `${a.who} (automatic)` : a.who }),
          el("td", { text: a.action.replace("_", " ") }),
          el("td", { class: "mono", text: describe(a.before) }),
          el("td", { class: "mono", text: describe(a.after) }),
          el("td", { text: a.note }),
        ),
      );
    }
    if (!s.actions.length) hbody.append(el("tr", {}, el("td", { colSpan: 6, class: "muted", text: "No review actions yet." })));
    draw();
    markRows();
  }

  // failure-mode tags: open to any closed episode, in the queue or not
  function renderTags(s) {
    const select = $('[data-testid="tag-mode"]');
    if (!select.options.length) {
      for (const m of s.failure_modes) select.append(el("option", { value: m.key, text: m.label, title: m.description }));
    }
    const tbody = $('[data-testid="tags"] tbody');
    tbody.replaceChildren();
    for (const t of s.tags) {
      const actions = el("td", { class: "actions" }, button("Jump", "jump", { "data-t": String(t.t_s) }));
      if (!t.retracted) actions.append(button("Retract", "retract-tag", { "data-tag": String(t.id) }));
      tbody.append(
        el(
          "tr",
          { "data-tag-row": String(t.id), "data-t": String(t.t_s), "data-mode": t.mode, class: t.retracted ? "retracted" : "" },
          el("td", { text: fmt(t.t_s) }),
          el("td", { text: t.retracted ? `${t.label} (retracted)` : t.label }),
          el("td", { text: t.automatic ? `${t.who} (automatic)` : t.who }),
          el("td", { text: t.note }),
          actions,
        ),
      );
    }
    if (!s.tags.length) tbody.append(el("tr", {}, el("td", { colSpan: 5, class: "muted", text: "No failure-mode tags." })));
  }

  function describe(obj) {
    return Object.entries(obj || {})
      .map(([k, v]) => `${k}=${typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : v}`)
      .join(", ");
  }

  function markRows() {
    const t = currentT();
    root.querySelectorAll("tr[data-t]").forEach((row) => {
      const here = Math.abs(S.timeline[nearest(S.timeline, Number(row.dataset.t))] - t) < 1e-6;
      row.classList.toggle("at-cursor", here);
    });
  }

  // -- decisions ------------------------------------------------------------
  async function decide(path, body) {
    if (S.busy) return;
    S.busy = true;
    showError("");
    try {
      S.state = await window.Proctor.api(`${base}/${path}`, { method: "POST", body });
      render();
    } catch (e) {
      showError(e.message);
    } finally {
      S.busy = false;
    }
  }

  root.addEventListener("click", (event) => {
    const b = event.target.closest("[data-act]");
    if (!b || b.disabled) return;
    const act = b.dataset.act;
    const ids = {};
    if (b.dataset.candidate) ids.candidate_id = Number(b.dataset.candidate);
    if (b.dataset.placement) ids.placement_id = Number(b.dataset.placement);
    const t = Number(currentT().toFixed(4));
    switch (act) {
      case "jump": seekTime(Number(b.dataset.t)); break;
      case "back": seek(S.k - 1); break;
      case "forward": seek(S.k + 1); break;
      case "back10": seek(S.k - 10); break;
      case "forward10": seek(S.k + 10); break;
      case "prev-candidate": jumpCandidate(-1); break;
      case "next-candidate": jumpCandidate(1); break;
      case "play": togglePlay(); break;
      case "confirm": decide("confirm", ids); break;
      case "move": decide("move", { ...ids, t_s: t }); break;
      case "reject": decide("reject", ids); break;
      case "add": decide("add", { t_s: t }); break;
      case "retract-tag": decide(`tags/${Number(b.dataset.tag)}/retract`, {}); break;
      default: break;
    }
  });

  $('[data-testid="tag-form"]').addEventListener("submit", (event) => {
    event.preventDefault();
    const f = event.target.elements;
    decide("tags", { mode: f.mode.value, t_s: Number(currentT().toFixed(4)), note: f.note.value.trim() });
    f.note.value = "";
  });
  $('[data-testid="flag-form"]').addEventListener("submit", (event) => {
    event.preventDefault();
    const note = event.target.elements.note.value.trim();
    if (note) decide("flag", { note });
  });
  const resolveForm = $('[data-testid="resolve-form"]');
  if (resolveForm && isAdmin) {
    resolveForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const f = event.target.elements;
      const body = { note: f.note.value.trim() };
      for (const name of ["placed", "lost", "dropped"]) if (f[name].value !== "") body[name] = Number(f[name].value);
      if (f.outcome.value) body.outcome = f.outcome.value;
      decide("resolve", body);
    });
  }

  $('[data-testid="zoom"]').addEventListener("change", (event) => {
    S.zoom = Number(event.target.value);
    draw();
  });
  $('[data-testid="traces"]').addEventListener("click", (event) => {
    if (!S.view) return;
    const rect = event.currentTarget.getBoundingClientRect();
    const left = 44;
    const right = S.view.width - 8;
    const frac = (event.clientX - rect.left - left) / (right - left);
    seekTime(S.view.t0 + Math.max(0, Math.min(1, frac)) * (S.view.t1 - S.view.t0));
  });
  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, textarea, select")) return;
    if (event.key === "ArrowLeft") { seek(S.k - (event.shiftKey ? 10 : 1)); event.preventDefault(); }
    else if (event.key === "ArrowRight") { seek(S.k + (event.shiftKey ? 10 : 1)); event.preventDefault(); }
    else if (event.key === "j" || event.key === "J") jumpCandidate(-1);
    else if (event.key === "k" || event.key === "K") jumpCandidate(1);
    else if (event.key === " ") { togglePlay(); event.preventDefault(); }
    else if ((event.key === "a" || event.key === "A") && S.state && S.state.label_status === "needs_review") decide("add", { t_s: Number(currentT().toFixed(4)) });
  });
  window.addEventListener("resize", () => draw());

  load()
    .then(() => { root.dataset.ready = "true"; })
    .catch((e) => { showError(`could not load the episode: ${e.message}`); root.dataset.ready = "error"; });
})();
