// The anonymous and keyless floods (bench/attacks/anonymous-flood.mjs,
// keyless-flood.mjs), from a process of its own so that building and sending the
// documents never delays the orchestrator's probes, reads, webhooks and memory
// samples. `connections` loops each POST one distinct document
// (bench/lib/flood-documents.mjs) without a working credential (none, or a
// made-up key), and the next as soon as it is answered, until the time is up or
// `stop` is called. `paced` is the token flood's (bench/attacks/token-flood.mjs):
// with a credential, at a fixed rate, each distinct document sent `repeats` times.
// Driven over IPC (bench/lib/worker.mjs).
import { Pool } from 'undici';
import { DOCUMENTS, KEYLESS_DOCUMENTS, fragmentHeavyDocument } from '../lib/flood-documents.mjs';
import { sleep } from '../lib/proc.mjs';
import { percentile } from '../lib/stats.mjs';
import { serve } from '../lib/worker.mjs';

let stopping = false;

/** "200 UNAUTHENTICATED", "413 REQUEST_ENTITY_TOO_LARGE", "200 data": the status and the first error's code. */
function outcomeOf(status, text) {
  try {
    const body = JSON.parse(text);
    const code = body.errors?.[0]?.extensions?.code;
    return `${status} ${code ?? (body.errors?.length ? 'error without code' : 'data')}`;
  } catch {
    return `${status} (not JSON)`;
  }
}

serve({
  async run({ origin, kind, connections, seconds, bodyBytes, first = 0 }) {
    stopping = false;
    const documents = DOCUMENTS[kind] ?? KEYLESS_DOCUMENTS[kind];
    if (!documents) throw new Error(`unknown kind of document "${kind}"`);
    // A stalled facade fails a request after 30 s instead of holding its loop for undici's 300 s default.
    const pool = new Pool(origin, { connections, pipelining: 1, headersTimeout: 30_000, bodyTimeout: 30_000 });
    const outcomes = new Map();
    const failures = new Map();
    /** One answer's first 300 characters per outcome, to show what the facade says. */
    const samples = {};
    const latencies = [];
    let next = first;
    let sent = 0;
    let answered = 0;
    let bytesSent = 0;
    const started = performance.now();
    const until = started + seconds * 1000;
    const loop = async () => {
      while (!stopping && performance.now() < until) {
        const n = next;
        next += 1;
        const body = documents.body(n, bodyBytes);
        const sentAt = performance.now();
        sent += 1;
        bytesSent += body.length;
        try {
          const response = await pool.request({
            method: 'POST',
            path: '/graphql',
            headers: { 'content-type': 'application/json', ...documents.headers },
            body,
          });
          const text = await response.body.text();
          latencies.push(performance.now() - sentAt);
          answered += 1;
          const outcome = outcomeOf(response.statusCode, text);
          outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
          samples[outcome] ??= text.slice(0, 300);
        } catch (error) {
          const reason = error.code ?? error.name ?? 'error';
          failures.set(reason, (failures.get(reason) ?? 0) + 1);
          // A facade that is gone refuses at once: do not spin.
          await sleep(50);
        }
      }
    };
    await Promise.all(Array.from({ length: connections }, loop));
    const elapsedMs = performance.now() - started;
    await pool.destroy();
    return {
      sent,
      answered,
      bytesSent,
      elapsedMs,
      outcomes: Object.fromEntries(outcomes),
      failures: Object.fromEntries(failures),
      samples,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: latencies.length ? latencies.reduce((most, ms) => (ms > most ? ms : most), 0) : NaN,
    };
  },

  /**
   * Issue 29's documents (fragmentHeavyDocument) as `authorization`, open loop
   * at `rate` operations a second (as a client keeping inside its rate limit
   * would, whether or not the last one was answered), each document `repeats`
   * times in a row (the second run of a plan is the one a facade compiles),
   * until the time is up or `stop` is called.
   */
  async paced({ origin, authorization, uid, rate, seconds, repeats = 2, connections = 16 }) {
    stopping = false;
    const pool = new Pool(origin, { connections, pipelining: 1, headersTimeout: 60_000, bodyTimeout: 60_000 });
    const outcomes = new Map();
    const failures = new Map();
    const samples = {};
    const latencies = [];
    const inFlight = new Set();
    let sent = 0;
    let answered = 0;
    const started = performance.now();
    for (let k = 0; !stopping && k < rate * seconds; k += 1) {
      const due = started + (k * 1000) / rate;
      if (due > performance.now() + 1) await sleep(due - performance.now());
      if (stopping) break;
      const body = JSON.stringify({ query: fragmentHeavyDocument(Math.floor(k / repeats), uid) });
      const sentAt = performance.now();
      sent += 1;
      const request = pool
        .request({
          method: 'POST',
          path: '/graphql',
          headers: { 'content-type': 'application/json', authorization },
          body,
        })
        .then(
          async (response) => {
            const text = await response.body.text();
            latencies.push(performance.now() - sentAt);
            answered += 1;
            const outcome = outcomeOf(response.statusCode, text);
            outcomes.set(outcome, (outcomes.get(outcome) ?? 0) + 1);
            samples[outcome] ??= text.slice(0, 300);
          },
          (error) => {
            const reason = error.code ?? error.name ?? 'error';
            failures.set(reason, (failures.get(reason) ?? 0) + 1);
          },
        );
      inFlight.add(request);
      void request.finally(() => inFlight.delete(request));
    }
    await Promise.all([...inFlight]);
    const elapsedMs = performance.now() - started;
    await pool.destroy();
    return {
      sent,
      answered,
      documents: Math.ceil(sent / repeats),
      elapsedMs,
      outcomes: Object.fromEntries(outcomes),
      failures: Object.fromEntries(failures),
      samples,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: latencies.length ? latencies.reduce((most, ms) => (ms > most ? ms : most), 0) : NaN,
    };
  },

  /** Ends the running flood early (the facade died, or passed the memory cap). */
  stop() {
    stopping = true;
  },
});
