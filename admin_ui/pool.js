// The Pool tab: the drafter registry through the admin pool API (gateway/http/routes/admin.py):
// GET/POST /admin/api/drafters, PATCH/DELETE /admin/api/drafters/{id},
// POST /admin/api/drafters/{id}/retry and GET /admin/api/events (the audit log).
//
// Rows are keyed by drafter id and updated in place, so polling every second while a download
// runs never re-creates the buttons under the operator's pointer.
//
// A drafter's kind is `eagle3` (weights from the Hub or a local directory) or a model-free kind
// (`ngram`, `suffix`, `grammar`: no weights, only parameters); the Kind column names it with the colour
// its rounds are drawn in on the Live and Overview tabs (charts.js).

import { ApiError } from "./api.js";
import { colorFor, setDrafterKinds } from "./charts.js";
import { $, clear, fmtBytes, fmtDateTime, h, setText } from "./dom.js";

const BUSY = new Set(["pending", "downloading", "validating"]);
const FAST_POLL_MS = 1000; // while something downloads or validates
const SLOW_POLL_MS = 5000;
const CONFIRM_MS = 4000;

export class PoolView {
  constructor(root, api) {
    this.root = root;
    this.api = api;
    this.rows = new Map();
    this.timer = null;
    this.active = false;
    this.available = true;
    this.form = $("#pool-form", root);
    this.tbody = $("#pool-table tbody", root);
    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.add();
    });
    for (const radio of this.form.querySelectorAll("input[name=source]")) {
      radio.addEventListener("change", () => this.syncSource());
    }
    this.syncSource();
  }

  show() {
    this.active = true;
    this.poll();
  }

  hide() {
    this.active = false;
    clearTimeout(this.timer);
  }

  async poll() {
    clearTimeout(this.timer);
    if (!this.active) return;
    let busy = false;
    try {
      busy = await this.refresh();
    } finally {
      if (this.active) this.timer = setTimeout(() => this.poll(), busy ? FAST_POLL_MS : SLOW_POLL_MS);
    }
  }

  syncSource() {
    const source = this.form.elements.source.value;
    for (const el of this.form.querySelectorAll("[data-source]")) {
      const on = el.dataset.source === source;
      el.hidden = !on;
      for (const input of el.querySelectorAll("input, select")) input.disabled = !on;
    }
    // A model-free drafter is named after its id (or kind) when no name is given.
    this.form.elements.name.required = source !== "none";
  }

  // ---- data

  async refresh() {
    let body;
    try {
      body = await this.api.get("api/drafters");
    } catch (err) {
      this.showUnavailable(err);
      return false;
    }
    this.available = true;
    $("#pool-unavailable", this.root).hidden = true;
    $("#pool-content", this.root).hidden = false;
    const drafters = body.data || [];
    setDrafterKinds(Object.fromEntries(drafters.map((d) => [d.id, d.kind ?? "eagle3"])));
    this.renderRows(drafters);
    setText($("#pool-count", this.root),
      `${drafters.length} drafter${drafters.length === 1 ? "" : "s"} · pool version ${body.pool_version ?? "—"}`);
    this.refreshAudit();
    return drafters.some((d) => BUSY.has(d.status));
  }

  showUnavailable(err) {
    const box = $("#pool-unavailable", this.root);
    if (err instanceof ApiError && (err.status === 404 || err.status === 405)) {
      this.available = false;
      $("#pool-content", this.root).hidden = true;
      setText(box, "This gateway does not serve the pool API (/admin/api/drafters).");
    } else {
      setText(box, `Could not load the pool: ${err.message}`);
    }
    box.hidden = false;
  }

  async refreshAudit() {
    const list = $("#pool-audit", this.root);
    let body;
    try {
      body = await this.api.get("api/events?limit=15");
    } catch {
      list.parentElement.hidden = true;
      return;
    }
    list.parentElement.hidden = false;
    clear(list);
    const events = (body && body.data) || [];
    if (events.length === 0) list.append(h("li", { class: "muted", text: "No changes yet." }));
    for (const ev of events.slice(0, 15)) {
      const change = ev.detail && ev.detail.to ? `${ev.detail.from ?? "?"} → ${ev.detail.to}` : "";
      list.append(
        h("li", {},
          h("div", {},
            h("span", { class: "audit-action", text: ev.action }), " ",
            h("span", { class: "mono", text: ev.target ?? "" }), " ",
            h("span", { class: "audit-change", text: change })),
          h("div", { class: "audit-meta", text: `${fmtDateTime(ev.at)}${ev.actor ? ` · ${ev.actor}` : ""}` })),
      );
    }
  }

  // ---- table

  renderRows(drafters) {
    const seen = new Set();
    let cursor = this.tbody.firstChild;
    for (const d of drafters) {
      seen.add(d.id);
      let row = this.rows.get(d.id);
      if (!row) {
        row = this.createRow(d.id);
        this.rows.set(d.id, row);
      }
      updateRow(row, d);
      if (row.tr === cursor) cursor = cursor.nextSibling;
      else this.tbody.insertBefore(row.tr, cursor);
    }
    for (const [id, row] of this.rows) {
      if (!seen.has(id)) {
        row.tr.remove();
        this.rows.delete(id);
      }
    }
    $("#pool-empty", this.root).hidden = drafters.length > 0;
  }

  createRow(id) {
    const c = {
      name: h("div", { class: "drafter-name" }),
      id: h("div", { class: "mono muted small" }),
      kind: h("span", { class: "kind-tag" }),
      swatch: h("span", { class: "swatch" }),
      source: h("div", { class: "mono small source" }),
      domain: h("td", {}),
      status: h("span", { class: "badge" }),
      fill: h("span", { class: "progress-fill" }),
      bytes: h("div", { class: "small muted" }),
      error: h("div", { class: "error-text small" }),
      toggle: h("button", { class: "btn small", type: "button", "data-action": "toggle" }),
      retry: h("button", { class: "btn small", type: "button", "data-action": "retry", text: "Retry" }),
      remove: h("button", { class: "btn small danger-outline", type: "button", "data-action": "remove", text: "Remove" }),
    };
    c.progress = h("div", { class: "progress" }, c.fill);
    const tr = h("tr", { dataset: { id } },
      h("td", {}, c.name, c.id),
      h("td", { class: "kind-cell" }, c.swatch, c.kind),
      h("td", {}, c.source),
      c.domain,
      h("td", {}, c.status),
      h("td", { class: "progress-cell" }, c.progress, c.bytes, c.error),
      h("td", { class: "actions" }, c.toggle, c.retry, c.remove));
    c.toggle.addEventListener("click", () => this.toggle(id, c.toggle));
    c.retry.addEventListener("click", () => this.act(c.retry, () => this.api.post(`api/drafters/${encodeURIComponent(id)}/retry`)));
    c.remove.addEventListener("click", () => this.remove(id, c.remove));
    return { tr, cells: c, drafter: null };
  }

  // ---- actions

  async act(button, call) {
    button.disabled = true;
    this.message(null);
    try {
      await call();
    } catch (err) {
      this.message(err.message, "error");
    } finally {
      button.disabled = false;
      this.poll();
    }
  }

  toggle(id, button) {
    const row = this.rows.get(id);
    const enabled = row && row.drafter ? isEnabled(row.drafter) : true;
    this.act(button, () => this.api.patch(`api/drafters/${encodeURIComponent(id)}`, { enabled: !enabled }));
  }

  // Two clicks: the first arms the button for a few seconds (no modal dialog to dismiss).
  remove(id, button) {
    if (button.dataset.armed !== "1") {
      button.dataset.armed = "1";
      button.textContent = "Confirm remove";
      button.classList.add("danger");
      setTimeout(() => {
        if (button.isConnected) {
          button.dataset.armed = "";
          button.textContent = "Remove";
          button.classList.remove("danger");
        }
      }, CONFIRM_MS);
      return;
    }
    button.dataset.armed = "";
    this.act(button, async () => {
      await this.api.delete(`api/drafters/${encodeURIComponent(id)}`);
      this.message(`Removed ${id}.`, "ok");
    });
  }

  async add() {
    const f = this.form.elements;
    const source = f.source.value;
    const optional = (input) => input.value.trim() || undefined;
    const body = source === "none"
      ? { name: optional(f.name), kind: f.kind.value, params: parseParams(f.params.value) }
      : { name: f.name.value.trim(), source };
    body.id = optional(f.id);
    body.domain = optional(f.domain);
    if (source === "none") {
      // Model-free: no source fields; the server checks the kind and its parameters.
    } else if (source === "hf") {
      body.repo_id = f.repo_id.value.trim();
      body.revision = optional(f.revision);
      body.subfolder = optional(f.subfolder);
    } else {
      body.path = f.path.value.trim();
    }
    const submit = $("button[type=submit]", this.form);
    submit.disabled = true;
    this.message(null);
    try {
      const created = await this.api.post("api/drafters", JSON.parse(JSON.stringify(body)));
      this.message(`Added ${created?.name ?? body.name ?? body.id ?? body.kind}: ${created?.status ?? "pending"}.`, "ok");
      this.form.reset();
      this.syncSource();
    } catch (err) {
      this.message(err.message, "error");
    } finally {
      submit.disabled = false;
      this.poll();
    }
  }

  message(text, kind = "ok") {
    const box = $("#pool-message", this.root);
    box.hidden = !text;
    box.className = `notice ${kind}`;
    setText(box, text || "");
  }
}

// "max_n=4, max_depth=6" -> {max_n: 4, max_depth: 6}; a value that is not an integer is sent
// as written, so the server's error names it.
export function parseParams(text) {
  const params = {};
  for (const item of text.split(/[\s,]+/).filter(Boolean)) {
    const [name, ...rest] = item.split("=");
    const value = rest.join("=");
    params[name] = /^-?\d+$/.test(value) ? Number(value) : value;
  }
  return params;
}

function isEnabled(d) {
  if (typeof d.enabled === "boolean") return d.enabled;
  return d.status !== "disabled";
}

function kindOfRow(d) {
  return d.kind ?? "eagle3";
}

function sourceText(d) {
  if (kindOfRow(d) !== "eagle3") {
    const params = Object.entries(d.params || {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return params.map(([k, v]) => `${k}=${v}`).join(" ") || "defaults";
  }
  if (d.source === "hf") {
    let text = `${d.repo_id ?? "?"}@${d.revision ?? "main"}`;
    if (d.subfolder) text += ` / ${d.subfolder}`;
    return text;
  }
  return d.local_path ?? d.path ?? "";
}

function updateRow(row, d) {
  row.drafter = d;
  const c = row.cells;
  row.tr.dataset.status = d.status;
  setText(c.name, d.name ?? d.id);
  setText(c.id, d.id);
  const kind = kindOfRow(d);
  row.tr.dataset.kind = kind;
  setText(c.kind, kind);
  c.swatch.style.background = colorFor(d.id);
  const origin = kind !== "eagle3" ? "model-free" : d.source === "hf" ? "HF" : "local";
  setText(c.source, `${origin} · ${sourceText(d)}`);
  c.source.title = d.commit_sha ? `commit ${d.commit_sha}` : sourceText(d);
  setText(c.domain, d.domain ?? "—");
  setText(c.status, d.status);
  c.status.className = `badge status-${d.status}`;

  const busy = BUSY.has(d.status);
  const fraction = d.progress ?? (d.bytes_total ? d.bytes_done / d.bytes_total : null);
  c.progress.hidden = !busy && d.status !== "ready";
  c.progress.classList.toggle("indeterminate", busy && fraction == null);
  c.progress.classList.toggle("done", d.status === "ready");
  c.fill.style.width = `${Math.round((d.status === "ready" ? 1 : fraction ?? 0) * 100)}%`;
  let bytes = "";
  if (d.bytes_total) bytes = `${fmtBytes(d.bytes_done)} / ${fmtBytes(d.bytes_total)}`;
  else if (d.bytes_done) bytes = fmtBytes(d.bytes_done);
  if (d.status === "validating") bytes = bytes ? `${bytes} · validating` : "validating";
  setText(c.bytes, bytes);
  c.error.hidden = !d.error;
  setText(c.error, d.error || "");

  const enabled = isEnabled(d);
  setText(c.toggle, enabled ? "Disable" : "Enable");
  c.retry.hidden = d.status !== "failed";
}
