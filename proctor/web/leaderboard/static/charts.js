// Proctor charts: small interactive SVG charts with PNG and SVG export.
//
// Drawn as plain SVG with presentation attributes (no stylesheet needed), so
// an exported SVG looks exactly like the page, and a PNG is that SVG painted
// on a canvas. Everything is local: the station may be offline.
//
//   const chart = ProctorCharts.line(el, {series, xLabel, yLabel, ...});
//   chart.setCursor(t);                 // the explorer's playback cursor
//   ProctorCharts.forest(el, {rows, xLabel, refLine});
//   ProctorCharts.exportButtons(toolbarEl, chart, "file-stem");
//
// Line charts: hover for values, drag across the plot to zoom in on x,
// double-click to zoom out, click a legend entry to hide or show a series,
// click a marker to run its action (the explorer seeks to its frame).
"use strict";

(() => {
  const NS = "http://www.w3.org/2000/svg";
  const PALETTE = [
    "#1f4e79", "#c0392b", "#2e8b57", "#8e44ad", "#d68910",
    "#16a085", "#7f8c8d", "#b03a2e", "#2471a3", "#6c3483",
  ];
  const FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif";
  const INK = "#1c2430";
  const MUTED = "#5b6675";
  const GRID = "#e3e7ed";

  function el(tag, attrs, parent) {
    const node = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) node.setAttribute(k, String(v));
    }
    if (parent) parent.appendChild(node);
    return node;
  }

  function text(parent, x, y, content, attrs) {
    const t = el("text", Object.assign({
      x, y, "font-family": FONT, "font-size": 11, fill: MUTED,
    }, attrs || {}), parent);
    t.textContent = content;
    return t;
  }

  // "nice" tick values covering [lo, hi]
  function ticks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / Math.max(1, count);
    const mag = 10 ** Math.floor(Math.log10(raw));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
      out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    }
    return out;
  }

  function fmt(v, digits) {
    if (v === null || v === undefined || !Number.isFinite(v)) return "—";
    if (digits !== undefined) return v.toFixed(digits);
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1000) return v.toFixed(0);
    if (a >= 100) return v.toFixed(1).replace(/\.0$/, "");
    if (a >= 1) return v.toFixed(2).replace(/\.?0+$/, "");
    return v.toPrecision(2).replace(/\.?0+$/, "");
  }

  // the smallest round number at or above v (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or
  // 8 × 10^k: a step of at most a third, so the data keep most of the axis)
  function niceCeil(v) {
    const mag = 10 ** Math.floor(Math.log10(v));
    return [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10].map((m) => m * mag).find((c) => c >= v - 1e-12 * mag);
  }

  // A time axis that fits the data: from 0 to a little past the last time any
  // series rises (its last success), capped at tau. Successes that all come
  // early would otherwise be squeezed into the left few percent of a 0–τ axis.
  function timeDomain(series, tau) {
    let last = 0;
    for (const s of series) {
      let prev = 0;
      for (let i = 0; i < s.x.length; i++) {
        const y = s.y[i];
        if (Number.isFinite(y) && Number.isFinite(s.x[i]) && y > prev + 1e-12) last = Math.max(last, s.x[i]);
        if (Number.isFinite(y)) prev = y;
      }
    }
    if (!(last > 0) || !(tau > 0)) return [0, tau > 0 ? tau : 1];
    return [0, Math.min(tau, niceCeil(last * 1.1))];
  }

  // A time-to-success chart: fitted to the data, τ marked where it is on the axis
  // and named in the label where it is past it, with a button (in ``toolbar``)
  // that switches between the fitted axis and the whole 0–τ.
  function timeChart(container, opts, tau, toolbar) {
    const fitted = timeDomain(opts.series || [], tau);
    const cut = fitted[1] < tau;
    const labelFor = (whole) => `${opts.xLabel || "t, s"} (τ = ${fmt(tau)} s${cut && !whole ? ", past the axis's end" : ""})`;
    const chart = new LineChart(container, Object.assign({}, opts, {
      xDomain: fitted, xLabel: labelFor(false), vLines: [{ x: tau, label: "τ" }],
    }));
    container.dataset.fitted = String(fitted[1]);
    if (toolbar && cut) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "button small";
      b.dataset.act = "time-range";
      const show = (whole) => {
        chart.fullX = whole ? [0, tau] : fitted.slice();
        chart.opts.xLabel = labelFor(whole);
        chart.setXDomain(chart.fullX);
        b.textContent = whole ? `fit to the data (0–${fmt(fitted[1])} s)` : `whole 0–τ (${fmt(tau)} s)`;
        b.setAttribute("aria-pressed", String(whole));
      };
      b.addEventListener("click", () => show(b.getAttribute("aria-pressed") !== "true"));
      show(false);
      toolbar.appendChild(b);
    }
    return chart;
  }

  function finiteExtent(arrays) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const a of arrays) {
      if (!a) continue;
      for (const v of a) {
        if (v !== null && Number.isFinite(v)) {
          if (v < lo) lo = v;
          if (v > hi) hi = v;
        }
      }
    }
    return lo <= hi ? [lo, hi] : [0, 1];
  }

  // index of the last x[i] <= v (x sorted ascending), -1 if none
  function lastAtOrBefore(x, v) {
    let lo = 0;
    let hi = x.length - 1;
    let ans = -1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (x[mid] <= v) { ans = mid; lo = mid + 1; } else { hi = mid - 1; }
    }
    return ans;
  }

  function nearestIndex(x, v) {
    const i = lastAtOrBefore(x, v);
    if (i < 0) return 0;
    if (i >= x.length - 1) return x.length - 1;
    return v - x[i] <= x[i + 1] - v ? i : i + 1;
  }

  // -------------------------------------------------------------- tooltip
  function tooltipFor(container) {
    let tip = container.querySelector(":scope > .chart-tip");
    if (!tip) {
      tip = document.createElement("div");
      tip.className = "chart-tip";
      tip.hidden = true;
      container.appendChild(tip);
    }
    return tip;
  }

  function showTip(tip, container, px, py, lines) {
    tip.replaceChildren();
    for (const [label, color] of lines) {
      const row = document.createElement("div");
      if (color) {
        const sw = document.createElement("span");
        sw.className = "chart-swatch";
        sw.style.background = color;
        row.appendChild(sw);
      }
      row.appendChild(document.createTextNode(label));
      tip.appendChild(row);
    }
    tip.hidden = false;
    const w = container.clientWidth;
    tip.style.left = `${px + 14 + tip.offsetWidth > w ? Math.max(0, px - tip.offsetWidth - 10) : px + 14}px`;
    tip.style.top = `${Math.max(0, py - 10)}px`;
  }

  // ------------------------------------------------------------ line chart
  class LineChart {
    constructor(container, opts) {
      this.container = container;
      this.opts = Object.assign({ height: 240, xLabel: "", yLabel: "", legend: true }, opts);
      this.series = (this.opts.series || []).map((s, i) =>
        Object.assign({ color: PALETTE[i % PALETTE.length], width: 1.8 }, s));
      this.markers = this.opts.markers || [];
      this.hidden = new Set(this.series.filter((s) => s.hidden).map((s) => s.name));
      const xs = this.series.map((s) => s.x);
      this.fullX = this.opts.xDomain || finiteExtent(xs);
      this.xDomain = this.fullX.slice();
      this.cursorX = null;
      container.classList.add("chart");
      this.svg = el("svg", { xmlns: NS, role: "img" });
      if (this.opts.title) this.svg.setAttribute("aria-label", this.opts.title);
      container.appendChild(this.svg);
      this.tip = tooltipFor(container);
      this._wire();
      this.render();
    }

    visibleSeries() {
      return this.series.filter((s) => !this.hidden.has(s.name));
    }

    yExtent() {
      if (this.opts.yDomain) return this.opts.yDomain;
      const [x0, x1] = this.xDomain;
      const arrays = [];
      for (const s of this.visibleSeries()) {
        const vals = [];
        for (let i = 0; i < s.x.length; i++) {
          if (s.x[i] >= x0 && s.x[i] <= x1) {
            vals.push(s.y[i]);
            if (s.lo) vals.push(s.lo[i]);
            if (s.hi) vals.push(s.hi[i]);
          }
        }
        arrays.push(vals);
      }
      let [lo, hi] = finiteExtent(arrays);
      if (this.opts.yMin !== undefined) lo = Math.min(lo, this.opts.yMin);
      if (this.opts.yMax !== undefined) hi = Math.max(hi, this.opts.yMax);
      if (hi - lo < 1e-12) { hi = lo + 1; }
      const pad = (hi - lo) * 0.05;
      return [this.opts.yMin !== undefined ? lo : lo - pad, this.opts.yMax !== undefined ? hi : hi + pad];
    }

    render() {
      const svg = this.svg;
      svg.replaceChildren();
      const width = Math.max(280, this.container.clientWidth || 600);
      const height = this.opts.height;
      const legendRows = this.opts.legend && this.series.length > 1 ? this._legendRows(width) : 0;
      const m = { l: 58, r: 14, t: 10 + (this.opts.title ? 18 : 0) + legendRows * 18, b: 40 };
      this.m = m;
      this.width = width;
      this.height = height;
      svg.setAttribute("width", width);
      svg.setAttribute("height", height);
      svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
      el("rect", { x: 0, y: 0, width, height, fill: "#ffffff" }, svg);
      const pw = width - m.l - m.r;
      const ph = height - m.t - m.b;
      const [x0, x1] = this.xDomain;
      const [y0, y1] = this.yExtent();
      this.yDomainNow = [y0, y1];
      const sx = (v) => m.l + ((v - x0) / (x1 - x0 || 1)) * pw;
      const sy = (v) => m.t + ph - ((v - y0) / (y1 - y0 || 1)) * ph;
      this.sx = sx;
      this.sy = sy;
      this.invX = (px) => x0 + ((px - m.l) / pw) * (x1 - x0);

      if (this.opts.title) {
        text(svg, m.l, 14, this.opts.title, { fill: INK, "font-size": 13, "font-weight": 600 });
      }
      // grid and axes
      const g = el("g", {}, svg);
      for (const v of ticks(y0, y1, Math.max(2, Math.floor(ph / 40)))) {
        const y = sy(v);
        el("line", { x1: m.l, x2: m.l + pw, y1: y, y2: y, stroke: GRID, "stroke-width": 1 }, g);
        text(g, m.l - 6, y + 4, fmt(v), { "text-anchor": "end" });
      }
      for (const v of ticks(x0, x1, Math.max(2, Math.floor(pw / 80)))) {
        const x = sx(v);
        el("line", { x1: x, x2: x, y1: m.t, y2: m.t + ph, stroke: GRID, "stroke-width": 1 }, g);
        text(g, x, m.t + ph + 16, fmt(v), { "text-anchor": "middle" });
      }
      el("rect", { x: m.l, y: m.t, width: pw, height: ph, fill: "none", stroke: "#b8c0cc" }, g);
      if (this.opts.xLabel) {
        text(svg, m.l + pw / 2, height - 6, this.opts.xLabel, { "text-anchor": "middle", fill: INK });
      }
      if (this.opts.yLabel) {
        const t = text(svg, 0, 0, this.opts.yLabel, { "text-anchor": "middle", fill: INK });
        t.setAttribute("transform", `translate(13 ${m.t + ph / 2}) rotate(-90)`);
      }

      // clip everything data-driven to the plot area
      const clipId = `clip-${Math.random().toString(36).slice(2)}`;
      const defs = el("defs", {}, svg);
      const clip = el("clipPath", { id: clipId }, defs);
      el("rect", { x: m.l, y: m.t, width: pw, height: ph }, clip);
      const plot = el("g", { "clip-path": `url(#${clipId})` }, svg);
      if (this.opts.diagonal) {
        el("line", {
          x1: sx(Math.max(x0, y0)), y1: sy(Math.max(x0, y0)),
          x2: sx(Math.min(x1, y1)), y2: sy(Math.min(x1, y1)),
          stroke: "#9aa4b1", "stroke-dasharray": "4 4", "stroke-width": 1,
        }, plot);
      }
      for (const v of this.opts.vLines || []) {
        if (!(v.x >= x0 && v.x <= x1)) continue;
        el("line", { x1: sx(v.x), x2: sx(v.x), y1: m.t, y2: m.t + ph, stroke: v.color || "#7f8c8d", "stroke-dasharray": "6 3", "data-vline": v.label || "" }, plot);
        if (v.label) text(plot, sx(v.x) - 4, m.t + 12, v.label, { "text-anchor": "end", fill: v.color || "#7f8c8d" });
      }
      for (const h of this.opts.hLines || []) {
        el("line", { x1: m.l, x2: m.l + pw, y1: sy(h.y), y2: sy(h.y), stroke: h.color || "#9aa4b1", "stroke-dasharray": "4 4" }, plot);
      }
      for (const s of this.visibleSeries()) {
        if (s.lo && s.hi) this._band(plot, s);
      }
      for (const s of this.visibleSeries()) this._line(plot, s);
      this._markers(plot, m, ph);
      if (this.opts.legend && this.series.length > 1) this._legend(m, width);

      // interaction layers: hover line, zoom rectangle, cursor
      this.hoverLine = el("line", { y1: m.t, y2: m.t + ph, stroke: "#7f8c8d", "stroke-width": 1, visibility: "hidden" }, svg);
      this.zoomRect = el("rect", { y: m.t, height: ph, fill: "rgba(31,78,121,0.12)", visibility: "hidden" }, svg);
      this.cursor = el("line", {
        y1: m.t, y2: m.t + ph, stroke: "#c0392b", "stroke-width": 2, visibility: "hidden", class: "chart-cursor",
      }, svg);
      this.overlay = el("rect", { x: m.l, y: m.t, width: pw, height: ph, fill: "transparent", class: "chart-overlay" }, svg);
      // markers stay clickable above the overlay
      if (this.markerLayer) svg.appendChild(this.markerLayer);
      if (this.cursorX !== null) this.setCursor(this.cursorX);
    }

    _stepPath(s, ys) {
      let d = "";
      let open = false;
      const [x0, x1] = this.xDomain;
      const n = s.x.length;
      for (let i = 0; i < n; i++) {
        const y = ys[i];
        if (y === null || !Number.isFinite(y)) { open = false; continue; }
        const xa = this.sx(s.x[i]);
        const xEnd = i + 1 < n ? s.x[i + 1] : (s.xEnd !== undefined ? s.xEnd : s.x[i]);
        const xb = this.sx(Math.min(Math.max(xEnd, x0 - (x1 - x0)), x1 + (x1 - x0)));
        const py = this.sy(y);
        d += (open ? ` V${py.toFixed(2)} H${xb.toFixed(2)}` : ` M${xa.toFixed(2)} ${py.toFixed(2)} H${xb.toFixed(2)}`);
        open = true;
      }
      return d.trim();
    }

    _linePath(s, ys) {
      let d = "";
      let open = false;
      for (let i = 0; i < s.x.length; i++) {
        const y = ys[i];
        if (y === null || !Number.isFinite(y) || s.x[i] === null) { open = false; continue; }
        d += `${open ? " L" : " M"}${this.sx(s.x[i]).toFixed(2)} ${this.sy(y).toFixed(2)}`;
        open = true;
      }
      return d.trim();
    }

    _line(plot, s) {
      const d = s.step ? this._stepPath(s, s.y) : this._linePath(s, s.y);
      if (d) {
        el("path", {
          d, fill: "none", stroke: s.color, "stroke-width": s.width,
          "stroke-dasharray": s.dash || null, "data-series": s.name,
          "stroke-linejoin": "round",
        }, plot);
      }
      if (s.points) {
        for (let i = 0; i < s.x.length; i++) {
          if (s.y[i] === null || !Number.isFinite(s.y[i])) continue;
          el("circle", { cx: this.sx(s.x[i]), cy: this.sy(s.y[i]), r: 3, fill: s.color }, plot);
        }
      }
    }

    _band(plot, s) {
      // upper edge left to right, lower edge right to left
      const up = s.step ? this._stepPath(s, s.hi) : this._linePath(s, s.hi);
      if (!up) return;
      const pts = [];
      const n = s.x.length;
      for (let i = 0; i < n; i++) {
        if (s.lo[i] === null || s.hi[i] === null) continue;
        const xa = s.x[i];
        const xb = i + 1 < n ? s.x[i + 1] : (s.xEnd !== undefined ? s.xEnd : s.x[i]);
        pts.push([xa, s.hi[i], xb]);
      }
      let d = "";
      pts.forEach(([xa, hi, xb], k) => {
        const X = this.sx(xa).toFixed(2);
        const Y = this.sy(hi).toFixed(2);
        d += k === 0 ? `M${X} ${Y}` : (s.step ? ` V${Y}` : ` L${X} ${Y}`);
        if (s.step) d += ` H${this.sx(xb).toFixed(2)}`;
      });
      for (let i = n - 1; i >= 0; i--) {
        if (s.lo[i] === null || s.hi[i] === null) continue;
        const xa = s.x[i];
        const xb = i + 1 < n ? s.x[i + 1] : (s.xEnd !== undefined ? s.xEnd : s.x[i]);
        if (s.step) d += ` L${this.sx(xb).toFixed(2)} ${this.sy(s.lo[i]).toFixed(2)} H${this.sx(xa).toFixed(2)}`;
        else d += ` L${this.sx(xa).toFixed(2)} ${this.sy(s.lo[i]).toFixed(2)}`;
      }
      d += " Z";
      el("path", { d, fill: s.color, "fill-opacity": 0.14, stroke: "none" }, plot);
    }

    _markers(_plot, m, ph) {
      this.markerLayer = null;
      if (!this.markers.length) return;
      const layer = el("g", { class: "chart-markers" });
      const [x0, x1] = this.xDomain;
      this.markers.forEach((mk, i) => {
        if (mk.x < x0 || mk.x > x1) return;
        const x = this.sx(mk.x);
        const g = el("g", {
          class: "chart-marker", "data-marker": mk.id || String(i), cursor: mk.onClick ? "pointer" : "default",
          tabindex: mk.onClick ? 0 : null, role: mk.onClick ? "button" : null,
          "aria-label": mk.label || null,
        }, layer);
        el("line", {
          x1: x, x2: x, y1: m.t, y2: m.t + ph, stroke: mk.color || "#d68910",
          "stroke-width": mk.width || 1.5, "stroke-dasharray": mk.dash || null,
        }, g);
        el("path", { d: `M${x - 5} ${m.t} L${x + 5} ${m.t} L${x} ${m.t + 8} Z`, fill: mk.color || "#d68910" }, g);
        // a wide transparent line: an easy target on a touch screen
        el("line", { x1: x, x2: x, y1: m.t, y2: m.t + ph, stroke: "transparent", "stroke-width": 12 }, g);
        if (mk.label) el("title", {}, g).textContent = mk.label;
        if (mk.onClick) {
          g.addEventListener("click", (ev) => { ev.stopPropagation(); mk.onClick(mk); });
          g.addEventListener("keydown", (ev) => {
            if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); mk.onClick(mk); }
          });
        }
      });
      this.markerLayer = layer;
    }

    _legendItems() {
      return this.series.filter((s) => !s.noLegend);
    }

    _legendRows(width) {
      let x = 58;
      let rows = 1;
      for (const s of this._legendItems()) {
        const w = 26 + s.name.length * 6.5;
        if (x + w > width - 10) { rows += 1; x = 58; }
        x += w;
      }
      return rows;
    }

    _legend(m, width) {
      let x = m.l;
      let y = (this.opts.title ? 32 : 14);
      const top = el("g", { class: "chart-legend" }, this.svg);
      for (const s of this._legendItems()) {
        const w = 26 + s.name.length * 6.5;
        if (x + w > width - 10) { x = m.l; y += 18; }
        const hidden = this.hidden.has(s.name);
        const g = el("g", { cursor: "pointer", "data-legend": s.name, opacity: hidden ? 0.35 : 1, role: "button", tabindex: 0 }, top);
        el("line", { x1: x, x2: x + 16, y1: y - 4, y2: y - 4, stroke: s.color, "stroke-width": 3, "stroke-dasharray": s.dash || null }, g);
        text(g, x + 20, y, s.name, { fill: INK });
        const toggle = () => {
          if (this.hidden.has(s.name)) this.hidden.delete(s.name); else this.hidden.add(s.name);
          this.render();
        };
        g.addEventListener("click", toggle);
        g.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); toggle(); } });
        x += w;
      }
    }

    nearestPoint(px, py) {
      let best = null;
      for (const s of this.visibleSeries()) {
        for (let i = 0; i < s.x.length; i++) {
          if (s.x[i] === null || s.y[i] === null || !Number.isFinite(s.y[i])) continue;
          const dx = this.sx(s.x[i]) - px;
          const dy = this.sy(s.y[i]) - py;
          const d2 = dx * dx + dy * dy;
          if (best === null || d2 < best.d2) best = { s, i, d2 };
        }
      }
      if (best === null) return [];
      const { s, i } = best;
      let label = `${s.name}: (${fmt(s.x[i])}, ${fmt(s.y[i])})`;
      if (s.tau) label += ` at τ = ${fmt(s.tau[i])} s`;
      return [[label, s.color]];
    }

    valuesAt(xv) {
      const out = [];
      for (const s of this.visibleSeries()) {
        if (!s.x.length) continue;
        const i = s.step ? lastAtOrBefore(s.x, xv) : nearestIndex(s.x, xv);
        if (i < 0) continue;
        const v = s.y[i];
        let label = `${s.name}: ${fmt(v)}`;
        if (s.lo && s.hi && s.lo[i] !== null && s.hi[i] !== null) label += ` [${fmt(s.lo[i])}, ${fmt(s.hi[i])}]`;
        if (!s.step && this.opts.showX) label += ` at ${fmt(s.x[i])}`;
        out.push([label, s.color]);
      }
      return out;
    }

    _wire() {
      let dragStart = null;
      const pos = (ev) => {
        const r = this.svg.getBoundingClientRect();
        return [ev.clientX - r.left, ev.clientY - r.top];
      };
      const inPlot = (px, py) => this.m && px >= this.m.l && px <= this.width - this.m.r && py >= this.m.t && py <= this.height - this.m.b;
      this.svg.addEventListener("pointermove", (ev) => {
        const [px, py] = pos(ev);
        if (!inPlot(px, py)) { this._hideHover(); return; }
        this.hoverLine.setAttribute("x1", px);
        this.hoverLine.setAttribute("x2", px);
        this.hoverLine.setAttribute("visibility", "visible");
        const xv = this.invX(px);
        const lines = this.opts.nearest
          ? this.nearestPoint(px, py)
          : [[`${this.opts.xLabel || "x"} = ${fmt(xv)}`, null], ...this.valuesAt(xv)];
        showTip(this.tip, this.container, px, py, lines);
        if (dragStart !== null) {
          const a = Math.min(dragStart, px);
          this.zoomRect.setAttribute("x", a);
          this.zoomRect.setAttribute("width", Math.abs(px - dragStart));
          this.zoomRect.setAttribute("visibility", "visible");
        }
      });
      this.svg.addEventListener("pointerleave", () => this._hideHover());
      this.svg.addEventListener("pointerdown", (ev) => {
        const [px, py] = pos(ev);
        if (ev.target.closest?.(".chart-marker, .chart-legend")) return;
        if (inPlot(px, py)) dragStart = px;
      });
      window.addEventListener("pointerup", (ev) => {
        if (dragStart === null) return;
        const [px] = pos(ev);
        const a = dragStart;
        dragStart = null;
        this.zoomRect.setAttribute("visibility", "hidden");
        if (Math.abs(px - a) > 6) {
          const lo = this.invX(Math.min(a, px));
          const hi = this.invX(Math.max(a, px));
          this.xDomain = [lo, hi];
          this.render();
          if (this.opts.onZoom) this.opts.onZoom(this.xDomain);
        } else if (this.opts.onClick) {
          this.opts.onClick(this.invX(px));
        }
      });
      this.svg.addEventListener("dblclick", () => {
        this.xDomain = this.fullX.slice();
        this.render();
        if (this.opts.onZoom) this.opts.onZoom(this.xDomain);
      });
      let pending = null;
      window.addEventListener("resize", () => {
        clearTimeout(pending);
        pending = setTimeout(() => this.render(), 120);
      });
    }

    _hideHover() {
      if (this.hoverLine) this.hoverLine.setAttribute("visibility", "hidden");
      this.tip.hidden = true;
    }

    setXDomain(domain) {
      this.xDomain = domain.slice();
      this.render();
    }

    setCursor(xv) {
      this.cursorX = xv;
      if (!this.cursor) return;
      const [x0, x1] = this.xDomain;
      if (xv === null || xv < x0 || xv > x1) {
        this.cursor.setAttribute("visibility", "hidden");
        return;
      }
      const x = this.sx(xv);
      this.cursor.setAttribute("x1", x);
      this.cursor.setAttribute("x2", x);
      this.cursor.setAttribute("visibility", "visible");
      this.cursor.setAttribute("data-x", xv.toFixed(4));
    }
  }

  // --------------------------------------------------- forest (interval) chart
  class ForestChart {
    constructor(container, opts) {
      this.container = container;
      this.opts = Object.assign({ rowHeight: 30, xLabel: "" }, opts);
      container.classList.add("chart");
      this.svg = el("svg", { xmlns: NS, role: "img" });
      if (this.opts.title) this.svg.setAttribute("aria-label", this.opts.title);
      container.appendChild(this.svg);
      this.tip = tooltipFor(container);
      this.render();
      let pending = null;
      window.addEventListener("resize", () => { clearTimeout(pending); pending = setTimeout(() => this.render(), 120); });
    }

    render() {
      const rows = this.opts.rows;
      const svg = this.svg;
      svg.replaceChildren();
      const width = Math.max(280, this.container.clientWidth || 600);
      const labelW = Math.min(220, Math.max(80, ...rows.map((r) => r.label.length * 7 + 16)));
      const m = { l: labelW, r: 18, t: this.opts.title ? 28 : 10, b: 40 };
      const height = m.t + m.b + rows.length * this.opts.rowHeight;
      svg.setAttribute("width", width);
      svg.setAttribute("height", height);
      svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
      el("rect", { x: 0, y: 0, width, height, fill: "#ffffff" }, svg);
      if (this.opts.title) text(svg, 8, 16, this.opts.title, { fill: INK, "font-size": 13, "font-weight": 600 });
      const vals = rows.flatMap((r) => [r.est, r.lo, r.hi]).concat(this.opts.refLine !== undefined ? [this.opts.refLine] : []);
      let [lo, hi] = finiteExtent([vals]);
      lo = Math.min(lo, this.opts.baseline !== undefined ? this.opts.baseline : lo);
      const pad = (hi - lo) * 0.05 || 1;
      const x0 = this.opts.baseline !== undefined ? Math.min(this.opts.baseline, lo) : lo - pad;
      const x1 = hi + pad;
      const pw = width - m.l - m.r;
      const sx = (v) => m.l + ((v - x0) / (x1 - x0)) * pw;
      for (const v of ticks(x0, x1, Math.max(2, Math.floor(pw / 80)))) {
        el("line", { x1: sx(v), x2: sx(v), y1: m.t, y2: height - m.b, stroke: GRID }, svg);
        text(svg, sx(v), height - m.b + 16, fmt(v), { "text-anchor": "middle" });
      }
      if (this.opts.xLabel) text(svg, m.l + pw / 2, height - 6, this.opts.xLabel, { "text-anchor": "middle", fill: INK });
      if (this.opts.refLine !== undefined) {
        el("line", { x1: sx(this.opts.refLine), x2: sx(this.opts.refLine), y1: m.t, y2: height - m.b, stroke: "#7f8c8d", "stroke-dasharray": "4 4" }, svg);
      }
      rows.forEach((r, i) => {
        const yc = m.t + i * this.opts.rowHeight + this.opts.rowHeight / 2;
        const color = r.color || PALETTE[0];
        const g = el("g", { "data-row": r.label, cursor: r.href ? "pointer" : "default" }, svg);
        const label = text(g, m.l - 8, yc + 4, r.label, { "text-anchor": "end", fill: r.href ? "#1f4e79" : INK, "font-size": 12 });
        if (r.href) label.setAttribute("text-decoration", "underline");
        if (Number.isFinite(r.est)) {
          const base = this.opts.baseline !== undefined ? this.opts.baseline : x0;
          el("rect", { x: Math.min(sx(base), sx(r.est)), y: yc - 8, width: Math.abs(sx(r.est) - sx(base)), height: 16, fill: color, "fill-opacity": 0.28 }, g);
          if (Number.isFinite(r.lo) && Number.isFinite(r.hi)) {
            el("line", { x1: sx(r.lo), x2: sx(r.hi), y1: yc, y2: yc, stroke: INK, "stroke-width": 1.5 }, g);
            el("line", { x1: sx(r.lo), x2: sx(r.lo), y1: yc - 5, y2: yc + 5, stroke: INK, "stroke-width": 1.5 }, g);
            el("line", { x1: sx(r.hi), x2: sx(r.hi), y1: yc - 5, y2: yc + 5, stroke: INK, "stroke-width": 1.5 }, g);
          }
          el("circle", { cx: sx(r.est), cy: yc, r: 4, fill: color }, g);
        }
        const hit = el("rect", { x: 0, y: yc - this.opts.rowHeight / 2, width, height: this.opts.rowHeight, fill: "transparent" }, g);
        const desc = `${r.label}: ${fmt(r.est)}${Number.isFinite(r.lo) ? ` [${fmt(r.lo)}, ${fmt(r.hi)}]` : ""}${this.opts.unit || ""}`;
        hit.addEventListener("pointermove", (ev) => {
          const b = svg.getBoundingClientRect();
          showTip(this.tip, this.container, ev.clientX - b.left, ev.clientY - b.top, [[desc, color]]);
        });
        hit.addEventListener("pointerleave", () => { this.tip.hidden = true; });
        if (r.href) hit.addEventListener("click", () => { window.location.href = r.href; });
      });
    }
  }

  // --------------------------------------------------------------- export
  function serialize(svg) {
    const clone = svg.cloneNode(true);
    clone.setAttribute("xmlns", NS);
    clone.querySelectorAll(".chart-overlay").forEach((n) => {
      n.remove();
    });
    clone.querySelectorAll("[visibility='hidden']").forEach((n) => {
      n.remove();
    });
    return `<?xml version="1.0" encoding="UTF-8"?>\n${new XMLSerializer().serializeToString(clone)}`;
  }

  function download(blob, name) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a);
    a.click();
    setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
  }

  function exportSVG(chart, name) {
    download(new Blob([serialize(chart.svg)], { type: "image/svg+xml" }), `${name}.svg`);
  }

  function toPNG(chart, scale) {
    return new Promise((resolve, reject) => {
      const svgText = serialize(chart.svg);
      const url = URL.createObjectURL(new Blob([svgText], { type: "image/svg+xml" }));
      const img = new Image();
      img.onload = () => {
        const w = Number(chart.svg.getAttribute("width"));
        const h = Number(chart.svg.getAttribute("height"));
        const canvas = document.createElement("canvas");
        canvas.width = Math.round(w * scale);
        canvas.height = Math.round(h * scale);
        const ctx = canvas.getContext("2d");
        ctx.scale(scale, scale);
        ctx.drawImage(img, 0, 0, w, h);
        URL.revokeObjectURL(url);
        canvas.toBlob((b) => (b ? resolve(b) : reject(new Error("PNG encoding failed"))), "image/png");
      };
      img.onerror = () => { URL.revokeObjectURL(url); reject(new Error("the chart could not be rasterized")); };
      img.src = url;
    });
  }

  async function exportPNG(chart, name) {
    download(await toPNG(chart, 2), `${name}.png`);
  }

  function exportButtons(toolbar, chart, name) {
    for (const [label, fn] of [["PNG", exportPNG], ["SVG", exportSVG]]) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "button small";
      b.textContent = label;
      b.title = `Download this chart as ${label}`;
      b.dataset.export = label.toLowerCase();
      b.addEventListener("click", () => fn(chart, name));
      toolbar.appendChild(b);
    }
  }

  window.ProctorCharts = {
    line: (container, opts) => new LineChart(container, opts),
    timeChart,
    timeDomain,
    forest: (container, opts) => new ForestChart(container, opts),
    exportButtons,
    exportSVG,
    exportPNG,
    toPNG,
    serialize,
    fmt,
    PALETTE,
  };
})();
