// The live view's data: request records folded from the gateway's event stream.
//
// A record has the shape of the server's `RequestTrace.public()` (gateway/live/traces.py),
// so a snapshot is loaded as is and later events are folded in the same way the server folds
// them. Nothing here touches the DOM: changed ids are collected in `dirty` for the renderer.
//
// The per-round lists hold plain rounds too: a plain round has no drafter,
// no accepted token and `plain_per_round` true (gateway/live/traces.py folds them the same way).

export const MAX_ROUNDS = 4096;

export class LiveModel {
  constructor(limit = 200) {
    this.limit = limit; // rows kept: all running requests first, then the newest finished
    this.records = new Map();
    this.dirty = new Set();
    this.structureDirty = true; // rows were added or removed
    this.drafters = []; // the served pool, from the snapshot
    this.droppedEvents = 0;
    this.eventsSeen = 0;
    this.seenDrafters = new Set(); // kept up to date here, so the legend never scans rounds
    this.lastBatchRows = null; // requests in the latest round's target pass (batched steps)
    this.sawPlainRounds = false; // some request ran a plain round (legend entry)
  }

  loadSnapshot(snapshot) {
    this.records.clear();
    this.dirty.clear();
    this.drafters = (snapshot.drafters || []).map(String);
    for (const raw of [...(snapshot.history || []), ...(snapshot.active || [])]) {
      const rec = normalise(raw);
      this.records.set(rec.request_id, rec);
      this.noteDrafters(rec.drafters);
      this.noteDrafters(rec.drafter_per_round);
      if (rec.plain_rounds > 0) this.sawPlainRounds = true;
    }
    this.enforceLimit();
    this.structureDirty = true;
    for (const id of this.records.keys()) this.dirty.add(id);
  }

  applyEvents(events) {
    for (const event of events) this.apply(event);
    this.enforceLimit();
  }

  apply(event) {
    this.eventsSeen += 1;
    switch (event.type) {
      case "request_started": {
        const rec = this.ensure(event.request_id, event.ts);
        rec.policy = event.policy ?? rec.policy;
        rec.drafters = (event.drafters || []).map(String);
        rec.prompt_tokens = event.prompt_tokens ?? null;
        rec.max_tokens = event.max_tokens ?? null;
        rec.temperature = event.temperature ?? null;
        rec.top_p = event.top_p ?? null;
        rec.top_k = event.top_k ?? null;
        rec.warm_start_requests = event.warm_start_requests ?? null;
        this.noteDrafters(rec.drafters);
        break;
      }
      case "round":
        applyRound(this.ensure(event.request_id, event.ts), event);
        if (Number.isInteger(event.batch_rows)) this.lastBatchRows = event.batch_rows;
        if (event.drafter != null) this.seenDrafters.add(String(event.drafter));
        if (event.plain) this.sawPlainRounds = true;
        break;
      case "request_finished":
        applyFinished(this.ensure(event.request_id, event.ts), event);
        break;
      case "dropped":
        this.droppedEvents += Number(event.count) || 0;
        return;
      default:
        return;
    }
    this.dirty.add(event.request_id);
  }

  ensure(id, ts) {
    let rec = this.records.get(id);
    if (!rec) {
      rec = normalise({ request_id: id, started_at: ts ?? Date.now() / 1000 });
      this.records.set(id, rec);
      this.structureDirty = true;
    }
    return rec;
  }

  // Newest first: running requests, then finished ones.
  ordered() {
    const all = Array.from(this.records.values());
    all.sort((a, b) => {
      const ra = a.status === "running" ? 1 : 0;
      const rb = b.status === "running" ? 1 : 0;
      return rb - ra || (b.started_at || 0) - (a.started_at || 0);
    });
    return all;
  }

  enforceLimit() {
    if (this.records.size <= this.limit) return;
    const ordered = this.ordered();
    for (const rec of ordered.slice(this.limit)) {
      this.records.delete(rec.request_id);
      this.dirty.delete(rec.request_id);
    }
    this.structureDirty = true;
  }

  counts() {
    let running = 0;
    for (const rec of this.records.values()) if (rec.status === "running") running += 1;
    return { running, finished: this.records.size - running };
  }

  noteDrafters(ids) {
    for (const d of ids) if (d != null) this.seenDrafters.add(String(d));
  }

  knownDrafters() {
    return Array.from(new Set([...this.drafters, ...this.seenDrafters]));
  }
}

function normalise(rec) {
  return {
    request_id: String(rec.request_id),
    policy: rec.policy ?? null,
    drafters: (rec.drafters || []).map(String),
    prompt_tokens: rec.prompt_tokens ?? null,
    max_tokens: rec.max_tokens ?? null,
    temperature: rec.temperature ?? null,
    top_p: rec.top_p ?? null,
    top_k: rec.top_k ?? null,
    warm_start_requests: rec.warm_start_requests ?? null,
    started_at: rec.started_at ?? null,
    finished_at: rec.finished_at ?? null,
    status: rec.status || "running",
    rounds: rec.rounds ?? 0,
    first_round: rec.first_round ?? 0,
    drafter_per_round: (rec.drafter_per_round || []).map((d) => (d == null ? null : String(d))),
    accepted_per_round: rec.accepted_per_round || [],
    committed_per_round: rec.committed_per_round || [],
    plain_per_round: rec.plain_per_round || [],
    plain_rounds: rec.plain_rounds ?? 0,
    completion_tokens: rec.completion_tokens ?? 0,
    mean_acceptance_length: rec.mean_acceptance_length ?? null,
    tokens_per_s: rec.tokens_per_s ?? null,
    weights: rec.weights || {},
    batch_rows: rec.batch_rows ?? null,
    regret: rec.regret ?? null,
    regret_unit: rec.regret_unit || "tokens",
    regret_curve: rec.regret_curve || [],
    finish_reason: rec.finish_reason ?? null,
    error: rec.error ?? null,
    elapsed_s: rec.elapsed_s ?? null,
  };
}

export function applyRound(rec, event) {
  const index = Number.isInteger(event.round) ? event.round : rec.rounds;
  if (index < rec.rounds) return; // already known (a snapshot overlapping the stream)
  if (rec.drafter_per_round.length === 0) rec.first_round = index;
  rec.rounds = index + 1;
  rec.drafter_per_round.push(event.drafter == null ? null : String(event.drafter));
  rec.accepted_per_round.push(Number(event.accepted) || 0);
  rec.committed_per_round.push(Number(event.committed) || 0);
  rec.plain_per_round.push(Boolean(event.plain));
  if (event.plain) rec.plain_rounds += 1;
  const overflow = rec.drafter_per_round.length - MAX_ROUNDS;
  if (overflow > 0) {
    for (const steps of perStepLists(rec)) steps.splice(0, overflow);
    rec.first_round += overflow;
  }
  if (event.policy != null) rec.policy = event.policy;
  rec.completion_tokens = event.completion_tokens ?? rec.completion_tokens;
  rec.mean_acceptance_length = event.mean_acceptance_length ?? rec.mean_acceptance_length;
  rec.tokens_per_s = event.tokens_per_s ?? rec.tokens_per_s;
  rec.weights = event.weights || rec.weights;
  rec.batch_rows = event.batch_rows ?? rec.batch_rows;
  const windows = Number(event.feedback_windows) || 0;
  const curve = rec.regret_curve;
  if (event.regret_unit) rec.regret_unit = event.regret_unit;
  if (event.regret != null && windows > 0) {
    if (curve.length === 0 || windows > curve[curve.length - 1][0]) {
      curve.push([windows, Number(event.regret)]);
      if (curve.length > MAX_ROUNDS) curve.splice(0, curve.length - MAX_ROUNDS);
    }
  }
  if (event.regret != null) rec.regret = event.regret;
}

export function applyFinished(rec, event) {
  rec.finish_reason = event.finish_reason ?? null;
  rec.error = event.error ?? null;
  rec.elapsed_s = event.elapsed_s ?? null;
  rec.finished_at = event.ts ?? Date.now() / 1000;
  if (rec.error) rec.status = "failed";
  else if (rec.finish_reason == null) rec.status = "aborted";
  else rec.status = "finished";
  const stats = event.stats;
  if (!stats || typeof stats !== "object") return;
  // The final statistics are authoritative: every round and the whole regret curve.
  rec.policy = stats.policy ?? rec.policy;
  rec.completion_tokens = stats.completion_tokens ?? rec.completion_tokens;
  rec.prompt_tokens = stats.prompt_tokens ?? rec.prompt_tokens;
  rec.warm_start_requests = stats.warm_start_requests ?? rec.warm_start_requests;
  rec.mean_acceptance_length = stats.mean_acceptance_length ?? rec.mean_acceptance_length;
  rec.regret = stats.regret ?? rec.regret;
  rec.regret_unit = stats.regret_unit || rec.regret_unit;
  if (stats.final_weights) rec.weights = stats.final_weights;
  const steps = finalSteps(stats);
  if (steps) replaceSteps(rec, steps);
  if (Array.isArray(stats.regret_curve)) {
    rec.regret_curve = stats.regret_curve.map((v, i) => [i + 1, v]).slice(-MAX_ROUNDS);
  }
}

function perStepLists(rec) {
  return [rec.drafter_per_round, rec.accepted_per_round, rec.committed_per_round, rec.plain_per_round];
}

// Every step of a finished request as [drafter, accepted, plain], in order: the speculative
// rounds of `drafter_choices` with the plain rounds of `plain_step_indices` put back between
// them. null when the statistics cannot be interleaved (the rounds' lists then stay).
export function finalSteps(stats) {
  const choices = stats.drafter_choices || [];
  const accepted = stats.accepted_per_round || [];
  const plain = new Set((stats.plain_step_indices || []).map(Number));
  const total = choices.length + plain.size;
  if (choices.length !== accepted.length || total === 0) return null;
  for (const i of plain) if (!(i >= 0 && i < total)) return null;
  const steps = [];
  let spec = 0;
  for (let i = 0; i < total; i += 1) {
    if (plain.has(i)) {
      steps.push([null, 0, true]);
    } else {
      const d = choices[spec];
      steps.push([d == null ? null : String(d), Number(accepted[spec]) || 0, false]);
      spec += 1;
    }
  }
  return steps;
}

function replaceSteps(rec, steps) {
  const kept = steps.slice(-MAX_ROUNDS);
  const first = steps.length - kept.length;
  if (first !== rec.first_round || rec.committed_per_round.length !== kept.length) {
    // Committed tokens are not in the final stats: accepted + 1 bonus (exact but for a
    // stop-truncated last round).
    rec.committed_per_round = kept.map(([, a]) => a + 1);
  }
  rec.first_round = first;
  rec.rounds = Math.max(rec.rounds, steps.length);
  rec.drafter_per_round = kept.map(([d]) => d);
  rec.accepted_per_round = kept.map(([, a]) => a);
  rec.plain_per_round = kept.map(([, , p]) => p);
  rec.plain_rounds = steps.filter(([, , p]) => p).length;
}
