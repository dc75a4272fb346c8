// DOM helpers. Every piece of server or user data reaches the page through `textContent` or
// a text node (never innerHTML), so drafter names, request ids and error messages stay text.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value == null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "text") el.textContent = String(value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2), value);
    } else if (!key.startsWith("on")) el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export function setText(el, value) {
  const text = value == null ? "" : String(value);
  if (el.textContent !== text) el.textContent = text;
}

export const $ = (selector, root = document) => root.querySelector(selector);
export const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

// ---- formatting -------------------------------------------------------------------------------

const DASH = "—";

export function fmt(value, digits = 2) {
  if (value == null || Number.isNaN(value)) return DASH;
  const text = Number(value).toFixed(digits);
  return /^-0\.?0*$/.test(text) ? text.slice(1) : text; // "-0.0" reads as a bug
}

export function fmtInt(value) {
  if (value == null || Number.isNaN(value)) return DASH;
  return Math.round(value).toLocaleString("en-US");
}

export function fmtBytes(n) {
  if (n == null) return DASH;
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  let x = Number(n);
  while (x >= 1000 && i < units.length - 1) {
    x /= 1000;
    i += 1;
  }
  return `${x.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

export function fmtDuration(seconds) {
  if (seconds == null) return DASH;
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const m = Math.floor(seconds / 60);
  return `${m} min ${Math.round(seconds - 60 * m)} s`;
}

export function fmtClock(ts) {
  if (ts == null) return DASH;
  const date = typeof ts === "number" ? new Date(ts * 1000) : new Date(ts);
  if (Number.isNaN(date.getTime())) return DASH;
  return date.toLocaleTimeString("en-GB", { hour12: false });
}

export function fmtDateTime(ts) {
  const date = new Date(ts);
  if (Number.isNaN(date.getTime())) return DASH;
  return `${date.toLocaleDateString("en-CA")} ${date.toLocaleTimeString("en-GB", { hour12: false })}`;
}
