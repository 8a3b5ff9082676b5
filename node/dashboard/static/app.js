// Suanli dashboard: reads the node's local API (/api/v0) with the token the
// user gives, and draws what it reads. No framework, no third-party code;
// every piece of data goes into the page as text, never as HTML.
"use strict";

const API = "/api/v0";
const TOKEN_KEY = "suanli-token:" + location.host;
const POLL_MS = 2000;
const PAGE_SIZE = 25;

// ---- token ---------------------------------------------------------------

// takeTokenFromHash stores a token given in the URL's fragment and keeps
// the page it names: "#token=T" opens Markets, "#/lease/ID?token=T" (or
// "#token=T&/lease/ID") that lease. The token leaves the address bar.
function takeTokenFromHash() {
  const h = location.hash.replace(/^#/, "");
  const m = h.match(/(?:^|[&?])token=([0-9a-fA-F]+)/);
  if (!m) return;
  localStorage.setItem(TOKEN_KEY, m[1]);
  access = "";
  ident = null;
  const rest = h.replace(/(^|[&?])token=[0-9a-fA-F]+/, "").replace(/^[&?]+|[&?]+$/g, "");
  const page = rest.startsWith("/") && views[rest.slice(1).split("/")[0]] ? rest : "/markets";
  history.replaceState(null, "", location.pathname + "#" + page);
}

function token() { return localStorage.getItem(TOKEN_KEY) || ""; }

class Unauthorized extends Error {}

async function api(path, opts = {}) {
  const tok = token();
  if (!tok) throw new Unauthorized("no token");
  const headers = { Authorization: "Bearer " + tok };
  if (opts.body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(API + path, {
    method: opts.method || "GET",
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    cache: "no-store",
    credentials: "omit",
  });
  let data = null;
  try { data = await resp.json(); } catch (e) { /* not JSON */ }
  if (resp.status === 401) throw new Unauthorized((data && data.error) || "unauthorized");
  if (!resp.ok) {
    const err = new Error((data && data.error) || resp.status + " " + resp.statusText);
    err.status = resp.status;
    err.body = data;
    throw err;
  }
  return data;
}

// ---- DOM helpers -----------------------------------------------------------

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

const SVGNS = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  for (const k of kids.flat()) {
    if (k === undefined || k === null) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}

function short(id) { return id ? (id.length > 14 ? id.slice(0, 6) + "…" + id.slice(-6) : id) : "-"; }
function dash(s) { return s === undefined || s === null || s === "" ? "-" : s; }
function when(t) {
  if (!t) return "-";
  const d = new Date(t);
  if (isNaN(d) || d.getFullYear() < 1971) return "-";
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}
function timeOnly(t) { const d = new Date(t); return isNaN(d) ? "-" : d.toLocaleTimeString(); }
function pill(s) { return el("span", { class: "pill " + (s || "") }, dash(s)); }

function card(title, ...kids) { return el("div", { class: "card" }, title ? el("h2", {}, title) : null, ...kids); }

function table(cls, head, rows, opts = {}) {
  const ths = head.map((h, i) => {
    const th = el("th", { class: (h.num ? "num " : "") + (opts.onSort ? "sortable" : "") }, h.label || h);
    if (opts.onSort) {
      if (opts.sortKey === h.key) th.classList.add(opts.sortDir > 0 ? "sorted-asc" : "sorted-desc");
      th.addEventListener("click", () => opts.onSort(h.key));
    }
    return th;
  });
  const body = rows.length ? rows : [el("tr", {}, el("td", { colspan: head.length, class: "muted empty" }, opts.empty || "nothing yet"))];
  return el("div", { class: "tablewrap" }, el("table", { class: cls }, el("thead", {}, el("tr", {}, ths)), el("tbody", {}, body)));
}

function td(v, num) { return el("td", num ? { class: "num" } : {}, v); }

// Decimal money strings are only turned into numbers to place them on a chart.
function num(s) { const x = Number(s); return isFinite(x) ? x : NaN; }

// ---- charts ----------------------------------------------------------------
//
// Every chart has two axes with ticks and labels: what is measured and in
// what unit up the side, and the price or the time along the bottom.

function niceRange(lo, hi) {
  if (!isFinite(lo) || !isFinite(hi)) return [0, 1];
  if (lo === hi) { const d = Math.abs(lo) * 0.05 || 1; return [lo - d, hi + d]; }
  const pad = (hi - lo) * 0.08;
  return [lo - pad, hi + pad];
}

// ticks are about n round values between lo and hi.
function ticks(lo, hi, n) {
  const span = hi - lo;
  if (!(span > 0)) return [lo];
  const raw = span / Math.max(n, 1), mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map(k => k * mag).find(k => k >= raw) || raw;
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return out;
}

function decimals(step) { return step >= 1 ? 0 : Math.min(6, Math.ceil(-Math.log10(step))); }

// timeTicks are about n round instants between t0 and t1 (ms), labelled
// with the time of day, and the date when the span is over a day.
function timeTicks(t0, t1, n) {
  const span = t1 - t0;
  const steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800].map(x => x * 1000);
  const step = steps.find(x => x >= span / Math.max(n, 1)) || steps[steps.length - 1];
  const off = new Date(t0).getTimezoneOffset() * 60000; // round in local time
  const out = [];
  for (let t = Math.ceil((t0 - off) / step) * step + off; t <= t1; t += step) out.push(t);
  const opts = span > 86400000 ? { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }
    : step < 60000 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" } : { hour: "2-digit", minute: "2-digit" };
  // A span too short for two round instants is labelled at its ends.
  if (out.length < 2) return [t0, t1].map(t => ({ v: t, label: new Date(t).toLocaleTimeString() }));
  return out.map(t => ({ v: t, label: new Date(t).toLocaleString(undefined, opts) }));
}

// frame draws the axes of a chart: box {W, H, L, R, T, B}, x and y ticks
// ({v, label}), their titles, and light grid lines at the y ticks.
function frame(root, box, X, Y, xt, yt, xTitle, yTitle) {
  const { W, H, L, R, T, B } = box;
  const g = svg("g", { class: "axes" });
  for (const t of yt) {
    g.append(svg("line", { class: "grid", x1: L, y1: Y(t.v), x2: W - R, y2: Y(t.v) }));
    g.append(svg("text", { class: "tick y-tick", x: L - 5, y: Y(t.v) + 3.5, "text-anchor": "end" }, t.label));
  }
  for (const t of xt) {
    g.append(svg("line", { class: "axis", x1: X(t.v), y1: H - B, x2: X(t.v), y2: H - B + 4 }));
    g.append(svg("text", { class: "tick x-tick", x: X(t.v), y: H - B + 15, "text-anchor": "middle" }, t.label));
  }
  g.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  g.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  if (xTitle) g.append(svg("text", { class: "axis-title x-title", x: (L + W - R) / 2, y: H - 3, "text-anchor": "middle" }, xTitle));
  if (yTitle) g.append(svg("text", { class: "axis-title y-title", x: 11, y: (T + H - B) / 2, "text-anchor": "middle", transform: `rotate(-90 11 ${(T + H - B) / 2})` }, yTitle));
  root.append(g);
}

function valueTicks(lo, hi, n, unit) {
  const t = ticks(lo, hi, n);
  const d = t.length > 1 ? decimals(t[1] - t[0]) : 2;
  return t.map(v => ({ v, label: v.toFixed(d) + (unit || "") }));
}

// depthChart draws cumulative GPUs bid (left of the spread) and asked (right).
function depthChart(book) {
  const box = { W: 640, H: 250, L: 56, R: 12, T: 12, B: 40 }, { W, H, L, R, T, B } = box;
  const bids = book.bids.map(l => ({ p: num(l.price), n: l.count })).filter(l => isFinite(l.p)).sort((a, b) => b.p - a.p);
  const asks = book.asks.map(l => ({ p: num(l.price), n: l.count })).filter(l => isFinite(l.p)).sort((a, b) => a.p - b.p);
  const root = svg("svg", { class: "chart depth", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "depth chart of " + book.market });
  if (!bids.length && !asks.length) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no open orders"));
    return root;
  }
  let cb = 0, ca = 0;
  const cbids = bids.map(l => ({ p: l.p, c: (cb += l.n) }));
  const casks = asks.map(l => ({ p: l.p, c: (ca += l.n) }));
  const prices = [...bids, ...asks].map(l => l.p);
  const [x0, x1] = niceRange(Math.min(...prices), Math.max(...prices));
  const ymax = Math.max(cb, ca, 1);
  const X = p => L + (p - x0) / (x1 - x0) * (W - L - R);
  const Y = c => H - B - c / ymax * (H - T - B);
  const yt = ticks(0, ymax, 4).filter(v => Number.isInteger(v)).map(v => ({ v, label: String(v) }));
  frame(root, box, X, Y, valueTicks(x0, x1, 6), yt, "price, " + book.currency + " per GPU-hour", "GPUs (cumulative)");
  if (cbids.length) {
    let d = `M${X(cbids[0].p)},${Y(0)}`;
    let prev = 0;
    for (const l of cbids) { d += ` L${X(l.p)},${Y(prev)} L${X(l.p)},${Y(l.c)}`; prev = l.c; }
    d += ` L${X(x0)},${Y(prev)} L${X(x0)},${Y(0)} Z`;
    root.append(svg("path", { class: "bids", d }));
  }
  if (casks.length) {
    let d = `M${X(casks[0].p)},${Y(0)}`;
    let prev = 0;
    for (const l of casks) { d += ` L${X(l.p)},${Y(prev)} L${X(l.p)},${Y(l.c)}`; prev = l.c; }
    d += ` L${X(x1)},${Y(prev)} L${X(x1)},${Y(0)} Z`;
    root.append(svg("path", { class: "asks", d }));
  }
  return root;
}

// The lease types a fill can be of, each its own series; "" is a fill
// stored before the node kept lease types.
const LEASE_TYPES = [["spot", "spot"], ["on-demand", "on-demand"], ["reserved", "reserved"], ["", "type not recorded"]];
function typeClass(t) { return "lt-" + (t || "unknown"); }

// historyChart draws each fill's price, one series per lease type (a
// line through its fills, a dot at each), and the market's index.
function historyChart(hist) {
  const box = { W: 640, H: 250, L: 56, R: 12, T: 12, B: 40 }, { W, H, L, R, T, B } = box;
  const pts = hist.points.map(p => ({ t: new Date(p.time).getTime(), p: p.price_micros / 1e6, i: p.index_micros ? p.index_micros / 1e6 : NaN, type: p.lease_type || "" }));
  const root = svg("svg", { class: "chart history", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "price history of " + hist.market });
  if (!pts.length) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no trades yet"));
    return root;
  }
  const ys = pts.flatMap(p => isFinite(p.i) ? [p.p, p.i] : [p.p]);
  const [y0, y1] = niceRange(Math.min(...ys), Math.max(...ys));
  let t0 = pts[0].t, t1 = pts[pts.length - 1].t;
  if (t1 - t0 < 60000) { const mid = (t0 + t1) / 2; t0 = mid - 30000; t1 = mid + 30000; }
  const X = t => L + (t - t0) / (t1 - t0) * (W - L - R);
  const Y = v => H - B - (v - y0) / (y1 - y0) * (H - T - B);
  frame(root, box, X, Y, timeTicks(t0, t1, 5), valueTicks(y0, y1, 5), "time of the fill (local)", hist.currency + " per GPU-hour");
  const ix = pts.filter(p => isFinite(p.i));
  if (ix.length) root.append(svg("path", { class: "index", d: ix.map((p, k) => (k ? "L" : "M") + X(p.t) + "," + Y(p.i)).join(" ") }));
  for (const [type] of LEASE_TYPES) {
    const s = pts.filter(p => p.type === type);
    if (!s.length) continue;
    const g = svg("g", { class: "series-type " + typeClass(type), "data-lease-type": type || "unknown" });
    if (s.length > 1) g.append(svg("path", { class: "fills", d: s.map((p, k) => (k ? "L" : "M") + X(p.t) + "," + Y(p.p)).join(" ") }));
    for (const p of s) g.append(svg("circle", { class: "spot-dot", cx: X(p.t), cy: Y(p.p), r: 3 }));
    root.append(g);
  }
  return root;
}

// timeChart draws one GPU metric over time: the samples' values against
// their times, a y axis from 0 to max (or the largest value) in unit.
function timeChart(times, values, max, unit, label) {
  const box = { W: 320, H: 110, L: 44, R: 8, T: 8, B: 22 }, { W, H, L, R, T, B } = box;
  const root = svg("svg", { class: "chart spark-line", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label + " over time" });
  if (values.length < 2) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "waiting for samples"));
    return root;
  }
  const top = Math.max(max || 0, ...values) || 1;
  const t0 = times[0], t1 = Math.max(times[times.length - 1], t0 + 1000);
  const X = t => L + (t - t0) / (t1 - t0) * (W - L - R);
  const Y = v => H - B - v / top * (H - T - B);
  const yt = ticks(0, top, 2).map(v => ({ v, label: (top >= 10 ? Math.round(v) : v.toFixed(1)) + unit }));
  frame(root, box, X, Y, timeTicks(t0, t1, 3), yt, "", "");
  root.append(svg("path", { class: "series", d: values.map((v, k) => (k ? "L" : "M") + X(times[k]).toFixed(1) + "," + Y(v).toFixed(1)).join(" ") }));
  return root;
}

// ---- views -----------------------------------------------------------------

// access is "full" or "read-only" for the current token, and ident the
// node's /id (is it a provider?), asked once per login.
let access = "";
let ident = null;

const state = {
  market: "", currency: "USD", joined: [],
  offers: null, offerQuery: {}, offerSort: { key: "price", dir: 1 },
  orderOffset: 0, orderStatus: "",
  logs: null, // the open lease's output: { lease, next, text: [[stream, data]], size, dropped, done, exit, error }
};

const views = {};

views.markets = async function (arg) {
  const markets = await api("/markets");
  // Joined markets have a book here; the others are known from providers'
  // offers (the DHT's) and are joined when opened.
  const joined = [...new Set(markets.filter(m => m.joined).map(m => m.market))];
  if (arg) state.market = decodeURIComponent(arg);
  if (!state.market && joined.length) state.market = joined[0];
  const names = [...joined];
  if (state.market && !names.includes(state.market)) names.push(state.market);
  const open = n => { location.hash = "#/markets/" + encodeURIComponent(n); };
  const tabs = el("div", { class: "tabs" }, names.map(n => el("button", {
    class: n === state.market ? "active" : "", "data-market": n, onclick: () => open(n),
  }, n)));
  const join = el("form", { class: "toolbar", onsubmit: ev => {
    ev.preventDefault();
    const v = ev.target.elements.market.value.trim();
    if (v) open(v);
  } }, el("input", { name: "market", placeholder: "open a market, e.g. nvidia-h100-sxm5-80gb", size: 36 }), el("button", { type: "submit", class: "secondary" }, "Open"));
  const out = [card("Markets", tabs, join,
    table("markets", ["market", "currency", "joined", { label: "providers", num: 1 }, { label: "GPUs offered", num: 1 }, { label: "lowest offer", num: 1 },
      { label: "best bid", num: 1 }, { label: "best ask", num: 1 }, { label: "spot", num: 1 }, { label: "index", num: 1 }, { label: "bids", num: 1 }, { label: "asks", num: 1 }],
      markets.map(m => el("tr", { class: "clickable" + (m.joined ? "" : " unjoined"), "data-market": m.market, onclick: () => open(m.market) },
        td(m.market), td(dash(m.currency)), td(m.joined ? "yes" : el("span", { class: "muted" }, "not yet: open it")),
        td(m.providers || "-", 1), td(m.offered_gpus || "-", 1), td(dash(m.lowest_offer), 1),
        td(dash(m.best_bid), 1), td(dash(m.best_ask), 1), td(dash(m.spot), 1), td(dash(m.index), 1), td(m.bid_orders, 1), td(m.ask_orders, 1))),
      { empty: "no market known yet: no provider's offer found on the network, and none joined. Open one above, or place an order" }))];
  if (!state.market) return out;
  if (access === "read-only" && !joined.includes(state.market)) {
    out.push(card(state.market, el("p", { class: "muted", id: "not-joined" }, "This node has not joined " + state.market +
      ", and a read-only token cannot make it join: log in with the full token (suanli dashboard) to open it.")));
    return out;
  }
  const m = encodeURIComponent(state.market), cur = encodeURIComponent(state.currency);
  const [book, hist, trades] = await Promise.all([
    api(`/book/${m}?currency=${cur}`), api(`/history/${m}?currency=${cur}&limit=500`), api(`/trades/${m}`)]);
  const stats = el("div", { class: "stats" },
    [["best bid", book.best_bid], ["best ask", book.best_ask], ["spread", book.spread], ["spot", book.spot], ["index (1h)", book.index]]
      .map(([k, v]) => el("div", { class: "stat" }, el("b", { class: "v-" + k.split(" ")[0] }, dash(v)), el("span", {}, k + " " + book.currency))));
  const byType = LEASE_TYPES.map(([t, label]) => [t, label, hist.points.filter(p => (p.lease_type || "") === t).length]).filter(x => x[2] > 0 || x[0] !== "");
  out.push(el("div", { class: "grid" },
    card("Depth · " + book.market, stats, el("div", { id: "depth" }, depthChart(book)),
      el("div", { class: "legend" }, el("span", {}, el("i", { class: "l-bid" }), "bids"), el("span", {}, el("i", { class: "l-ask" }), "asks"))),
    card("Price history · every fill this node saw in " + book.market,
      el("p", { class: "muted note" }, "All traders' fills, as applied to this node's copy of the book; its own trades are on This node."),
      el("div", { id: "history" }, historyChart(hist)),
      el("div", { class: "legend", id: "history-legend" },
        byType.map(([t, label, n]) => el("span", { "data-lease-type": t || "unknown" }, el("i", { class: "l-type " + typeClass(t) }), label + " (" + n + ")")),
        el("span", {}, el("i", { class: "l-index" }), "index")))));
  out.push(card("Order book", el("div", { class: "grid" },
    table("levels bids", ["bid", { label: "GPUs", num: 1 }, { label: "orders", num: 1 }], book.bids.map(l => el("tr", {}, td(el("span", { class: "side-bid" }, l.price)), td(l.count, 1), td(l.orders, 1))), { empty: "no bids" }),
    table("levels asks", ["ask", { label: "GPUs", num: 1 }, { label: "orders", num: 1 }], book.asks.map(l => el("tr", {}, td(el("span", { class: "side-ask" }, l.price)), td(l.count, 1), td(l.orders, 1))), { empty: "no asks" }))));
  out.push(card("Recent trades · all traders", el("div", { id: "trades" }, table("trades", ["time", { label: "price", num: 1 }, { label: "GPUs", num: 1 }, "type", "buyer", "provider", "lease"],
    trades.slice(0, 50).map(t => el("tr", { "data-fill": t.id }, td(when(t.time)), td(t.price + " " + t.currency, 1), td(t.count, 1), td(el("span", { class: "type-tag " + typeClass(t.lease_type) }, t.lease_type)),
      td(short(t.buyer)), td(t.reseller ? short(t.provider) + " (resold by " + short(t.reseller) + ")" : short(t.provider)), td(t.lease ? el("a", { href: "#/lease/" + encodeURIComponent(t.lease) }, short(t.lease)) : "-"))),
    { empty: "no trades yet" }))));
  return out;
};
views.markets.poll = true;

const offerCols = [
  { key: "provider", label: "provider" }, { key: "region", label: "region" }, { key: "gpu", label: "GPU" },
  { key: "gpus", label: "GPUs", num: 1 }, { key: "vram", label: "GiB/GPU", num: 1 }, { key: "price", label: "price/GPU-h", num: 1 },
  { key: "spot", label: "spot floor", num: 1 }, { key: "attestation", label: "attestation" }, { key: "expires", label: "expires" },
];

function offerValue(o, key) {
  switch (key) {
    case "gpus": return o.matching_gpus;
    case "vram": return o.gpus.length ? o.gpus[0].memory_bytes : 0;
    case "price": return num(o.price);
    case "spot": return o.spot_floor ? num(o.spot_floor) : Infinity;
    case "gpu": return o.gpus.length ? o.gpus[0].name : "";
    case "expires": return o.expires;
    default: return o[key] || "";
  }
}

views.offers = async function () {
  const q = state.offerQuery;
  const field = (name, label, attrs = {}) => el("label", {}, label, el("input", { name, value: q[name] || "", ...attrs }));
  const form = el("form", { class: "filters", id: "offer-filters", onsubmit: ev => {
    ev.preventDefault();
    const f = ev.target.elements, nq = {};
    for (const k of ["gpu", "min_gpus", "min_vram_gib", "region", "max_price", "currency", "sort"]) if (f[k].value) nq[k] = f[k].value;
    if (f.cc_attested.checked) nq.cc_attested = "true";
    state.offerQuery = nq;
    state.offers = null;
    render();
  } },
  field("gpu", "GPU", { placeholder: "h100" }), field("min_gpus", "min GPUs", { type: "number", min: 0 }),
  field("min_vram_gib", "min GiB/GPU", { type: "number", min: 0 }), field("region", "region", { placeholder: "CN-NM" }),
  field("max_price", "max price", { placeholder: "2.60" }), field("currency", "currency", { placeholder: "USD" }),
  el("label", {}, "sort", el("select", { name: "sort" }, ["", "price", "vram", "gpus"].map(s => el("option", { value: s, selected: q.sort === s }, s || "price")))),
  el("label", { class: "check" }, el("input", { type: "checkbox", name: "cc_attested", checked: q.cc_attested === "true" }), "CC evidence"),
  el("button", { type: "submit" }, "Search"));
  if (state.offers === null) {
    const p = new URLSearchParams(q).toString();
    state.offers = await api("/offers" + (p ? "?" + p : ""));
  }
  const { key, dir } = state.offerSort;
  const rows = [...state.offers].sort((a, b) => {
    const x = offerValue(a, key), y = offerValue(b, key);
    return (x < y ? -1 : x > y ? 1 : 0) * dir;
  });
  return [card("Offers on the network", form, el("div", { id: "offers" }, table("offers", offerCols,
    rows.map(o => el("tr", { "data-provider": o.provider },
      td(short(o.provider)), td(o.region), td(o.gpus.length ? o.gpus[0].name : "-"), td(o.matching_gpus + "/" + o.gpus.length, 1),
      td(o.gpus.length ? Math.round(o.gpus[0].memory_bytes / 2 ** 30) : "-", 1), td(o.price + " " + o.currency, 1), td(dash(o.spot_floor), 1),
      td(o.attestation), td(when(o.expires)))),
    { empty: "no offer matches", sortKey: key, sortDir: dir, onSort: k => {
      state.offerSort = { key: k, dir: state.offerSort.key === k ? -state.offerSort.dir : 1 };
      render();
    } })))];
};

async function cancelOrder(id, button) {
  button.disabled = true;
  try {
    await api("/orders/" + encodeURIComponent(id), { method: "DELETE" });
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    flash(e.message);
  }
  render();
}

views.node = async function () {
  const p = new URLSearchParams({ offset: state.orderOffset, limit: PAGE_SIZE });
  if (state.orderStatus) p.set("status", state.orderStatus);
  const [id, peers, page, leases, settle] = await Promise.all([
    api("/id"), api("/peers"), api("/orders-page?" + p), api("/leases"), api("/settle")]);
  const status = el("select", { name: "status", onchange: ev => { state.orderStatus = ev.target.value; state.orderOffset = 0; render(); } },
    ["", "resting", "filled", "cancelled", "expired", "done"].map(s => el("option", { value: s, selected: state.orderStatus === s }, s || "all")));
  const last = Math.min(page.offset + page.orders.length, page.total);
  const pager = el("div", { class: "pager" },
    el("button", { class: "secondary", disabled: page.offset === 0, onclick: () => { state.orderOffset = Math.max(0, page.offset - PAGE_SIZE); render(); } }, "‹ newer"),
    el("span", { class: "muted", id: "orders-range" }, page.total ? `${page.offset + 1}–${last} of ${page.total}` : "0"),
    el("button", { class: "secondary", disabled: last >= page.total, onclick: () => { state.orderOffset = page.offset + PAGE_SIZE; render(); } }, "older ›"));
  const orders = table("orders", ["side", "market", { label: "GPUs", num: 1 }, { label: "left", num: 1 }, { label: "price", num: 1 }, "type", "status", "expires", "id", ""],
    page.orders.map(o => el("tr", { "data-order": o.id },
      td(el("span", { class: "side-" + o.side }, o.side)), td(o.market), td(o.count, 1), td(o.remaining, 1), td(o.price + " " + o.currency, 1),
      td(o.lease_type), td(pill(o.status)), td(when(o.expires)), td(short(o.id)),
      td(o.status === "resting" && access === "full" ? el("button", { class: "danger cancel", onclick: ev => cancelOrder(o.id, ev.target) }, "Cancel") : ""))),
    { empty: "no orders" });
  const leaseRows = leases.map(l => el("tr", { class: "clickable", "data-lease": l.id, onclick: () => { location.hash = "#/lease/" + encodeURIComponent(l.id); } },
    td(short(l.id)), td(l.role), td(pill(l.state)), td(l.market), td(l.gpus.length, 1), td(l.price + " " + l.currency, 1),
    td(l.receipts + "/" + l.countersigned, 1), td(l.cumulative + " " + l.currency, 1), td(dash(l.executor)), td(when(l.start)), td(when(l.end))));
  const settleRows = [];
  for (const s of settle) {
    for (const t of s.totals) {
      settleRows.push(el("tr", { "data-peer": s.peer }, td(short(s.peer)), td(s.leases.length, 1), td(t.currency),
        td(dash(t.receivable), 1), td(dash(t.received), 1), td(dash(t.payable), 1), td(dash(t.paid), 1), td(dash(t.owed), 1)));
    }
  }
  return [
    el("div", { class: "grid wide" },
      card("This node", el("dl", { class: "kv" },
        el("dt", {}, "peer ID"), el("dd", { id: "peer-id" }, id.id),
        el("dt", {}, "role"), el("dd", {}, id.provider ? "provider and buyer" : "buyer (" + dash(id.no_gpu_reason) + ")"),
        el("dt", {}, "peers"), el("dd", { id: "peer-count" }, peers.length),
        el("dt", {}, "addresses"), el("dd", {}, id.addrs.map(a => el("div", {}, el("code", {}, a)))))),
      card("Settlement per counterparty", table("settle", ["peer", { label: "leases", num: 1 }, "currency", { label: "receivable", num: 1 }, { label: "received", num: 1 },
        { label: "payable", num: 1 }, { label: "paid", num: 1 }, { label: "owed to us", num: 1 }],
        settleRows, { empty: "nothing to settle" }))),
    card("Orders", el("div", { class: "toolbar" }, el("label", {}, "status ", status)), el("div", { id: "orders" }, orders), pager),
    card("Leases", el("div", { id: "leases" }, table("leases", ["lease", "role", "state", "market", { label: "GPUs", num: 1 }, { label: "price", num: 1 },
      { label: "receipts/signed", num: 1 }, { label: "amount", num: 1 }, "executor", "start", "end"], leaseRows, { empty: "no leases" }))),
  ];
};
views.node.poll = true;

// Output kept on the lease page: the newest this many characters.
const LOG_KEEP = 200000;

// readLogs reads the lease's output after what the page holds, page by
// page (more), noting chunks the node dropped under its cap.
async function readLogs(id) {
  let L = state.logs;
  if (!L || L.lease !== id) L = state.logs = { lease: id, next: 0, text: [], size: 0, dropped: 0, done: false, exit: null, error: "" };
  if (L.done) return L;
  try {
    for (let pages = 0; pages < 20; pages++) {
      const v = await api("/leases/" + encodeURIComponent(id) + "/logs?after=" + L.next);
      L.dropped += v.dropped || 0;
      for (const c of v.chunks) { L.text.push([c.stream, c.data]); L.size += c.data.length; }
      while (L.size > LOG_KEEP && L.text.length > 1) L.size -= L.text.shift()[1].length;
      L.next = v.next; L.done = v.done; L.exit = v.exit || null; L.error = "";
      if (!v.more) break;
    }
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    L.error = e.message;
  }
  return L;
}

// resaleRows are a lease's resale as `suanli lease show` prints it: who
// resold to whom, or where a lease bought by resale came from, and the
// premium paid for it.
function resaleRows(r) {
  if (!r) return [];
  const rows = [];
  if (r.role === "provider") rows.push(["resale", "resold by " + r.holder + " to " + r.buyer + " from " + when(r.from)], ["new lease", r.new_lease]);
  else if (r.role === "seller") rows.push(["resale", "resold to " + r.buyer + " from " + when(r.from)], ["new lease", r.new_lease]);
  else rows.push(["resale origin", "bought by resale from " + r.holder + " from " + when(r.from)], ["original lease", r.lease]);
  if (r.role !== "provider") {
    rows.push(["premium", dash(r.premium) + " " + r.currency + " (" + (r.gpus || "-") + " GPUs from " + when(r.from) + " to " + when(r.end) + " at " + dash(r.resale_price) +
      " against the lease's " + dash(r.lease_price) + "; positive: the buyer pays the holder)"],
    ["premium record", r.countersigned ? "countersigned by the new buyer" : "not yet countersigned"]);
  }
  return rows;
}

function kvList(id, rows) {
  return el("dl", { class: "kv", id }, rows.flatMap(([k, v]) => [el("dt", {}, k), el("dd", { "data-key": k }, v)]));
}

views.lease = async function (arg) {
  const id = decodeURIComponent(arg || "");
  const [l, receipts, logs] = await Promise.all([api("/leases/" + encodeURIComponent(id)), api("/leases/" + encodeURIComponent(id) + "/receipts"), readLogs(id)]);
  const kv = [["lease", l.id], ["role", l.role], ["state", l.state + (l.reason && l.reason !== "none" ? " (" + l.reason + ")" : "")], ["market", l.market],
    ["provider", l.provider], ["buyer", l.buyer], ["GPUs", l.gpus.join(", ")], ["price", l.price + " " + l.currency + " per GPU-hour"],
    ["type", l.lease_type], ["billing", "every " + l.billing_interval], ["start", when(l.start)], ["end", when(l.end)],
    ["closed", when(l.closed_at)], ["receipts", l.receipts + " (" + l.countersigned + " countersigned)"], ["amount", l.cumulative + " " + l.currency]];
  if (l.preempt_at) kv.push(["preempted", "ends " + when(l.preempt_at)]);
  if (l.note) kv.push(["note", l.note]);
  // What runs, and where the buyer reaches it: as `suanli lease show`.
  const wk = [["executor", dash(l.executor)], ["command", l.exec && l.exec.length ? el("code", {}, l.exec.join(" ")) : "-"]];
  if (l.image) wk.push(["image", l.image], ["image digest", dash(l.image_digest)]);
  wk.push(["container", l.container_state ? l.container_state + (l.gpu_access ? ", GPUs " + l.gpu_access : "") : l.image ? "not started" : "none (no image)"]);
  if (l.exit) wk.push(["exit", "code " + l.exit.code + (l.exit.oom_killed ? " (OOM-killed)" : "") + (l.exit.signal ? " " + l.exit.signal : "") + (l.exit.error ? " " + l.exit.error : "") + (l.exit.detached ? " (detached)" : "")]);
  const endpoints = table("endpoints", [{ label: "container port", num: 1 }, "reach it at"],
    (l.endpoints || []).map(ep => el("tr", { "data-port": ep.container_port }, td(ep.container_port, 1), td(el("code", {}, ep.host + ":" + ep.host_port)))),
    { empty: l.image ? "no published ports" : "no container, so no endpoints" });
  const logBox = el("pre", { class: "logs", id: "log-output" }, logs.text.map(([stream, data]) => el("span", { class: stream }, data)));
  const logNotes = [];
  if (logs.dropped) logNotes.push(el("p", { class: "muted", id: "log-dropped" }, logs.dropped + " earlier chunks dropped: the node keeps the newest (daemon --log-cap)"));
  if (logs.error) logNotes.push(el("p", { class: "muted", id: "log-error" }, "no output: " + logs.error));
  else if (!logs.text.length && l.role === "provider") logNotes.push(el("p", { class: "muted", id: "log-empty" }, "The output streams to the buyer, whose node keeps it (suanli logs there); the provider keeps none."));
  else if (!logs.text.length) logNotes.push(el("p", { class: "muted", id: "log-empty" }, logs.done ? "the workload wrote nothing" : "no output yet"));
  if (logs.done) logNotes.push(el("p", { class: "muted", id: "log-done" }, "the workload ended" + (logs.exit ? ": exit code " + logs.exit.code : "")));
  const out = [
    el("p", {}, el("a", { href: "#/node" }, "‹ this node")),
    el("div", { class: "grid" },
      card("Lease " + short(l.id), kvList("lease-detail", kv)),
      card("Workload", kvList("lease-workload", wk), el("h3", {}, "Endpoints"), el("div", { id: "endpoints" }, endpoints))),
  ];
  if (l.resale) out.push(card("Resale", kvList("lease-resale", resaleRows(l.resale))));
  out.push(card("Output", ...logNotes, logBox));
  out.push(card("Receipts", el("div", { id: "receipts" }, table("receipts", [{ label: "seq", num: 1 }, "window", { label: "GPU-s", num: 1 }, "utilization", { label: "amount", num: 1 }, { label: "cumulative", num: 1 }, "provider sig", "buyer sig"],
    receipts.map(r => el("tr", { "data-seq": r.seq }, td(r.seq, 1), td(timeOnly(r.window_start) + " – " + timeOnly(r.window_end)), td((r.gpu_ms / 1000).toFixed(1), 1),
      td((r.utilization_permille || []).map(u => Math.round(u / 10) + "%").join(" ")), td(r.amount, 1), td(r.cumulative, 1), td(r.provider_signature), td(r.buyer_signature))),
    { empty: "no receipts yet" }))));
  return out;
};
views.lease.poll = true;

views.provider = async function () {
  let h;
  try {
    h = await api("/gpus/history");
  } catch (e) {
    if (e.status === 404) return [card("Provider", el("p", { class: "muted", id: "no-gpus" }, "This node offers no GPUs: " + e.message))];
    throw e;
  }
  const st = await api("/status");
  const iso = st.isolation;
  const isoCard = iso ? [card("Isolation · " + iso.level, el("div", { id: "isolation" }, iso.executors.map(e =>
    el("div", { "data-executor": e.executor },
      el("h3", {}, e.executor + " (" + e.level + ")"),
      el("ul", {}, e.enforced.map(x => el("li", {}, "enforced: " + x)),
        (e.not_enforced || []).map(x => el("li", { class: "warn" }, "not enforced: " + x)))))))] : [];
  const gib = b => b / 2 ** 30;
  const metric = (label, times, values, max, unit, fmt) => el("div", { class: "spark" },
    el("div", { class: "spark-head" }, el("span", { class: "muted" }, label), el("b", {}, values.length ? fmt(values[values.length - 1]) : "-")),
    timeChart(times, values, max, unit, label));
  return [...isoCard, el("div", { class: "gpus", id: "gpus" }, h.gpus.map(g => {
    const s = g.samples, times = s.map(x => new Date(x.time).getTime());
    const total = s.length ? gib(s[s.length - 1].mem_total_bytes) : 0;
    return card("GPU " + g.index + " · " + g.name,
      el("p", { class: "muted" }, el("code", {}, g.uuid)),
      el("p", { class: "holder" }, g.lease ? ["held by lease ", el("a", { href: "#/lease/" + encodeURIComponent(g.lease) }, short(g.lease))] : "free"),
      metric("utilization", times, s.map(x => x.util_pct), 100, "%", v => v + "%"),
      metric("memory", times, s.map(x => gib(x.mem_used_bytes)), total, " GiB", v => v.toFixed(1) + " GiB"),
      metric("temperature", times, s.map(x => x.temp_c), 100, " °C", v => v + " °C"),
      metric("power", times, s.map(x => x.power_mw / 1000), 0, " W", v => Math.round(v) + " W"),
      el("p", { class: "muted" }, s.length + " samples, one every " + h.interval_s + " s, times local"));
  }))];
};
views.provider.poll = true;

// ---- shell -----------------------------------------------------------------

let renderSeq = 0;
let lastOK = 0;
let flashMsg = "";

function flash(msg) { flashMsg = msg; }

function route() {
  const h = location.hash.replace(/^#\/?/, "");
  const [name, ...rest] = h.split("/");
  return { name: views[name] ? name : "markets", arg: rest.join("/") };
}

function showLogin(msg) {
  document.getElementById("login").hidden = false;
  document.getElementById("nav").hidden = true;
  document.getElementById("view").replaceChildren();
  document.getElementById("status").replaceChildren();
  document.getElementById("login-error").textContent = msg || "";
}

async function render() {
  const seq = ++renderSeq;
  const { name, arg } = route();
  if (!token()) { showLogin(""); return; }
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.route === name || (name === "lease" && a.dataset.route === "node"));
  try {
    if (!access) access = (await api("/access")).access;
    if (!ident) ident = await api("/id");
    // A buyer-only node has no Provider page to show.
    document.querySelector('nav a[data-route="provider"]').hidden = !ident.provider;
    const kids = await views[name](arg);
    if (seq !== renderSeq) return; // a newer render started
    document.getElementById("login").hidden = true;
    document.getElementById("nav").hidden = false;
    const view = document.getElementById("view");
    view.replaceChildren(...(flashMsg ? [el("p", { class: "error", id: "flash" }, flashMsg)] : []), ...kids);
    view.dataset.view = name;
    flashMsg = "";
    lastOK = Date.now();
    setStatus("");
  } catch (e) {
    if (seq !== renderSeq) return;
    if (e instanceof Unauthorized) {
      localStorage.removeItem(TOKEN_KEY);
      access = "";
      ident = null;
      showLogin(e.message === "no token" ? "" : "The token was refused: " + e.message);
      return;
    }
    setStatus(e.message);
  }
}

function setStatus(err) {
  const s = document.getElementById("status");
  const stale = err || Date.now() - lastOK > 3 * POLL_MS;
  s.replaceChildren(el("span", { class: "dot" + (stale ? " stale" : "") }),
    ...(access === "read-only" ? [el("span", { class: "pill readonly", id: "read-only" }, "read-only"), " "] : []),
    err ? "error: " + err : "updated " + new Date(lastOK).toLocaleTimeString(),
    " · ", el("a", { href: "#", class: "logout", onclick: ev => { ev.preventDefault(); localStorage.removeItem(TOKEN_KEY); access = ""; ident = null; showLogin(""); } }, "log out"));
}

let polling = false;
async function poll() {
  if (!polling && token() && !document.hidden && views[route().name].poll) {
    polling = true;
    try { await render(); } finally { polling = false; }
  }
  setTimeout(poll, POLL_MS);
}

document.getElementById("login-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const v = ev.target.elements.token.value.trim();
  if (!v) return;
  localStorage.setItem(TOKEN_KEY, v);
  access = "";
  ident = null;
  ev.target.reset();
  render();
});
window.addEventListener("hashchange", () => { takeTokenFromHash(); render(); });

takeTokenFromHash();
render();
setTimeout(poll, POLL_MS);
