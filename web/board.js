/* board.js -- the sale board: log in with the admin token, poll /admin/api/board once a
 * second, draw tiles, SVG charts and tables, create flash sales, and run them (pause,
 * resume, end, extend: POST /admin/api/sale/{id}/...).
 *
 * The server sends cumulative counters per instance (src/server/board.c); rates and latency
 * percentiles are the differences between two polls, summed over the live instances.
 * The token is kept in sessionStorage (this tab only) and sent as x-admin-token on every
 * data call. No libraries: plain DOM and SVG. URLs are relative to /admin/, so the board
 * works as well behind a proxy prefix (nginx's /api/admin/ in deploy/).
 *
 * What outlives a reload comes from the server: each sale's totals by outcome (kept in
 * Redis, summed over every instance) and the event log; the charts are this tab's own. */
"use strict";

const TOKEN_KEY = "seckill-admin-token";
const HISTORY = 120;              /* points kept per chart: two minutes at one poll a second */
const LAT_BOUNDS_MS = [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, Infinity];
/* Outcome groups shown on the board; "errors" is every failure that is not a verdict. */
const GROUPS = [
  { key: "ok", label: "admitted", color: "#1a7f37", of: ["ok"] },
  { key: "sold_out", label: "sold out", color: "#c62828", of: ["sold_out"] },
  { key: "duplicate", label: "duplicate", color: "#f59e0b", of: ["duplicate"] },
  { key: "not_started", label: "not started / ended / paused", color: "#6b7280",
    of: ["not_started", "ended", "paused"] },
  { key: "rate_limited", label: "rate limited", color: "#7c3aed", of: ["rate_limited"] },
  { key: "queue_required", label: "no pass (waiting room)", color: "#0e7490", of: ["queue_required"] },
  { key: "errors", label: "errors", color: "#111827",
    of: ["unavailable", "bad_request", "unauthorized", "no_voucher", "other"] },
];

const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem(TOKEN_KEY) || "";
let timer = null;
let prev = new Map();             /* instance name -> its previous snapshot */
const hist = { t: [], groups: {}, p50: [], p99: [], backlog: [], lag: [] };
GROUPS.forEach((g) => { hist.groups[g.key] = []; });

/* ------------------------------------------------------------ login */

function showLogin(msg) {
  stop();
  $("board").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = msg || "";
  $("status").textContent = "";
  $("token").focus();
}

function showBoard() {
  $("login").hidden = true;
  $("board").hidden = false;
  $("logout").hidden = false;
  start();
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const t = $("token").value.trim();
  if (!t) { $("login-error").textContent = "Enter the admin token."; return; }
  token = t;
  const res = await poll();
  if (res === "ok") {
    sessionStorage.setItem(TOKEN_KEY, t);
    $("token").value = "";
    showBoard();
  }
});

$("logout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  token = "";
  showLogin("");
});

/* ------------------------------------------------------------ polling */

function start() { if (!timer) timer = setInterval(poll, 1000); }
function stop() { if (timer) { clearInterval(timer); timer = null; } }

/* One data call: "ok", "denied" (the token was refused: back to the login form) or
 * "error" (the service did not answer; the board says so and keeps polling). */
async function poll() {
  let r;
  try {
    r = await fetch("api/board", { headers: { "x-admin-token": token }, cache: "no-store" });
  } catch (e) {
    setStatus("no answer from the service", true);
    return "error";
  }
  if (r.status === 403) {
    sessionStorage.removeItem(TOKEN_KEY);
    token = "";
    showLogin("Wrong admin token: the service refused it.");
    return "denied";
  }
  let j = null;
  try { j = await r.json(); } catch (e) { j = null; }
  if (!r.ok || !j || !j.success) {
    setStatus("service: " + ((j && j.errorMsg) || "HTTP " + r.status), true);
    return "error";
  }
  update(j.data);
  setStatus("live · " + new Date(j.data.now).toLocaleTimeString(), false);
  return "ok";
}

function setStatus(text, bad) {
  const s = $("status");
  s.textContent = text;
  s.className = bad ? "status bad" : "status";
}

/* ------------------------------------------------------------ figures */

function update(d) {
  const now = d.now;
  const rates = {};
  GROUPS.forEach((g) => { rates[g.key] = 0; });
  let answers = 0, latDelta = new Array(LAT_BOUNDS_MS.length).fill(0), anyDelta = false;
  let backlog = 0, admitted = 0, persisted = 0, redisBad = 0, sqlBad = 0;
  const rows = [];
  const seen = new Map();
  for (const s of d.instances) {
    seen.set(s.name, s);
    const p = prev.get(s.name);
    const dt = p && s.ts > p.ts ? (s.ts - p.ts) / 1000 : 0;
    const delta = (a, b) => (a >= b ? a - b : a);       /* a restart resets the counters */
    let instAnswers = null, instOk = null;
    if (dt > 0) {
      anyDelta = true;
      GROUPS.forEach((g) => {
        let n = 0;
        g.of.forEach((o) => { n += delta(s.seckill[o] || 0, (p.seckill || {})[o] || 0); });
        rates[g.key] += n / dt;
      });
      instAnswers = delta(s.requests, p.requests) / dt;
      instOk = delta(s.seckill.ok || 0, p.seckill.ok || 0) / dt;
      answers += instAnswers;
      s.lat.forEach((v, i) => { latDelta[i] += delta(v, p.lat[i] || 0); });
    }
    backlog = Math.max(backlog, (s.pending || 0) + (s.lag || 0));   /* the same stream seen by all */
    admitted += s.seckill.ok || 0;
    persisted += s.persisted || 0;
    if (s.redis_up < s.workers) redisBad++;
    if (!s.sql_up) sqlBad++;
    rows.push({ s, instAnswers, instOk, age: Math.max(0, now - s.ts) });
  }
  prev = seen;

  const p50 = percentile(latDelta, 0.5), p99 = percentile(latDelta, 0.99);
  const n = d.instances.length;
  const refused = GROUPS.filter((g) => g.key !== "ok").reduce((a, g) => a + rates[g.key], 0);
  if (anyDelta) {
    push(hist.t, now);
    GROUPS.forEach((g) => push(hist.groups[g.key], rates[g.key]));
    push(hist.p50, p50);
    push(hist.p99, p99);
    push(hist.backlog, backlog);
    push(hist.lag, Math.max(0, admitted - persisted));
  }

  text("t-ok", anyDelta ? fmtRate(rates.ok) : "–");
  text("t-refused", anyDelta ? fmtRate(refused) : "–");
  text("t-p50", fmtMs(p50));
  text("t-p99", fmtMs(p99));
  text("t-backlog", String(backlog));
  text("t-lag", String(Math.max(0, admitted - persisted)));
  upDown("t-redis", n > 0 && redisBad === 0, redisBad ? redisBad + " down" : "up");
  upDown("t-sql", n > 0 && sqlBad === 0, sqlBad ? sqlBad + " down" : "up");
  text("t-inst", String(n));

  chart($("c-adm"), hist.t, GROUPS.map((g) => ({ name: g.label, color: g.color, v: hist.groups[g.key] })), "/s");
  chart($("c-lat"), hist.t, [{ name: "p50", color: "#2563eb", v: hist.p50 },
                             { name: "p99", color: "#c62828", v: hist.p99 }], " ms");
  chart($("c-backlog"), hist.t, [{ name: "backlog (stream)", color: "#f59e0b", v: hist.backlog },
                                 { name: "admitted − persisted", color: "#7c3aed", v: hist.lag }], "");
  sales(d.sales, now);
  events(d.events);
  instances(rows);
}

function push(a, v) { a.push(v); if (a.length > HISTORY) a.shift(); }
function text(id, t) { $(id).textContent = t; }
function upDown(id, up, t) { const e = $(id); e.textContent = t; e.className = "v " + (up ? "up" : "down"); }
function fmtRate(r) { return r >= 100 ? Math.round(r).toLocaleString() : r.toFixed(1); }
function fmtMs(v) { return v == null ? "–" : v >= 10 ? v.toFixed(0) + " ms" : v.toFixed(2) + " ms"; }

/* The q-quantile (ms) of one interval's latency buckets, interpolated inside its bucket
 * as Prometheus's histogram_quantile does; null when nothing was answered. */
function percentile(buckets, q) {
  const total = buckets.reduce((a, b) => a + b, 0);
  if (total === 0) return null;
  const rank = q * total;
  let cum = 0;
  for (let i = 0; i < buckets.length; i++) {
    if (cum + buckets[i] >= rank) {
      const lo = i === 0 ? 0 : LAT_BOUNDS_MS[i - 1];
      const hi = LAT_BOUNDS_MS[i];
      if (!isFinite(hi)) return lo;
      return lo + (hi - lo) * ((rank - cum) / buckets[i]);
    }
    cum += buckets[i];
  }
  return null;
}

/* ------------------------------------------------------------ SVG line chart */

const SVG = "http://www.w3.org/2000/svg";
function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

function chart(box, t, series, unit) {
  const W = Math.max(box.clientWidth, 200), H = 170;
  const L = 46, R = 8, T = 8, B = 18;
  let max = 0;
  series.forEach((s) => s.v.forEach((v) => { if (v != null && v > max) max = v; }));
  max = niceMax(max);
  const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, role: "img" });
  const x = (i) => L + (W - L - R) * (t.length > 1 ? i / (HISTORY - 1) : 0);
  const y = (v) => T + (H - T - B) * (1 - v / max);
  for (let k = 0; k <= 4; k++) {
    const v = (max * k) / 4;
    el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e5e7eb" }, svg);
    el("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" }, svg).textContent = short(v);
  }
  el("text", { x: L, y: H - 4 }, svg).textContent = "−" + HISTORY + " s";
  el("text", { x: W - R, y: H - 4, "text-anchor": "end" }, svg).textContent = "now";
  const off = HISTORY - t.length;
  series.forEach((s) => {
    let d = "", pen = false;
    s.v.forEach((v, i) => {
      if (v == null) { pen = false; return; }
      d += (pen ? "L" : "M") + x(i + off).toFixed(1) + "," + y(v).toFixed(1);
      pen = true;
    });
    if (d) el("path", { d, fill: "none", stroke: s.color, "stroke-width": 1.8 }, svg);
  });
  const legend = document.createElement("div");
  legend.className = "legend";
  series.forEach((s) => {
    const last = s.v.length ? s.v[s.v.length - 1] : null;
    const span = document.createElement("span");
    const sw = document.createElement("i");
    sw.style.background = s.color;
    span.appendChild(sw);
    span.appendChild(document.createTextNode(s.name + " " + (last == null ? "–" : short(last) + unit)));
    legend.appendChild(span);
  });
  box.replaceChildren(svg, legend);
}

function niceMax(m) {
  if (!(m > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(m)));
  for (const f of [1, 2, 2.5, 5, 10]) if (m <= f * p) return f * p;
  return 10 * p;
}
function short(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e4) return (v / 1e3).toFixed(0) + "k";
  if (v >= 100) return v.toFixed(0);
  if (v >= 10) return v.toFixed(1);
  return v.toFixed(2).replace(/\.?0+$/, "") || "0";
}

/* ------------------------------------------------------------ tables */

function cell(tr, content, cls) {
  const td = document.createElement("td");
  if (content instanceof Node) td.appendChild(content); else td.textContent = content;
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

/* A sale's state at `nowS` (seconds) and the countdown that goes with it. */
function saleState(s, nowS) {
  if (s.begin != null && nowS < s.begin)
    return { state: "not started", cls: "state-wait", count: "opens in " + fmtSpan(s.begin - nowS) };
  if (s.end != null && nowS >= s.end)
    return { state: "ended", cls: "state-end", count: "ended " + fmtSpan(nowS - s.end) + " ago" };
  const count = s.end != null ? "ends in " + fmtSpan(s.end - nowS) : "";
  if (s.paused) return { state: "paused", cls: "state-paused", count };
  if (s.stock === 0) return { state: "sold out", cls: "state-out", count };
  if (s.replicasShort)
    return { state: "not sellable: replicas below the promise", cls: "state-short", count };
  return { state: "on sale", cls: "state-on", count };
}

/* "2 d 3 h", "1 h 05 m", "4 m 09 s", "12 s". */
function fmtSpan(sec) {
  sec = Math.max(0, Math.floor(sec));
  const d = Math.floor(sec / 86400), h = Math.floor((sec % 86400) / 3600);
  const m = Math.floor((sec % 3600) / 60), s = sec % 60, p = (n) => String(n).padStart(2, "0");
  if (d > 0) return d + " d " + h + " h";
  if (h > 0) return h + " h " + p(m) + " m";
  if (m > 0) return m + " m " + p(s) + " s";
  return s + " s";
}

function sales(list, now) {
  const tb = $("sales").tBodies[0];
  tb.replaceChildren();
  list.sort((a, b) => b.id - a.id);
  lastSales = new Map(list.map((s) => [s.id, s]));
  const nowS = now / 1000;
  for (const s of list) {
    const tr = document.createElement("tr");
    tr.dataset.id = s.id;
    // units sold: the orders (the buyers, and the orders whose cancel freed their buyer:
    // --cancel-frees-buyer) less those cancelled or timed out (their units came back)
    const l = s.life || {};
    const sold = Math.max(0, (s.buyers || 0) + (l.freed || 0) - (l.returned || 0));
    const initial = (s.stock || 0) + sold;
    const pct = initial > 0 ? (100 * sold) / initial : 0;
    const st = saleState(s, nowS);
    cell(tr, "#" + s.id);
    cell(tr, s.title == null ? "–" : s.title, "sale-title").title = s.title || "";
    cell(tr, s.stock == null ? "–" : s.stock.toLocaleString(), "n stock");
    cell(tr, sold.toLocaleString() + " / " + initial.toLocaleString(), "n");
    const bar = document.createElement("div");
    bar.className = "bar";
    const fill = document.createElement("div");
    fill.style.width = pct.toFixed(1) + "%";
    const label = document.createElement("span");
    label.textContent = sold.toLocaleString() + " sold · " + pct.toFixed(0) + "%";
    bar.append(fill, label);
    cell(tr, bar, "bar-cell");
    const stc = cell(tr, st.state, "state " + st.cls);
    const cd = document.createElement("span");
    cd.className = "countdown";
    cd.textContent = st.count;
    stc.appendChild(cd);
    cell(tr, fmtWhen(s.begin) + " → " + fmtWhen(s.end), "window");
    cell(tr, controls(s, st, nowS), "ctl");
    tb.appendChild(tr);
    if (s.buckets > 1 && Array.isArray(s.perBucket)) tb.appendChild(bucketRow(s));
    if (s.room) tb.appendChild(roomRow(s, now));
    if (s.life) tb.appendChild(lifeRow(s));
    tb.appendChild(totalsRow(s));
  }
  if (!list.length) {
    const tr = document.createElement("tr");
    cell(tr, "No flash sales yet: create one.").colSpan = COLS;
    tb.appendChild(tr);
  }
}

const COLS = 8;
/* Outcome totals of a sale, in the order a review reads them (server names: metrics.c). */
const TOTALS = [
  ["ok", "sold"], ["sold_out", "sold out"], ["duplicate", "duplicates"],
  ["rate_limited", "rate limited"], ["queue_required", "no pass"], ["paused", "paused"], ["not_started", "not started"],
  ["ended", "ended"], ["errors", "errors"],
];
const ERROR_OUTCOMES = GROUPS.find((g) => g.key === "errors").of;

/* A row under sale s's row, one cell across the table: { tr, td }. */
function subRow(s, cls, dataKey) {
  const tr = document.createElement("tr");
  tr.className = cls;
  tr.dataset[dataKey] = s.id;
  const td = cell(tr, "", cls + "-cell");
  td.colSpan = COLS;
  return { tr, td };
}

/* The row under a sale: its answers by outcome since it was created, from every instance. */
function totalsRow(s) {
  const { tr, td } = subRow(s, "totals", "totalsOf");
  const t = Object.assign({}, s.totals || {});
  t.errors = ERROR_OUTCOMES.reduce((a, k) => a + (t[k] || 0), 0);
  for (const [k, label] of TOTALS) {
    const span = document.createElement("span");
    span.className = "tot";
    span.dataset.outcome = k;
    const b = document.createElement("b");
    b.textContent = (t[k] || 0).toLocaleString();
    span.append(b, " " + label);
    td.appendChild(span);
  }
  return tr;
}

/* ------------------------------------------------------------ sale controls */

let lastSales = new Map();         /* id -> the sale as last drawn */
let confirmEnd = { id: 0, until: 0 };   /* End needs a second click within 4 s */

function controls(s, st, nowS) {
  const box = document.createElement("span");
  const btn = (action, label, cls) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.dataset.action = action;
    b.dataset.sale = s.id;
    if (cls) b.className = cls;
    box.appendChild(b);
  };
  const ended = s.end != null && nowS >= s.end;
  if (!ended) {
    btn(s.paused ? "resume" : "pause", s.paused ? "Resume" : "Pause");
    const armed = confirmEnd.id === s.id && Date.now() < confirmEnd.until;
    btn("end", armed ? "Confirm end" : "End", armed ? "warn" : "");
  }
  btn("extend", "Extend…");
  return box;
}

function controlMsg(text, ok) {
  const m = $("control-msg");
  m.textContent = text;
  m.className = ok ? "ok" : "error";
}

async function control(id, action, body) {
  let r, j = null;
  try {
    r = await fetch("api/sale/" + id + "/" + action, {
      method: "POST", body: body ? JSON.stringify(body) : "",
      headers: { "content-type": "application/json", "x-admin-token": token },
    });
    j = await r.json();
  } catch (e) {
    controlMsg("No answer from the service.", false);
    return false;
  }
  if (r.status === 403) { showLogin("Wrong admin token: the service refused it."); return false; }
  if (j && j.success) {
    const done = { pause: "paused", resume: "resumed", end: "ended", extend: "extended to " +
                   (j.data && j.data.endTime ? j.data.endTime.replace("T", " ") : "?") };
    controlMsg("Sale #" + id + " " + done[action] + ".", true);
    poll();
    return true;
  }
  controlMsg("Sale #" + id + ": " + ((j && j.errorMsg) || "HTTP " + r.status), false);
  return false;
}

$("sales").tBodies[0].addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-action]");
  if (!b) return;
  const id = Number(b.dataset.sale), action = b.dataset.action;
  if (action === "end") {
    if (confirmEnd.id === id && Date.now() < confirmEnd.until) {
      confirmEnd = { id: 0, until: 0 };
      control(id, "end");
    } else {
      confirmEnd = { id, until: Date.now() + 4000 };
      b.textContent = "Confirm end";
      b.className = "warn";
    }
  } else if (action === "extend") {
    const s = lastSales.get(id), f = $("extend");
    const base = Math.max(Date.now(), s && s.end != null ? s.end * 1000 : 0);
    f.dataset.sale = id;
    $("extend-what").textContent = "Sale #" + id + (s && s.title ? " " + s.title : "") + " ends at";
    f.end.value = localIso(new Date(base + 3600 * 1000));
    f.hidden = false;
    f.end.focus();
  } else {
    control(id, action);
  }
});

$("extend").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = ev.target, id = Number(f.dataset.sale);
  const v = f.end.value.length === 16 ? f.end.value + ":00" : f.end.value;
  if (!v || new Date(v).getTime() <= Date.now()) {
    controlMsg("The new end must be in the future.", false);
    return;
  }
  if (await control(id, "extend", { endTime: v })) f.hidden = true;
});
$("extend-cancel").addEventListener("click", () => { $("extend").hidden = true; });

/* ------------------------------------------------------------ events */

const EVENT_LABEL = {
  redis_down: "Redis down", redis_up: "Redis up", sql_down: "SQL down", sql_up: "SQL up",
  redis_restart: "Redis restarted", rebuild: "rebuild", failover: "failover",
  replicas_low: "replicas below the promise", sale_opened: "sale opened",
  sale_sold_out: "sold out", sale_ended: "sale ended", sale_paused: "paused",
  sale_resumed: "resumed", sale_extended: "extended",
};
const EVENT_BAD = new Set(["redis_down", "sql_down", "redis_restart", "failover", "replicas_low"]);
const EVENT_GOOD = new Set(["redis_up", "sql_up", "sale_opened", "sale_resumed"]);

function events(list) {
  const tb = $("events").tBodies[0];
  tb.replaceChildren();
  for (const e of list || []) {
    const tr = document.createElement("tr");
    tr.dataset.kind = e.kind;
    if (e.voucher != null) tr.dataset.sale = e.voucher;
    tr.className = EVENT_BAD.has(e.kind) ? "ev-bad" : EVENT_GOOD.has(e.kind) ? "ev-good" : "";
    cell(tr, fmtStamp(e.ts));
    cell(tr, EVENT_LABEL[e.kind] || e.kind, "ev-kind");
    cell(tr, e.text || "", "ev-text");
    cell(tr, e.instance || "");
    tb.appendChild(tr);
  }
  if (!tb.rows.length) {
    const tr = document.createElement("tr");
    cell(tr, "No events yet.").colSpan = 4;
    tb.appendChild(tr);
  }
}

/* A sale in K stock buckets: a second row with each bucket's stock left and sold, and the
 * units on their way between buckets (they count in the sale's stock above). */
function bucketRow(s) {
  const { tr, td } = subRow(s, "buckets", "bucketsOf");
  const head = document.createElement("span");
  head.className = "bk-head";
  head.textContent = s.buckets + " stock buckets:";
  td.appendChild(head);
  s.perBucket.forEach((b, i) => {
    const span = document.createElement("span");
    span.className = "bk" + (b.stock === 0 ? " bk-empty" : "");
    span.dataset.bucket = i;
    const left = b.stock == null ? "–" : b.stock.toLocaleString();
    const sold = b.buyers == null ? "–" : b.buyers.toLocaleString();
    span.textContent = "#" + i + " " + left + " left, " + sold + " sold";
    td.appendChild(span);
  });
  if (s.inTransit > 0) {
    const t = document.createElement("span");
    t.className = "bk bk-transit";
    t.textContent = s.inTransit.toLocaleString() + " in transit";
    td.appendChild(t);
  }
  return tr;
}

/* A sale with a waiting room: a row with its queue (docs/waiting-room.md). The passes
 * issued per second are measured here, from two board answers' issued counts. */
let prevRooms = new Map();         /* sale id -> { t, issued } of the previous answer */
function roomRow(s, now) {
  const { tr, td } = subRow(s, "room", "roomOf");
  const r = s.room, p = prevRooms.get(s.id);
  let measured = null;
  if (p && r.issued != null && now > p.t && r.issued >= p.issued)
    measured = ((r.issued - p.issued) * 1000) / (now - p.t);
  if (r.issued != null) prevRooms.set(s.id, { t: now, issued: r.issued });
  const fig = (v) => (v == null ? "–" : v.toLocaleString());
  const parts = [
    ["head", "waiting room:"],
    ["queued", fig(r.queued) + " queued"],
    ["waiting", fig(r.waiting) + " waiting"],
    ["rate", fig(r.admitPerSecond) + "/s admitted · " +
      (measured == null ? "–" : fmtRate(measured)) + "/s passes issued"],
    ["issued", fig(r.issued) + " passes issued"],
    ["used", fig(r.used) + " used"],
    ["expired", fig(r.expired) + " expired"],
    ["wait", "wait " + (r.waitS == null ? "–" : fmtSpan(r.waitS))],
  ];
  putParts(td, parts, "room");
  return tr;
}

/* A sub-row's figures: one span per [key, text], data-<dataKey>=key (the head in bold). */
function putParts(td, parts, dataKey) {
  for (const [k, t] of parts) {
    const span = document.createElement("span");
    span.className = k === "head" ? "rm-head" : "rm";
    span.dataset[dataKey] = k;
    span.textContent = t;
    td.appendChild(span);
  }
}

/* A sale in stream mode: its orders by lifecycle state (docs/lifecycle.md) -- paid,
 * unpaid, cancelled by the buyer, expired (payment timeout), the units they returned, and
 * the returns due within the next minute (when the payment timeout is on; "≥ N" when the
 * server stopped counting). */
function lifeRow(s) {
  const { tr, td } = subRow(s, "life", "lifeOf");
  const l = s.life;
  const fig = (v) => (v == null ? "–" : v.toLocaleString());
  const parts = [
    ["head", "orders:"],
    ["paid", fig(l.paid) + " paid"],
    ["unpaid", fig(l.unpaid) + " unpaid"],
    ["cancelled", fig(l.cancelled) + " cancelled"],
    ["expired", fig(l.expired) + " expired"],
    ["returned", fig(l.returned) + " returned"],
  ];
  if (l.dueNextMinute != null)
    parts.push(["due", (l.dueCapped ? "≥ " : "") + fig(l.dueNextMinute) + " due back in 1 min"]);
  putParts(td, parts, "life");
  return tr;
}

/* "2026-12-06 20:14" (local time, with the year: a sale may be reviewed long after). */
function fmtWhen(s) {
  if (s == null) return "?";
  return localIso(new Date(s * 1000)).slice(0, 16).replace("T", " ");
}

/* An event's time: "2026-12-06 20:14:05". */
function fmtStamp(ms) {
  return localIso(new Date(ms)).replace("T", " ");
}

function instances(rows) {
  const tb = $("instances").tBodies[0];
  tb.replaceChildren();
  rows.sort((a, b) => a.s.name.localeCompare(b.s.name));
  for (const { s, instAnswers, instOk, age } of rows) {
    const tr = document.createElement("tr");
    cell(tr, s.name);
    cell(tr, s.listen);
    cell(tr, s.mode);
    cell(tr, instAnswers == null ? "–" : fmtRate(instAnswers), "n");
    cell(tr, instOk == null ? "–" : fmtRate(instOk), "n");
    cell(tr, (s.persisted || 0).toLocaleString(), "n");
    cell(tr, s.redis_up + "/" + s.workers, s.redis_up < s.workers ? "state-out" : "state-on");
    cell(tr, s.sql_up ? "up" : "down", s.sql_up ? "state-on" : "state-out");
    cell(tr, (age / 1000).toFixed(1) + " s ago");
    tb.appendChild(tr);
  }
}

/* ------------------------------------------------------------ create a sale */

/* "2026-12-01T17:10:00" in local time, what the API's beginTime/endTime take. */
function localIso(d) {
  const p = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

/* The form's checks, made when Create is pressed (the API makes them too: api_voucher.c).
 * Empty times mean "now" and "an hour after the begin", taken at the press, so a board
 * left open for hours still creates a sale that can sell. Returns the message or null. */
function checkSale(b) {
  const t = (v) => new Date(v).getTime();
  if (!Number.isInteger(b.stock) || b.stock < 1) return "Stock must be a whole number of at least 1.";
  if (b.payValue == null || b.actualValue == null || !(b.payValue >= 0) || !(b.actualValue >= 0))
    return "Pay and Worth must be amounts in fen.";
  if (b.payValue > b.actualValue) return "Pay must not be above Worth.";
  if (isNaN(t(b.beginTime)) || isNaN(t(b.endTime))) return "Begins and Ends must be date-times.";
  if (t(b.endTime) <= Date.now()) return "Ends must be in the future.";
  if (t(b.endTime) <= t(b.beginTime)) return "Ends must be after Begins.";
  return null;
}

$("create").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = ev.target, msg = $("create-msg");
  const num = (v) => (v.trim() === "" ? null : Number(v));
  const secs = (v) => (v.length === 16 ? v + ":00" : v);   /* datetime-local may omit seconds */
  const pressed = new Date();
  const begin = f.begin.value ? secs(f.begin.value) : localIso(pressed);
  const end = f.end.value ? secs(f.end.value)
    : localIso(new Date(new Date(begin).getTime() + 3600 * 1000));
  const body = {
    shopId: num(f.shopId.value), title: f.title.value, subTitle: "", rules: "",
    payValue: num(f.payValue.value), actualValue: num(f.actualValue.value), type: 1,
    stock: num(f.stock.value), beginTime: begin, endTime: end,
  };
  const bad = checkSale(body);
  if (bad) {
    msg.className = "error";
    msg.textContent = bad;
    return;
  }
  /* stock buckets (1-16): one hot voucher's stock over several Redis masters */
  if (f.buckets.value.trim() !== "" && f.buckets.value.trim() !== "1") body.stockBuckets = num(f.buckets.value);
  msg.className = "";
  msg.textContent = "creating…";
  let r, j = null;
  try {
    r = await fetch("../voucher/seckill", {
      method: "POST", body: JSON.stringify(body),
      headers: { "content-type": "application/json", "x-admin-token": token },
    });
    j = await r.json();
  } catch (e) {
    msg.className = "error";
    msg.textContent = "No answer from the service.";
    return;
  }
  if (r.status === 403) { showLogin("Wrong admin token: the service refused it."); return; }
  if (j && j.success) {
    msg.className = "ok";
    msg.textContent = "Created flash sale #" + j.data + ".";
    poll();
  } else {
    msg.className = "error";
    msg.textContent = (j && j.errorMsg) || "HTTP " + r.status;   /* the API's own message */
  }
});

if (token) {
  poll().then((res) => { if (res === "ok") showBoard(); });
} else {
  showLogin("");
}
