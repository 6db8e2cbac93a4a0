"""The report's own CSS (after :data:`diopi.html_page.CSS`) and its JavaScript (:mod:`op_tools.report`); inline.

The script reads the rows from ``<script type="application/json" id="rows-data">``, draws the error chart on a
canvas and renders the rows table one page at a time. Every value goes into the page with ``textContent`` or
attribute properties, never as markup.
"""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
.first-fail { border: 2px solid var(--fail); background: #fdecea; border-radius: 6px; padding: 8px 12px;
  margin: 10px 0; }
.first-fail dl { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 6px 0; }
.first-fail dt { color: #555; } .first-fail dd { margin: 0; word-break: break-all; }
.all-good { border-left: 5px solid var(--pass); background: #edf7ed; padding: 8px 12px; border-radius: 6px; }
.controls { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 6px 0; }
.controls input[type=search] { min-width: 280px; padding: 4px 6px; }
.chart-box { position: relative; width: 100%; }
#chart { display: block; width: 100%; height: 300px; border: 1px solid var(--line); border-radius: 4px; }
#tip { position: absolute; pointer-events: none; background: #222; color: #fff; padding: 4px 8px;
  border-radius: 4px; font: 12px ui-monospace, Menlo, Consolas, monospace; white-space: pre; z-index: 2; }
.legend span { margin-right: 14px; } .dot { display: inline-block; width: 10px; height: 10px;
  border-radius: 50%; margin-right: 4px; vertical-align: middle; }
#rows th { cursor: pointer; user-select: none; } #rows th:hover { background: #e9e9e9; }
td.long { max-width: 420px; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
tr.mark td { outline: 2px solid #1565c0; outline-offset: -2px; }
#ops tbody tr { cursor: pointer; } #ops tbody tr:hover td { background: #eef3fb; }
"""

JS = r"""
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const ROWS = JSON.parse($("rows-data").textContent);
  const COLUMNS = JSON.parse($("columns-data").textContent);
  const NUMERIC = new Set(["id", "max_abs_diff", "max_rel_diff", "cosine", "atol", "rtol", "step"]);
  const LONG = new Set(["message", "call_site", "name", "shape"]);
  const RANK = new Map([["FAIL", 0], ["SKIP", 2], ["NOISE", 3], ["PASS", 4]]);
  const COLOR = new Map([["FAIL", "#c62828"], ["NOISE", "#d98c1c"], ["SKIP", "#9e9e9e"], ["PASS", "#2e7d32"]]);
  const PAGE = 500;
  const state = {col: null, dir: 1, text: "", verdict: "", phase: "", op: "", page: 0, mark: -1};
  let view = [];
  let hay = null;

  function num(v) {
    if (typeof v === "number") return v;
    if (v === "inf" || v === "Infinity") return Infinity;
    if (v === "-inf" || v === "-Infinity") return -Infinity;
    if (typeof v === "string" && v.trim() !== "") {
      const x = Number(v);
      return Number.isNaN(x) ? null : x;
    }
    return null;
  }
  function str(v) {
    if (v === null || v === undefined) return "";
    return typeof v === "object" ? JSON.stringify(v) : String(v);
  }
  function fmt(col, v) {
    if (!NUMERIC.has(col)) return str(v);
    const x = num(v);
    if (x === null) return str(v);
    if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
    if (Number.isInteger(x) && Math.abs(x) < 1e15) return String(x);
    const a = Math.abs(x);
    return a >= 1e-3 && a < 1e4 ? String(Number(x.toPrecision(4))) : x.toExponential(3).replace(/\.?0+e/, "e");
  }
  function rank(v) { return RANK.has(v) ? RANK.get(v) : 1; }
  function known(v) { return RANK.has(v) ? v : "other"; }
  function caseHref(p) {
    if (typeof p !== "string" || p === "") return null;
    if (/^[a-z][a-z0-9+.-]*:/i.test(p) || p.startsWith("//") || p.includes("\\")) return null;
    return p.split("/").map(encodeURIComponent).join("/") + (p.endsWith("/") ? "" : "/");
  }
  function haystack(i) {
    if (hay === null) hay = new Array(ROWS.length);
    if (hay[i] === undefined) {
      const r = ROWS[i];
      hay[i] = [r.id, r.name, r.phase, r.index, r.dtype, r.message, r.call_site, r.case_dir]
        .map(str).join(" ").toLowerCase();
    }
    return hay[i];
  }

  // ---- table --------------------------------------------------------------------------------------------
  function comparator() {
    const c = state.col, d = state.dir;
    if (c === null) return (a, b) => rank(ROWS[a].verdict) - rank(ROWS[b].verdict) || a - b;
    if (c === "#") return (a, b) => d * (a - b);
    if (c === "verdict") return (a, b) => d * (rank(ROWS[a].verdict) - rank(ROWS[b].verdict)) || a - b;
    if (NUMERIC.has(c)) {
      return (a, b) => {
        const x = num(ROWS[a][c]), y = num(ROWS[b][c]);
        if (x === null || y === null) return (x === null) - (y === null) || a - b;
        return x < y ? -d : x > y ? d : a - b;
      };
    }
    return (a, b) => {
      const x = str(ROWS[a][c]), y = str(ROWS[b][c]);
      return x < y ? -d : x > y ? d : a - b;
    };
  }
  function compute() {
    const t = state.text.trim().toLowerCase();
    const out = [];
    for (let i = 0; i < ROWS.length; i++) {
      const r = ROWS[i];
      if (state.verdict === "!PASS" ? r.verdict === "PASS" : state.verdict && r.verdict !== state.verdict) continue;
      if (state.phase && r.phase !== state.phase) continue;
      if (state.op && r.name !== state.op) continue;
      if (t && !haystack(i).includes(t)) continue;
      out.push(i);
    }
    out.sort(comparator());
    view = out;
  }
  function rowElement(i) {
    const r = ROWS[i];
    const tr = document.createElement("tr");
    tr.dataset.row = String(i);
    tr.className = "v-" + known(r.verdict) + (i === state.mark ? " mark" : "");
    const first = document.createElement("td");
    first.className = "num";
    first.textContent = String(i + 1);
    tr.appendChild(first);
    for (const c of COLUMNS) {
      const td = document.createElement("td");
      const v = r[c];
      const h = c === "case_dir" ? caseHref(v) : null;
      if (h !== null) {
        const a = document.createElement("a");
        a.href = h;
        a.textContent = str(v);
        td.appendChild(a);
      } else {
        td.textContent = fmt(c, v);
      }
      if (NUMERIC.has(c)) td.className = "num";
      else if (LONG.has(c)) td.className = "long";
      else if (c === "verdict") td.className = "verdict";
      if (td.textContent !== str(v) || LONG.has(c)) td.title = str(v);
      tr.appendChild(td);
    }
    return tr;
  }
  function renderHead() {
    const tr = document.createElement("tr");
    for (const c of ["#"].concat(COLUMNS)) {
      const th = document.createElement("th");
      th.dataset.col = c;
      const arrow = state.col === c ? (state.dir > 0 ? " \u25B2" : " \u25BC") : "";
      th.textContent = c + arrow;
      th.title = "sort by " + c;
      tr.appendChild(th);
    }
    const head = $("rows").tHead;
    head.replaceChildren(tr);
  }
  function render() {
    const pages = Math.max(1, Math.ceil(view.length / PAGE));
    state.page = Math.min(Math.max(0, state.page), pages - 1);
    const start = state.page * PAGE, end = Math.min(view.length, start + PAGE);
    const body = document.createElement("tbody");
    for (let k = start; k < end; k++) body.appendChild(rowElement(view[k]));
    const table = $("rows");
    table.replaceChild(body, table.tBodies[0]);
    let info = view.length ? "rows " + (start + 1) + "\u2013" + end + " of " + view.length : "no rows match";
    if (view.length !== ROWS.length) info += " (filtered from " + ROWS.length + ")";
    $("page-info").textContent = info;
    $("page-no").textContent = "page " + (state.page + 1) + " / " + pages;
    $("prev").disabled = state.page === 0;
    $("next").disabled = state.page >= pages - 1;
    renderHead();
  }
  function update() { compute(); state.page = 0; render(); }
  function syncControls() {
    $("filter").value = state.text;
    $("verdict").value = state.verdict;
    $("phase").value = state.phase;
    $("op").value = state.op;
  }
  function jump(i) {
    state.mark = i;
    if (!view.includes(i)) {
      Object.assign(state, {text: "", verdict: "", phase: "", op: ""});
      syncControls();
      compute();
    }
    state.page = Math.floor(view.indexOf(i) / PAGE);
    render();
    const tr = $("rows").querySelector('tr[data-row="' + i + '"]');
    if (tr) tr.scrollIntoView({block: "center"});
  }

  function setupTable() {
    const ops = Array.from(new Set(ROWS.map((r) => str(r.name)))).sort();
    for (const name of ops) $("op").appendChild(new Option(name, name));
    let timer = 0;
    $("filter").addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(() => { state.text = $("filter").value; update(); }, 200);
    });
    for (const k of ["verdict", "phase", "op"]) {
      $(k).addEventListener("change", () => { state[k] = $(k).value; update(); });
    }
    $("reset").addEventListener("click", () => {
      Object.assign(state, {col: null, dir: 1, text: "", verdict: "", phase: "", op: "", mark: -1});
      syncControls();
      update();
    });
    $("prev").addEventListener("click", () => { state.page--; render(); });
    $("next").addEventListener("click", () => { state.page++; render(); });
    $("rows").tHead.addEventListener("click", (ev) => {
      const th = ev.target.closest("th");
      if (!th) return;
      const c = th.dataset.col;
      if (state.col === c) state.dir = -state.dir;
      else { state.col = c; state.dir = NUMERIC.has(c) && c !== "id" ? -1 : 1; }
      compute();
      render();
    });
    $("ops").addEventListener("click", (ev) => {
      const tr = ev.target.closest("tr[data-op]");
      if (!tr) return;
      Object.assign(state, {op: tr.dataset.op, text: "", verdict: "", phase: ""});
      syncControls();
      update();
      $("rows-section").scrollIntoView();
    });
    document.addEventListener("click", (ev) => {
      const b = ev.target.closest("[data-jump]");
      if (b) jump(Number(b.dataset.jump));
    });
    compute();
    render();
  }

  // ---- chart --------------------------------------------------------------------------------------------
  const canvas = $("chart");
  let px = new Float32Array(0), py = new Float32Array(0);
  function drawChart() {
    const metric = $("metric").value;
    const dpr = window.devicePixelRatio || 1;
    const W = Math.max(200, canvas.clientWidth), H = Math.max(120, canvas.clientHeight);
    canvas.width = Math.round(W * dpr);
    canvas.height = Math.round(H * dpr);
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    const n = ROWS.length;
    px = new Float32Array(n).fill(NaN);
    py = new Float32Array(n).fill(NaN);
    const vals = new Float64Array(n);
    let lo = Infinity, hi = -Infinity, missing = 0, zeros = 0, infs = 0;
    for (let i = 0; i < n; i++) {
      const v = num(ROWS[i][metric]);
      if (v === null || Number.isNaN(v) || v < 0) { vals[i] = NaN; missing++; continue; }
      vals[i] = v;
      if (v === 0) zeros++;
      else if (!Number.isFinite(v)) infs++;
      else { lo = Math.min(lo, v); hi = Math.max(hi, v); }
    }
    if (lo === Infinity) { lo = 1e-8; hi = 1; }
    const d0 = Math.floor(Math.log10(lo));
    const d1 = Math.max(d0 + 1, Math.ceil(Math.log10(hi)));
    const L = 62, R = 14, T = 14, B = 34;
    const pw = W - L - R, ph = H - T - B;
    const yInf = T, yZero = T + ph, yTop = T + 16, yBottom = T + ph - 16;
    const ymap = (v) => (v === 0 ? yZero : !Number.isFinite(v) ? yInf
      : yBottom - ((Math.log10(v) - d0) / (d1 - d0)) * (yBottom - yTop));
    const xmap = (i) => L + (n <= 1 ? pw / 2 : (i / (n - 1)) * pw);
    g.font = "11px ui-monospace, Menlo, Consolas, monospace";
    g.fillStyle = "#555";
    g.strokeStyle = "#e4e4e4";
    g.lineWidth = 1;
    g.textAlign = "right";
    g.textBaseline = "middle";
    const step = Math.max(1, Math.ceil((d1 - d0) / 8));
    for (let d = d0; d <= d1; d += step) {
      const y = ymap(Math.pow(10, d));
      g.beginPath(); g.moveTo(L, y); g.lineTo(L + pw, y); g.stroke();
      g.fillText("1e" + d, L - 6, y);
    }
    if (zeros) g.fillText("0", L - 6, yZero);
    if (infs) g.fillText("inf", L - 6, yInf);
    g.strokeStyle = "#999";
    g.strokeRect(L, T, pw, ph);
    g.textAlign = "center";
    g.textBaseline = "top";
    if (n > 0) {
      for (let k = 0; k <= 5; k++) {
        const i = Math.round((k / 5) * (n - 1));
        g.fillText("id " + str(ROWS[i].id), xmap(i), T + ph + 4);
      }
    }
    g.fillText("rows in op order \u2192  (y: " + metric + ", log scale)", L + pw / 2, T + ph + 18);
    const firstFail = ROWS.findIndex((r) => r.verdict === "FAIL");
    if (firstFail >= 0) {
      g.save();
      g.strokeStyle = "#c62828";
      g.setLineDash([4, 4]);
      g.beginPath(); g.moveTo(xmap(firstFail), T); g.lineTo(xmap(firstFail), T + ph); g.stroke();
      g.restore();
    }
    const order = ["PASS", "NOISE", "SKIP", "other", "FAIL"];
    const shown = new Map(order.map((v) => [v, 0]));
    for (const verdict of order) {
      g.fillStyle = COLOR.get(verdict) || "#5c6bc0";
      const s = verdict === "FAIL" ? 5 : verdict === "PASS" ? 2 : 3;
      for (let i = 0; i < n; i++) {
        if (Number.isNaN(vals[i]) || known(ROWS[i].verdict) !== verdict) continue;
        const x = xmap(i), y = ymap(vals[i]);
        px[i] = x;
        py[i] = y;
        g.fillRect(x - s / 2, y - s / 2, s, s);
        shown.set(verdict, shown.get(verdict) + 1);
      }
    }
    const legend = $("legend");
    legend.replaceChildren();
    for (const verdict of order) {
      if (!shown.get(verdict)) continue;
      const span = document.createElement("span");
      const dot = document.createElement("i");
      dot.className = "dot";
      dot.style.background = COLOR.get(verdict) || "#5c6bc0";
      span.append(dot, verdict + " " + shown.get(verdict));
      legend.appendChild(span);
    }
    const note = document.createElement("span");
    note.textContent = missing ? missing + " rows without a " + metric + " are not drawn" : "";
    legend.appendChild(note);
  }
  function nearest(ev, failOnly, radius) {
    const rect = canvas.getBoundingClientRect();
    const x = ev.clientX - rect.left, y = ev.clientY - rect.top;
    let best = -1, bd = radius * radius;
    for (let i = 0; i < px.length; i++) {
      if (Number.isNaN(px[i]) || (failOnly && ROWS[i].verdict !== "FAIL")) continue;
      const dx = px[i] - x, dy = py[i] - y, d = dx * dx + dy * dy;
      if (d <= bd) { bd = d; best = i; }
    }
    return best;
  }
  function pick(ev) {
    const i = nearest(ev, true, 8);
    return i >= 0 ? i : nearest(ev, false, 5);
  }
  function setupChart() {
    const tip = $("tip");
    canvas.addEventListener("mousemove", (ev) => {
      const i = pick(ev);
      if (i < 0) { tip.hidden = true; canvas.style.cursor = "default"; return; }
      const r = ROWS[i];
      tip.textContent = r.verdict + "  " + str(r.name) + " #" + str(r.id) + " " + str(r.phase) + " "
        + str(r.index) + "\nmax_rel_diff " + fmt("max_rel_diff", r.max_rel_diff)
        + "  max_abs_diff " + fmt("max_abs_diff", r.max_abs_diff) + "\n(click: show the row)";
      tip.hidden = false;
      const box = canvas.parentElement.getBoundingClientRect();
      tip.style.left = Math.min(ev.clientX - box.left + 12, box.width - tip.offsetWidth - 4) + "px";
      tip.style.top = (ev.clientY - box.top + 12) + "px";
      canvas.style.cursor = "pointer";
    });
    canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
    canvas.addEventListener("click", (ev) => {
      const i = pick(ev);
      if (i >= 0) jump(i);
    });
    $("metric").addEventListener("change", drawChart);
    let timer = 0;
    window.addEventListener("resize", () => { clearTimeout(timer); timer = setTimeout(drawChart, 150); });
    drawChart();
  }

  setupTable();
  setupChart();
})();
"""
