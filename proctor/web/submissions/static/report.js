// A submission's page: while its conformance check is queued or running,
// ask the API now and then and reload when the report is in.
"use strict";

(() => {
  const ACTIVE = ["queued", "running"];

  document.addEventListener("DOMContentLoaded", () => {
    const report = document.getElementById("report");
    const data = document.getElementById("submission-data");
    if (!report || !data || report.dataset.checking !== "true") return;
    const { id } = JSON.parse(data.textContent);
    let delay = 1000;
    async function poll() {
      try {
        const sub = await window.Proctor.api(`/api/submissions/${id}`);
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
