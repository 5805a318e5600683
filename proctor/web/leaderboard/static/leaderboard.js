// The leaderboard's interactive chart: HRT (or RMST) per policy with its
// interval (at the board's level, 1 − α: the box's data-level); click a policy to open its page; export as PNG or SVG.
"use strict";

(() => {
  function start() {
    const dataEl = document.getElementById("board-data");
    const box = document.getElementById("hrt-chart");
    if (!dataEl || !box || !window.ProctorCharts) return;
    const data = JSON.parse(dataEl.textContent);
    const toolbar = document.querySelector('.chart-toolbar[data-chart="hrt-chart"]');
    let chart = null;

    function draw(metric) {
      box.replaceChildren();
      const rows = (metric === "hrt" ? data.hrt : data.rmst).map((r) => ({
        label: r.label,
        est: r.est,
        lo: r.lo,
        hi: r.hi,
        href: r.href,
        color: r.reference ? "#7f8c8d" : "#1f4e79",
      }));
      chart = ProctorCharts.forest(box, {
        rows,
        xLabel: metric === "hrt" ? "Human-Relative Throughput, % (100 = the reference)" : "RMST(τ), s per operation (lower is faster)",
        refLine: metric === "hrt" ? 100 : undefined,
        baseline: 0,
        unit: metric === "hrt" ? " %" : " s",
        title: `${metric === "hrt" ? "HRT" : "RMST"} with ${box.dataset.level || "95"} % intervals`,
      });
      box.dataset.metric = metric;
    }

    draw("hrt");
    const holder = document.createElement("span");
    holder.className = "chart-toolbar";
    toolbar.appendChild(holder);
    ProctorCharts.exportButtons(holder, { get svg() { return chart.svg; } }, `leaderboard-${box.dataset.metric || "hrt"}`);
    toolbar.querySelectorAll('input[name="metric"]').forEach((input) => {
      input.addEventListener("change", () => draw(input.value));
    });
    window.proctorBoardChart = () => chart;
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
