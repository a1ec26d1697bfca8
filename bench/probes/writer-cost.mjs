// CPU per stored event of the SQLite store: on the main thread (sending the
// batch to the writer thread, reading its answer) and off it (the writer
// thread: parsing, de-duplicating, ranking, inserting, committing; and V8's
// helpers), at a few batch sizes (events per appendEvents call, as the webhook
// receiver's group commit makes them: a few at 500 events/s, tens to hundreds
// under a burst). Every event is new (none is a duplicate); 100 deliveries in
// turn; two payload sizes: the realtime bench's events, and ~1.5 KB ones (real
// events carry addresses, items, platform data). One batch in flight at a time.
// The main thread's CPU is its on-CPU time from the kernel's schedstat; the rest
// is the process's CPU (process.cpuUsage) less that.
//
//   npm run build && node bench/probes/writer-cost.mjs [--events=20000] [--rounds=3] [--dist=<other checkout>/dist]
import { mkdtempSync, openSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    dist: { type: 'string' },
  },
});
const dist = path.resolve(values.dist ?? new URL('../../dist', import.meta.url).pathname);
const { SqliteStore } = await import(path.join(dist, 'store/sqlite.js'));
const EVENTS = Number(values.events);
const ROUNDS = Number(values.rounds);
const BATCHES = [1, 4, 16, 64];
const NAMES = [
  'delivery.assigned',
  'location.pickup_enroute',
  'delivery.pickup_complete',
  'location.dropoff_enroute',
  'delivery.dropoff_arrived',
];
const FILLER = 'x'.repeat(1_000);

const schedstat = openSync(`/proc/self/task/${process.pid}/schedstat`, 'r');
const buffer = Buffer.alloc(128);
const mainCpuUs = () =>
  Number(buffer.toString('latin1', 0, readSync(schedstat, buffer, 0, 128, 0)).split(' ')[0]) / 1e3;
const processCpuUs = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};

let serial = 0;
const small = (n) => ({
  uid: `00000000-0000-4000-9000-${String(n % 100).padStart(12, '0')}`,
  event_name: NAMES[n % NAMES.length],
  status: `e${n}`,
  driver_location: { lat: 37 + n / 1e6, lng: -122 },
});
const large = (n) => ({
  ...small(n),
  pickup_address: {
    street: '1 Market St',
    city: 'San Francisco',
    state: 'CA',
    postal_code: '94105',
    country: 'US',
    latitude: 37.79,
    longitude: -122.39,
  },
  dropoff_address: {
    street: '500 Howard St',
    city: 'San Francisco',
    state: 'CA',
    postal_code: '94105',
    country: 'US',
    latitude: 37.78,
    longitude: -122.39,
  },
  items: [{ name: 'Parcel', quantity: 1, weight: 2.5 }],
  platform_payload: { order: { id: `O-${n}`, note: FILLER } },
});

async function measure(store, make, batch) {
  const receivedAt = new Date().toISOString();
  const main = mainCpuUs();
  const all = processCpuUs();
  const started = performance.now();
  for (let sent = 0; sent < EVENTS; sent += batch) {
    const events = Array.from({ length: Math.min(batch, EVENTS - sent) }, () => ({
      payload: make((serial += 1)),
      receivedAt,
    }));
    await store.appendEvents(events);
  }
  const mainUs = mainCpuUs() - main;
  return {
    mainUs: mainUs / EVENTS,
    offUs: (processCpuUs() - all - mainUs) / EVENTS,
    wallUs: ((performance.now() - started) * 1000) / EVENTS,
  };
}

const dir = mkdtempSync(path.join(tmpdir(), 'dg-writer-cost-'));
const store = new SqliteStore(dir);
await store.ping();
// Compiled paths first.
await measure(store, small, 16);
const results = new Map();
for (let round = 0; round < ROUNDS; round += 1) {
  for (const [kind, make] of [
    ['small', small],
    ['1.5 KB', large],
  ]) {
    for (const batch of BATCHES) {
      const key = `${kind} events, ${batch} per batch`;
      if (!results.has(key)) results.set(key, []);
      results.get(key).push(await measure(store, make, batch));
    }
  }
}
await store.close();
rmSync(dir, { recursive: true, force: true });
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`${EVENTS} events per measurement, ${ROUNDS} round(s), medians; µs per event (${dist})`);
console.log('| events | main thread | writer thread and the rest | wall |\n| --- | --- | --- | --- |');
for (const [key, runs] of results)
  console.log(
    `| ${key} | ${median(runs.map((r) => r.mainUs)).toFixed(1)} | ${median(runs.map((r) => r.offUs)).toFixed(1)} | ${median(runs.map((r) => r.wallUs)).toFixed(1)} |`,
  );
