// A graphql-ws subscriber fleet in a process of its own: `count` connections,
// one deliveryEvents(uids:) subscription each, subscribers first … first+count-1
// of a fleet that may span several such processes (bench/lib/fleet.mjs);
// subscriber i follows uids[i % uids.length]. Every message is logged with the
// shared clock (bench/lib/clock.mjs), so its latency can be computed against the
// send time another process read from the same clock. Driven over IPC (bench/lib/worker.mjs).
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { sharedNow } from '../lib/clock.mjs';
import { serve } from '../lib/worker.mjs';

const SUBSCRIPTION = 'subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid statusText } }';

const clients = [];
let uids = [];
/** This process's subscribers: first … first + clients.length - 1 of the fleet. */
let first = 0;

/** How many of this process's subscribers follow the delivery of event n (uids[n % uids.length]). */
function followersOf(n) {
  const deliveries = uids.length;
  const residue = n % deliveries;
  const upTo = (x) => (x > residue ? Math.floor((x - 1 - residue) / deliveries) + 1 : 0);
  return upTo(first + clients.length) - upTo(first);
}
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
  /**
   * Opens this process's part of the fleet, `batch` connections at a time;
   * resolves once every one is connected. Subscriber i connects to
   * origins[floor(i / uids.length) % origins.length]: with two instances, every
   * delivery's subscribers alternate between them.
   */
  async connect({ origin, origins = [origin], key, count, first: firstIndex = 0, uids: followed, batch = 200 }) {
    uids = followed;
    first = firstIndex;
    const urls = origins.map((o) => `${o.replace('http', 'ws')}/graphql`);
    const started = performance.now();
    for (let start = 0; start < count; start += batch) {
      await Promise.all(
        Array.from({ length: Math.min(batch, count - start) }, (_, j) => {
          const i = first + start + j;
          const url = urls[Math.floor(i / uids.length) % urls.length];
          const client = createClient({
            url,
            webSocketImpl: WebSocket,
            connectionParams: { authorization: `Bearer ${key}` },
            retryAttempts: 0,
            lazy: false,
          });
          clients.push(client);
          return new Promise((resolve, reject) => {
            // The facade acknowledges no subscription: connected is what can be awaited; a warm-up event proves each
            // live.
            client.subscribe(
              { query: SUBSCRIPTION, variables: { uids: [uids[i % uids.length]] } },
              { next: (message) => record(i, message.data?.deliveryEvents), error: reject, complete: () => undefined },
            );
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

  /** Waits until this process has every message of the acknowledged events (acked[n]) beyond the `before` it had. */
  async waitForEvents({ acked, before, timeoutMs }) {
    let expected = before;
    for (let n = 0; n < acked.length; n += 1) if (acked[n]) expected += followersOf(n);
    const { timedOut } = await waitUntil(() => log.at.length >= expected, timeoutMs);
    return { received: log.at.length, expected, timedOut };
  },

  /**
   * Waits until `count` subscribers of this process have the event tagged `tag`
   * (all of them: count 'all'; those following event n's delivery: ofEvent n);
   * when the last of them got it (shared clock).
   */
  async waitForTag({ tag, count: wanted, ofEvent, timeoutMs }) {
    const count = wanted === 'all' ? clients.length : ofEvent !== undefined ? followersOf(ofEvent) : wanted;
    const { timedOut } = await waitUntil(() => (byTag.get(tag)?.count ?? 0) >= count, timeoutMs);
    return { ...(byTag.get(tag) ?? { count: 0, last: NaN }), timedOut };
  },

  /**
   * The open-loop run's deliveries to this process's subscribers. Events are
   * tagged `${prefix}${n}`; sentAt[n] is when the poster sent event n (shared
   * clock), acked[n] whether it was acknowledged. Event n concerns
   * uids[n % uids.length], so exactly the subscribers following that uid must
   * get it, once each. Returns every latency (ms) and, per event, its slowest
   * subscriber's: the fleet merges them across processes (bench/lib/fleet.mjs).
   */
  latencies({ prefix, sentAt, acked }) {
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
      else if (!acked[n])
        unacknowledged += 1; // stored although its POST failed (a timeout, say): counted, not timed
      else if (received.has(subscriber * total + n)) duplicates += 1;
      else {
        received.add(subscriber * total + n);
        const latency = log.at[k] - sentAt[n];
        samples.push(latency);
        if (latency > slowest[n]) slowest[n] = latency;
      }
    }
    let expected = 0;
    for (let n = 0; n < total; n += 1) if (acked[n]) expected += followersOf(n);
    return {
      samples: Float64Array.from(samples),
      slowest,
      delivered: samples.length,
      expected,
      duplicates,
      misrouted,
      unacknowledged,
    };
  },

  async close() {
    await Promise.all(clients.splice(0).map((client) => client.dispose()));
  },
});
