// What `delivery { events }` selected in a subscription costs the facade per
// message: 240 graphql-ws subscribers (12 to a socket) of 4 deliveries, each
// delivery with some history, then rounds of one signed webhook per delivery,
// each round once every subscriber has the previous one. Prints the facade's
// CPU time per message (one event reaching one subscriber), with and without the
// selection; with --baseline, the same for another checkout's build (its
// dist/main.js) in the same run.
//
//   npm run build && node bench/probes/subscription-events.mjs [--subscribers=240] [--deliveries=4]
//     [--history=20] [--rounds=30] [--baseline=/path/to/an/older/checkout]
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { FACADE_ENTRY, startFacade, startUpstream } from '../lib/contenders.mjs';
import { cpuMs } from '../lib/cpu.mjs';
import { keyPair, signEvent, webhookPoster } from '../lib/webhooks.mjs';

const { values } = parseArgs({
  options: {
    subscribers: { type: 'string', default: '240' },
    deliveries: { type: 'string', default: '4' },
    history: { type: 'string', default: '20' },
    rounds: { type: 'string', default: '30' },
    baseline: { type: 'string' },
  },
});
const SUBSCRIBERS = Number(values.subscribers);
const DELIVERIES = Number(values.deliveries);
const HISTORY = Number(values.history);
const ROUNDS = Number(values.rounds);
const PER_SOCKET = 12;
/**
 * The fixed upstream answers any key; the single-read scenario's (not imported: it loads autocannon from
 * bench/node_modules).
 */
const KEY = 'sk_bench_merchant';

const SELECTIONS = {
  plain: 'subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid statusText } }',
  events:
    'subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid statusText delivery { status events { edges { cursor node { name } } } } } }',
};

const uidOf = (d) => `00000000-0000-4000-9100-${String(d).padStart(12, '0')}`;
let posted = 0;
/** A distinct location event (the facade drops exact repeats) whose status is its tag. */
const eventFor = (uid, tag) => {
  posted += 1;
  return {
    uid,
    event_name: 'location.dropoff_enroute',
    status: tag,
    driver_location: { lat: 37 + posted / 1e6, lng: -122 - posted / 1e6 },
  };
};

async function measure(upstream, keys, { entry, cwd, label }, selection) {
  const facade = await startFacade(upstream.url, { publicKeyPem: keys.publicKeyPem, entry, cwd, label });
  const poster = webhookPoster(facade.origin);
  const post = (uid, tag) => {
    const event = eventFor(uid, tag);
    return poster.post(signEvent(keys.privateKey, event), event).then((status) => {
      if (status !== 200) throw new Error(`${label}: webhook answered ${status}`);
    });
  };
  const uids = Array.from({ length: DELIVERIES }, (_, d) => uidOf(d));
  for (let h = 0; h < HISTORY; h += 1) await Promise.all(uids.map((uid) => post(uid, `history-${h}`)));

  // Per tag: messages received, and who waits for a count of them.
  const seen = new Map();
  const waiters = new Set();
  /** Subscribers that have had a message: the facade acknowledges no subscription, a message proves it live. */
  const live = new Set();
  const received = (subscriber, tag) => {
    live.add(subscriber);
    seen.set(tag, (seen.get(tag) ?? 0) + 1);
    for (const check of waiters) check();
  };
  const allHave = (tag) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`${label} ${selection}: ${seen.get(tag) ?? 0} of ${SUBSCRIBERS} got ${tag}`)),
        60_000,
      );
      const check = () => {
        if ((seen.get(tag) ?? 0) < SUBSCRIBERS) return;
        waiters.delete(check);
        clearTimeout(timer);
        resolve();
      };
      waiters.add(check);
      check();
    });

  const clients = [];
  const url = `${facade.origin.replace('http', 'ws')}/graphql`;
  for (let start = 0; start < SUBSCRIBERS; start += PER_SOCKET) {
    const client = createClient({
      url,
      webSocketImpl: WebSocket,
      connectionParams: { authorization: `Bearer ${KEY}` },
      retryAttempts: 0,
      lazy: false,
    });
    clients.push(client);
    for (let i = start; i < Math.min(SUBSCRIBERS, start + PER_SOCKET); i += 1) {
      client.subscribe(
        { query: SELECTIONS[selection], variables: { uids: [uids[i % DELIVERIES]] } },
        {
          next: (message) => {
            if (message.errors) console.error(`${label} ${selection}:`, JSON.stringify(message.errors));
            received(i, message.data?.deliveryEvents?.statusText ?? '');
          },
          error: (error) => console.error(`${label} ${selection}:`, error),
          complete: () => undefined,
        },
      );
    }
  }
  // Warm-up events until every subscriber has had one; then a few rounds not counted.
  for (let call = 0; live.size < SUBSCRIBERS; call += 1) {
    if (call === 300) throw new Error(`${label} ${selection}: ${live.size} of ${SUBSCRIBERS} subscribers live`);
    await Promise.all(uids.map((uid) => post(uid, 'live')));
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  for (let warm = 0; warm < 3; warm += 1) {
    const tag = `warm-${warm}`;
    const arrived = allHave(tag);
    await Promise.all(uids.map((uid) => post(uid, tag)));
    await arrived;
  }

  const before = cpuMs(facade.child.pid);
  for (let round = 0; round < ROUNDS; round += 1) {
    const tag = `round-${round}`;
    const arrived = allHave(tag);
    await Promise.all(uids.map((uid) => post(uid, tag)));
    await arrived;
  }
  const used = cpuMs(facade.child.pid) - before;
  for (const client of clients) await client.dispose();
  await poster.close();
  await facade.stop();
  const messages = ROUNDS * SUBSCRIBERS;
  return { cpuMs: Math.round(used), microsecondsPerMessage: Math.round((used * 1000) / messages), messages };
}

const upstream = await startUpstream();
const keys = keyPair();
const contenders = [{ label: 'this build', entry: FACADE_ENTRY, cwd: undefined }];
if (values.baseline) {
  const dir = path.resolve(values.baseline);
  contenders.unshift({ label: `baseline (${path.basename(dir)})`, entry: path.join(dir, 'dist/main.js'), cwd: dir });
}
const results = {};
for (const contender of contenders) {
  for (const selection of ['plain', 'events']) {
    results[`${contender.label}, ${selection}`] = await measure(upstream, keys, contender, selection);
  }
}
await upstream.stop?.();
upstream.child?.kill();
console.log(
  JSON.stringify(
    { subscribers: SUBSCRIBERS, deliveries: DELIVERIES, history: HISTORY, rounds: ROUNDS, results },
    null,
    2,
  ),
);
