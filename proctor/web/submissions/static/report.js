// A submission's page: while its conformance check is queued or running,
// ask the API now and then and reload when the report is in. Meanwhile a
// checkpoint's runner state and stage (building its environment, starting)
// are updated in place.
"use strict";

(() => {
  const ACTIVE = ["queued", "running"];

  function showRunner(runner) {
    if (!runner) return;
    const status = document.querySelector("[data-testid=runner-status]");
    const stage = document.querySelector("[data-testid=runner-stage]");
    const ended = ["ready", "failed", "stopped"].includes(runner.status);
    // its first server was just asked for (no panel yet), or it came up or
    // failed: the page shows what a finished one recorded
    if (!status || !stage || (ended && status.textContent !== runner.status)) {
      window.location.reload();
      return;
    }
    status.textContent = runner.status;
    stage.textContent = runner.stage;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const report = document.getElementById("report");
    const data = document.getElementById("submission-data");
    if (!report || !data || report.dataset.checking !== "true") return;
    const { id } = JSON.parse(data.textContent);
    let delay = 1000;
    async function poll() {
      try {
        const sub = await window.Proctor.api(`/api/submissions/${id}`);
        showRunner(sub.runner);
        if (!sub.check || !ACTIVE.includes(sub.check.status)) {
          window.location.reload();
          return;
        }
      } catch (_) {
        // a blip: try again later
      }
      delay = Math.min(delay * 1.5, 10000);
      setTimeout(poll, delay);
    }
    setTimeout(poll, delay);
  });
})();
