// HTTP to the gateway's admin API. Paths are relative to the page (`/admin/`), so the page also
// works behind a reverse proxy that mounts the gateway under a prefix.
//
// The admin key is sent as `Authorization: Bearer` on every call, the live stream included:
// the stream is read with fetch() + ReadableStream rather than EventSource, because
// EventSource cannot send headers and a key in a URL would end up in logs and history.

export class ApiError extends Error {
  constructor(status, message, code = null) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// A readable sentence from an error body: the OpenAI shape `{error: {message}}` that the gateway
// uses, or FastAPI's `{detail}` (a string, or a list of validation problems).
export function describeError(body) {
  if (!body || typeof body !== "object") return null;
  const err = body.error;
  if (err && typeof err === "object" && err.message) return String(err.message);
  if (typeof err === "string") return err;
  const detail = body.detail;
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail
      .map((d) => {
        const where = (d.loc || []).filter((p) => p !== "body").join(".");
        return where ? `${where}: ${d.msg}` : String(d.msg);
      })
      .join("; ");
  }
  if (detail && typeof detail === "object" && detail.message) return String(detail.message);
  return null;
}

export async function errorFrom(response) {
  let message = `HTTP ${response.status} ${response.statusText}`.trim();
  let code = null;
  try {
    const body = await response.json();
    message = describeError(body) || message;
    code = body?.error?.code ?? null;
  } catch {
    // not JSON (a proxy's HTML error page): keep the status line
  }
  return new ApiError(response.status, message, code);
}

export class Api {
  constructor(key, { onUnauthorized } = {}) {
    this.key = key;
    this.onUnauthorized = onUnauthorized || (() => {});
  }

  headers(extra = {}) {
    return { Authorization: `Bearer ${this.key}`, ...extra };
  }

  async request(method, path, body) {
    let response;
    try {
      response = await fetch(path, {
        method,
        headers: this.headers(body === undefined ? {} : { "Content-Type": "application/json" }),
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: "no-store",
      });
    } catch (err) {
      throw new ApiError(0, `The gateway is unreachable (${err.message}).`);
    }
    if (!response.ok) {
      const error = await errorFrom(response);
      if (response.status === 401) this.onUnauthorized(error);
      throw error;
    }
    if (response.status === 204) return null;
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }

  get(path) {
    return this.request("GET", path);
  }
  post(path, body = {}) {
    return this.request("POST", path, body);
  }
  patch(path, body) {
    return this.request("PATCH", path, body);
  }
  delete(path) {
    return this.request("DELETE", path);
  }

  // Read a server-sent event stream until it ends or `signal` aborts; calls onEvent(name, data)
  // per event (data parsed as JSON). Comment lines (keep-alive pings) are skipped.
  async stream(path, { signal, onOpen, onEvent }) {
    const response = await fetch(path, {
      headers: this.headers({ Accept: "text/event-stream" }),
      cache: "no-store",
      signal,
    });
    if (!response.ok) {
      const error = await errorFrom(response);
      if (response.status === 401) this.onUnauthorized(error);
      throw error;
    }
    if (onOpen) onOpen();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      // JSON never carries a raw CR, so dropping them turns CRLF framing into LF framing.
      buffer += value.replace(/\r/g, "");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const parsed = parseBlock(block);
        if (parsed) onEvent(parsed.event, parsed.data);
      }
    }
  }
}

export function parseBlock(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
  }
  if (data.length === 0) return null;
  return { event, data: JSON.parse(data.join("\n")) };
}
