// Entry point: sign-in, tabs, the live stream and the overview poll.
//
// The admin key lives in sessionStorage (this tab only, gone when it closes) and is sent as a
// Bearer header. The page itself is static and holds no data; everything comes from
// `/admin/api/*`, which answers 401 without the key.

import { Api } from "./api.js";
import { LiveView } from "./live.js";
import { OverviewView } from "./overview.js";
import { PoolView } from "./pool.js";
import { $, $$, fmtInt, setText } from "./dom.js";

const KEY_STORAGE = "hedgespec.adminKey";
const OVERVIEW_POLL_MS = 2000;
const TABS = ["live", "overview", "pool"];

const state = {
  api: null,
  live: null,
  overview: null,
  pool: null,
  streamAbort: null,
  overviewTimer: null,
  tab: "live",
  generation: 0, // bumps on sign-out, so loops of an old session stop
};

// Exposed for operators' debugging and for the browser tests (render throttling, XSS checks).
window.__hedgespecAdmin = {
  get renders() {
    return state.live ? state.live.renders : 0;
  },
  get maxRenderMs() {
    return state.live ? state.live.maxRenderMs : 0;
  },
  get model() {
    return state.live ? state.live.model : null;
  },
  ingest(events) {
    state.live.onEvents(events);
  },
};

// ---- sign-in --------------------------------------------------------------------------------

async function checkKey(key) {
  const api = new Api(key);
  return api.get("api/overview"); // throws ApiError with the server's message on 401/403
}

function showSignIn(message = "") {
  $("#app").hidden = true;
  $("#signin").hidden = false;
  setText($("#signin-error"), message);
  $("#signin-error").hidden = !message;
  $("#admin-key").focus();
}

async function signIn(event) {
  event.preventDefault();
  const input = $("#admin-key");
  const button = $("#signin-form button[type=submit]");
  const key = input.value;
  if (!key) return;
  button.disabled = true;
  try {
    const overview = await checkKey(key);
    sessionStorage.setItem(KEY_STORAGE, key);
    input.value = "";
    start(key, overview);
  } catch (err) {
    const text = err.status === 401 ? "Incorrect admin key." : err.message;
    showSignIn(text);
  } finally {
    button.disabled = false;
  }
}

function signOut(message = "") {
  state.generation += 1;
  sessionStorage.removeItem(KEY_STORAGE);
  if (state.streamAbort) state.streamAbort.abort();
  clearTimeout(state.overviewTimer);
  if (state.pool) state.pool.hide();
  state.api = null;
  showSignIn(message);
}

// ---- the signed-in app -------------------------------------------------------------------------

function start(key, overview) {
  state.generation += 1;
  const generation = state.generation;
  state.api = new Api(key, {
    onUnauthorized: () => {
      if (generation === state.generation) signOut("The admin key was rejected; sign in again.");
    },
  });
  $("#signin").hidden = true;
  $("#app").hidden = false;
  if (!state.live) {
    state.live = new LiveView($("#tab-live"));
    state.overview = new OverviewView($("#tab-overview"));
    state.pool = new PoolView($("#tab-pool"), state.api);
  }
  state.pool.api = state.api;
  if (overview) applyOverview(overview);
  selectTab(TABS.includes(location.hash.slice(1)) ? location.hash.slice(1) : "live");
  runStream(generation);
  pollOverview(generation);
}

function selectTab(tab) {
  state.tab = tab;
  for (const button of $$(".tabs [data-tab]")) {
    button.setAttribute("aria-selected", String(button.dataset.tab === tab));
  }
  for (const name of TABS) $(`#tab-${name}`).hidden = name !== tab;
  if (location.hash.slice(1) !== tab) history.replaceState(null, "", `#${tab}`);
  if (tab === "pool") state.pool.show();
  else state.pool.hide();
  if (tab === "live") state.live.refresh();
  if (tab === "overview") state.overview.render();
}

function setConnection(status, detail = "") {
  const el = $("#conn");
  el.className = `conn conn-${status}`;
  setText(el, { live: "Live", connecting: "Connecting…", retrying: "Reconnecting…" }[status]);
  el.title = detail;
}

async function runStream(generation) {
  let delay = 500;
  while (generation === state.generation) {
    const controller = new AbortController();
    state.streamAbort = controller;
    setConnection("connecting");
    try {
      await state.api.stream("api/live", {
        signal: controller.signal,
        onOpen: () => {
          delay = 500;
          setConnection("live");
        },
        onEvent: (name, data) => {
          if (name === "snapshot") state.live.onSnapshot(data);
          else if (name === "events") state.live.onEvents(data);
        },
      });
    } catch (err) {
      if (generation !== state.generation || err.status === 401) return;
      setConnection("retrying", err.message);
    }
    if (generation !== state.generation) return;
    setConnection("retrying", "the stream ended");
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 10000);
  }
}

async function pollOverview(generation) {
  if (generation !== state.generation) return;
  try {
    applyOverview(await state.api.get("api/overview"));
  } catch {
    // shown by the connection indicator; the next poll retries
  }
  if (generation === state.generation) {
    state.overviewTimer = setTimeout(() => pollOverview(generation), OVERVIEW_POLL_MS);
  }
}

function applyOverview(data) {
  setText($("#hdr-model"), data.model ?? "engine loading…");
  setText($("#hdr-inflight"), fmtInt(data.load.in_flight));
  setText($("#hdr-queued"), fmtInt(data.load.queued));
  state.overview.update(data);
}

// ---- boot ---------------------------------------------------------------------------------------

function boot() {
  $("#signin-form").addEventListener("submit", signIn);
  $("#signout").addEventListener("click", () => signOut());
  for (const button of $$(".tabs [data-tab]")) {
    button.addEventListener("click", () => selectTab(button.dataset.tab));
  }
  window.addEventListener("hashchange", () => {
    const tab = location.hash.slice(1);
    if (state.api && TABS.includes(tab) && tab !== state.tab) selectTab(tab);
  });
  const saved = sessionStorage.getItem(KEY_STORAGE);
  if (!saved) {
    showSignIn();
    return;
  }
  checkKey(saved)
    .then((overview) => start(saved, overview))
    .catch((err) => {
      sessionStorage.removeItem(KEY_STORAGE);
      showSignIn(err.status === 401 ? "" : err.message);
    });
}

boot();
