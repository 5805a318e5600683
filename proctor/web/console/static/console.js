// The operator console: live station state, controls with keyboard
// shortcuts, live cameras, the countdown and the post-rollout form.
// Everything goes through this server's /api/console/… (the station's own
// API answers loopback only). Space is the safety stop, whatever has focus.
// While the page is open it sends a heartbeat every HEARTBEAT_MS: the station
// stops a running episode when they stop coming (its console-link deadman).
"use strict";

(() => {
  const API = "/api/console";
  const MOVING = new Set(["armed", "running", "finishing", "homing"]);
  const HEARTBEAT_MS = 500;
  // the robot's own mode, in the operator's words; the alert ones stand out
  const MODE_WORDS = {
    idle: "idle",
    move: "moving",
    guiding: "hand guiding",
    reflex: "REFLEX",
    user_stopped: "USER STOP ENGAGED",
    automatic_error_recovery: "error recovery",
    other: "not ready (brakes locked or FCI off?)",
  };
  const MODE_ALERT = new Set(["reflex", "user_stopped", "guiding", "other"]);
  const OUTCOME_WORDS = {
    success: "success",
    ran_out_of_time: "ran out of time",
    operator_stop: "operator stop",
    safety: "safety stop",
    system: "system failure",
  };
  const COUNT_FIELDS = ["placed", "lost", "dropped"];
  const RETRY_MS = 2000;
  const NO_SIGNAL_MS = 3000;

  let status = { state: "offline" };
  let statusAt = performance.now();
  let shownRun = null;  // run code whose scene is on screen
  let formRun = null;  // episode whose log form is on screen

  const $ = (id) => document.getElementById(id);

  function show(el, on) { el.hidden = !on; }

  function fmtTime(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(Number(seconds))) return "--:--";
    const s = Math.max(0, seconds);
    const m = Math.floor(s / 60);
    const rest = s - m * 60;
    return `${String(m).padStart(2, "0")}:${rest.toFixed(1).padStart(4, "0")}`;
  }

  function message(text, kind) {
    const el = $("action-message");
    if (!text) { show(el, false); return; }
    el.textContent = text;
    el.className = `flash flash-${kind || "info"}`;
    show(el, true);
  }

  // -- talking to the server ---------------------------------------------------------------
  async function act(action) {
    try {
      const next = await window.Proctor.api(`${API}/${action}`, { method: "POST" });
      message(action === "safety-stop" ? "Safety stop sent: the arm is halted." : "", "warning");
      apply(next);
      return true;
    } catch (err) {
      if (action === "next" && err.status === 503 && err.message) {
        // a policy that failed its pre-flight: the run was skipped, and the station's own
        // notice says so; show that one message, not it and this error with the same text.
        // Any other 503 (the console server cannot reach the station) is shown as it is.
        try {
          const next = await window.Proctor.api(`${API}/status`);
          apply(next);
          if (next.notice?.message.includes(err.message)) {
            message("", "info");
            return false;
          }
        } catch (_) { /* the status did not come: the error below says what happened */ }
      }
      message(err.message || String(err), err.status === 409 ? "warning" : "error");
      return false;
    }
  }

  function safetyStop() {
    $("btn-safety").classList.add("pressed");
    setTimeout(() => $("btn-safety").classList.remove("pressed"), 400);
    return act("safety-stop");
  }

  // the console-link deadman's heartbeat: fire and forget (a missed one is what
  // the station watches for; the link badge shows the events stream)
  function heartbeat() {
    window.Proctor.api(`${API}/heartbeat`, { method: "POST" }).then(
      () => { document.body.dataset.heartbeats = String(Number(document.body.dataset.heartbeats || 0) + 1); },
      () => { /* the station or this server is away: the deadman will act */ },
    );
  }

  // homing: a confirmation naming the cell and the gripper, the cell-clear box required
  function askHome() {
    const dialog = $("home-dialog");
    $("home-station").textContent = status.station || "this station";
    $("home-cell-clear").checked = false;
    $("home-open-gripper").checked = false;
    dialog.returnValue = "";
    dialog.showModal();
  }

  async function homeConfirmed() {
    const dialog = $("home-dialog");
    if (dialog.returnValue !== "home" || !$("home-cell-clear").checked) return;
    const body = { cell_clear: true, open_gripper: $("home-open-gripper").checked };
    message("Homing the arm…", "info");
    try {
      apply(await window.Proctor.api(`${API}/home`, { method: "POST", body }));
      message("", "info");
    } catch (err) {
      message(err.message || String(err), err.status === 409 ? "warning" : "error");
    }
  }

  // the dot is green only while the page hears the station itself: the console server
  // can be up (the events socket open) while the station behind it is offline
  let linkOpen = false;
  function showLink() {
    const up = linkOpen && status.state !== "offline";
    const dot = $("link-state");
    dot.classList.toggle("up", up);
    dot.title = up ? "live connection to the station" : (linkOpen ? "the station is not answering" : "no connection to the console server");
  }

  function connectEvents() {
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${API}/events`;
    const ws = new WebSocket(url);
    ws.onopen = () => { linkOpen = true; showLink(); };
    ws.onmessage = (event) => {
      try { apply(JSON.parse(event.data)); } catch (_) { /* a frame we cannot read */ }
    };
    ws.onclose = () => {
      linkOpen = false;
      showLink();
      setTimeout(connectEvents, RETRY_MS);
    };
  }

  function connectCamera(camera) {
    const img = $(`live-${camera}`);
    const noSignal = $(`no-signal-${camera}`);
    let lastFrame = 0;
    let current = null;
    const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}${API}/preview/${camera}`;
    const ws = new WebSocket(url);
    ws.binaryType = "blob";
    ws.onmessage = (event) => {
      if (!(event.data instanceof Blob)) return;
      const next = URL.createObjectURL(event.data);
      img.onload = () => { if (current && current !== next) URL.revokeObjectURL(current); current = next; };
      img.src = next;
      img.dataset.frames = String(Number(img.dataset.frames || 0) + 1);
      lastFrame = performance.now();
      show(noSignal, false);
    };
    ws.onclose = (event) => {
      if (event.code === 1008) { noSignal.textContent = "no such camera"; return; }
      setTimeout(() => connectCamera(camera), RETRY_MS);
    };
    setInterval(() => { show(noSignal, performance.now() - lastFrame > NO_SIGNAL_MS); }, 1000);
  }

  // -- showing the state -------------------------------------------------------------------
  function apply(next) {
    if (!next || typeof next.state !== "string") return;
    status = next;
    statusAt = performance.now();
    const root = $("console");
    root.dataset.state = next.state;
    showLink();
    $("station-name").textContent = next.station ? `${next.station}${next.profile ? ` (${next.profile})` : ""}` : "station";
    $("station-state").textContent = next.state === "offline" ? "offline" : next.state.replace("_", " ");
    $("station-state").className = `state-badge state-${next.state}`;

    const notice = $("notice");
    if (next.state === "offline") {
      notice.textContent = next.detail || "the station is not answering";
      notice.className = "flash flash-error";
      show(notice, true);
    } else if (next.notice) {
      notice.textContent = next.notice.message;
      notice.className = `flash flash-${next.notice.level === "info" ? "info" : next.notice.level}`;
      show(notice, true);
    } else {
      show(notice, false);
    }

    const mode = $("robot-mode");
    const modeName = next.robot_mode || null;
    mode.textContent = `robot: ${modeName ? (MODE_WORDS[modeName] || modeName) : "–"}`;
    mode.dataset.mode = modeName || "";
    mode.classList.toggle("alert", MODE_ALERT.has(modeName));

    showUplink(next.uplink || null);

    const armError = $("arm-error");
    armError.textContent = next.arm_error ? `The arm needs recovery: ${next.arm_error}` : "";
    show(armError, Boolean(next.arm_error));

    // a camera not delivering frames blocks the next run until the station reconnects it
    const cameraHealth = $("camera-health");
    const unwell = Object.entries(next.cameras || {})
      .filter(([, c]) => c.health && c.health.state !== "ok" && c.health.state !== "not started")
      .map(([name, c]) => `camera ${name}: ${c.health.state}${c.health.error ? ` (${c.health.error})` : ""}`);
    cameraHealth.textContent = unwell.join("; ");
    show(cameraHealth, unwell.length > 0);

    showRun(next.work || null);
    showControls(next);
    showLogForm(next);
    tick();
  }

  // a station host that keeps its own ledger: is the server there, what waits for it
  function showUplink(uplink) {
    const badge = $("uplink-state");
    show(badge, Boolean(uplink));
    if (!uplink) return;
    const n = uplink.waiting;
    const waiting = `${n} episode${n === 1 ? "" : "s"} waiting`;
    badge.textContent = uplink.online ? (n ? `server: ${waiting}` : "server: up to date") : `offline, ${waiting}`;
    badge.classList.toggle("alert", !uplink.online);
    badge.title = uplink.last_error || "the station's link to the server";
  }

  function showRun(work) {
    show($("run"), Boolean(work));
    show($("no-run"), !work);
    if (!work) { shownRun = null; return; }
    if (shownRun === work.run_code) return;
    shownRun = work.run_code;
    $("run-code").textContent = work.run_code;
    $("run-items").textContent = String(work.items);
    $("run-object").textContent = work.object;
    $("run-tote").textContent = work.tote_side;
    $("run-camera").textContent = work.camera_side;
    $("run-relation").textContent = work.tote_side === work.camera_side
      ? "(same side as the target tote)" : "(opposite the target tote)";
    $("run-budget").textContent = `${fmtTime(work.budget_s)} (${work.items} × ${work.per_item_cap_s} s)`;
    const picture = $("layout-picture");
    picture.src = `/static/console/layouts/tote-${work.tote_side}-camera-${work.camera_side}.svg`;
    picture.alt = `Layout: target tote on the robot's ${work.tote_side}, exterior camera on the robot's ${work.camera_side}`;
    picture.dataset.config = `tote-${work.tote_side}-camera-${work.camera_side}`;
    loadPhoto(work.run_code, "exterior");
    const cams = $("photo-cams");
    cams.textContent = "";
    for (const camera of Object.keys(status.cameras || { exterior: 1 })) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "link-button small";
      b.textContent = camera;
      b.addEventListener("click", () => loadPhoto(work.run_code, camera));
      cams.append(" ", b);
    }
  }

  async function loadPhoto(runCode, camera) {
    const img = $("reference-photo");
    const missing = $("reference-missing");
    try {
      const response = await fetch(`${API}/reference/${camera}?run=${encodeURIComponent(runCode)}`,
        { credentials: "same-origin" });
      if (shownRun !== runCode) return;
      if (!response.ok) {
        let detail = `no reference photo (HTTP ${response.status})`;
        try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
        missing.textContent = detail;
        show(missing, true);
        show(img, false);
        return;
      }
      const blob = await response.blob();
      if (img.src.startsWith("blob:")) URL.revokeObjectURL(img.src);
      img.src = URL.createObjectURL(blob);
      img.dataset.run = runCode;
      img.dataset.camera = camera;
      show(img, true);
      show(missing, false);
    } catch (err) {
      missing.textContent = `no reference photo: ${err.message || err}`;
      show(missing, true);
    }
  }

  function showControls(s) {
    const st = s.state;
    $("btn-next").disabled = st !== "idle" || Boolean(s.arm_error) || s.at_home === false;
    $("btn-home").classList.toggle("primary", s.at_home === false && !s.arm_error);
    $("btn-start").disabled = st !== "armed";
    $("btn-stop").disabled = st !== "running";
    $("btn-disarm").disabled = st !== "armed";
    $("btn-home").disabled = !(st === "idle" || st === "awaiting_log") || Boolean(s.arm_error);
    show($("btn-recover"), Boolean(s.arm_error) && st !== "running" && st !== "finishing");
    show($("btn-gripper"), st === "idle" || st === "awaiting_log");
  }

  // -- the countdown ----------------------------------------------------------------------------
  function tick() {
    const s = status;
    const work = s.work;
    let remaining = null;
    let label = "Time left";
    if (s.state === "running" && typeof s.remaining_s === "number") {
      // the station reports at least once a second; count down smoothly in between
      const since = (performance.now() - statusAt) / 1000;
      remaining = Math.max(0, s.remaining_s - since);
    } else if (s.state === "armed" && work) {
      remaining = work.budget_s;
      label = "Time budget";
    } else if (s.last_episode && (s.state === "awaiting_log" || s.state === "finishing")) {
      remaining = s.last_episode.duration_s;
      label = "Ran for";
    }
    $("countdown-label").textContent = label;
    $("countdown").textContent = fmtTime(remaining);
    const fill = $("budget-fill");
    const fraction = work && remaining !== null && label === "Time left" ? remaining / work.budget_s : (label === "Time budget" ? 1 : 0);
    fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
    $("countdown").classList.toggle("low", label === "Time left" && fraction < 0.1);
  }

  // -- the post-rollout form ----------------------------------------------------------------
  function showLogForm(s) {
    const awaiting = s.state === "awaiting_log" && s.work;
    show($("log-panel"), Boolean(awaiting));
    if (!awaiting) { formRun = null; return; }
    if (formRun === s.episode) return;
    formRun = s.episode;
    const form = $("log-form");
    form.reset();
    clearErrors();
    $("log-run-code").textContent = s.work.run_code;
    for (const name of COUNT_FIELDS) $(`log-${name}`).max = String(s.work.items);
    const proposed = s.proposed_outcome;
    $("log-proposed").textContent = OUTCOME_WORDS[proposed] || "no outcome (the run never started)";
    $("log-reason").textContent = s.reason ? ` (${s.reason})` : "";
    if (proposed && $(`outcome-${proposed}`)) $(`outcome-${proposed}`).checked = true;
    $("log-placed").focus();
  }

  function clearErrors() {
    for (const el of document.querySelectorAll("#log-form .field-error, #counts-error")) {
      el.textContent = "";
      show(el, false);
    }
    for (const el of document.querySelectorAll("#log-form [aria-invalid]")) el.removeAttribute("aria-invalid");
  }

  function fieldError(name, text) {
    const id = { "placed + lost + dropped": "counts" }[name] || name;
    const el = $(`${id}-error`) || $("form-error");
    el.textContent = text;
    show(el, true);
    const inputs = id === "counts" ? COUNT_FIELDS.map((n) => $(`log-${n}`))
      : id === "outcome" ? [...document.querySelectorAll("input[name=outcome]")] : [$(`log-${id}`)];
    for (const input of inputs) if (input) input.setAttribute("aria-invalid", "true");
  }

  // The same rules the server applies; the server is the authority.
  function validate(items) {
    const errors = [];
    const counts = {};
    for (const name of COUNT_FIELDS) {
      const raw = $(`log-${name}`).value.trim();
      if (raw === "") { errors.push([name, "required"]); continue; }
      if (!/^\d+$/.test(raw)) { errors.push([name, `must be a whole number, 0 or more, got ${raw}`]); continue; }
      counts[name] = Number(raw);
    }
    const outcome = document.querySelector("input[name=outcome]:checked")?.value;
    if (!outcome) errors.push(["outcome", "choose how the run ended"]);
    const notes = $("log-notes").value;
    if (notes.length > 4000) errors.push(["notes", `at most 4000 characters, got ${notes.length}`]);
    if (Object.keys(counts).length === 3) {
      const handled = counts.placed + counts.lost + counts.dropped;
      if (handled > items) {
        errors.push(["placed + lost + dropped",
          `${counts.placed} + ${counts.lost} + ${counts.dropped} = ${handled} is more than the ${items} items set out`]);
      } else if (outcome === "success" && handled !== items) {
        errors.push(["outcome",
          `'success' means all ${items} items were handled, but placed + lost + dropped = ${handled}; choose another outcome or correct the counts`]);
      }
    }
    return { errors, body: { ...counts, outcome, notes } };
  }

  async function saveLog(event) {
    event.preventDefault();
    clearErrors();
    const work = status.work;
    if (status.state !== "awaiting_log" || !work) return;
    const { errors, body } = validate(work.items);
    if (errors.length) {
      for (const [name, text] of errors) fieldError(name, text);
      return;
    }
    const button = $("log-save");
    button.disabled = true;
    try {
      const next = await window.Proctor.api(`${API}/log`, { method: "POST", body });
      message(`Run ${work.run_code} closed: ${body.placed} placed, ${body.lost} lost, ${body.dropped} dropped — ${OUTCOME_WORDS[body.outcome]}.`, "info");
      apply(next);
    } catch (err) {
      if (Array.isArray(err.detail)) {
        for (const e of err.detail) fieldError(String((e.loc || []).slice(-1)[0] || "form"), e.msg);
      } else {
        const el = $("form-error");
        el.textContent = err.message || String(err);
        show(el, true);
      }
    } finally {
      button.disabled = false;
    }
  }

  // -- keyboard ---------------------------------------------------------------------------------
  function typingInText(target) {
    if (!target) return false;
    if (target.tagName === "TEXTAREA") return true;
    return target.tagName === "INPUT" && !["number", "radio", "checkbox", "button", "submit"].includes(target.type);
  }

  function isSpace(event) { return event.code === "Space" || event.key === " "; }

  function onKeyDown(event) {
    if (isSpace(event)) {
      // typing a space into the notes is fine while the arm stands still; otherwise
      // Space is the safety stop and nothing else (not a click on a focused button)
      if (typingInText(event.target) && !MOVING.has(status.state)) return;
      event.preventDefault();
      event.stopPropagation();
      if (!event.repeat) safetyStop();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || event.repeat) return;
    if (typingInText(event.target) || (event.target && event.target.tagName === "INPUT")) return;
    const key = event.key.toLowerCase();
    const button = { n: "btn-next", s: "btn-start", x: "btn-stop" }[key];
    if (!button) return;
    event.preventDefault();
    if (!$(button).disabled) $(button).click();
  }

  function onKeyUp(event) {
    // a focused button would otherwise be "clicked" when Space is released
    if (isSpace(event) && !(typingInText(event.target) && !MOVING.has(status.state))) {
      event.preventDefault();
      event.stopPropagation();
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const button of document.querySelectorAll("#console [data-action]")) {
      button.addEventListener("click", () => {
        const confirmText = button.dataset.confirm;
        if (confirmText && !window.confirm(confirmText)) return;
        if (button.dataset.action === "safety-stop") safetyStop();
        else act(button.dataset.action);
      });
    }
    $("log-form").addEventListener("submit", saveLog);
    $("btn-home").addEventListener("click", askHome);
    $("home-dialog").addEventListener("close", homeConfirmed);
    heartbeat();
    setInterval(heartbeat, HEARTBEAT_MS);
    window.addEventListener("keydown", onKeyDown, true);
    window.addEventListener("keyup", onKeyUp, true);
    setInterval(tick, 100);
    window.Proctor.api(`${API}/status`).then(apply).catch((err) => message(err.message, "error"));
    connectEvents();
    for (const figure of document.querySelectorAll("#live .cam")) connectCamera(figure.dataset.camera);
  });
})();
