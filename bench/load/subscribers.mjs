// A graphql-ws subscriber fleet in a process of its own: `count` connections,
// one deliveryEvents(uids:) subscription each (subscriber i follows
// uids[i % uids.length]). Every message is logged with the shared clock
// (bench/lib/clock.mjs), so its latency can be computed against the send time
// another process read from the same clock. Driven over IPC (bench/lib/worker.mjs).
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { sharedNow } from '../lib/clock.mjs';
import { percentile } from '../lib/stats.mjs';
import { serve } from '../lib/worker.mjs';

const SUBSCRIPTION = 'subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid statusText } }';

const clients = [];
let uids = [];
/** Every message received: which subscriber, the event's statusText (the tag the poster gave it), when. */
const log = { subscriber: [], tag: [], at: [] };
/** Per tag: how many subscribers have it and when the last one got it. */
const byTag = new Map();
const waiters = new Set();

function record(subscriber, event) {
  const at = sharedNow();
  const tag = event?.statusText ?? '';
  log.subscriber.push(subscriber);
  log.tag.push(tag);
  log.at.push(at);
  const seen = byTag.get(tag);
  if (seen) {
    seen.count += 1;
    seen.last = at;
  } else byTag.set(tag, { count: 1, last: at });
  for (const check of waiters) check();
}

/** Resolves once `done()` holds (checked on every message) or after timeoutMs; says which. */
function waitUntil(done, timeoutMs) {
  if (done()) return Promise.resolve({ timedOut: false });
  return new Promise((resolve) => {
    const check = () => {
      if (!done()) return;
      waiters.delete(check);
      clearTimeout(timer);
      resolve({ timedOut: false });
    };
    const timer = setTimeout(() => {
      waiters.delete(check);
      resolve({ timedOut: true });
    }, timeoutMs);
    waiters.add(check);
  });
}

serve({
  /** Opens the fleet, `batch` connections at a time; resolves once every one is connected. */
  async connect({ origin, key, count, uids: followed, batch = 200 }) {
    uids = followed;
    const url = `${origin.replace('http', 'ws')}/graphql`;
    const started = performance.now();
    for (let start = 0; start < count; start += batch) {
      await Promise.all(
        Array.from({ length: Math.min(batch, count - start) }, (_, j) => {
          const i = start + j;
          const client = createClient({ url, webSocketImpl: WebSocket, connectionParams: { authorization: `Bearer ${key}` }, retryAttempts: 0, lazy: false });
          clients.push(client);
          return new Promise((resolve, reject) => {
            // The facade acknowledges no subscription: connected is what can be awaited; a warm-up event proves each live.
            client.subscribe({ query: SUBSCRIPTION, variables: { uids: [uids[i % uids.length]] } }, { next: (message) => record(i, message.data?.deliveryEvents), error: reject, complete: () => undefined });
            client.on('connected', () => resolve());
          });
        }),
      );
    }
    return { connected: clients.length, ms: performance.now() - started };
  },

  received: () => log.at.length,

  /** Waits until `count` messages in all have arrived (or timeoutMs passed). */
  async waitFor({ count, timeoutMs }) {
    const { timedOut } = await waitUntil(() => log.at.length >= count, timeoutMs);
    return { received: log.at.length, timedOut };
  },

  /** Waits until `count` subscribers have the event tagged `tag`; when the last of them got it (shared clock). */
  async waitForTag({ tag, count, timeoutMs }) {
    const { timedOut } = await waitUntil(() => (byTag.get(tag)?.count ?? 0) >= count, timeoutMs);
    return { ...(byTag.get(tag) ?? { count: 0, last: NaN }), timedOut };
  },

  /**
   * The open-loop run's deliveries. Events are tagged `${prefix}${n}`; sentAt[n]
   * is when the poster sent event n (shared clock), acked[n] whether it was
   * acknowledged. Event n concerns uids[n % uids.length], so exactly the
   * subscribers following that uid must get it, once each. `slowMs`: events
   * whose slowest subscriber waited longer are counted, with how many runs of
   * consecutive events they form (one pause or a steady tail).
   */
  latencies({ prefix, sentAt, acked, slowMs }) {
    const deliveries = uids.length;
    const total = sentAt.length;
    const received = new Set();
    const samples = [];
    const slowest = new Float64Array(total);
    let duplicates = 0;
    let misrouted = 0;
    let unacknowledged = 0;
    for (let k = 0; k < log.tag.length; k += 1) {
      const tag = log.tag[k];
      if (!tag.startsWith(prefix)) continue;
      const n = Number(tag.slice(prefix.length));
      if (!Number.isInteger(n) || n < 0 || n >= total) continue;
      const subscriber = log.subscriber[k];
      if (subscriber % deliveries !== n % deliveries) misrouted += 1;
      else if (!acked[n]) unacknowledged += 1; // stored although its POST failed (a timeout, say): counted, not timed
      else if (received.has(subscriber * total + n)) duplicates += 1;
      else {
        received.add(subscriber * total + n);
        const latency = log.at[k] - sentAt[n];
        samples.push(latency);
        if (latency > slowest[n]) slowest[n] = latency;
      }
    }
    let slowEvents = 0;
    let slowRuns = 0;
    let longestRun = 0;
    for (let n = 0, run = 0; n < total; n += 1) {
      if (slowest[n] > slowMs) {
        slowEvents += 1;
        run += 1;
        if (run === 1) slowRuns += 1;
        longestRun = Math.max(longestRun, run);
      } else run = 0;
    }
    let expected = 0;
    for (let n = 0; n < total; n += 1) {
      if (!acked[n]) continue;
      // Subscribers i with i % deliveries === n % deliveries, among clients.length.
      const first = n % deliveries;
      expected += first < clients.length ? Math.ceil((clients.length - first) / deliveries) : 0;
    }
    return {
      p50: percentile(samples, 50),
      p99: percentile(samples, 99),
      p999: percentile(samples, 99.9),
      max: percentile(samples, 100),
      delivered: samples.length,
      expected,
      lost: expected - samples.length,
      duplicates,
      misrouted,
      unacknowledged,
      slowEvents,
      slowRuns,
      longestRun,
    };
  },

  async close() {
    await Promise.all(clients.splice(0).map((client) => client.dispose()));
  },
});
