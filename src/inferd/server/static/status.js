"use strict";
const POLL_MS = 2000;
const KEEP = 90;  // points per chart: three minutes at one every two seconds
const SERIES = [
  // key, title, unit, lines
  ["rps", "requests / s", "", ["rps"]],
  ["latency", "p50 / p99", "ms", ["p50", "p99"]],
  ["queue", "queue depth", "", ["queue"]],
  ["batch", "mean batch size", "", ["batch"]],
  ["padding", "padding efficiency", "%", ["padding"]],
  ["errors", "errors / s", "", ["errors"]],
];
const COLORS = ["var(--accent)", "var(--second)"];
const history = new Map();   // model -> {points: {line: [values]}, totals}
const cards = new Map();     // model -> elements

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  return node;
}

// the server writes the current status into the page (inferd.server.status_page): its cards
// are taken over as they are; a model that appears later gets a card built here, alike
function card(model) {
  if (cards.has(model)) return cards.get(model);
  const root = [...document.querySelectorAll("section[data-model]")]
    .find(node => node.dataset.model === model) || build(model);
  const parts = {
    root, task: root.querySelector(".task"), versions: root.querySelector(".versions"),
    split: root.querySelector(".split"), rollout: root.querySelector(".rollout"),
    reason: root.querySelector(".reason"), note: root.querySelector(".note"), charts: {},
  };
  for (const [key, , unit, lines] of SERIES) {
    const plot = root.querySelector(`svg[data-series="${key}"]`);
    parts.charts[key] = {plot, value: plot.parentNode.querySelector(".value"),
                         polylines: [...plot.querySelectorAll("polyline")], unit, lines};
  }
  cards.set(model, parts);
  return parts;
}

function build(model) {
  const root = el("section", {class: "card", "data-model": model});
  const title = el("div");
  title.append(el("h2", {}, model), el("span", {class: "task"}));
  const charts = el("div", {class: "charts"});
  for (const [key, name, , lines] of SERIES) {
    const box = el("div", {class: "chart"});
    const head = el("div");
    head.append(el("span", {class: "name"}, name), el("span", {class: "value"}, "–"));
    const plot = svg("svg", {viewBox: `0 0 ${KEEP - 1} 100`, preserveAspectRatio: "none",
                             "data-series": key, "data-last": "0"});
    lines.forEach((line, i) => plot.append(
      svg("polyline", {"data-line": line, stroke: COLORS[i], points: ""})));
    box.append(head, plot);
    charts.append(box);
  }
  root.append(title, el("div", {class: "versions"}), el("div", {class: "split", hidden: ""}),
              el("div", {class: "rollout", hidden: ""}), el("div", {class: "reason"}), charts,
              el("div", {class: "note"}));
  document.getElementById("models").append(root);
  return root;
}

// a rollout's step (or how it ended), its last decision with the reason, and the versions
// withdrawn from traffic (rolled back or aborted), as the server writes them
function drawRollout(node, rollout) {
  if (!rollout || rollout.status === "failed") {
    node.hidden = true;
    node.replaceChildren();
    return;
  }
  const status = rollout.status || "";
  let step;
  if (typeof rollout.weight === "number") {
    step = `step ${rollout.step} of ${(rollout.steps || []).length}`;
    if (status === "holding") step += " (holding)";
  } else {
    step = `rollout of v${rollout.candidate} ${status.replaceAll("_", " ")}`;
  }
  const spans = [el("span", {class: "step"}, step)];
  if (rollout.decision) {
    spans.push(el("span", {class: "decision"},
                  `last decision: ${rollout.decision.decision}: ${rollout.decision.reason}`));
  }
  if (rollout.withdrawn && rollout.withdrawn.length) {
    spans.push(el("span", {class: "withdrawn"},
                  `withdrawn: ${rollout.withdrawn.map(v => `v${v}`).join(", ")}`));
  }
  node.hidden = false;
  node.dataset.status = status;
  node.replaceChildren(...spans);
}

function sum(versions, field) {
  return versions.reduce((total, v) => total + (v[field] || 0), 0);
}

function push(model, values) {
  let h = history.get(model);
  if (!h) {
    h = {points: {}};
    history.set(model, h);
  }
  for (const [line, value] of Object.entries(values)) {
    const points = h.points[line] || (h.points[line] = []);
    points.push(value);
    if (points.length > KEEP) points.shift();
  }
  return h;
}

function draw(parts, h) {
  for (const chart of Object.values(parts.charts)) {
    const all = chart.lines.flatMap(line => h.points[line] || []).filter(v => v !== null);
    const top = Math.max(1e-9, ...all) * 1.1;
    chart.polylines.forEach((poly, i) => {
      const values = h.points[chart.lines[i]] || [];
      const offset = KEEP - values.length;
      poly.setAttribute("points", values.map((v, x) =>
        `${x + offset},${(100 - (v === null ? 0 : v) / top * 100).toFixed(2)}`).join(" "));
    });
    const lasts = chart.lines.map(line => {
      const values = h.points[line] || [];
      return values.length ? values[values.length - 1] : null;
    });
    chart.plot.setAttribute("data-last", String(lasts[0] === null ? 0 : lasts[0]));
    const shown = lasts.map(v => v === null ? "–" : fmt(v)).join(" / ");
    chart.value.textContent = lasts.some(v => v !== null) && chart.unit ? `${shown} ${chart.unit}` : shown;
  }
}

function fmt(v) {
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 10) return v.toFixed(1);
  return v.toFixed(2);
}

function update(status) {
  document.getElementById("server").textContent = `${status.server.name} ${status.server.version}`;
  document.getElementById("ready").textContent = status.ready ? "yes" : "no";
  document.getElementById("in-flight").textContent = status.in_flight;
  document.getElementById("jobs").textContent =
    `${status.jobs.running} running (${status.jobs.store})`;
  document.getElementById("updated").textContent = new Date(status.time * 1000).toLocaleTimeString();
  for (const model of status.models) {
    const parts = card(model.name);
    parts.task.textContent = model.task || "";
    parts.versions.replaceChildren(...(model.versions.length
      ? model.versions.map(v => el("span", {class: `badge ${v.state}`, "data-version": v.version,
                                            title: v.reason || ""},
                                         `v${v.version} ${v.state}${resident(v)}`))
      : [el("span", {class: `badge ${model.state}`}, model.state || "")]));
    parts.reason.textContent = model.reason || model.versions.filter(v => v.reason)
      .map(v => `v${v.version}: ${v.reason}`).join("; ");
    const rollout = model.rollout;
    if (rollout && typeof rollout.weight === "number") {
      // a running rollout: the stable version, its baseline (as large a share as the
      // candidate's, while that is under half) and the candidate
      const canary = Math.round(rollout.weight * 100);
      const baseline = Math.round((Number(rollout.baseline_weight) || 0) * 100);
      const stable = 100 - canary - baseline;
      parts.split.hidden = false;
      parts.split.className = "split";
      parts.split.dataset.rollout = rollout.status || "running";
      parts.split.replaceChildren(
        el("div", {class: "stable", style: `width:${stable}%`}, `v${rollout.stable} ${stable}%`),
        ...(baseline > 0 ? [el("div", {class: "baseline", style: `width:${baseline}%`,
                                       title: "baseline: a second instance of the stable version"},
                               `v${rollout.stable} baseline ${baseline}%`)] : []),
        el("div", {class: "canary", style: `width:${canary}%`}, `v${rollout.candidate} ${canary}%`));
    } else if (rollout && rollout.status === "failed") {
      // a rollout that is not running as it should (its state could not be read): its
      // status and reason, no split
      parts.split.hidden = false;
      parts.split.className = "split failed";
      parts.split.dataset.rollout = rollout.status || "failed";
      parts.split.replaceChildren(
        el("div", {class: "failed", title: rollout.reason || ""},
           `rollout ${rollout.status || "failed"}: ${rollout.reason || "no reason given"}`));
    } else {
      parts.split.hidden = true;
      parts.split.replaceChildren();
    }
    drawRollout(parts.rollout, rollout);
    const totals = {
      rows: sum(model.versions, "rows"), batches: sum(model.versions, "batches"),
      real: sum(model.versions, "real_elements"), padded: sum(model.versions, "padded_elements"),
      hits: sum(model.versions, "cache_hits"), misses: sum(model.versions, "cache_misses"),
    };
    const previous = (history.get(model.name) || {}).totals;
    let batch = null, padding = null;
    if (previous) {
      const batches = totals.batches - previous.batches;
      const padded = totals.padded - previous.padded;
      // a model batched by another (zero-shot over its base) has no batches of its own
      batch = totals.batches === 0 ? null : batches > 0 ? (totals.rows - previous.rows) / batches : 0;
      padding = padded > 0 ? (totals.real - previous.real) / padded * 100 : null;
    }
    const live = model.live || {requests_per_s: 0, errors_per_s: 0, p50_ms: null, p99_ms: null};
    const h = push(model.name, {
      rps: live.requests_per_s, errors: live.errors_per_s, p50: live.p50_ms, p99: live.p99_ms,
      queue: sum(model.versions, "queue_depth"), batch, padding,
    });
    h.totals = totals;
    const lookups = totals.hits + totals.misses;
    parts.note.textContent = lookups
      ? `response cache: ${(totals.hits / lookups * 100).toFixed(1)}% of ${lookups} lookups hit`
      : "";
    draw(parts, h);
  }
}

async function poll() {
  try {
    const response = await fetch("/v1/status", {cache: "no-store"});
    if (!response.ok) throw new Error(`status ${response.status}`);
    update(await response.json());
    document.getElementById("error").textContent = "";
  } catch (error) {
    document.getElementById("error").textContent = `cannot read /v1/status: ${error.message}`;
  } finally {
    setTimeout(poll, POLL_MS);
  }
}
poll();

// what a version in memory holds, after its state (nothing while it is not)
function resident(v) {
  let text = v.resident_mb === null || v.resident_mb === undefined ? "" : ` ${v.resident_mb} MB`;
  for (const [gpu, mb] of Object.entries(v.resident_device_mb || {})) {
    text += `, GPU ${gpu} ${mb} MB`;
  }
  return text;
}
