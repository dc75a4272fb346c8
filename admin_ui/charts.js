// Small <canvas> charts drawn by hand: no library, nothing to vendor, and full control over
// cost (each call redraws one canvas; the caller decides when, at most a few times a second).

// ---- drafter colours ----------------------------------------------------------------------------

// Well-separated hues; a drafter keeps its colour for the whole session.
const PALETTE = [
  "#2563eb", "#f59e0b", "#10b981", "#e11d48", "#8b5cf6", "#0891b2",
  "#db2777", "#65a30d", "#ea580c", "#4f46e5", "#0d9488", "#a16207",
];
const NONE_COLOR = "#9ca3af";
// Model-free drafters (no weights: prompt lookup, a suffix cache, grammar fast-forward) are drawn in one colour per
// kind, dark and outside the palette, so a strip tells them from the EAGLE-3 drafters at a
// glance; every drafter of a kind shares it (their ids say which one).
export const KIND_COLORS = { ngram: "#111827", suffix: "#7c2d12", grammar: "#14532d" };
const OTHER_KIND_COLOR = "#475569"; // a model-free kind this page does not know
const kinds = new Map(); // drafter id -> kind, from the server ("eagle3" when absent)
// A plain round (nothing drafted): no drafter, and not a drafter's id (a registry id
// could be any string, so the marker is a symbol no id can equal).
export const PLAIN_ROUND = Symbol("plain round");
const PLAIN_COLOR = "#d6dae1";
const assigned = new Map();
const taken = new Set();

function hash(text) {
  let h = 0x811c9dc5; // FNV-1a: cheap and stable across reloads
  for (let i = 0; i < text.length; i += 1) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

// The server's `drafter_kinds` ({id: kind}): call before drawing, and before `assignColors`
// so model-free drafters take no palette slot.
export function setDrafterKinds(map) {
  for (const [id, kind] of Object.entries(map || {})) kinds.set(String(id), String(kind));
}

export function kindOf(id) {
  return kinds.get(String(id)) ?? "eagle3";
}

export function isModelFree(id) {
  return kindOf(id) !== "eagle3";
}

export function kindColor(kind) {
  return KIND_COLORS[kind] ?? OTHER_KIND_COLOR;
}

// Assign colours to a whole pool at once, in sorted order, so the same pool gets the same
// colours on every load; a slot already taken goes to the next free one.
export function assignColors(ids) {
  for (const id of [...ids].map(String).sort()) if (!isModelFree(id)) colorFor(id);
}

export function colorFor(id) {
  if (id == null) return NONE_COLOR;
  if (id === PLAIN_ROUND) return PLAIN_COLOR;
  const key = String(id);
  if (isModelFree(key)) return kindColor(kindOf(key));
  const known = assigned.get(key);
  if (known) return known;
  const start = hash(key) % PALETTE.length;
  let color = null;
  for (let i = 0; i < PALETTE.length; i += 1) {
    const candidate = PALETTE[(start + i) % PALETTE.length];
    if (!taken.has(candidate)) {
      color = candidate;
      break;
    }
  }
  if (color == null) color = `hsl(${hash(key) % 360} 60% 48%)`;
  taken.add(color);
  assigned.set(key, color);
  return color;
}

// ---- canvas basics --------------------------------------------------------------------------------

const FONT = "11px system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif";
const AXIS = "#6b7280";
const GRID = "#eef0f3";

// Size the backing store to the element's CSS size times the pixel ratio. Returns null while
// the canvas is not laid out (a hidden tab), so callers simply skip drawing. Reading the CSS
// size forces a layout; callers drawing many canvases measure once and pass `size` instead.
export function setup(canvas, size = null) {
  const w = size ? size.w : canvas.clientWidth;
  const hgt = size ? size.h : canvas.clientHeight;
  if (!w || !hgt) return null;
  const ratio = window.devicePixelRatio || 1;
  const bw = Math.round(w * ratio);
  const bh = Math.round(hgt * ratio);
  if (canvas.width !== bw || canvas.height !== bh) {
    canvas.width = bw;
    canvas.height = bh;
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, hgt);
  return { ctx, w, h: hgt };
}

export function niceTicks(min, max, count = 4) {
  if (!(max > min)) {
    const pad = Math.abs(min) > 0 ? Math.abs(min) * 0.5 : 1;
    return niceTicks(min - pad, max + pad, count);
  }
  const raw = (max - min) / count;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const norm = raw / mag;
  const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const lo = Math.floor(min / step) * step;
  const hi = Math.ceil(max / step) * step;
  const ticks = [];
  for (let v = lo; v <= hi + step / 2; v += step) ticks.push(Number(v.toFixed(10)));
  return ticks;
}

// Tick labels with just enough decimals to tell neighbouring ticks apart.
export function tickFormat(ticks) {
  const step = ticks.length > 1 ? Math.abs(ticks[1] - ticks[0]) : 1;
  const decimals = Math.min(4, Math.max(0, Math.ceil(-Math.log10(step))));
  return (value) => {
    if (Math.abs(value) >= 10000) return `${Math.round(value / 1000)}k`;
    return value.toFixed(decimals);
  };
}

function emptyMessage(ctx, w, h, text) {
  ctx.fillStyle = "#9ca3af";
  ctx.font = FONT;
  ctx.textAlign = "center";
  ctx.textBaseline = "middle";
  ctx.fillText(text, w / 2, h / 2);
}

// ---- line chart ---------------------------------------------------------------------------------

// series: [{label, color, points: [[x, y], ...]}]; y may be null (a gap).
export function lineChart(canvas, { series, xFormat = null, yFormat = null, yMin = null,
  yMax = null, empty = "no data yet", zeroLine = false, step = false }) {
  const area = setup(canvas);
  if (!area) return;
  const { ctx, w, h } = area;
  const points = series.flatMap((s) => s.points.filter((p) => p[1] != null));
  if (points.length === 0) {
    emptyMessage(ctx, w, h, empty);
    return;
  }
  let x0 = Math.min(...points.map((p) => p[0]));
  let x1 = Math.max(...points.map((p) => p[0]));
  if (x0 === x1) {
    x0 -= 1;
    x1 += 1;
  }
  let lo = Math.min(...points.map((p) => p[1]));
  let hi = Math.max(...points.map((p) => p[1]));
  if (yMin != null) lo = Math.min(lo, yMin);
  if (yMax != null) hi = Math.max(hi, yMax);
  const ticks = niceTicks(lo, hi, 4);
  lo = ticks[0];
  hi = ticks[ticks.length - 1];
  const yLabel = yFormat || tickFormat(ticks);
  const pad = { l: 40, r: 10, t: 8, b: 20 };
  const pw = w - pad.l - pad.r;
  const ph = h - pad.t - pad.b;
  const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * pw;
  const Y = (y) => pad.t + ph - ((y - lo) / (hi - lo)) * ph;

  ctx.font = FONT;
  ctx.lineWidth = 1;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const t of ticks) {
    ctx.strokeStyle = zeroLine && t === 0 ? "#cbd5e1" : GRID;
    ctx.beginPath();
    ctx.moveTo(pad.l, Math.round(Y(t)) + 0.5);
    ctx.lineTo(w - pad.r, Math.round(Y(t)) + 0.5);
    ctx.stroke();
    ctx.fillStyle = AXIS;
    ctx.fillText(yLabel(t), pad.l - 6, Y(t));
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "top";
  const xTicks = niceTicks(x0, x1, Math.max(2, Math.floor(pw / 90)));
  const xLabel = xFormat || tickFormat(xTicks);
  for (const t of xTicks) {
    if (t < x0 || t > x1) continue;
    ctx.fillStyle = AXIS;
    ctx.fillText(xLabel(t), X(t), h - pad.b + 5);
  }

  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.lineWidth = 1.75;
    ctx.lineJoin = "round";
    ctx.beginPath();
    let drawing = false;
    let prevY = null;
    for (const [x, y] of s.points) {
      if (y == null) {
        drawing = false;
        continue;
      }
      if (!drawing) ctx.moveTo(X(x), Y(y));
      else if (step) {
        ctx.lineTo(X(x), Y(prevY));
        ctx.lineTo(X(x), Y(y));
      } else ctx.lineTo(X(x), Y(y));
      drawing = true;
      prevY = y;
    }
    ctx.stroke();
    const last = s.points.filter((p) => p[1] != null).pop();
    if (last) {
      ctx.fillStyle = s.color;
      ctx.beginPath();
      ctx.arc(X(last[0]), Y(last[1]), 2.5, 0, Math.PI * 2);
      ctx.fill();
    }
  }
}

// ---- bars per round ---------------------------------------------------------------------------------

// One bar per round, height = value, coloured per round; with axes (detail view).
export function roundBars(canvas, { values, colors, yMax = null, empty = "no rounds yet" }) {
  const area = setup(canvas);
  if (!area) return;
  const { ctx, w, h } = area;
  if (values.length === 0) {
    emptyMessage(ctx, w, h, empty);
    return;
  }
  const top = Math.max(1, yMax ?? 0, ...values);
  const ticks = niceTicks(0, top, 4);
  const hi = ticks[ticks.length - 1];
  const yLabel = tickFormat(ticks);
  const pad = { l: 40, r: 10, t: 8, b: 20 };
  const pw = w - pad.l - pad.r;
  const ph = h - pad.t - pad.b;
  const Y = (y) => pad.t + ph - (y / hi) * ph;
  ctx.font = FONT;
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  ctx.lineWidth = 1;
  for (const t of ticks) {
    ctx.strokeStyle = GRID;
    ctx.beginPath();
    ctx.moveTo(pad.l, Math.round(Y(t)) + 0.5);
    ctx.lineTo(w - pad.r, Math.round(Y(t)) + 0.5);
    ctx.stroke();
    ctx.fillStyle = AXIS;
    ctx.fillText(yLabel(t), pad.l - 6, Y(t));
  }
  const n = values.length;
  const bw = pw / n;
  const gap = bw > 4 ? 1 : 0;
  for (let i = 0; i < n; i += 1) {
    ctx.fillStyle = colors[i];
    const y = Y(values[i]);
    ctx.fillRect(pad.l + i * bw, y, Math.max(bw - gap, 0.5), pad.t + ph - y);
  }
  ctx.fillStyle = AXIS;
  ctx.textAlign = "left";
  ctx.textBaseline = "top";
  ctx.fillText("round 1", pad.l, h - pad.b + 5);
  ctx.textAlign = "right";
  ctx.fillText(`round ${n}`, w - pad.r, h - pad.b + 5);
}

// ---- in-table miniatures ------------------------------------------------------------------------------

// The drafter chosen per round as a colour strip. Rounds are at least 2 px wide; when they do
// not fit, the most recent rounds are shown (the strip scrolls left as the request runs).
export function strip(canvas, drafters, size = null) {
  const area = setup(canvas, size);
  if (!area) return;
  const { ctx, w, h } = area;
  ctx.fillStyle = "#f3f4f6";
  ctx.fillRect(0, 0, w, h);
  const n = drafters.length;
  if (n === 0) return;
  const cell = Math.max(2, Math.min(10, w / n));
  const shown = Math.min(n, Math.floor(w / cell));
  const from = n - shown;
  for (let i = 0; i < shown; i += 1) {
    ctx.fillStyle = colorFor(drafters[from + i]);
    const x = i * cell;
    ctx.fillRect(x, 0, cell > 4 ? cell - 1 : cell, h);
  }
}

// Accepted length per round as a bar sparkline (same windowing as the strip).
export function sparkBars(canvas, values, size = null) {
  const area = setup(canvas, size);
  if (!area) return;
  const { ctx, w, h } = area;
  const n = values.length;
  if (n === 0) return;
  const top = Math.max(1, ...values);
  const cell = Math.max(2, Math.min(10, w / n));
  const shown = Math.min(n, Math.floor(w / cell));
  const from = n - shown;
  ctx.fillStyle = "#64748b";
  for (let i = 0; i < shown; i += 1) {
    const v = values[from + i];
    const bh = Math.max(1, (v / top) * (h - 1));
    ctx.fillRect(i * cell, h - bh, cell > 4 ? cell - 1 : cell, bh);
  }
}
