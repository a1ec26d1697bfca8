// Signed webhooks from a process of their own. Events are signed ahead
// (`prepare`), so that RS256 signing never competes with the facade while it is
// measured; then posted open loop at a rate, all at once, one at a time, or as
// fast as the facade acknowledges with a fixed number in flight. Send times are
// read from the shared clock (bench/lib/clock.mjs) for the subscriber process to
// compare with. Driven over IPC (bench/lib/worker.mjs).
import { createPrivateKey } from 'node:crypto';
import { sharedNow } from '../lib/clock.mjs';
import { sleep } from '../lib/proc.mjs';
import { percentile } from '../lib/stats.mjs';
import { signEvent, webhookPoster } from '../lib/webhooks.mjs';
import { serve } from '../lib/worker.mjs';

let poster;
let privateKey;
/** Signed sets by name: each event's token and body. */
const sets = new Map();

function set(name) {
  const found = sets.get(name);
  if (!found) throw new Error(`no prepared set "${name}"`);
  return found;
}

serve({
  init({ origin, privateKeyPem }) {
    poster = webhookPoster(origin);
    privateKey = createPrivateKey(privateKeyPem);
  },

  /** Posts to another facade from now on (the signed sets stay: another facade's store has none of them yet). */
  async retarget({ origin }) {
    await poster?.close();
    poster = webhookPoster(origin);
  },

  /** Signs the events ahead of any posting. */
  prepare({ name, events }) {
    const started = performance.now();
    sets.set(name, {
      tokens: events.map((event) => signEvent(privateKey, event)),
      bodies: events.map((event) => JSON.stringify(event)),
    });
    return { count: events.length, ms: performance.now() - started };
  },

  /** One event; when it was sent (shared clock) and the answer's status. */
  async postOne({ name, index }) {
    const { tokens, bodies } = set(name);
    const sentAt = sharedNow();
    const status = await poster.post(tokens[index], bodies[index]);
    return { sentAt, status };
  },

  /** The whole set at once; when the first was sent and the last answered (shared clock), and the statuses. */
  async burst({ name }) {
    const { tokens, bodies } = set(name);
    const startedAt = sharedNow();
    const statuses = await Promise.all(tokens.map((token, n) => poster.post(token, bodies[n]).catch(() => 0)));
    return {
      startedAt,
      answeredAt: sharedNow(),
      ok: statuses.filter((status) => status === 200).length,
      total: tokens.length,
    };
  },

  /**
   * Open loop: event n is due at start + n / rate and sent then, whether or not
   * earlier ones were answered. Per event: when it was sent (shared clock) and
   * whether it was acknowledged (200); how late the sends were against the
   * schedule, to show the poster kept up.
   */
  async openLoop({ name, rate }) {
    const { tokens, bodies } = set(name);
    const total = tokens.length;
    const sentAt = new Float64Array(total);
    const acked = new Uint8Array(total);
    const acks = [];
    const lateness = [];
    let failed = 0;
    const posts = [];
    const start = sharedNow() + 5;
    for (let n = 0; n < total; n += 1) {
      const due = start + (n * 1000) / rate;
      const wait = due - sharedNow();
      if (wait > 1) await sleep(wait);
      const sent = sharedNow();
      sentAt[n] = sent;
      lateness.push(Math.max(0, sent - due));
      posts.push(
        poster.post(tokens[n], bodies[n]).then(
          (status) => {
            if (status !== 200) return (failed += 1);
            acked[n] = 1;
            acks.push(sharedNow() - sent);
          },
          () => (failed += 1),
        ),
      );
    }
    await Promise.all(posts);
    return {
      sentAt,
      acked,
      total,
      acknowledged: acks.length,
      failed,
      ackP50: percentile(acks, 50),
      ackP99: percentile(acks, 99),
      lateP99: percentile(lateness, 99),
      lateMax: percentile(lateness, 100),
    };
  },

  /** Maximum ingest: `concurrency` posts in flight until the set is sent; acknowledged events per second. */
  async closedLoop({ name, concurrency }) {
    const { tokens, bodies } = set(name);
    let next = 0;
    let ok = 0;
    let failed = 0;
    const started = performance.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next < tokens.length) {
          const n = next++;
          const status = await poster.post(tokens[n], bodies[n]).catch(() => 0);
          if (status === 200) ok += 1;
          else failed += 1;
        }
      }),
    );
    const seconds = (performance.now() - started) / 1000;
    return { ok, failed, seconds, rate: ok / seconds };
  },

  async close() {
    await poster?.close();
  },
});
