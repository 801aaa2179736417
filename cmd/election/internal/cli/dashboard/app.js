"use strict";
// The dashboard page: the keys of one bucket, live; a key's timeline from
// the leadership history; the latest changes. It reads only.
const pageSize = 100;
let offset = 0, total = 0, search = "", selected = "";
const $ = (id) => document.getElementById(id);

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

function ago(seconds) {
  if (seconds === undefined) return "–";
  return seconds < 1 ? Math.round(seconds * 1000) + " ms ago" : seconds.toFixed(1) + " s ago";
}

async function loadKeys(changedKey) {
  const q = new URLSearchParams({ offset, limit: pageSize, search });
  const res = await fetch("/api/keys?" + q);
  if (!res.ok) { $("live").textContent = "error: " + (await res.text()); return; }
  const page = await res.json();
  total = page.total;
  $("bucket").textContent = page.bucket;
  showMirror(page.mirror);
  const body = document.createElement("tbody");
  for (const k of page.keys) {
    const tr = document.createElement("tr");
    tr.dataset.key = k.key;
    if (k.key === selected) tr.classList.add("selected");
    if (k.key === changedKey) tr.classList.add("changed");
    tr.append(cell(k.key), leaderCell(k), tokenCell(k),
      sinceCell(k), cell(ago(k.renewed_ago)),
      cell(k.candidates.join(", ") || "–"), healthCell(k, page));
    tr.addEventListener("click", () => showTimeline(k.key));
    body.append(tr);
  }
  $("keys").replaceChild(body, $("keys").tBodies[0]);
  const last = Math.min(offset + pageSize, total);
  $("range").textContent = total ? `${offset + 1}–${last} of ${total}` : "no keys";
  $("prev").disabled = offset === 0;
  $("next").disabled = last >= total;
  if (!$("changes").children.length) for (const c of page.changes) addChange(c);
}

// leaderCell shows the key's leader, or a job's done mark: who ran it, when,
// and until when no host runs it again.
function leaderCell(k) {
  if (k.done) return cell(`done by ${k.done.by} at ${when(k.done.at)}, until ${when(k.done.until)}`, "done");
  return cell(k.leader || "none", k.leader ? "" : "none");
}

// holder says who a change left holding the key: a leader, a job's done
// mark ("done:" and its runner), or nobody.
function holder(name) {
  if (!name) return "no leader";
  return name.startsWith("done:") ? "done by " + name.slice(5) : name;
}

// showMirror says, when the page reads a mirror of the bucket, that nothing
// on it is authoritative, and how far behind the bucket the mirror is.
function showMirror(m) {
  $("mirror").hidden = !m;
  if (!m) return;
  const heard = m.heard_seconds_ago === undefined ? `never heard from bucket ${m.bucket}` :
    `last heard from bucket ${m.bucket} ${ago(m.heard_seconds_ago)}`;
  $("mirror").textContent = `${m.note}; lag ${m.lag_messages} messages, ${heard}` +
    (m.mirror_error ? `; mirroring fails: ${m.mirror_error}` : "");
}

// tokenCell shows the fencing token, or what is known of it: a leader that led
// before the dashboard started, with no win in the history, has a token of at
// most its latest write's revision.
function tokenCell(k) {
  if (k.token) return cell(k.token);
  if (!k.leader || !k.revision) return cell("–");
  const td = cell("≤ " + k.revision, "unknown");
  td.title = "led before the dashboard started, and the leadership history does not record its win: its token is at most its latest write's revision";
  return td;
}

// when shows a moment as the time of day if it is today, else with its
// date: a leader since yesterday must not read as since this morning.
function when(ts) {
  const d = new Date(ts);
  if (d.toDateString() === new Date().toDateString()) return d.toLocaleTimeString();
  return d.toLocaleString();
}

function sinceCell(k) {
  if (!k.since) return cell("–");
  const at = when(k.since);
  if (!k.since_before) return cell(at);
  const td = cell("before " + at, "unknown");
  td.title = "led before the dashboard started, and the leadership history does not record its win";
  return td;
}

// healthCell says whether the key is healthy: a leader whose renewal is on
// time, or nobody to expect; else why not, at the ages election check warns
// and fails at.
function healthCell(k, page) {
  let td;
  if (k.done) td = cell("done");
  else if (!k.leader) td = cell(k.healthy ? "ok" : "no leader", k.healthy ? "" : "unhealthy");
  else if (k.renewal === "late") td = cell("renewal late", "late");
  else if (k.renewal === "lapsed") td = cell("leadership lapsed", "unhealthy");
  else td = cell("ok");
  if (k.leader) {
    td.title = `renewal late past ${page.renewal_late_seconds.toFixed(3)} s, leadership lapsed (the leader stood down) ` +
      `past ${page.renewal_lapsed_seconds.toFixed(3)} s, for leaders renewing at the default interval`;
  }
  return td;
}

function duration(seconds) {
  if (seconds < 60) return seconds.toFixed(0) + " s";
  if (seconds < 3600) return (seconds / 60).toFixed(0) + " min";
  if (seconds < 86400) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

// loadFleet shows the fleet's nodes and daemons, if the bucket has a fleet.
// A daemon that runs on no node stands out.
async function loadFleet() {
  const res = await fetch("/api/fleet");
  if (!res.ok) return;
  const fleet = await res.json();
  $("fleet-section").hidden = !fleet.nodes.length && !fleet.daemons.length;
  const now = Date.now();
  const nodes = document.createElement("tbody");
  for (const n of fleet.nodes) {
    const tr = document.createElement("tr");
    tr.dataset.node = n.node;
    const labels = Object.entries(n.labels || {}).sort().map(([k, v]) => `${k}=${v}`).join(", ");
    const running = cell(`${n.running.length}/${n.can_run.length}`);
    running.title = (n.running.join(", ") || "no daemon") + " of the daemons it can run: " + (n.can_run.join(", ") || "none");
    const load = cell(n.capacity ? (n.running.length / n.capacity).toFixed(2) : "–");
    load.title = "daemons running per unit of capacity";
    tr.append(cell(n.node), cell(duration(n.age_seconds)), cell(n.capacity), running, load, cell(labels || "–"), cell(n.version || "–"));
    nodes.append(tr);
  }
  $("nodes").replaceChild(nodes, $("nodes").tBodies[0]);
  const daemons = document.createElement("tbody");
  let nowhere = 0;
  for (const d of fleet.daemons) {
    const tr = document.createElement("tr");
    tr.dataset.daemon = d.daemon;
    tr.dataset.key = d.key;
    const runs = d.state === "running" || d.state === "revoking";
    if (!runs) { tr.classList.add("nowhere"); nowhere++; }
    if (d.key === selected) tr.classList.add("selected");
    const state = cell(runs ? d.state : d.state + ": runs nowhere", "state");
    tr.append(cell(d.daemon), cell(d.node || "–", d.node ? "" : "none"), state, cell(d.token || "–"),
      cell(d.since ? duration(Math.max(now - new Date(d.since).getTime(), 0) / 1000) : "–"),
      cell(d.restarts || 0), cell(d.last_error || "–", d.last_error ? "" : "none"));
    tr.addEventListener("click", () => showTimeline(d.key));
    daemons.append(tr);
  }
  $("daemons").replaceChild(daemons, $("daemons").tBodies[0]);
  $("fleet-summary").textContent = `${fleet.nodes.length} nodes, ${fleet.daemons.length} daemons` +
    (nowhere ? `, ${nowhere} running nowhere` : "");
  $("fleet-summary").className = nowhere ? "unhealthy" : "";
}

function addChange(c) {
  const li = document.createElement("li");
  const done = (c.leader || "").startsWith("done:");
  li.textContent = `${when(c.at)} ${c.key}: ${holder(c.leader)}` + (c.token && !done ? ` (token ${c.token})` : "");
  $("changes").prepend(li);
  while ($("changes").children.length > 200) $("changes").lastChild.remove();
}

async function showTimeline(key) {
  selected = key;
  for (const tr of $("keys").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.key === key);
  for (const tr of $("daemons").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.key === key);
  $("timeline-key").textContent = key;
  const svg = $("timeline");
  svg.replaceChildren();
  svg.setAttribute("height", 0);
  const res = await fetch("/api/history?" + new URLSearchParams({ key }));
  if (!res.ok) { $("timeline-note").textContent = await res.text(); return; }
  const events = await res.json();
  if (!events.length) { $("timeline-note").textContent = "No history recorded for this key."; return; }
  // Spans: a holder from its win to its stand-down (or the next win, or now).
  const spans = [];
  for (const ev of events) {
    const at = new Date(ev.at).getTime();
    const open = spans.length && spans[spans.length - 1].end === undefined ? spans[spans.length - 1] : null;
    if (ev.kind === "won") {
      if (open) open.end = at;
      spans.push({ name: ev.name, token: ev.token, start: at });
    } else if (ev.kind === "stood_down" && open && open.token === ev.token) {
      open.end = at;
    }
  }
  const now = Date.now(), t0 = spans[0].start, width = svg.clientWidth || 600;
  const x = (t) => 4 + (t - t0) / Math.max(now - t0, 1) * (width - 8);
  const names = [...new Set(spans.map((s) => s.name))];
  const lane = 22;
  svg.setAttribute("height", names.length * lane + lane);
  const ns = "http://www.w3.org/2000/svg";
  const rect = (cls, x1, y, w, title) => {
    const r = document.createElementNS(ns, "rect");
    r.setAttribute("class", cls); r.setAttribute("x", x1); r.setAttribute("y", y);
    r.setAttribute("width", Math.max(w, 2)); r.setAttribute("height", lane - 6);
    const t = document.createElementNS(ns, "title"); t.textContent = title; r.append(t);
    svg.append(r);
  };
  spans.forEach((s, i) => {
    const end = s.end ?? now;
    rect("held", x(s.start), names.indexOf(s.name) * lane, x(end) - x(s.start), `${s.name}, token ${s.token}`);
    const next = spans[i + 1];
    if (next && next.start > end) rect("gap", x(end), names.length * lane, x(next.start) - x(end), "no leader");
  });
  names.forEach((n, i) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", 6); t.setAttribute("y", i * lane + 13); t.textContent = n;
    svg.append(t);
  });
  $("timeline-note").textContent = `${spans.length} leaderships since ${new Date(t0).toLocaleString()}; red: no leader.`;
}

let reload;
function follow() {
  const source = new EventSource("/api/changes");
  source.onopen = () => { $("live").textContent = "live"; };
  source.onerror = () => { $("live").textContent = "reconnecting…"; };
  source.onmessage = (e) => {
    const c = JSON.parse(e.data);
    addChange(c);
    clearTimeout(reload);
    reload = setTimeout(() => {
      loadKeys(c.key);
      if (c.key.startsWith("fleet.")) loadFleet();
      if (c.key === selected) showTimeline(selected);
    }, 50);
  };
}

$("search").addEventListener("input", () => { search = $("search").value.toLowerCase(); offset = 0; loadKeys(); });
$("prev").addEventListener("click", () => { offset = Math.max(0, offset - pageSize); loadKeys(); });
$("next").addEventListener("click", () => { offset += pageSize; loadKeys(); });
setInterval(() => { loadKeys(); loadFleet(); }, 2000); // renewal ages, health, daemons' restarts
loadKeys();
loadFleet();
follow();
