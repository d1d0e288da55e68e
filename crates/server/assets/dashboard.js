// tickwheel dashboard: polls the HTTP API and draws plain SVG (no library, no build step).
"use strict";

const POLL_MS = 2000;
const LATENESS_SAMPLES = 150;
const SVG_NS = "http://www.w3.org/2000/svg";

const $ = (sel) => document.querySelector(sel);
const state = { prev: null, lateness: [], job: null, tubesSeen: new Set() };

// ---- API ---------------------------------------------------------------------------------

function token() {
  return sessionStorage.getItem("tickwheel.token") || "";
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = "Bearer " + token();
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { data = null; }
  if (!res.ok) {
    const err = data && data.error ? data.error : { code: "http_" + res.status, message: text || res.statusText };
    const e = new Error(err.code + ": " + err.message);
    e.code = err.code;
    e.status = res.status;
    throw e;
  }
  return data;
}

function say(message, kind) {
  const el = $("#status");
  el.textContent = message;
  el.className = kind || "";
  delete el.dataset.fromPoll;
}

// ---- formatting --------------------------------------------------------------------------

const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));
const rate = (n) => (n === null ? "–" : n < 10 ? n.toFixed(1) : Math.round(n).toLocaleString("en-US"));

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 19);
}

// ---- tubes -------------------------------------------------------------------------------

function renderTubes(tubes, elapsedS) {
  const body = $("#tubes tbody");
  const prev = state.prev ? new Map(state.prev.map((t) => [t.name, t])) : new Map();
  const perS = (t, field) => {
    const p = prev.get(t.name);
    return p && elapsedS > 0 ? Math.max(0, t[field] - p[field]) / elapsedS : null;
  };
  body.replaceChildren(
    ...tubes.map((t) => {
      const actions = t.paused
        ? el("button", { type: "button", "data-action": "resume", onclick: () => resume(t.name) }, "Resume")
        : el("button", { type: "button", "data-action": "pause", onclick: () => pause(t.name) }, "Pause…");
      return el(
        "tr",
        { "data-tube": t.name, class: t.paused ? "paused" : "" },
        el("td", { class: "l name" }, t.name),
        el("td", { class: "ready" }, fmt(t.ready)),
        el("td", { class: "urgent" }, fmt(t.urgent)),
        el("td", { class: "delayed" }, fmt(t.delayed)),
        el("td", { class: "reserved" }, fmt(t.reserved)),
        el("td", { class: "buried" }, fmt(t.buried)),
        el("td", { class: "put-rate" }, rate(perS(t, "puts"))),
        el("td", { class: "reserve-rate" }, rate(perS(t, "reserves"))),
        el("td", { class: "delete-rate" }, rate(perS(t, "deletes"))),
        el("td", { class: "timeouts" }, fmt(t.timeouts)),
        el("td", { class: "paused-left" }, t.paused ? t.pause_time_left_s + " s" : ""),
        el("td", { class: "l" }, actions),
      );
    }),
  );
  // The timeline's tube picker follows the tubes that exist.
  const select = $("#timeline-tube");
  for (const t of tubes) {
    if (!state.tubesSeen.has(t.name)) {
      state.tubesSeen.add(t.name);
      select.append(el("option", { value: t.name }, t.name));
    }
  }
}

async function pause(tube) {
  const answer = prompt(`Pause tube "${tube}" for how many seconds?`, "60");
  if (answer === null) return;
  const seconds = Number(answer);
  if (!Number.isInteger(seconds) || seconds < 0) return say("pause: seconds must be a whole number ≥ 0", "error");
  await act(() => api("POST", `/api/v1/tubes/${encodeURIComponent(tube)}/pause`, { seconds }), `tube ${tube} paused for ${seconds} s`);
}

async function resume(tube) {
  await act(() => api("POST", `/api/v1/tubes/${encodeURIComponent(tube)}/resume`), `tube ${tube} resumed`);
}

async function act(call, done) {
  try {
    await call();
    say(done, "ok");
  } catch (e) {
    say(e.status === 401 || e.status === 403 ? `${e.message} (set the token above)` : e.message, "error");
  }
  await poll();
}

// ---- charts ------------------------------------------------------------------------------

const W = 1000;

// A bar chart of one timeline series.
function barChart(target, series, label, tickEvery, tickLabel) {
  const H = 120, left = 44, right = 8, top = 18, bottom = 20;
  const buckets = series.buckets;
  const max = Math.max(1, ...buckets.map((b) => b.count));
  const total = buckets.reduce((s, b) => s + b.count, 0);
  const bw = (W - left - right) / buckets.length;
  const root = svg("svg", {
    viewBox: `0 0 ${W} ${H}`,
    role: "img",
    "aria-label": `${label}: ${total} jobs`,
    "data-resolution": series.resolution,
    "data-total": String(total),
  });
  root.append(svg("text", { x: left, y: 13, class: "title" }, `${label} — ${fmt(total)} job${total === 1 ? "" : "s"}`));
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  for (const v of [max, Math.round(max / 2)]) {
    root.append(svg("line", { x1: left, x2: W - right, y1: y(v), y2: y(v), class: "grid" }));
    root.append(svg("text", { x: left - 4, y: y(v) + 4, "text-anchor": "end" }, fmt(v)));
  }
  buckets.forEach((b, i) => {
    const x = left + i * bw;
    if (b.count > 0) {
      const r = svg("rect", { x: x + 0.5, y: y(b.count), width: Math.max(1, bw - 1), height: H - bottom - y(b.count), class: "bar" });
      r.append(svg("title", {}, `${fmt(b.count)} due ${clock(b.start_ms)}–${clock(b.start_ms + series.width_ms)} UTC`));
      root.append(r);
    }
    if (i % tickEvery === 0) {
      root.append(svg("text", { x, y: H - 5 }, tickLabel(i, b)));
    }
  });
  root.append(svg("line", { x1: left, x2: W - right, y1: H - bottom, y2: H - bottom, class: "axis" }));
  target.replaceChildren(root);
}

function renderTimeline(t) {
  const by = Object.fromEntries(t.series.map((s) => [s.resolution, s]));
  if (by.second) barChart($("#timeline-second"), by.second, "Next minute, by second", 10, (i) => `+${i}s`);
  if (by.minute) barChart($("#timeline-minute"), by.minute, "Next hour, by minute", 10, (i) => `+${i}m`);
  if (by.hour) barChart($("#timeline-hour"), by.hour, "Next days, by hour (UTC)", 6, (i, b) => (i === 0 ? "now" : clock(b.start_ms).slice(0, 5)));
  $("#timeline-summary").textContent = `${fmt(t.delayed)} delayed in all, ${fmt(t.later)} due later than shown`;
  $("#timeline-section").dataset.delayed = String(t.delayed);
}

function renderLateness() {
  const samples = state.lateness;
  const target = $("#lateness");
  const H = 140, left = 44, right = 8, top = 18, bottom = 20;
  const max = Math.max(1, ...samples.map((s) => s.max));
  const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "lateness over time" });
  root.append(svg("text", { x: left, y: 13, class: "title" }, "lateness (ms): p50 blue, p99 orange, max dashed"));
  const y = (v) => top + (H - top - bottom) * (1 - v / max);
  const x = (i) => left + ((W - left - right) * i) / Math.max(1, LATENESS_SAMPLES - 1);
  for (const v of [max, Math.round(max / 2), 0]) {
    root.append(svg("line", { x1: left, x2: W - right, y1: y(v), y2: y(v), class: "grid" }));
    root.append(svg("text", { x: left - 4, y: y(v) + 4, "text-anchor": "end" }, fmt(v)));
  }
  const offset = LATENESS_SAMPLES - samples.length;
  for (const key of ["max", "p99", "p50"]) {
    const d = samples.map((s, i) => `${i ? "L" : "M"}${x(offset + i).toFixed(1)},${y(s[key]).toFixed(1)}`).join("");
    if (d) root.append(svg("path", { d, class: key }));
  }
  if (samples.length) {
    const first = samples[0].at, last = samples[samples.length - 1].at;
    // The first sample's time only once the line is long enough for both labels to fit.
    if (samples.length > 20) root.append(svg("text", { x: x(offset), y: H - 5 }, clock(first)));
    root.append(svg("text", { x: W - right, y: H - 5, "text-anchor": "end" }, clock(last)));
  }
  root.append(svg("line", { x1: left, x2: W - right, y1: H - bottom, y2: H - bottom, class: "axis" }));
  target.replaceChildren(root);
}

// ---- inspector ---------------------------------------------------------------------------

const JOB_FIELDS = [
  "id", "tube", "state", "priority", "ttr_s", "age_s", "due_at_ms", "time_left_ms",
  "reserves", "timeouts", "releases", "buries", "kicks", "body_len", "idempotency_key",
];

function renderJob(job) {
  state.job = job;
  const rows = JOB_FIELDS.filter((f) => f in job).map((f) => {
    let v = job[f];
    if (f === "due_at_ms" && v !== null) v = `${v} (${new Date(v).toISOString()})`;
    return el("tr", { "data-field": f }, el("td", {}, f), el("td", {}, v === null ? "—" : String(v)));
  });
  $("#job-fields tbody").replaceChildren(...rows);
  $("#job-body").textContent = job.body_preview ?? "";
  $("#job-kick").disabled = !(job.state === "delayed" || job.state === "buried");
  $("#job-kick").textContent = job.state === "delayed" ? "Run now" : "Kick";
  $("#job").hidden = false;
}

async function showJob(path, keepStatus) {
  try {
    renderJob(await api("GET", path));
    if (!keepStatus) say("", "");
  } catch (e) {
    $("#job").hidden = true;
    state.job = null;
    say(e.message, "error");
  }
}

// ---- polling -----------------------------------------------------------------------------

let polling = false;
let lastPoll = null;

async function poll() {
  if (polling) return;
  polling = true;
  try {
    const tube = $("#timeline-tube").value;
    const [stats, tubes, timeline] = await Promise.all([
      api("GET", "/api/v1/stats"),
      api("GET", "/api/v1/tubes"),
      api("GET", "/api/v1/timeline" + (tube ? "?tube=" + encodeURIComponent(tube) : "")),
    ]);
    const now = performance.now();
    const elapsedS = lastPoll === null ? 0 : (now - lastPoll) / 1000;
    lastPoll = now;
    renderTubes(tubes, elapsedS);
    state.prev = tubes;
    renderTimeline(timeline);
    const l = stats.lateness_ms || { count: 0, p50: 0, p90: 0, p99: 0, max: 0 };
    state.lateness.push({ at: timeline.now_ms, p50: l.p50 || 0, p99: l.p99 || 0, max: l.max || 0 });
    if (state.lateness.length > LATENESS_SAMPLES) state.lateness.shift();
    renderLateness();
    $("#lateness-summary").textContent = `${fmt(l.count)} delivered; p50 ${fmt(l.p50)} ms, p90 ${fmt(l.p90)} ms, p99 ${fmt(l.p99)} ms, max ${fmt(l.max)} ms`;
    $("#server-line").textContent =
      `${stats.version ? "v" + stats.version + " · " : ""}up ${fmt(stats.uptime)} s · ${fmt(stats.current_connections)} connections · ` +
      `${fmt(stats.current_jobs_ready)} ready · ${fmt(stats.current_jobs_delayed)} delayed · updated ${clock(timeline.now_ms)} UTC`;
    document.body.dataset.polled = String((Number(document.body.dataset.polled) || 0) + 1);
    if ($("#status").className === "error" && $("#status").dataset.fromPoll) say("", "");
  } catch (e) {
    say("cannot reach the server: " + e.message, "error");
    $("#status").dataset.fromPoll = "1";
  } finally {
    polling = false;
  }
}

// ---- wiring ------------------------------------------------------------------------------

function init() {
  const tok = $("#token");
  tok.value = token();
  tok.addEventListener("change", () => {
    if (tok.value) sessionStorage.setItem("tickwheel.token", tok.value.trim());
    else sessionStorage.removeItem("tickwheel.token");
  });
  $("#timeline-tube").addEventListener("change", poll);
  $("#find-by-id").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = $("#job-id").value.trim();
    if (!/^\d+$/.test(id)) return say("job id: a positive whole number", "error");
    showJob(`/api/v1/jobs/${id}`);
  });
  $("#find-by-key").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const tube = $("#key-tube").value.trim() || "default";
    const key = $("#key").value;
    if (!key) return say("idempotency key: required", "error");
    showJob(`/api/v1/jobs/by-key/${encodeURIComponent(tube)}/${encodeURIComponent(key)}`);
  });
  $("#job-refresh").addEventListener("click", () => state.job && showJob(`/api/v1/jobs/${state.job.id}`));
  $("#job-kick").addEventListener("click", async () => {
    if (!state.job) return;
    const id = state.job.id, was = state.job.state;
    await act(() => api("POST", `/api/v1/jobs/${id}/kick`), was === "delayed" ? `job ${id} runs now (ready)` : `job ${id} kicked`);
    await showJob(`/api/v1/jobs/${id}`, true);
  });
  $("#job-delete").addEventListener("click", async () => {
    if (!state.job) return;
    const id = state.job.id;
    if (!confirm(`Delete job ${id}?`)) return;
    await act(() => api("DELETE", `/api/v1/jobs/${id}`), `job ${id} deleted`);
    $("#job").hidden = true;
    state.job = null;
  });
  poll();
  setInterval(() => {
    if ($("#live").checked && !document.hidden) poll();
  }, POLL_MS);
}

init();
