// The policy page's charts: KM CDFs with bands per object, P-P and Q-Q —
// all against the comparator (the reference, or the policy ?vs= names) —
// the UPH vs MTBF/A trajectory as τ sweeps, and the failure modes.
"use strict";

(() => {
  const POLICY = "#1f4e79";
  const OTHER = "#c0392b";

  function stepSeries(name, km, color, tau, band) {
    return {
      name, x: km.t, y: km.cdf, lo: band ? km.lo : null, hi: band ? km.hi : null,
      step: true, xEnd: tau, color,
    };
  }

  function addExport(key, chart, stem) {
    const bar = document.querySelector(`.chart-toolbar[data-export="${key}"]`);
    if (bar && chart) ProctorCharts.exportButtons(bar, chart, stem);
  }

  function start() {
    const dataEl = document.getElementById("policy-data");
    if (!dataEl || !window.ProctorCharts) return;
    const d = JSON.parse(dataEl.textContent);
    const charts = {};
    const slug = (s) => String(s).replace(/[^A-Za-z0-9_-]+/g, "-");

    document.querySelectorAll('[data-chart="cdf"]').forEach((box) => {
      const o = d.objects[Number(box.dataset.index)];
      const series = [stepSeries(d.label, o.km, POLICY, d.tau, true)];
      if (o.comparator_km) series.push(stepSeries(d.comparator, o.comparator_km, OTHER, d.tau, true));
      const bar = document.querySelector(`.chart-toolbar[data-export="cdf-${box.dataset.index}"]`);
      const chart = ProctorCharts.timeChart(box, {
        series, xLabel: "time to success t, s", yLabel: "F(t)", yDomain: [0, 1.02], height: 260,
      }, d.tau, bar);
      charts[`cdf-${box.dataset.index}`] = chart;
      addExport(`cdf-${box.dataset.index}`, chart, `cdf-${slug(d.label)}-${slug(o.object)}`);
    });

    document.querySelectorAll('[data-chart="pp"]').forEach((box) => {
      const o = d.objects[Number(box.dataset.index)];
      if (!o.pp) return;
      const chart = ProctorCharts.line(box, {
        series: [{ name: d.label, x: o.pp.ref, y: o.pp.model, color: POLICY }],
        xLabel: `F_c(t) (${d.comparator})`, yLabel: `F(t) (${d.label})`, xDomain: [0, 1], yDomain: [0, 1],
        diagonal: true, height: 260, legend: false, showX: true, nearest: true,
      });
      charts[`pp-${box.dataset.index}`] = chart;
      addExport(`pp-${box.dataset.index}`, chart, `pp-${slug(d.label)}-${slug(o.object)}`);
    });

    document.querySelectorAll('[data-chart="qq"]').forEach((box) => {
      const o = d.objects[Number(box.dataset.index)];
      if (!o.qq) return;
      const ref = [];
      const model = [];
      o.qq.p.forEach((_p, i) => {
        if (o.qq.ref[i] !== null && o.qq.model[i] !== null) { ref.push(o.qq.ref[i]); model.push(o.qq.model[i]); }
      });
      const hi = Math.max(1, ...ref, ...model);
      const chart = ProctorCharts.line(box, {
        series: [{ name: d.label, x: ref, y: model, color: POLICY, points: true }],
        xLabel: `quantile of ${d.comparator}, s`, yLabel: `quantile of ${d.label}, s`,
        xDomain: [0, hi], yDomain: [0, hi], diagonal: true, height: 260, legend: false, showX: true, nearest: true,
      });
      charts[`qq-${box.dataset.index}`] = chart;
      addExport(`qq-${box.dataset.index}`, chart, `qq-${slug(d.label)}-${slug(o.object)}`);
    });

    const tbox = document.querySelector('[data-chart="tradeoff"]');
    if (tbox) {
      const series = d.objects.map((o, i) => ({
        name: o.object, x: o.sweep.uph, y: o.sweep.mtbfa, points: true,
        color: ProctorCharts.PALETTE[(i + 2) % ProctorCharts.PALETTE.length], width: 1.2, dash: "4 3",
        tau: o.sweep.tau,
      }));
      series.push({ name: "macro (equal weights)", x: d.sweep.uph, y: d.sweep.mtbfa, points: true, color: POLICY, width: 2.4, tau: d.sweep.tau });
      const chart = ProctorCharts.line(tbox, {
        series, xLabel: "UPH (units per hour)", yLabel: "MTBF/A, s", height: 300, showX: true, nearest: true,
      });
      charts.tradeoff = chart;
      addExport("tradeoff", chart, `tradeoff-${slug(d.label)}`);
    }

    const fbox = document.querySelector('[data-chart="failures"]');
    if (fbox) {
      // envelope interventions are counts per episode (tens for a policy that keeps
      // pushing outwards), not shares: on this axis they would flatten every rate
      const rows = Object.entries(d.failure_modes)
        .filter(([k, v]) => k !== "envelope_interventions_per_episode" && v && v.estimate !== null)
        .map(([k, v]) => ({
          label: k.replace(/_/g, " "),
          est: v.estimate, lo: v.lo, hi: v.hi,
          color: k.endsWith("operation") ? "#c0392b" : "#d68910",
        }));
      const chart = ProctorCharts.forest(fbox, { rows, xLabel: "rate (per operation or per episode)", baseline: 0, title: "Failure modes with 95 % intervals" });
      charts.failures = chart;
      addExport("failures", chart, `failures-${slug(d.label)}`);
    }
    window.proctorPolicyCharts = charts;
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
