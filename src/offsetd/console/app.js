// offsetd console: reads the broker's read-only JSON API (/v1/lag, /v1/topics,
// /v1/groups/{group}/history) and draws the pages by hand (DOM + SVG, no library, no build step).
// Pages: #/ (consumer groups), #/group/<id>, #/topics. Live: polls every few seconds.
"use strict";

const API = "../v1/";
const PALETTE = ["--c0", "--c1", "--c2", "--c3", "--c4", "--c5", "--c6", "--c7", "--c8"];
const RANGES = [["15m", 15 * 60e3], ["1h", 3600e3], ["6h", 6 * 3600e3], ["24h", 24 * 3600e3], ["7d", 7 * 86400e3]];
const HEALTH_TTL_MS = 30e3;     // a group's health grade on the groups page is read again after this
const HEALTH_PER_ROUND = 40;    // at most this many groups graded per refresh (each reads its offsets log)
const HISTORY_EVERY = 3;        // the group page reads its history every Nth refresh (lag every refresh)

const store = {
  get(key, fallback) { try { return JSON.parse(localStorage.getItem("offsetd." + key)) ?? fallback; } catch { return fallback; } },
  set(key, value) { try { localStorage.setItem("offsetd." + key, JSON.stringify(value)); } catch { /* private mode */ } },
};

const state = {
  poll: store.get("poll", 5000), timer: null, generation: 0, skew: 0, round: 0,
  sort: store.get("sort", { key: "total_lag", dir: -1 }), filter: "", stateFilter: "", lagging: false,
  health: new Map(), healthBusy: new Set(), range: store.get("range", 3600e3), history: null, lag: null,
  selected: null, hidden: new Set(), bootstrap: store.get("bootstrap", location.hostname + ":9092"),
};

// ------------------------------------------------------------------------------ helpers

function h(tag, attrs, ...children) {
  const svg = ["svg", "path", "line", "text", "rect", "g", "circle", "title"].includes(tag);
  const el = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.setAttribute("class", v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== false) el.append(c instanceof Node ? c : String(c));
  return el;
}

async function getJSON(path) {
  const response = await fetch(API + path, { cache: "no-store", credentials: "same-origin" });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(`${response.status} ${body.error || response.statusText}: ${body.message || path}`);
  return body;
}

const nowMs = () => Date.now() + state.skew;  // the broker's clock, as seen in its last answer
const NUMBER = new Intl.NumberFormat("en-US");  // one formatter: toLocaleString builds one per call
const DATETIME = new Intl.DateTimeFormat([], { year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit",
  minute: "2-digit", second: "2-digit", hour12: false });
const fmtInt = (n) => (n === null || n === undefined ? "–" : NUMBER.format(n));
const cssVar = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
const color = (i) => cssVar(PALETTE[i % PALETTE.length]);

function fmtDuration(ms) {
  if (ms === null || ms === undefined) return "–";
  const neg = ms < 0; ms = Math.abs(ms);
  let out;
  if (ms < 1000) out = `${Math.round(ms)} ms`;
  else if (ms < 60e3) out = `${(ms / 1000).toFixed(ms < 10e3 ? 1 : 0)} s`;
  else if (ms < 3600e3) out = `${Math.floor(ms / 60e3)}m ${Math.floor((ms % 60e3) / 1000)}s`;
  else if (ms < 86400e3) out = `${Math.floor(ms / 3600e3)}h ${Math.floor((ms % 3600e3) / 60e3)}m`;
  else out = `${Math.floor(ms / 86400e3)}d ${Math.floor((ms % 86400e3) / 3600e3)}h`;
  return neg ? "-" + out : out;
}

const fmtTime = (ms) => (ms ? DATETIME.format(ms) : "–");

function countdown(expiresAt) {
  // A live "expires in …" cell: app ticks every second, see tick().
  if (state.expiryKnown === false) return h("span", { class: "muted", title: "this cluster does not report when offsets expire (offsetd's own brokers do)" }, "unknown");
  if (expiresAt === null || expiresAt === undefined) return h("span", { class: "muted", title: "offsets do not expire while the group is subscribed" }, "never");
  return h("span", { "data-expiry": expiresAt, title: "expires " + fmtTime(expiresAt) }, expiryText(expiresAt));
}

function expiryText(at) {
  const left = at - nowMs();
  return left <= 0 ? "expiring now" : "in " + fmtDuration(left);
}

function tick() {
  for (const el of document.querySelectorAll("[data-expiry]")) {
    const at = Number(el.dataset.expiry), left = at - nowMs();
    el.textContent = expiryText(at);
    el.classList.toggle("expiring", left > 0 && left < 86400e3);
    el.classList.toggle("expired", left <= 0);
  }
}

function badge(kind, value, title) {
  return h("span", { class: `badge ${kind}-${value}`, "data-field": kind === "s" ? "state" : "health", title }, value);
}

function healthTitle(health) {
  // Which partitions made the grade (Burrow's rules, as `offsetd groups --describe --health`).
  const bad = (health.partitions || []).filter((p) => p.status !== "OK");
  if (!bad.length) return "every committed partition is OK";
  return bad.slice(0, 12).map((p) => `${p.topic}-${p.partition}: ${p.status} (lag ${fmtInt(p.lag)})`).join("\n")
    + (bad.length > 12 ? `\n… ${bad.length - 12} more` : "");
}

function num(value, field, text) {
  return h("td", { class: "num", "data-field": field, "data-value": value ?? "" }, text ?? fmtInt(value));
}

function copyButton(text) {
  return h("button", { type: "button", title: "copy to the clipboard", onclick: async (e) => {
    try { await navigator.clipboard.writeText(text); } catch {
      const area = h("textarea", {}, text); document.body.append(area); area.select(); document.execCommand("copy"); area.remove();
    }
    e.target.textContent = "copied"; setTimeout(() => (e.target.textContent = "copy"), 1200);
  } }, "copy");
}

function shellQuote(s) { return /^[A-Za-z0-9_.:\/=-]+$/.test(s) ? s : "'" + s.replace(/'/g, "'\\''") + "'"; }

// ------------------------------------------------------------------------------ routing and polling

function route() {
  const hash = location.hash || "#/";
  if (hash.startsWith("#/group/")) return { page: "group", group: decodeURIComponent(hash.slice(8)) };
  if (hash.startsWith("#/topics")) return { page: "topics" };
  return { page: "groups" };
}

async function refresh(first) {
  const generation = ++state.generation;
  clearTimeout(state.timer);
  const r = route();
  for (const a of document.querySelectorAll("[data-nav]"))
    a.classList.toggle("active", a.dataset.nav === (r.page === "group" ? "groups" : r.page));
  const status = document.getElementById("status");
  try {
    if (r.page === "group") await groupPage(r.group, first);
    else if (r.page === "topics") await topicsPage();
    else await groupsPage();
    if (generation !== state.generation) return;
    document.getElementById("error").hidden = true;
    status.className = "status";
    status.textContent = "updated " + new Date().toLocaleTimeString([], { hour12: false });
    document.body.dataset.loaded = String(state.round++);  // tests wait for this
  } catch (err) {
    if (generation !== state.generation) return;
    const box = document.getElementById("error");
    box.hidden = false; box.textContent = String(err.message || err);
    status.className = "status failed"; status.textContent = "update failed";
  }
  if (state.poll > 0) state.timer = setTimeout(() => refresh(false), state.poll);
}

function onRoute() {
  state.history = null; state.selected = null; state.hidden = new Set(); state.round = 0;
  document.getElementById("main").replaceChildren();
  refresh(true);
}

// ------------------------------------------------------------------------------ groups page

const GROUP_COLUMNS = [
  ["group", "Group", (g) => g.group],
  ["state", "State", (g) => g.state],
  ["members", "Members", (g) => g.members, true],
  ["partitions", "Partitions", (g) => g.partitions.length, true],
  ["total_lag", "Lag", (g) => g.total_lag ?? -1, true],
  ["max_time_lag_ms", "Time lag", (g) => g.max_time_lag_ms ?? -1, true],
  ["health", "Health", (g) => healthRank(state.health.get(g.group)?.status)],
  ["earliest_expiry_ms", "Offsets expire", (g) => g.earliest_expiry_ms ?? Infinity, true],
];
const HEALTH_ORDER = ["OK", "WARN", "ERR", "NOTFOUND"];
const healthRank = (s) => (s === undefined ? -1 : HEALTH_ORDER.indexOf(s));

function groupMatches(g) {
  if (state.stateFilter && g.state !== state.stateFilter) return false;
  if (state.lagging && !(g.total_lag > 0)) return false;
  if (!state.filter) return true;
  if (state.filter.length > 2 && state.filter.startsWith("/") && state.filter.endsWith("/")) {
    try { return new RegExp(state.filter.slice(1, -1)).test(g.group); } catch { return false; }
  }
  return g.group.toLowerCase().includes(state.filter.toLowerCase());
}

async function groupsPage() {
  const lag = await getJSON("lag");
  if (route().page !== "groups") return;  // the reader moved on while this was loading
  state.skew = lag.taken_at_ms - Date.now();
  state.expiryKnown = lag.expiry_known !== false;
  const main = document.getElementById("main");
  if (!main.querySelector("#groups")) main.replaceChildren(groupsSkeleton());
  const rows = lag.groups.filter(groupMatches);
  const column = GROUP_COLUMNS.find((c) => c[0] === state.sort.key) || GROUP_COLUMNS[4];
  rows.sort((a, b) => {
    const x = column[2](a), y = column[2](b);
    return (x < y ? -1 : x > y ? 1 : a.group < b.group ? -1 : 1) * (x === y ? 1 : state.sort.dir);
  });
  const maxLag = Math.max(1, ...rows.map((g) => g.total_lag || 0));
  const body = h("tbody", {}, rows.map((g) => groupRow(g, maxLag)));
  main.querySelector("#groups tbody").replaceWith(body);
  for (const th of main.querySelectorAll("#groups th")) {
    th.classList.toggle("sorted-asc", th.dataset.key === state.sort.key && state.sort.dir > 0);
    th.classList.toggle("sorted-desc", th.dataset.key === state.sort.key && state.sort.dir < 0);
  }
  main.querySelector(".count").textContent = `${rows.length} of ${lag.groups.length} groups`;
  main.querySelector("#cluster").textContent = lag.cluster ? "cluster " + lag.cluster : "";
  summarize(main.querySelector(".cards"), lag.groups);
  tick();
  gradeGroups(rows.slice(0, HEALTH_PER_ROUND).map((g) => g.group));
}

function groupsSkeleton() {
  const states = ["", "Stable", "Empty", "PreparingRebalance", "CompletingRebalance", "Dead"];
  return h("div", {},
    h("h1", {}, "Consumer groups", h("span", { class: "crumbs", id: "cluster" })),
    h("div", { class: "cards" }),
    h("div", { class: "panel" },
      h("div", { class: "tools" },
        h("input", { type: "search", id: "filter", placeholder: "filter groups (text or /regex/)", value: state.filter, size: 32,
          oninput: (e) => { state.filter = e.target.value; groupsPage().catch(() => {}); } }),
        h("select", { id: "state-filter", onchange: (e) => { state.stateFilter = e.target.value; groupsPage().catch(() => {}); } },
          states.map((s) => h("option", { value: s, selected: s === state.stateFilter }, s || "any state"))),
        h("label", {}, h("input", { type: "checkbox", id: "lagging", checked: state.lagging,
          onchange: (e) => { state.lagging = e.target.checked; groupsPage().catch(() => {}); } }), " lagging only"),
        h("span", { class: "count" })),
      h("div", { class: "scroll" },
        h("table", { id: "groups" },
          h("thead", {}, h("tr", {}, GROUP_COLUMNS.map(([key, label, , numeric]) =>
            h("th", { class: "sortable" + (numeric ? " num" : ""), "data-key": key, onclick: () => {
              state.sort = { key, dir: state.sort.key === key ? -state.sort.dir : (numeric ? -1 : 1) };
              store.set("sort", state.sort); groupsPage().catch(() => {});
            } }, label)))),
          h("tbody")))));
}

function groupRow(g, maxLag) {
  const health = state.health.get(g.group);
  return h("tr", { "data-group": g.group },
    h("td", { "data-field": "group" }, h("a", { href: "#/group/" + encodeURIComponent(g.group) }, g.group)),
    h("td", {}, badge("s", g.state)),
    num(g.members, "members"),
    num(g.partitions.length, "partitions"),
    h("td", { class: "num", "data-field": "total_lag", "data-value": g.total_lag ?? "" },
      g.total_lag ? h("span", { class: "lagbar", style: `width:${Math.max(2, 60 * g.total_lag / maxLag)}px` }) : null,
      fmtInt(g.total_lag)),
    num(g.max_time_lag_ms, "max_time_lag_ms", fmtDuration(g.max_time_lag_ms)),
    h("td", {}, health ? badge("h", health.status, health.title) : h("span", { class: "badge h-pending", "data-field": "health" }, "…")),
    h("td", { class: "num", "data-field": "earliest_expiry_ms", "data-value": g.earliest_expiry_ms ?? "" },
      countdown(g.earliest_expiry_ms)));
}

function summarize(cards, groups) {
  const lagging = groups.filter((g) => g.total_lag > 0).length;
  const worst = Math.max(0, ...groups.map((g) => g.max_time_lag_ms || 0));
  const soon = groups.filter((g) => g.earliest_expiry_ms && g.earliest_expiry_ms - nowMs() < 86400e3).length;
  const total = groups.reduce((s, g) => s + (g.total_lag || 0), 0);
  cards.replaceChildren(...[["Groups", fmtInt(groups.length)], ["Lagging", fmtInt(lagging)], ["Total lag", fmtInt(total)],
    ["Worst time lag", fmtDuration(worst)], ["Expire within 24h", fmtInt(soon)]]
    .map(([k, v]) => h("div", { class: "card" }, h("div", { class: "k" }, k), h("div", { class: "v" }, v))));
}

async function gradeGroups(groups) {
  // Health needs the group's commit history: grade the rows in view a few at a time, cache briefly.
  const due = groups.filter((g) => !state.healthBusy.has(g) && !(nowMs() - (state.health.get(g)?.at || 0) < HEALTH_TTL_MS));
  const next = async () => {
    const g = due.shift();
    if (g === undefined) return;
    state.healthBusy.add(g);
    try {
      const history = await getJSON(`groups/${encodeURIComponent(g)}/history?points=2&since_ms=${Math.floor(nowMs() - 60e3)}`);
      state.health.set(g, { status: history.health.status, title: healthTitle(history.health), at: nowMs() });
      const cell = document.querySelector(`#groups tr[data-group="${CSS.escape(g)}"] [data-field=health]`);
      if (cell) cell.replaceWith(badge("h", history.health.status, healthTitle(history.health)));
    } catch { state.health.set(g, { status: "NOTFOUND", at: nowMs() }); } finally { state.healthBusy.delete(g); }
    await next();
  };
  await Promise.all([next(), next(), next()]);
}

// ------------------------------------------------------------------------------ group page

async function groupPage(group, first) {
  const wantHistory = first || !state.history || state.round % HISTORY_EVERY === 0;
  const [lag, history] = await Promise.all([
    getJSON("lag?group=" + encodeURIComponent(group)),
    wantHistory ? getJSON(`groups/${encodeURIComponent(group)}/history?since_ms=${Math.floor(Date.now() + state.skew - state.range)}`
      + `&points=${chartPoints()}`)
      .catch((err) => ({ error: String(err.message || err) })) : Promise.resolve(state.history),
  ]);
  const now = route();
  if (now.page !== "group" || now.group !== group) return;
  state.skew = lag.taken_at_ms - Date.now();
  state.expiryKnown = lag.expiry_known !== false;
  const g = lag.groups[0];
  if (!g) throw new Error(`group ${group} is not known to this broker (not coordinated here, deleted, or not visible to you)`);
  state.history = history; state.lag = g;
  const main = document.getElementById("main");
  if (!main.querySelector("#group")) main.replaceChildren(groupSkeleton(group));
  const health = history && !history.error ? history.health : null;
  const byTp = new Map((health?.partitions || []).map((p) => [p.topic + "\u0000" + p.partition, p.status]));
  main.querySelector("#group-state").replaceChildren(badge("s", g.state), health ? badge("h", health.status, healthTitle(health)) : "");
  cardsFor(main.querySelector(".cards"), g, health);
  main.querySelector("#partitions tbody").replaceWith(h("tbody", {}, g.partitions.map((p) => partitionRow(p, byTp))));
  main.querySelector("#members").replaceChildren(membersTable(g));
  main.querySelector("#expiry").replaceChildren(expiryTimeline(g));
  if (wantHistory) drawCharts();
  main.querySelector("#commands").replaceChildren(...commands(g));
  tick();
}

function chartPoints() {
  // One point per two pixels of a chart is as smooth as a line gets; every point costs the broker
  // a log-end lookup per partition.
  const width = document.querySelector("#lag-chart")?.clientWidth || (window.innerWidth - 100) / 2;
  return Math.max(120, Math.min(600, Math.round(width / 2)));
}

function groupSkeleton(group) {
  return h("div", { id: "group" },
    h("div", { class: "crumbs" }, h("a", { href: "#/" }, "Consumer groups"), " / "),
    h("h1", {}, h("span", { id: "group-name" }, group), h("span", { id: "group-state" })),
    h("div", { class: "cards" }),
    h("div", { class: "panel" },
      h("div", { class: "tools" }, h("h2", { style: "margin:0" }, "Lag over time"),
        h("div", { class: "seg", id: "range" }, RANGES.map(([label, ms]) =>
          h("button", { type: "button", class: ms === state.range ? "on" : "", onclick: (e) => {
            state.range = ms; store.set("range", ms);
            for (const b of e.target.parentNode.children) b.classList.toggle("on", b === e.target);
            state.history = null; refresh(true);
          } }, label))),
        h("span", { class: "count", id: "history-note" })),
      h("div", { class: "grid2" },
        h("div", {}, h("div", { class: "muted" }, "Records behind (offset lag)"), h("div", { class: "chart", id: "lag-chart" })),
        h("div", {}, h("div", { class: "muted" }, "Time lag (age of the first unconsumed record)"), h("div", { class: "chart", id: "time-chart" }))),
      h("div", { id: "partition-chart-box", hidden: true },
        h("div", { class: "muted", id: "partition-chart-title", style: "margin-top:12px" }),
        h("div", { class: "chart", id: "partition-chart" }))),
    h("div", { class: "panel" }, h("h2", {}, "Partitions"),
      h("p", { class: "note" }, "Click a row to chart its committed offset against the log end."),
      h("div", { class: "scroll" }, h("table", { id: "partitions" },
        h("thead", {}, h("tr", {}, ["Topic", "Partition", "Committed", "Log start", "Log end", "Lag", "Time lag", "Health",
          "Consumer", "Host", "Committed at", "Expires"].map((t, i) => h("th", { class: i >= 1 && i <= 6 ? "num" : "" }, t)))),
        h("tbody")))),
    h("div", { class: "grid2" },
      h("div", { class: "panel" }, h("h2", {}, "Members and assignments"), h("div", { id: "members" })),
      h("div", { class: "panel" }, h("h2", {}, "Offset expiry"), h("div", { id: "expiry" }))),
    h("div", { class: "panel" }, h("h2", {}, "Commands"),
      h("div", { class: "tools" }, h("label", {}, "bootstrap server ",
        h("input", { type: "text", id: "bootstrap", value: state.bootstrap, size: 28, oninput: (e) => {
          state.bootstrap = e.target.value; store.set("bootstrap", state.bootstrap);
          document.querySelector("#commands").replaceChildren(...commands(state.lag));
        } }))),
      h("div", { id: "commands" })));
}

function cardsFor(cards, g, health) {
  const items = [["Members", fmtInt(g.members), "members"], ["Partitions", fmtInt(g.partitions.length), "partitions"],
    ["Total lag", fmtInt(g.total_lag), "total_lag"], ["Max time lag", fmtDuration(g.max_time_lag_ms), "max_time_lag_ms"],
    ["Health", health ? health.status : "–", "health"], ["Offsets expire", null, "earliest_expiry_ms"],
    ["Retention", g.retention_ms ? fmtDuration(g.retention_ms) : "–", "retention_ms"]];
  cards.replaceChildren(...items.map(([k, v, field]) => h("div", { class: "card", "data-card": field },
    h("div", { class: "k" }, k), h("div", { class: "v" }, field === "earliest_expiry_ms" ? countdown(g.earliest_expiry_ms) : v))));
}

function partitionRow(p, health) {
  const key = p.topic + "\u0000" + p.partition;
  const status = health.get(key);
  return h("tr", { "data-tp": `${p.topic}:${p.partition}`, class: state.selected === key ? "selected" : "", style: "cursor:pointer",
    onclick: () => { state.selected = state.selected === key ? null : key; refreshSelection(); } },
    h("td", { "data-field": "topic" }, p.topic), num(p.partition, "partition"), num(p.committed, "committed"),
    num(p.log_start, "log_start"), num(p.log_end, "log_end"), num(p.lag, "lag"),
    num(p.time_lag_ms, "time_lag_ms", fmtDuration(p.time_lag_ms)),
    h("td", {}, status ? badge("h", status) : "–"),
    h("td", { class: "mono ellipsis", title: p.consumer_id ? `${p.consumer_id} (client ${p.client_id || "–"})` : "" },
      p.consumer_id || h("span", { class: "muted" }, "unassigned")),
    h("td", {}, p.host || ""),
    h("td", { title: p.commit_timestamp_ms || "" }, fmtTime(p.commit_timestamp_ms)),
    h("td", { "data-field": "expires_at_ms", "data-value": p.expires_at_ms ?? "" }, countdown(p.expires_at_ms)));
}

function refreshSelection() {
  for (const tr of document.querySelectorAll("#partitions tbody tr")) {
    const [topic, partition] = [tr.dataset.tp.slice(0, tr.dataset.tp.lastIndexOf(":")), tr.dataset.tp.slice(tr.dataset.tp.lastIndexOf(":") + 1)];
    tr.classList.toggle("selected", state.selected === topic + "\u0000" + partition);
  }
  drawPartitionChart();
}

function membersTable(g) {
  if (!g.member_list.length) return h("p", { class: "muted" }, g.members ? `${g.members} member(s); assignments not available from this source.` : "No members: the group is empty.");
  return h("table", {}, h("thead", {}, h("tr", {}, ["Member", "Instance", "Client", "Host", "Assigned partitions"].map((t) => h("th", {}, t)))),
    h("tbody", {}, g.member_list.map((m) => h("tr", { "data-member": m.member_id },
      h("td", { class: "mono ellipsis", title: m.member_id }, m.member_id), h("td", {}, m.group_instance_id || "–"), h("td", {}, m.client_id), h("td", {}, m.host),
      h("td", { style: "white-space:normal" }, compactAssignment(m.assignment))))));
}

function compactAssignment(assignment) {
  const byTopic = new Map();
  for (const [topic, partition] of assignment) (byTopic.get(topic) || byTopic.set(topic, []).get(topic)).push(partition);
  if (!byTopic.size) return h("span", { class: "muted" }, "nothing");
  return [...byTopic].map(([topic, parts]) => `${topic} [${ranges(parts.sort((a, b) => a - b))}]`).join(", ");
}

function ranges(sorted) {
  const out = [];
  for (let i = 0; i < sorted.length; i++) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    out.push(j > i ? `${sorted[i]}-${sorted[j]}` : `${sorted[i]}`); i = j;
  }
  return out.join(",");
}

function expiryTimeline(g) {
  if (state.expiryKnown === false) {
    return h("p", { class: "note" }, "This cluster does not report when offsets expire: its brokers apply"
      + " offsets.retention.minutes (KIP-211) after the group empties, or after the last commit for a group"
      + " without members. offsetd's own console (the broker's metrics listener) shows the countdown.");
  }
  const marks = g.partitions.filter((p) => p.expires_at_ms !== null && p.expires_at_ms !== undefined);
  const retention = g.retention_ms ? ` Retention: ${fmtDuration(g.retention_ms)} after the last commit or the group emptying.` : "";
  if (!marks.length) {
    return h("p", { class: "note" }, g.partitions.length
      ? "No offset of this group will expire while it keeps members subscribed to its topics: once the group"
        + " becomes empty (or stops subscribing to a topic), its offsets start counting down." + retention
      : "The group has no committed offsets.");
  }
  const now = nowMs(), last = Math.max(...marks.map((p) => p.expires_at_ms));
  const span = Math.max(last - now, 60e3) * 1.08, width = 640, left = 10, right = 20, height = 70;
  const x = (t) => left + (width - left - right) * Math.min(Math.max((t - now) / span, 0), 1);
  const groups = new Map();
  for (const p of marks) (groups.get(p.expires_at_ms) || groups.set(p.expires_at_ms, []).get(p.expires_at_ms)).push(p);
  const svg = h("svg", { class: "timeline", viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "offset expiry timeline" },
    h("line", { class: "track", x1: left, x2: width - right, y1: 30, y2: 30 }),
    h("line", { class: "now", x1: x(now), x2: x(now), y1: 18, y2: 42 }), h("text", { x: x(now), y: 56 }, "now"),
    [...groups].map(([at, ps]) => h("g", {},
      h("circle", { class: "mark", cx: x(at), cy: 30, r: 5 + Math.min(ps.length, 6) },
        h("title", {}, `${ps.length} offset(s) expire ${fmtTime(at)}: ${ps.slice(0, 8).map((p) => p.topic + "-" + p.partition).join(", ")}`)))),
    h("text", { x: width - right, y: 56, "text-anchor": "end" }, "+" + fmtDuration(span)));
  const first = g.earliest_expiry_ms;
  return h("div", {}, svg, h("p", { class: "note" }, "First offset expires ", countdown(first), ` (${fmtTime(first)}); `,
    `${marks.length} of ${g.partitions.length} offsets have an expiry time.`, retention));
}

function commands(g) {
  if (!g) return [];
  const base = `offsetd groups --bootstrap-server ${shellQuote(state.bootstrap)} --group ${shellQuote(g.group)}`;
  const topics = [...new Set(g.partitions.map((p) => p.topic))];
  const topicArgs = topics.map((t) => `--topic ${shellQuote(t)}`).join(" ");
  const lines = [
    ["Describe with health", `${base} --describe --health --verbose`],
    ["Plan: skip to the log end", `${base} --reset-offsets --to-latest ${topicArgs} --dry-run`],
    ["Skip to the log end", `${base} --reset-offsets --to-latest ${topicArgs} --execute`],
    ["Replay the last hour", `${base} --reset-offsets --by-duration PT1H ${topicArgs} --execute`],
    ["Reset to a time", `${base} --reset-offsets --to-datetime ${new Date(nowMs() - 3600e3).toISOString().slice(0, 23)}Z ${topicArgs} --execute`],
    ...topics.map((t) => [`Delete offsets of ${t}`, `${base} --delete-offsets --topic ${shellQuote(t)}`]),
  ];
  const note = h("p", { class: "note" }, "Resetting needs the group to be empty (stop its consumers first); the console itself only reads.");
  return [note, ...lines.map(([what, cmd]) => h("div", { class: "cmd" }, h("div", { class: "what" }, what), h("pre", {}, cmd), copyButton(cmd)))];
}

// ------------------------------------------------------------------------------ charts

function drawCharts() {
  const history = state.history, note = document.getElementById("history-note");
  const lagBox = document.getElementById("lag-chart"), timeBox = document.getElementById("time-chart");
  if (!history || history.error) {
    const why = history ? history.error : "no history";
    lagBox.replaceChildren(emptyChart(why)); timeBox.replaceChildren(emptyChart(why)); note.textContent = "";
    return;
  }
  const commits = history.partitions.reduce((s, p) => s + p.commit_count, 0);
  note.textContent = `${fmtInt(commits)} commits in range · ${history.times.length} points`;
  // The total, then the partitions whose lag peaked highest (a legend of 100 lines helps nobody).
  const top = history.partitions.map((p, i) => [Math.max(0, ...p.lag.map((v) => v || 0)), i])
    .sort((a, b) => b[0] - a[0]).slice(0, 8).filter(([peak]) => peak > 0).map(([, i]) => history.partitions[i]);
  const label = (p) => `${p.topic}-${p.partition}`;
  lineChart(lagBox, history.times, [{ name: "total", values: history.total_lag, total: true },
    ...top.map((p) => ({ name: label(p), values: p.lag }))], fmtInt);
  const topTime = history.partitions.map((p, i) => [Math.max(0, ...p.time_lag_ms.map((v) => v || 0)), i])
    .sort((a, b) => b[0] - a[0]).slice(0, 8).filter(([peak]) => peak > 0).map(([, i]) => history.partitions[i]);
  lineChart(timeBox, history.times, [{ name: "max", values: history.max_time_lag_ms, total: true },
    ...topTime.map((p) => ({ name: label(p), values: p.time_lag_ms }))], fmtDuration);
  drawPartitionChart();
}

function drawPartitionChart() {
  const box = document.getElementById("partition-chart-box"), history = state.history;
  const p = state.selected && history && !history.error
    ? history.partitions.find((q) => q.topic + "\u0000" + q.partition === state.selected) : null;
  box.hidden = !p;
  if (!p) return;
  document.getElementById("partition-chart-title").textContent = `${p.topic}-${p.partition}: committed offset and log end`
    + ` (${fmtInt(p.commit_count)} commits in range)`;
  lineChart(document.getElementById("partition-chart"), history.times,
    [{ name: "log end", values: p.log_end }, { name: "committed", values: p.committed, total: true }], fmtInt);
}

function emptyChart(text) {
  return h("svg", { viewBox: "0 0 600 180" }, h("text", { class: "empty", x: 300, y: 90, "text-anchor": "middle" }, text));
}

function niceTicks(max, count) {
  if (!(max > 0)) return [0, 1];
  const raw = max / count, mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let v = 0; v <= max + step * 0.001; v += step) ticks.push(v);
  if (ticks[ticks.length - 1] < max) ticks.push(ticks[ticks.length - 1] + step);
  return ticks;
}

function timeLabel(t, span) {
  const d = new Date(t);
  if (span > 2 * 86400e3) return d.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
  const text = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: span < 3600e3 ? "2-digit" : undefined, hour12: false });
  return span < 20e3 ? text + "." + String(d.getMilliseconds()).padStart(3, "0").slice(0, 1) : text;
}

function lineChart(box, times, series, fmt) {
  // One SVG line chart: y from 0, gaps where a value is null, a crosshair tooltip on hover,
  // a legend that toggles series. Redrawn whole on every update (cheap at <= 600 points).
  const width = Math.max(box.clientWidth || 600, 320), height = 200, m = { l: 64, r: 12, t: 8, b: 24 };
  const visible = series.filter((s) => !state.hidden.has(box.id + "/" + s.name));
  const values = visible.flatMap((s) => s.values.filter((v) => v !== null));
  if (!times.length || !series.some((s) => s.values.some((v) => v !== null))) {
    box.replaceChildren(emptyChart("no commits in this range"));
    return;
  }
  const ticks = niceTicks(Math.max(0, ...values), 4), ymax = ticks[ticks.length - 1] || 1;
  const t0 = times[0], t1 = Math.max(times[times.length - 1], t0 + 1);
  const x = (t) => m.l + (width - m.l - m.r) * (t - t0) / (t1 - t0);
  const y = (v) => m.t + (height - m.t - m.b) * (1 - v / ymax);
  const svg = h("svg", { viewBox: `0 0 ${width} ${height}`, height, role: "img", "data-series": series.length });
  svg.append(h("g", { class: "grid" }, ticks.map((v) => h("line", { x1: m.l, x2: width - m.r, y1: y(v), y2: y(v) }))));
  svg.append(h("g", { class: "axis" }, ticks.map((v) => h("text", { x: m.l - 6, y: y(v) + 4, "text-anchor": "end" }, fmt(v))),
    [0, 0.25, 0.5, 0.75, 1].map((f) => h("text", { x: x(t0 + f * (t1 - t0)), y: height - 6,
      "text-anchor": f === 0 ? "start" : f === 1 ? "end" : "middle" }, timeLabel(t0 + f * (t1 - t0), t1 - t0)))));
  series.forEach((s, i) => {
    if (state.hidden.has(box.id + "/" + s.name)) return;
    let d = "", pen = false;
    s.values.forEach((v, j) => {
      if (v === null || v === undefined) { pen = false; return; }
      d += `${pen ? "L" : "M"}${x(times[j]).toFixed(1)},${y(v).toFixed(1)}`; pen = true;
    });
    svg.append(h("path", { class: "series" + (s.total ? " total" : ""), d, stroke: color(i), "data-name": s.name }));
  });
  const cursor = h("line", { class: "cursor", y1: m.t, y2: height - m.b, visibility: "hidden" });
  const overlay = h("rect", { x: m.l, y: m.t, width: width - m.l - m.r, height: height - m.t - m.b, fill: "transparent" });
  const tip = document.getElementById("tooltip");
  overlay.addEventListener("mousemove", (e) => {
    const rect = svg.getBoundingClientRect(), px = (e.clientX - rect.left) * width / rect.width;
    const t = t0 + (px - m.l) / (width - m.l - m.r) * (t1 - t0);
    let j = 0;
    for (let k = 1; k < times.length; k++) if (Math.abs(times[k] - t) < Math.abs(times[j] - t)) j = k;
    cursor.setAttribute("x1", x(times[j])); cursor.setAttribute("x2", x(times[j])); cursor.setAttribute("visibility", "visible");
    tip.replaceChildren(h("b", {}, fmtTime(times[j])), ...series.filter((s) => !state.hidden.has(box.id + "/" + s.name))
      .map((s) => h("div", {}, h("span", { style: `color:${color(series.indexOf(s))}` }, "● "), `${s.name}: ${s.values[j] === null ? "–" : fmt(s.values[j])}`)));
    tip.hidden = false;
    tip.style.left = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 8) + "px";
    tip.style.top = e.clientY + 14 + "px";
  });
  overlay.addEventListener("mouseleave", () => { tip.hidden = true; cursor.setAttribute("visibility", "hidden"); });
  svg.append(cursor, overlay);
  const legend = h("div", { class: "legend" }, series.map((s, i) => h("span", {
    class: state.hidden.has(box.id + "/" + s.name) ? "off" : "", title: "show / hide",
    onclick: () => { const k = box.id + "/" + s.name; state.hidden.has(k) ? state.hidden.delete(k) : state.hidden.add(k); lineChart(box, times, series, fmt); },
  }, h("i", { style: `background:${color(i)}` }), s.name)));
  box.replaceChildren(svg, legend);
}

// ------------------------------------------------------------------------------ topics page

async function topicsPage() {
  const data = await getJSON("topics");
  if (route().page !== "topics") return;
  state.skew = data.taken_at_ms - Date.now();
  state.openTopics = state.openTopics || new Set();
  const toggle = (topic) => { state.openTopics.has(topic) ? state.openTopics.delete(topic) : state.openTopics.add(topic); topicsPage().catch(() => {}); };
  const main = document.getElementById("main");
  main.replaceChildren(h("h1", {}, "Topics"), h("div", { class: "panel" }, h("div", { class: "scroll" }, h("table", { id: "topics" },
    h("thead", {}, h("tr", {}, ["Topic", "Partitions", "Records", "Read by"].map((t, i) => h("th", { class: i === 1 || i === 2 ? "num" : "" }, t)))),
    h("tbody", {}, data.topics.map((t) => [
      h("tr", { "data-topic": t.topic, style: "cursor:pointer", onclick: (e) => { if (e.target.tagName !== "A") toggle(t.topic); } },
        h("td", { "data-field": "topic" }, h("span", { class: "muted" }, state.openTopics.has(t.topic) ? "▾ " : "▸ "), t.topic),
        num(t.partitions.length, "partitions"), num(t.records, "records"),
        h("td", { style: "white-space:normal" }, t.groups.length ? t.groups.map((g, i) => [i ? ", " : "",
          h("a", { href: "#/group/" + encodeURIComponent(g) }, g)]) : h("span", { class: "muted" }, "no group"))),
      state.openTopics.has(t.topic) ? h("tr", { class: "detail" }, h("td", { colspan: 4 }, partitionsTable(t))) : null,
    ]))))));
}

function partitionsTable(t) {
  return h("table", { class: "inner" }, h("thead", {}, h("tr", {}, ["Partition", "Leader", "Log start", "Log end (LSO)", "High watermark", "Groups (lag)"]
    .map((x, i) => h("th", { class: i < 5 ? "num" : "" }, x)))),
  h("tbody", {}, t.partitions.map((p) => h("tr", { "data-tp": `${t.topic}:${p.partition}` },
    num(p.partition, "partition"), num(p.leader, "leader"), num(p.log_start, "log_start"), num(p.log_end, "log_end"),
    num(p.high_watermark, "high_watermark"),
    h("td", { style: "white-space:normal" }, p.groups.map((g, i) => [i ? ", " : "", h("a", { href: "#/group/" + encodeURIComponent(g.group) }, g.group), ` (${fmtInt(g.lag)})`]))))));
}

// ------------------------------------------------------------------------------ start

document.getElementById("poll").value = String(state.poll);
document.getElementById("poll").addEventListener("change", (e) => { state.poll = Number(e.target.value); store.set("poll", state.poll); refresh(false); });
window.addEventListener("hashchange", onRoute);
window.addEventListener("resize", () => { if (route().page === "group") drawCharts(); });
setInterval(tick, 1000);
onRoute();
