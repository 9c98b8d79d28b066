// Cairn's dashboard: polls /stats.json (the snapshot the control socket's
// `stats` returns), keeps the last KEEP samples of every series and draws
// them on canvases. Rates and interval percentiles come from the difference
// of two snapshots. A file export (`cairn serve --files`) has its own
// charts (requests, readahead, resident bytes, dual's preface): elements
// with data-for="volumes" or "files" show for that kind of export only.
// Each chart's <figure> says what it drew in
// data-points (points), data-series (lines) and data-max (largest value),
// for tests and scripts. No library, no network but this server.
"use strict";

const params = new URLSearchParams(location.search);
const POLL_MS = Math.max(200, 1000 * (Number(params.get("every")) || 1));
const KEEP = 300;
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"];

const format = {
  ratio: (v) => (v * 100).toFixed(1) + " %",
  bytes: (v) => {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : Math.round(v)) + " " + units[i];
  },
  rate: (v) => format.bytes(v) + "/s",
  ns: (v) => v < 1e3 ? Math.round(v) + " ns"
    : v < 1e6 ? (v / 1e3).toFixed(1) + " µs"
    : v < 1e9 ? (v / 1e6).toFixed(2) + " ms"
    : (v / 1e9).toFixed(2) + " s",
  perSecond: (v) => (v < 10 ? v.toFixed(2) : v.toFixed(0)) + "/s",
  plain: (v) => v < 10 ? v.toFixed(2) : v.toFixed(1),
};

class Chart {
  constructor(id, show, { log = false, top = null } = {}) {
    this.figure = document.getElementById(id);
    this.canvas = this.figure.querySelector("canvas");
    this.legend = this.figure.querySelector(".legend");
    this.show = show;
    this.log = log;
    this.top = top;
    this.series = new Map(); // name -> [{t, v}]
  }

  push(name, t, v) {
    if (!Number.isFinite(v) || (this.log && v <= 0)) return;
    if (!this.series.has(name)) this.series.set(name, []);
    const points = this.series.get(name);
    points.push({ t, v });
    if (points.length > KEEP) points.shift();
  }

  clear() { this.series.clear(); }

  draw() {
    const ratio = window.devicePixelRatio || 1;
    const width = this.canvas.clientWidth || 400;
    const height = this.canvas.clientHeight || 190;
    this.canvas.width = Math.round(width * ratio);
    this.canvas.height = Math.round(height * ratio);
    const g = this.canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    g.font = "11px system-ui, sans-serif";
    const all = [...this.series.values()].flat();
    this.figure.dataset.points = all.length;
    this.figure.dataset.series = this.series.size;
    this.figure.dataset.max = all.length ? Math.max(...all.map((p) => p.v)) : 0;
    this.drawLegend();
    const box = { left: 62, right: width - 8, top: 8, bottom: height - 18 };
    if (!all.length) {
      g.fillStyle = "#6b7280";
      g.fillText("no data yet", box.left, (box.top + box.bottom) / 2);
      return;
    }
    const tMax = Math.max(...all.map((p) => p.t));
    const tMin = Math.min(tMax - 10, ...all.map((p) => p.t));
    const y = this.scale(all, box);
    const x = (t) => box.left + (box.right - box.left) * (t - tMin) / (tMax - tMin);
    g.fillStyle = "#6b7280";
    g.fillText("-" + Math.round(tMax - tMin) + " s", box.left, height - 4);
    g.textAlign = "right";
    g.fillText("now", box.right, height - 4);
    let color = 0;
    for (const points of this.series.values()) {
      g.strokeStyle = g.fillStyle = COLORS[color++ % COLORS.length];
      g.lineWidth = 1.5;
      g.beginPath();
      points.forEach((p, i) => (i ? g.lineTo : g.moveTo).call(g, x(p.t), y(p.v)));
      g.stroke();
      const last = points[points.length - 1];
      g.beginPath();
      g.arc(x(last.t), y(last.v), 2.5, 0, 2 * Math.PI);
      g.fill();
    }
  }

  // The value axis (grid lines and labels); returns value -> pixel.
  scale(all, box) {
    const g = this.canvas.getContext("2d");
    const values = all.map((p) => p.v);
    let low, high, ticks;
    if (this.log) {
      low = Math.floor(Math.log10(Math.min(...values)));
      high = Math.max(low + 1, Math.ceil(Math.log10(Math.max(...values))));
      ticks = [];
      for (let e = low; e <= high; e++) ticks.push(10 ** e);
    } else {
      low = 0;
      high = this.top ?? (Math.max(...values) * 1.1 || 1);
      ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => f * high);
    }
    const span = (v) => this.log ? (Math.log10(v) - low) / (high - low) : (v - low) / (high - low);
    const y = (v) => box.bottom - (box.bottom - box.top) * span(v);
    g.strokeStyle = "#e3e3df";
    g.fillStyle = "#6b7280";
    g.lineWidth = 1;
    g.textAlign = "right";
    for (const tick of ticks) {
      g.beginPath();
      g.moveTo(box.left, y(tick));
      g.lineTo(box.right, y(tick));
      g.stroke();
      g.fillText(this.show(tick), box.left - 6, y(tick) + 4);
    }
    g.textAlign = "left";
    return y;
  }

  drawLegend() {
    this.legend.replaceChildren();
    if (!this.series.size) {
      const item = document.createElement("li");
      item.className = "empty";
      item.textContent = "nothing in this export's stack reports this yet";
      this.legend.append(item);
      return;
    }
    let color = 0;
    for (const [name, points] of this.series) {
      const item = document.createElement("li");
      item.style.setProperty("--color", COLORS[color++ % COLORS.length]);
      item.textContent = name + ": " + this.show(points[points.length - 1].v);
      this.legend.append(item);
    }
  }
}

const charts = {
  hitRatio: new Chart("chart-hit-ratio", format.ratio, { top: 1 }),
  throughput: new Chart("chart-throughput", format.rate),
  latency: new Chart("chart-latency", format.ns, { log: true }),
  dirty: new Chart("chart-dirty", format.bytes),
  cleaner: new Chart("chart-cleaner", format.perSecond),
  costs: new Chart("chart-costs", format.plain),
  requests: new Chart("chart-requests", format.perSecond),
  readahead: new Chart("chart-readahead", format.perSecond),
  resident: new Chart("chart-resident", format.bytes),
  preface: new Chart("chart-preface", format.plain),
};

// Per layer kind: the counters of its hits and of all its lookups.
const HITS = {
  cache: { label: "", hits: ["hits", "coalesced"], all: ["hits", "coalesced", "misses"] },
  tier: { label: "", hits: ["hits"], all: ["hits", "misses"] },
  log: { label: " NV writes", hits: ["nv_write_hits"], all: ["nv_writes"] },
  objects: { label: " segment cache", hits: ["segcache_hits"], all: ["segcache_hits", "segcache_misses"] },
};
// Per layer kind: the counters of its cleaner's work.
const CLEANER = {
  log: [["cleaner_segment_reads", "segments cleaned"], ["cleaner_segment_writes", "cleaner segment writes"]],
  tier: [["cleaned_blocks", "blocks written back"]],
  objects: [["cleaner_blocks", "blocks moved"]],
};
// Per layer kind: its dirty data, bytes.
const DIRTY = { tier: "dirty_bytes", log: "nv_dirty_bytes" };

const value = (metrics, name) => metrics.find((m) => m.name === name)?.value;

// Percentiles `qs` of the values recorded between two snapshots of one
// histogram (their buckets' difference); null when none were.
function intervalQuantiles(now, then, qs) {
  const was = new Map((then?.buckets ?? []).map((b) => [b.le_ns, b.count]));
  const added = now.buckets
    .map((b) => ({ le: Math.min(b.le_ns, now.max_ns), n: b.count - (was.get(b.le_ns) ?? 0) }))
    .filter((b) => b.n > 0);
  const total = added.reduce((n, b) => n + b.n, 0);
  if (!total) return null;
  return qs.map((q) => {
    const rank = Math.max(1, Math.ceil(q * total));
    let seen = 0;
    for (const b of added) {
      seen += b.n;
      if (seen >= rank) return b.le;
    }
    return now.max_ns;
  });
}

let previous = null;
let chosen = null;

// The exports a snapshot lists: its volumes, then its file exports, each
// {key, label, files}; the key tells a volume and a file export apart.
const exportsOf = (snapshot) => [
  ...snapshot.exports.map((e) => ({ key: "volume:" + e.name, label: e.name, export: e, files: false })),
  ...(snapshot.files ?? []).map((e) => ({ key: "files:" + e.name, label: e.name + " (files)", export: e, files: true })),
];

function update(snapshot) {
  chooseExport(snapshot);
  const chosenExport = exportsOf(snapshot).find((e) => e.key === chosen);
  if (!chosenExport) return;
  showFor(chosenExport.files ? "files" : "volumes");
  const current = chosenExport.export;
  const before = previous && exportsOf(previous).find((e) => e.key === chosen)?.export;
  // Points are placed by the page's clock (when it polled); rates divide
  // by the server's (how far apart the two snapshots were taken).
  const t = performance.now() / 1000;
  const seconds = previous ? snapshot.uptime_seconds - previous.uptime_seconds : 0;
  if (chosenExport.files) {
    filesUpdate(snapshot, current, before, t, seconds);
    previous = snapshot;
    Object.values(charts).forEach((c) => c.draw());
    return;
  }
  for (const layer of current.layers) {
    if (DIRTY[layer.kind]) charts.dirty.push(layer.name, t, value(layer.metrics, DIRTY[layer.kind]));
    for (const group of layer.groups) {
      charts.costs.push(layer.name + " " + group.name, t, value(group.metrics, "cost"));
    }
  }
  if (before && seconds > 0) rates(current, before, t, seconds);
  summary(snapshot, current, before, seconds);
  layerTable(current);
  previous = snapshot;
  Object.values(charts).forEach((c) => c.draw());
}

// The charts of what happened between two snapshots.
function rates(current, before, t, seconds) {
  const io = current.io;
  charts.throughput.push("read", t, (io.read_bytes - before.io.read_bytes) / seconds);
  charts.throughput.push("write", t, (io.write_bytes - before.io.write_bytes) / seconds);
  for (const op of ["read", "write"]) {
    const q = intervalQuantiles(current.latency[op], before.latency[op], [0.5, 0.99, 0.999]);
    if (!q) continue;
    ["p50", "p99", "p99.9"].forEach((name, i) => charts.latency.push(op + " " + name, t, q[i]));
  }
  for (const layer of current.layers) {
    const then = before.layers.find((l) => l.name === layer.name);
    if (!then) continue;
    const delta = (name) => value(layer.metrics, name) - value(then.metrics, name);
    const hits = HITS[layer.kind];
    if (hits) {
      const all = hits.all.reduce((n, name) => n + delta(name), 0);
      const hit = hits.hits.reduce((n, name) => n + delta(name), 0);
      if (all > 0) charts.hitRatio.push(layer.name + hits.label, t, hit / all);
    }
    for (const [name, label] of CLEANER[layer.kind] ?? []) {
      charts.cleaner.push(layer.name + ": " + label, t, delta(name) / seconds);
    }
  }
}

function chooseExport(snapshot) {
  const select = document.getElementById("export");
  const all = exportsOf(snapshot);
  const keys = all.map((e) => e.key);
  if ([...select.options].map((o) => o.value).join("\n") !== keys.join("\n")) {
    select.replaceChildren(...all.map((e) => new Option(e.label, e.key)));
  }
  if (!keys.includes(chosen)) {
    chosen = keys[0] ?? null;
    Object.values(charts).forEach((c) => c.clear());
  }
  select.value = chosen;
}

// Shows the elements for `kind` ("volumes" or "files"), hides the others'.
function showFor(kind) {
  for (const element of document.querySelectorAll("[data-for]")) {
    element.hidden = element.dataset.for !== kind;
  }
}

// A file export: its cache's counters (`cache`, named metrics), requests by
// method and status class, connections.
function filesUpdate(snapshot, current, before, t, seconds) {
  const cache = (e, name) => value(e.cache, name) ?? 0;
  charts.resident.push("resident", t, cache(current, "resident_bytes"));
  charts.resident.push("capacity", t, cache(current, "capacity_bytes"));
  if (value(current.cache, "dual_preface_blocks") !== undefined) {
    charts.preface.push("preface blocks", t, cache(current, "dual_preface_blocks"));
    charts.preface.push("active files", t, cache(current, "dual_active_files"));
  }
  if (before && seconds > 0) {
    const delta = (name) => cache(current, name) - cache(before, name);
    const all = delta("hits") + delta("coalesced") + delta("misses");
    if (all > 0) charts.hitRatio.push("blocks", t, (delta("hits") + delta("coalesced")) / all);
    // With --spill: the SSD level's hits among the reads that reached it.
    const spilled = delta("spill_hits") + delta("spill_misses");
    if (spilled > 0) charts.hitRatio.push("SSD spill", t, delta("spill_hits") / spilled);
    charts.throughput.push("from the cache", t, delta("cache_bytes") / seconds);
    charts.throughput.push("from the backend", t, delta("backend_read_bytes") / seconds);
    for (const name of ["issued", "used", "wasted", "dropped"]) {
      charts.readahead.push(name, t, delta("prefetch_" + name) / seconds);
    }
    for (const r of current.requests) {
      const then = before.requests.find((b) => b.method === r.method && b.status === r.status);
      const count = r.count - (then?.count ?? 0);
      // Only the pairs that happened; a line per method and class.
      if (count > 0 || charts.requests.series.has(r.method + " " + r.status)) {
        charts.requests.push(r.method + " " + r.status, t, count / seconds);
      }
    }
  }
  const errors = Object.values(current.backend_errors).reduce((n, v) => n + v, 0);
  const cells = [
    ["up", Math.round(snapshot.uptime_seconds) + " s"],
    ["policy", current.policy],
    ["block", format.bytes(current.block_size_bytes)],
    ["cache", format.bytes(cache(current, "resident_bytes")) + " of " + format.bytes(cache(current, "capacity_bytes"))],
    ...(value(current.cache, "spill_capacity_bytes") === undefined ? [] : [["SSD spill",
      format.bytes(cache(current, "spill_cached_bytes")) + " of " + format.bytes(cache(current, "spill_capacity_bytes"))
      + (cache(current, "spill_failed") ? " (failed: passing reads through)" : "")]]),
    ["connections", current.connections_open + " open, " + current.connections_total + " since start, "
      + current.connections_refused + " refused"],
    ["requests", current.requests.reduce((n, r) => n + r.count, 0).toLocaleString()],
    ["backend errors", errors.toLocaleString()],
  ];
  fillSummary(cells);
}

function fillSummary(cells) {
  const section = document.getElementById("summary");
  section.replaceChildren(...cells.map(([name, text]) => {
    const span = document.createElement("span");
    const b = document.createElement("b");
    b.textContent = text;
    span.append(name + " ", b);
    return span;
  }));
}

function summary(snapshot, current, before, seconds) {
  const io = current.io;
  const cells = [
    ["up", Math.round(snapshot.uptime_seconds) + " s"],
    ["size", format.bytes(current.size_bytes)],
    ["connections", current.connections_open + " open, " + current.connections_total + " since start"],
    ["reads", io.reads.toLocaleString()],
    ["writes", io.writes.toLocaleString()],
    ["errors", (io.errors + io.rejected).toLocaleString()],
  ];
  if (before && seconds > 0) {
    cells.push(["requests", format.perSecond((requests(io) - requests(before.io)) / seconds)]);
  }
  if (!snapshot.counting) cells.push(["counting", "off (--no-stats)"]);
  fillSummary(cells);
}

const requests = (io) => io.reads + io.writes + io.flushes + io.trims + io.write_zeroes
  + io.caches + io.block_statuses;

function layerTable(current) {
  const body = document.querySelector("#layers tbody");
  const rows = [];
  for (const layer of current.layers) {
    for (const op of ["read", "write", "flush"]) {
      const l = layer.latency?.[op];
      if (!l?.count) continue;
      const cells = [layer.name, layer.kind, op, l.count.toLocaleString(),
        format.ns(l.p50_ns), format.ns(l.p99_ns), format.ns(l.p999_ns), format.ns(l.max_ns)];
      const row = document.createElement("tr");
      row.replaceChildren(...cells.map((text) => {
        const cell = document.createElement("td");
        cell.textContent = text;
        return cell;
      }));
      rows.push(row);
    }
  }
  body.replaceChildren(...rows);
}

function status(text, error) {
  const element = document.getElementById("status");
  element.textContent = text;
  element.classList.toggle("error", error);
}

async function poll() {
  try {
    const answer = await fetch("/stats.json", { cache: "no-store" });
    if (!answer.ok) throw new Error("HTTP " + answer.status);
    const snapshot = await answer.json();
    update(snapshot);
    status("pid " + snapshot.pid + " · updated " + new Date().toLocaleTimeString(), false);
  } catch (e) {
    status("cannot read /stats.json: " + e.message + "; retrying", true);
  }
  setTimeout(poll, POLL_MS);
}

document.getElementById("export").addEventListener("change", (event) => {
  chosen = event.target.value;
  Object.values(charts).forEach((c) => c.clear());
});
poll();
