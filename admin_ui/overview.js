// The Overview tab: the server's `/admin/api/overview` snapshot (polled by app.js) drawn as
// tiles, time-series charts, usage bars and a per-drafter table.

import { colorFor, kindOf, lineChart, setDrafterKinds } from "./charts.js";
import { $, clear, fmt, fmtDuration, fmtInt, h, setText } from "./dom.js";

function relative(x) {
  return Math.abs(x) < 0.5 ? "now" : `${Math.round(x)} s`;
}

// MAT counts speculative rounds only; say how many rounds were plain.
function plainShare(recent) {
  const plain = recent.plain_rounds || 0;
  if (!plain) return "";
  const share = (100 * plain) / (plain + (recent.rounds || 0));
  return ` · ${fmt(share, 0)} % of rounds plain`;
}

export class OverviewView {
  constructor(root) {
    this.root = root;
    this.data = null;
  }

  update(data) {
    this.data = data;
    setDrafterKinds(data.drafter_kinds);
    if (!this.root.hidden) this.render();
  }

  render() {
    const data = this.data;
    if (!data) return;
    const r = this.root;
    setText($("#ov-model", r), data.model ?? "loading…");
    setText($("#ov-ready", r), data.ready ? "ready" : "not ready");
    $("#ov-ready", r).className = `badge ${data.ready ? "status-finished" : "status-failed"}`;
    setText($("#ov-uptime", r), `up ${fmtDuration(data.uptime_s)}`);
    setText($("#ov-inflight", r), fmtInt(data.load.in_flight));
    setText($("#ov-running", r), `${fmtInt(data.load.running)} running of ${fmtInt(data.load.max_running)}`);
    setText($("#ov-queued", r), fmtInt(data.load.queued));
    setText($("#ov-queue-cap", r), `queue capacity ${fmtInt(data.load.max_queue)}`);
    setText($("#ov-mat", r), fmt(data.recent.mat));
    setText($("#ov-mat-all", r), `all time ${fmt(data.totals.mat)}${plainShare(data.recent)}`);
    setText($("#ov-tps", r), fmt(data.recent.tokens_per_s, 1));
    setText($("#ov-tokens", r), `${fmtInt(data.totals.tokens)} tokens served`);
    setText($("#ov-requests", r), fmtInt(data.totals.requests_finished));
    setText($("#ov-failed", r),
      `${fmtInt(data.totals.requests_failed)} failed · ${fmtInt(data.totals.events_dropped)} events dropped`);

    const s = data.series;
    const xs = s.t.map((t) => t - data.ts);
    const pts = (ys) => xs.map((x, i) => [x, ys[i]]);
    lineChart($("#ov-chart-mat", r), {
      series: [{ label: "MAT", color: "#2563eb", points: pts(s.mat) }],
      xFormat: relative,
      yMin: 1,
      empty: "no rounds in the last minutes",
    });
    lineChart($("#ov-chart-tps", r), {
      series: [{ label: "tokens/s", color: "#10b981", points: pts(s.tokens_per_s) }],
      xFormat: relative,
      yMin: 0,
    });
    lineChart($("#ov-chart-queue", r), {
      series: [
        { label: "in flight", color: "#8b5cf6", points: pts(s.in_flight) },
        { label: "queued", color: "#f59e0b", points: pts(s.queue_depth) },
      ],
      xFormat: relative,
      yMin: 0,
      step: true,
    });

    this.renderUsage(data.per_drafter);
    this.renderTable(data.per_drafter);
  }

  renderUsage(perDrafter) {
    const box = $("#ov-usage", this.root);
    clear(box);
    if (perDrafter.length === 0) {
      box.append(h("p", { class: "muted", text: "No speculative rounds yet." }));
      return;
    }
    for (const d of perDrafter) {
      const swatch = h("span", { class: "swatch" });
      swatch.style.background = colorFor(d.id);
      const all = h("span", { class: "bar-fill" });
      all.style.width = `${(d.share || 0) * 100}%`;
      all.style.background = colorFor(d.id);
      const recent = h("span", { class: "bar-fill recent" });
      recent.style.width = `${(d.recent_share || 0) * 100}%`;
      recent.style.background = colorFor(d.id);
      box.append(
        h("div", { class: "usage-row" },
          h("span", { class: "bar-label", title: d.id }, swatch, h("span", { text: d.id })),
          h("div", { class: "usage-bars" },
            h("span", { class: "bar-track", title: "all time" }, all),
            h("span", { class: "bar-track thin", title: "last minute" }, recent)),
          h("span", { class: "bar-value", text: `${fmt((d.share || 0) * 100, 1)} %` })),
      );
    }
  }

  renderTable(perDrafter) {
    const tbody = $("#ov-drafters tbody", this.root);
    clear(tbody);
    for (const d of perDrafter) {
      const swatch = h("span", { class: "swatch" });
      swatch.style.background = colorFor(d.id);
      const kind = kindOf(d.id);
      tbody.append(
        h("tr", { dataset: { id: d.id, kind } },
          h("td", {}, swatch, h("span", { text: d.id }),
            kind === "eagle3" ? null : h("span", { class: "kind-tag", text: kind })),
          h("td", { class: "num", text: fmtInt(d.rounds) }),
          h("td", { class: "num", text: `${fmt((d.share || 0) * 100, 1)} %` }),
          h("td", { class: "num", text: fmtInt(d.recent_rounds) }),
          h("td", { class: "num", text: fmt(d.mean_accepted) }),
          h("td", { class: "num strong", text: fmt(d.mat) })),
      );
    }
    $("#ov-drafters-empty", this.root).hidden = perDrafter.length > 0;
  }
}
