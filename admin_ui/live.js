// The Live tab: requests appear as they start and update round by round.
//
// Events only update the model (cheap); drawing happens in `render`, which a throttle runs at
// most every RENDER_INTERVAL_MS on an animation frame, and which touches only the rows whose
// request changed since the last frame. So a burst of hundreds of concurrent requests costs a
// few DOM updates per second, not one per round.

import { LiveModel } from "./model.js";
import {
  PLAIN_ROUND, assignColors, colorFor, lineChart, roundBars, setDrafterKinds, sparkBars, strip,
} from "./charts.js";
import { $, clear, fmt, fmtClock, fmtDuration, fmtInt, h, setText } from "./dom.js";

export const RENDER_INTERVAL_MS = 200; // at most 5 renders a second
const HISTORY_ROWS = 200;

export function throttle(fn, intervalMs) {
  let pending = false;
  let last = 0;
  return () => {
    if (pending) return;
    pending = true;
    const wait = Math.max(0, last + intervalMs - performance.now());
    setTimeout(() => {
      requestAnimationFrame(() => {
        pending = false;
        last = performance.now();
        fn();
      });
    }, wait);
  };
}

const STATUS_LABEL = {
  running: "running",
  finished: "finished",
  aborted: "stopped",
  failed: "failed",
};

export class LiveView {
  constructor(root) {
    this.root = root;
    this.model = new LiveModel(HISTORY_ROWS);
    this.rows = new Map(); // request id -> {tr, cells}
    this.selected = null;
    this.renders = 0;
    this.lastRenderMs = 0;
    this.maxRenderMs = 0;
    this.tbody = $("#live-table tbody", root);
    this.detail = $("#detail", root);
    this.schedule = throttle(() => this.render(), RENDER_INTERVAL_MS);
    $("#d-close", root).addEventListener("click", () => this.select(null));
    document.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.selected) this.select(null);
    });
    this.tbody.addEventListener("click", (e) => {
      const tr = e.target.closest("tr[data-id]");
      if (tr) this.select(tr.dataset.id);
    });
    this.tbody.addEventListener("keydown", (e) => {
      const tr = e.target.closest("tr[data-id]");
      if (tr && (e.key === "Enter" || e.key === " ")) {
        e.preventDefault();
        this.select(tr.dataset.id);
      }
    });
    $("#live-example", root).textContent = exampleCode();
  }

  // ---- stream input

  onSnapshot(snapshot) {
    setDrafterKinds(snapshot.drafter_kinds);
    assignColors(snapshot.drafters || []);
    this.model.loadSnapshot(snapshot);
    this.schedule();
  }

  onEvents(events) {
    // A drafter added since the snapshot: its kind arrives with the first request that has it.
    for (const e of events) if (e.drafter_kinds) setDrafterKinds(e.drafter_kinds);
    this.model.applyEvents(events);
    this.schedule();
  }

  // Tab shown again: canvases had no size while hidden, so draw everything once.
  refresh() {
    for (const id of this.model.records.keys()) this.model.dirty.add(id);
    this.schedule();
  }

  select(id) {
    this.selected = id;
    for (const [rid, row] of this.rows) row.tr.classList.toggle("selected", rid === id);
    this.detail.hidden = id == null;
    $(".split", this.root).classList.toggle("has-detail", id != null);
    if (id != null) this.refresh();
  }

  // ---- drawing

  render() {
    const started = performance.now();
    this.draw();
    this.renders += 1;
    this.lastRenderMs = performance.now() - started;
    this.maxRenderMs = Math.max(this.maxRenderMs, this.lastRenderMs);
  }

  draw() {
    const model = this.model;
    if (model.structureDirty) {
      this.reconcileRows();
      model.structureDirty = false;
    }
    // Text first (writes only), then one measurement, then canvases: interleaving writes
    // and size reads would force a layout of the whole table per row.
    const changed = [];
    for (const id of model.dirty) {
      const rec = model.records.get(id);
      const row = this.rows.get(id);
      if (rec && row) {
        const labels = stepLabels(rec); // once per changed row and frame
        updateRow(row, rec, labels);
        changed.push([row, rec, labels]);
      }
    }
    if (changed.length) {
      const { strip: s, spark: k } = changed[0][0].cells;
      const stripSize = { w: s.clientWidth, h: s.clientHeight };
      const sparkSize = { w: k.clientWidth, h: k.clientHeight };
      for (const [row, rec, labels] of changed) {
        strip(row.cells.strip, labels, stripSize);
        sparkBars(row.cells.spark, rec.accepted_per_round, sparkSize);
      }
    }
    const detailDirty = this.selected != null && model.dirty.has(this.selected);
    model.dirty.clear();
    if (detailDirty) this.renderDetail();
    this.renderLegend();
    const { running, finished } = model.counts();
    const rows = model.lastBatchRows == null ? "" : ` · last step verified ${model.lastBatchRows} together`;
    setText($("#live-counts", this.root), `${running} running · ${finished} finished (last ${model.limit} kept)${rows}`);
    $("#live-empty", this.root).hidden = model.records.size > 0;
    $("#live-dropped", this.root).hidden = model.droppedEvents === 0;
    setText($("#live-dropped", this.root), `${fmtInt(model.droppedEvents)} events dropped by the gateway (display resynced)`);
  }

  reconcileRows() {
    const ordered = this.model.ordered();
    const keep = new Set(ordered.map((r) => r.request_id));
    for (const [id, row] of this.rows) {
      if (!keep.has(id)) {
        row.tr.remove();
        this.rows.delete(id);
      }
    }
    // Move as few nodes as possible: walk the wanted order against the current children.
    let cursor = this.tbody.firstChild;
    for (const rec of ordered) {
      let row = this.rows.get(rec.request_id);
      if (!row) {
        row = createRow(rec.request_id);
        this.rows.set(rec.request_id, row);
        this.model.dirty.add(rec.request_id);
        row.tr.classList.toggle("selected", rec.request_id === this.selected);
      }
      if (row.tr === cursor) cursor = cursor.nextSibling;
      else this.tbody.insertBefore(row.tr, cursor);
    }
    if (this.selected != null && !keep.has(this.selected)) this.select(null);
  }

  renderLegend() {
    const legend = $("#legend", this.root);
    const ids = this.model.knownDrafters().sort();
    const key = JSON.stringify([ids, this.model.sawPlainRounds]);
    if (legend.dataset.key === key) return;
    legend.dataset.key = key;
    clear(legend);
    if (ids.length === 0) return;
    legend.append(h("span", { class: "legend-title", text: "Drafters" }));
    for (const id of ids) legend.append(legendChip(id, "chip", id));
    if (this.model.sawPlainRounds) legend.append(legendChip(PLAIN_ROUND, "chip plain-round", PLAIN_TITLE));
  }

  renderDetail() {
    const rec = this.model.records.get(this.selected);
    if (!rec) return;
    const d = this.detail;
    setText($("#d-id", d), rec.request_id);
    setBadge($("#d-status", d), rec.status);
    const meta = $("#d-meta", d);
    clear(meta);
    const rows = [
      ["Policy", rec.policy ?? "—"],
      ["Learner", learnerStart(rec.warm_start_requests)],
      ["Started", fmtClock(rec.started_at)],
      ["Rounds", roundsText(rec)],
      ["Prompt tokens", fmtInt(rec.prompt_tokens)],
      ["Completion tokens", fmtInt(rec.completion_tokens)],
      ["Max tokens", fmtInt(rec.max_tokens)],
      ["MAT", fmt(rec.mean_acceptance_length)],
      ["Tokens/s", fmt(rec.tokens_per_s, 1)],
      ["Batch (last round)", rec.batch_rows == null ? "—" : `${fmtInt(rec.batch_rows)} requests`],
      [`Regret (${rec.regret_unit === "s" ? "s" : "tokens"})`, fmt(rec.regret, rec.regret_unit === "s" ? 4 : 2)],
      ["Sampling", samplingText(rec)],
      ["Finish reason", rec.finish_reason ?? (rec.status === "running" ? "—" : "none")],
      ["Elapsed", fmtDuration(rec.elapsed_s)],
    ];
    for (const [k, v] of rows) meta.append(h("div", {}, h("dt", { text: k }), h("dd", { text: v })));

    const weights = $("#d-weights", d);
    clear(weights);
    const entries = Object.entries(rec.weights || {}).sort((a, b) => b[1] - a[1]);
    if (entries.length === 0) weights.append(h("p", { class: "muted", text: "No learner weights (fixed or plain policy)." }));
    for (const [name, w] of entries) {
      const fill = h("span", { class: "bar-fill" });
      fill.style.width = `${Math.max(0, Math.min(1, w)) * 100}%`;
      fill.style.background = colorFor(name);
      weights.append(
        h("div", { class: "bar-row" },
          h("span", { class: "bar-label", title: name, text: name }),
          h("span", { class: "bar-track" }, fill),
          h("span", { class: "bar-value", text: fmt(w, 3) })),
      );
    }

    const choices = $("#d-choices", d);
    clear(choices);
    const labels = stepLabels(rec);
    for (const [name, n] of countChoices(labels)) {
      const swatch = h("span", { class: "swatch" });
      swatch.style.background = colorFor(name);
      choices.append(h("span", { class: "chip" }, swatch, h("span", { text: `${labelOf(name)} × ${n}` })));
    }
    strip($("#d-strip", d), labels);

    lineChart($("#d-regret", d), {
      series: [{ label: "regret", color: "#e11d48", points: rec.regret_curve }],
      xFormat: (x) => String(Math.round(x)),
      yMin: 0,
      zeroLine: true,
      empty: "no completed feedback window yet",
    });
    roundBars($("#d-accepted", d), {
      values: rec.committed_per_round,
      colors: labels.map(colorFor),
    });
    const error = $("#d-error", d);
    error.hidden = !rec.error;
    setText(error, rec.error ? `Error: ${rec.error}` : "");
  }
}

function createRow(id) {
  const cells = {
    id: h("td", { class: "mono id-cell", title: id, text: id }),
    status: h("span", { class: "badge" }),
    policy: h("td", { class: "policy" }),
    strip: h("canvas", { class: "strip" }),
    spark: h("canvas", { class: "spark" }),
    rounds: h("td", { class: "num" }),
    tokens: h("td", { class: "num" }),
    mat: h("td", { class: "num strong" }),
    tps: h("td", { class: "num" }),
    regret: h("td", { class: "num" }),
  };
  const tr = h("tr", { tabindex: 0, dataset: { id } },
    cells.id,
    h("td", {}, cells.status),
    cells.policy,
    h("td", { class: "strip-cell" }, cells.strip),
    h("td", { class: "spark-cell" }, cells.spark),
    cells.rounds, cells.tokens, cells.mat, cells.tps, cells.regret);
  return { tr, cells };
}

// How the request's learner started: fresh (the default), or continuing its session's learner.
function learnerStart(warm) {
  if (warm == null) return "—";
  if (warm === 0) return "fresh";
  return `session, after ${warm} earlier request${warm === 1 ? "" : "s"}`;
}

function setBadge(el, status) {
  setText(el, STATUS_LABEL[status] || status);
  el.className = `badge status-${status}`;
}

const PLAIN_TITLE = "Rounds decoded without drafting (the learner chose plain decoding, or no drafter had a guess)";

function legendChip(name, cls, title) {
  const swatch = h("span", { class: "swatch" });
  swatch.style.background = colorFor(name);
  return h("span", { class: cls, title }, swatch, h("span", { text: labelOf(name) }));
}

// The drafter of each round, or PLAIN_ROUND for a plain round.
function stepLabels(rec) {
  return rec.drafter_per_round.map((d, i) => (rec.plain_per_round[i] ? PLAIN_ROUND : d));
}

function labelOf(name) {
  if (name === PLAIN_ROUND) return "plain round";
  return name ?? "none";
}

// What the request sampled with (the server's defaults fill what the request left out).
function samplingText(rec) {
  if (rec.temperature == null) return "—";
  if (rec.temperature === 0) return "greedy";
  const parts = [`temperature ${fmt(rec.temperature, 2)}`];
  if (rec.top_p != null && rec.top_p < 1) parts.push(`top_p ${fmt(rec.top_p, 2)}`);
  if (rec.top_k) parts.push(`top_k ${fmtInt(rec.top_k)}`);
  return parts.join(", ");
}

// All target passes after prefill; split when some of them ran plain.
function roundsText(rec) {
  if (!rec.plain_rounds) return fmtInt(rec.rounds);
  const spec = rec.rounds - rec.plain_rounds;
  return `${fmtInt(rec.rounds)} (${fmtInt(spec)} speculative, ${fmtInt(rec.plain_rounds)} plain)`;
}

function countChoices(choices) {
  const counts = new Map();
  for (const c of choices) counts.set(c, (counts.get(c) || 0) + 1);
  return Array.from(counts.entries()).sort((a, b) => b[1] - a[1]);
}

function updateRow(row, rec, labels) {
  const c = row.cells;
  setBadge(c.status, rec.status);
  row.tr.dataset.status = rec.status;
  setText(c.policy, rec.policy ?? "—");
  setText(c.rounds, fmtInt(rec.rounds));
  setText(c.tokens, fmtInt(rec.completion_tokens));
  setText(c.mat, fmt(rec.mean_acceptance_length));
  setText(c.tps, fmt(rec.tokens_per_s, 1));
  setText(c.regret, rec.regret == null ? "—" : `${fmt(rec.regret, rec.regret_unit === "s" ? 3 : 1)}${rec.regret_unit === "s" ? " s" : ""}`);
  const summary = countChoices(labels)
    .map(([name, n]) => `${labelOf(name)} ×${n}`)
    .join(", ");
  c.strip.title = summary ? `Drafter per round: ${summary}` : "No rounds yet";
  c.strip.dataset.choices = summary;
  c.spark.title = `Accepted draft tokens per round (last: ${rec.accepted_per_round.at(-1) ?? "—"})`;
}

function exampleCode() {
  const base = new URL("../v1", window.location.href).href;
  return [
    "from openai import OpenAI",
    "",
    `client = OpenAI(base_url="${base}", api_key="YOUR_API_KEY")`,
    "stream = client.chat.completions.create(",
    '    model=client.models.list().data[0].id,',
    '    messages=[{"role": "user", "content": "Explain speculative decoding."}],',
    "    max_tokens=200, stream=True,",
    ")",
    "for chunk in stream:",
    "    if chunk.choices:",
    '        print(chunk.choices[0].delta.content or "", end="", flush=True)',
  ].join("\n");
}
