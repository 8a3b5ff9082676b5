// Suanli dashboard: reads the node's local API (/api/v0) with the token the
// user gives, and draws what it reads. No framework, no third-party code;
// every piece of data goes into the page as text, never as HTML.
"use strict";

const API = "/api/v0";
const TOKEN_KEY = "suanli-token:" + location.host;
const POLL_MS = 2000;
const PAGE_SIZE = 25;

// ---- token ---------------------------------------------------------------

function takeTokenFromHash() {
  const m = location.hash.match(/(?:^#|&)token=([0-9a-fA-F]+)/);
  if (m) {
    localStorage.setItem(TOKEN_KEY, m[1]);
    access = "";
    history.replaceState(null, "", location.pathname + "#/markets");
  }
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

function niceRange(lo, hi) {
  if (!isFinite(lo) || !isFinite(hi)) return [0, 1];
  if (lo === hi) { const d = Math.abs(lo) * 0.05 || 1; return [lo - d, hi + d]; }
  const pad = (hi - lo) * 0.08;
  return [lo - pad, hi + pad];
}

// depthChart draws cumulative GPUs bid (left of the spread) and asked (right).
function depthChart(book) {
  const W = 640, H = 240, L = 44, R = 10, T = 10, B = 26;
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
  root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const c of [0, Math.round(ymax / 2), ymax]) {
    root.append(svg("text", { x: L - 6, y: Y(c) + 4, "text-anchor": "end" }, c));
  }
  for (const [p, anchor] of [[x0, "start"], [(x0 + x1) / 2, "middle"], [x1, "end"]]) {
    root.append(svg("text", { x: X(p), y: H - 8, "text-anchor": anchor }, p.toFixed(2)));
  }
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
  root.append(svg("text", { x: L + 4, y: T + 10 }, "GPUs (cumulative)"));
  return root;
}

// historyChart draws each fill's price as a dot on a line, and the index.
function historyChart(hist) {
  const W = 640, H = 220, L = 44, R = 10, T = 10, B = 26;
  const pts = hist.points.map(p => ({ t: new Date(p.time).getTime(), p: p.price_micros / 1e6, i: p.index_micros ? p.index_micros / 1e6 : NaN }));
  const root = svg("svg", { class: "chart history", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "price history of " + hist.market });
  if (!pts.length) {
    root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no trades yet"));
    return root;
  }
  const ys = pts.flatMap(p => isFinite(p.i) ? [p.p, p.i] : [p.p]);
  const [y0, y1] = niceRange(Math.min(...ys), Math.max(...ys));
  let t0 = pts[0].t, t1 = pts[pts.length - 1].t;
  if (t0 === t1) { t0 -= 30000; t1 += 30000; }
  const X = t => L + (t - t0) / (t1 - t0) * (W - L - R);
  const Y = v => H - B - (v - y0) / (y1 - y0) * (H - T - B);
  root.append(svg("line", { class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B }));
  root.append(svg("line", { class: "axis", x1: L, y1: T, x2: L, y2: H - B }));
  for (const v of [y0, (y0 + y1) / 2, y1]) root.append(svg("text", { x: L - 6, y: Y(v) + 4, "text-anchor": "end" }, v.toFixed(2)));
  for (const t of [t0, t1]) root.append(svg("text", { x: X(t), y: H - 8, "text-anchor": t === t0 ? "start" : "end" }, timeOnly(t)));
  root.append(svg("path", { class: "spot", d: pts.map((p, k) => (k ? "L" : "M") + X(p.t) + "," + Y(p.p)).join(" ") }));
  const ix = pts.filter(p => isFinite(p.i));
  if (ix.length) root.append(svg("path", { class: "index", d: ix.map((p, k) => (k ? "L" : "M") + X(p.t) + "," + Y(p.i)).join(" ") }));
  for (const p of pts) root.append(svg("circle", { class: "spot-dot", cx: X(p.t), cy: Y(p.p), r: 3 }));
  return root;
}

function sparkline(values, max) {
  const W = 200, H = 34;
  const root = svg("svg", { class: "chart spark-line", viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" });
  if (values.length < 2) return root;
  const top = Math.max(max || 0, ...values, 1);
  const X = k => k / (values.length - 1) * W;
  const Y = v => H - 2 - v / top * (H - 4);
  root.append(svg("path", { class: "series", d: values.map((v, k) => (k ? "L" : "M") + X(k).toFixed(1) + "," + Y(v).toFixed(1)).join(" ") }));
  return root;
}

// ---- views -----------------------------------------------------------------

// access is "full" or "read-only" for the current token, asked once.
let access = "";

const state = {
  market: "", currency: "USD", joined: [],
  offers: null, offerQuery: {}, offerSort: { key: "price", dir: 1 },
  orderOffset: 0, orderStatus: "",
};

const views = {};

views.markets = async function (arg) {
  const markets = await api("/markets");
  const names = [...new Set(markets.map(m => m.market))];
  if (arg) state.market = decodeURIComponent(arg);
  if (!state.market && names.length) state.market = names[0];
  if (state.market && !names.includes(state.market)) names.push(state.market);
  const tabs = el("div", { class: "tabs" }, names.map(n => el("button", {
    class: n === state.market ? "active" : "", "data-market": n,
    onclick: () => { location.hash = "#/markets/" + encodeURIComponent(n); },
  }, n)));
  const join = el("form", { class: "toolbar", onsubmit: ev => {
    ev.preventDefault();
    const v = ev.target.elements.market.value.trim();
    if (v) location.hash = "#/markets/" + encodeURIComponent(v);
  } }, el("input", { name: "market", placeholder: "join a market, e.g. nvidia-h100-sxm5-80gb", size: 36 }), el("button", { type: "submit", class: "secondary" }, "Open"));
  const out = [card("Markets joined", tabs, join,
    table("markets", ["market", "currency", { label: "best bid", num: 1 }, { label: "best ask", num: 1 }, { label: "spot", num: 1 }, { label: "index", num: 1 }, { label: "bids", num: 1 }, { label: "asks", num: 1 }],
      markets.map(m => el("tr", { class: "clickable", onclick: () => { location.hash = "#/markets/" + encodeURIComponent(m.market); } },
        td(m.market), td(dash(m.currency)), td(dash(m.best_bid), 1), td(dash(m.best_ask), 1), td(dash(m.spot), 1), td(dash(m.index), 1), td(m.bid_orders, 1), td(m.ask_orders, 1))),
      { empty: "no market joined yet: open one above, or place an order" }))];
  if (!state.market) return out;
  const m = encodeURIComponent(state.market), cur = encodeURIComponent(state.currency);
  const [book, hist, trades] = await Promise.all([
    api(`/book/${m}?currency=${cur}`), api(`/history/${m}?currency=${cur}&limit=500`), api(`/trades/${m}`)]);
  const stats = el("div", { class: "stats" },
    [["best bid", book.best_bid], ["best ask", book.best_ask], ["spread", book.spread], ["spot", book.spot], ["index (1h)", book.index]]
      .map(([k, v]) => el("div", { class: "stat" }, el("b", { class: "v-" + k.split(" ")[0] }, dash(v)), el("span", {}, k + " " + book.currency))));
  out.push(el("div", { class: "grid" },
    card("Depth · " + book.market, stats, el("div", { id: "depth" }, depthChart(book)),
      el("div", { class: "legend" }, el("span", {}, el("i", { class: "l-bid" }), "bids"), el("span", {}, el("i", { class: "l-ask" }), "asks"))),
    card("Price history (this node's fills)", el("div", { id: "history" }, historyChart(hist)),
      el("div", { class: "legend" }, el("span", {}, el("i", { class: "l-spot" }), "fill price"), el("span", {}, el("i", { class: "l-index" }), "index"),
        el("span", {}, hist.points.length + " fills")))));
  out.push(el("div", { class: "grid" },
    card("Order book", el("div", { class: "grid" },
      table("levels bids", ["bid", { label: "GPUs", num: 1 }, { label: "orders", num: 1 }], book.bids.map(l => el("tr", {}, td(el("span", { class: "side-bid" }, l.price)), td(l.count, 1), td(l.orders, 1))), { empty: "no bids" }),
      table("levels asks", ["ask", { label: "GPUs", num: 1 }, { label: "orders", num: 1 }], book.asks.map(l => el("tr", {}, td(el("span", { class: "side-ask" }, l.price)), td(l.count, 1), td(l.orders, 1))), { empty: "no asks" }))),
    card("Recent trades", el("div", { id: "trades" }, table("trades", ["time", { label: "price", num: 1 }, { label: "GPUs", num: 1 }, "type", "buyer", "provider", "lease"],
      trades.slice(0, 50).map(t => el("tr", { "data-fill": t.id }, td(timeOnly(t.time)), td(t.price + " " + t.currency, 1), td(t.count, 1), td(t.lease_type),
        td(short(t.buyer)), td(short(t.provider)), td(t.lease ? el("a", { href: "#/lease/" + encodeURIComponent(t.lease) }, short(t.lease)) : "-"))),
      { empty: "no trades yet" })))));
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

views.lease = async function (arg) {
  const id = decodeURIComponent(arg || "");
  const [l, receipts] = await Promise.all([api("/leases/" + encodeURIComponent(id)), api("/leases/" + encodeURIComponent(id) + "/receipts")]);
  const kv = [["lease", l.id], ["role", l.role], ["state", l.state + (l.reason && l.reason !== "none" ? " (" + l.reason + ")" : "")], ["market", l.market],
    ["provider", l.provider], ["buyer", l.buyer], ["GPUs", l.gpus.join(", ")], ["price", l.price + " " + l.currency + " per GPU-hour"],
    ["type", l.lease_type], ["billing", l.billing_interval], ["executor", dash(l.executor)], ["start", when(l.start)], ["end", when(l.end)],
    ["closed", when(l.closed_at)], ["receipts", l.receipts + " (" + l.countersigned + " countersigned)"], ["amount", l.cumulative + " " + l.currency]];
  // What runs, and where the buyer reaches it.
  if (l.image) kv.push(["image", l.image + (l.image_digest ? " (" + short(l.image_digest) + ")" : "")]);
  if (l.container_state) kv.push(["container", l.container_state + (l.gpu_access ? ", GPUs " + l.gpu_access : "")]);
  for (const ep of l.endpoints || []) kv.push(["port " + ep.container_port, ep.host + ":" + ep.host_port]);
  if (l.exit) kv.push(["exit", "code " + l.exit.code + (l.exit.oom_killed ? " (OOM-killed)" : "") + (l.exit.signal ? " " + l.exit.signal : "") + (l.exit.error ? " " + l.exit.error : "")]);
  if (l.preempt_at) kv.push(["preempted", "ends " + when(l.preempt_at)]);
  if (l.note) kv.push(["note", l.note]);
  return [
    el("p", {}, el("a", { href: "#/node" }, "‹ this node")),
    card("Lease " + short(l.id), el("dl", { class: "kv", id: "lease-detail" }, kv.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]))),
    card("Receipts", el("div", { id: "receipts" }, table("receipts", [{ label: "seq", num: 1 }, "window", { label: "GPU-s", num: 1 }, "utilization", { label: "amount", num: 1 }, { label: "cumulative", num: 1 }, "provider sig", "buyer sig"],
      receipts.map(r => el("tr", { "data-seq": r.seq }, td(r.seq, 1), td(timeOnly(r.window_start) + " – " + timeOnly(r.window_end)), td((r.gpu_ms / 1000).toFixed(1), 1),
        td((r.utilization_permille || []).map(u => Math.round(u / 10) + "%").join(" ")), td(r.amount, 1), td(r.cumulative, 1), td(r.provider_signature), td(r.buyer_signature))),
      { empty: "no receipts yet" }))),
  ];
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
  const metric = (label, values, max, fmt) => el("div", { class: "spark" }, el("span", { class: "muted" }, label), sparkline(values, max),
    el("b", {}, values.length ? fmt(values[values.length - 1]) : "-"));
  return [...isoCard, el("div", { class: "gpus", id: "gpus" }, h.gpus.map(g => {
    const s = g.samples;
    const total = s.length ? gib(s[s.length - 1].mem_total_bytes) : 0;
    return card("GPU " + g.index + " · " + g.name,
      el("p", { class: "muted" }, el("code", {}, g.uuid)),
      el("p", { class: "holder" }, g.lease ? ["held by lease ", el("a", { href: "#/lease/" + encodeURIComponent(g.lease) }, short(g.lease))] : "free"),
      metric("utilization", s.map(x => x.util_pct), 100, v => v + "%"),
      metric("memory", s.map(x => gib(x.mem_used_bytes)), total, v => v.toFixed(1) + " GiB"),
      metric("temperature", s.map(x => x.temp_c), 100, v => v + " °C"),
      metric("power", s.map(x => x.power_mw / 1000), 0, v => Math.round(v) + " W"),
      el("p", { class: "muted" }, s.length + " samples, every " + h.interval_s + " s"));
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
    " · ", el("a", { href: "#", class: "logout", onclick: ev => { ev.preventDefault(); localStorage.removeItem(TOKEN_KEY); access = ""; showLogin(""); } }, "log out"));
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
  ev.target.reset();
  render();
});
window.addEventListener("hashchange", () => { takeTokenFromHash(); render(); });

takeTokenFromHash();
render();
setTimeout(poll, POLL_MS);
