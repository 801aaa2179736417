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
  const body = document.createElement("tbody");
  for (const k of page.keys) {
    const tr = document.createElement("tr");
    tr.dataset.key = k.key;
    if (k.key === selected) tr.classList.add("selected");
    if (k.key === changedKey) tr.classList.add("changed");
    tr.append(cell(k.key), cell(k.leader || "none", k.leader ? "" : "none"), cell(k.token || "–"),
      cell(k.since ? new Date(k.since).toLocaleTimeString() : "–"), cell(ago(k.renewed_ago)),
      cell(k.candidates.join(", ") || "–"), cell(k.healthy ? "ok" : "no leader", k.healthy ? "" : "unhealthy"));
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

function addChange(c) {
  const li = document.createElement("li");
  li.textContent = `${new Date(c.at).toLocaleTimeString()} ${c.key}: ${c.leader || "no leader"}` + (c.token ? ` (token ${c.token})` : "");
  $("changes").prepend(li);
  while ($("changes").children.length > 200) $("changes").lastChild.remove();
}

async function showTimeline(key) {
  selected = key;
  for (const tr of $("keys").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.key === key);
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
    } else if (open && open.token === ev.token) {
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
      if (c.key === selected) showTimeline(selected);
    }, 50);
  };
}

$("search").addEventListener("input", () => { search = $("search").value.toLowerCase(); offset = 0; loadKeys(); });
$("prev").addEventListener("click", () => { offset = Math.max(0, offset - pageSize); loadKeys(); });
$("next").addEventListener("click", () => { offset += pageSize; loadKeys(); });
setInterval(() => loadKeys(), 2000); // renewal ages and health
loadKeys();
follow();
