// How long each thing the facade does on its own schedule holds the event loop, with large stores: each cause is made
// to happen alone, in this process, on the compiled code (dist/), while a heartbeat due every millisecond reads how
// long the main thread ran between two beats (its on-CPU time from the kernel's schedstat, so that other processes
// taking the CPU on a loaded machine do not read as holds): the longest hold per cause, to within a millisecond. Where
// a cause's work can be timed directly (a constructor, a scrape, a batch's publication), that is printed too.
// --dist=<checkout>/dist probes another build.
//
//   npm run build && node bench/probes/stalls.mjs [--owners=1000000] [--events=200000] [--followed=10000] [--sockets=10000] [--only=<cause>]
//
// Causes: owner-flush (owner records learned from reads, written together), retention (a trim
// pass over expired events and owner records), reconcile (the reconciliation tick with every followed delivery due),
// metrics (a /metrics collection with many sockets open), writer-answers (a batch of 512 events answered by the writer
// thread and published to 10 subscribers each).
import { randomUUID } from 'node:crypto';
import { mkdtempSync, openSync, readSync, rmSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';

const { values } = parseArgs({
  options: {
    owners: { type: 'string', default: '1000000' },
    events: { type: 'string', default: '200000' },
    followed: { type: 'string', default: '10000' },
    sockets: { type: 'string', default: '10000' },
    only: { type: 'string' },
    dist: { type: 'string' },
  },
});
const dist = path.resolve(values.dist ?? new URL('../../dist', import.meta.url).pathname);
const load = (file) => import(path.join(dist, file));
const { SqliteStore } = await load('store/sqlite.js');
const { Owners } = await load('access/owners.js');
const { Reconciler } = await load('realtime/reconcile.js');
const { createMetrics } = await load('observability/metrics.js');
const { createEventBus } = await load('realtime/bus.js');
const { AppendBatcher } = await load('webhooks/receiver.js');

const OWNERS = Number(values.owners);
const EVENTS = Number(values.events);
const FOLLOWED = Number(values.followed);
const SOCKETS = Number(values.sockets);
const results = [];
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const turn = () => new Promise((resolve) => setImmediate(resolve));

/** This thread's time on a CPU so far, ns (the kernel's schedstat: preemption by other processes does not count). */
const schedstat = openSync(`/proc/self/task/${process.pid}/schedstat`, 'r');
const schedBuffer = Buffer.alloc(128);
function onCpuNs() {
  const length = readSync(schedstat, schedBuffer, 0, schedBuffer.length, 0);
  return Number(schedBuffer.toString('latin1', 0, length).split(' ')[0]);
}

/**
 * Runs `work` with a heartbeat due every millisecond: between two beats the
 * loop was held by whatever ran. The longest such hold, as the time the main
 * thread spent on a CPU between two beats (what the work held it for: on a
 * loaded machine the wall time between two beats also counts the time other
 * processes had the CPU), and the longest wall gap beside it.
 */
async function holds(work) {
  let lastWall = performance.now();
  let lastCpu = onCpuNs();
  let maxCpuMs = 0;
  let maxWallMs = 0;
  const gaps = [];
  const beat = setInterval(() => {
    const wall = performance.now();
    const cpu = onCpuNs();
    const cpuMs = (cpu - lastCpu) / 1e6;
    gaps.push(cpuMs);
    maxCpuMs = Math.max(maxCpuMs, cpuMs);
    maxWallMs = Math.max(maxWallMs, wall - lastWall);
    lastWall = wall;
    lastCpu = cpu;
  }, 1);
  const started = performance.now();
  const detail = await work();
  // A few more beats, so that a hold at the very end is counted.
  await sleep(5);
  clearInterval(beat);
  gaps.sort((a, b) => a - b);
  return {
    maxMs: maxCpuMs,
    p99Ms: gaps[Math.floor(gaps.length * 0.99)] ?? 0,
    over5: gaps.filter((ms) => ms > 5).length,
    wallMaxMs: maxWallMs,
    wallMs: performance.now() - started,
    detail,
  };
}

function report(cause, what, { maxMs, p99Ms, over5, wallMaxMs, wallMs, detail }) {
  results.push({ cause, what, maxMs, p99Ms, over5, wallMaxMs, wallMs, detail });
  console.log(
    `${cause}: longest hold ${maxMs.toFixed(1)} ms of CPU (p99 ${p99Ms.toFixed(2)}; ${over5} over 5 ms; longest wall gap ${wallMaxMs.toFixed(1)} ms) over ${wallMs.toFixed(0)} ms — ${what}${detail ? `; ${detail}` : ''}`,
  );
}

const wanted = (cause) => !values.only || values.only.split(',').includes(cause);
const uuid = (n) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;

/**
 * A data directory whose store file holds `owners` owner records and `events` events, written straight into the file
 * (not through the facade).
 */
async function prefilledDir({ owners = 0, events = 0, ageMs = 0 }) {
  const dir = mkdtempSync(path.join(tmpdir(), 'dg-stalls-'));
  const made = new SqliteStore(dir);
  await made.ping();
  await made.close();
  const db = new Database(path.join(dir, 'delivery-graph.sqlite'));
  db.pragma('journal_mode = WAL');
  const createdAt = Date.now() - ageMs;
  const receivedAt = new Date(createdAt).toISOString();
  db.transaction(() => {
    const owner = db.prepare(
      'INSERT INTO ownership (uid, owner_hash, created_at, proved_at, api_group) VALUES (?, ?, ?, ?, ?)',
    );
    for (let n = 0; n < owners; n += 1) owner.run(randomUUID(), 'a'.repeat(64), createdAt, createdAt, 'PLATFORM');
    const event = db.prepare(
      'INSERT INTO events (uid, name, hash, status_text, received_at, stale, payload) VALUES (?, ?, ?, ?, ?, 0, ?)',
    );
    for (let n = 0; n < events; n += 1) {
      const uid = uuid(n % 5000);
      event.run(
        uid,
        'location.dropoff_enroute',
        `h${n}`,
        'Enroute',
        receivedAt,
        JSON.stringify({ uid, event_name: 'location.dropoff_enroute', n, driver_location: { lat: 37, lng: -122 } }),
      );
    }
  })();
  db.close();
  return dir;
}

if (wanted('owner-flush')) {
  const dir = await prefilledDir({ owners: Math.min(OWNERS, 100_000) });
  const store = new SqliteStore(dir);
  const owners = new Owners(store);
  const learned = 5_000;
  const uids = Array.from({ length: learned }, () => randomUUID());
  const measured = await holds(async () => {
    // First reads arriving for 40 ms, a hundred a turn (5,000: more than a busy instance makes in a flush period), then
    // the flush.
    for (let k = 0; k < learned; k += 100) {
      for (const uid of uids.slice(k, k + 100)) owners.learn(uid, 'c'.repeat(64), 'PLATFORM');
      await sleep(1);
    }
    await sleep(60);
    await owners.flush();
  });
  report(
    'owner-flush',
    `${learned.toLocaleString('en-US')} owner records learned at once, written in one flush`,
    measured,
  );
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}

if (wanted('retention')) {
  const dir = await prefilledDir({ owners: Math.min(OWNERS, 200_000), events: EVENTS, ageMs: 3_600_000 });
  const retention = { eventRetentionMs: 60_000, idempotencyRetentionMs: 60_000 };
  const store = new SqliteStore(dir, { retention });
  const measured = await holds(async () => {
    await store.trimExpired();
    const left = store.db
      .prepare('SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM ownership) AS owners')
      .get();
    return `left after the pass: ${left.events} events, ${left.owners} owner records`;
  });
  report(
    'retention',
    `a trim pass over ${EVENTS.toLocaleString('en-US')} expired events and ${Math.min(OWNERS, 200_000).toLocaleString('en-US')} expired owner records`,
    measured,
  );
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}

if (wanted('reconcile')) {
  const dir = await prefilledDir({});
  const store = new SqliteStore(dir);
  const wire = { uid: '', status: 'enroute_to_dropoff', driver_location: { lat: 37.1, lng: -122.1 } };
  const upstream = {
    platform: { get: async (_key, uid) => ({ ...wire, uid }) },
    partner: { getOrder: async () => ({}) },
  };
  const reconciler = new Reconciler({
    store,
    upstream,
    append: async (payload) => ({ duplicate: false, event: { stale: false, payload } }),
    intervalMs: 200,
    maxReadsPerSecond: 100,
  });
  const ends = Array.from({ length: FOLLOWED }, (_, n) => reconciler.follow(uuid(n), { key: 'sk_probe', end() {} }));
  const measured = await holds(async () => {
    await sleep(3_000);
    return `${reconciler.counters.reads} reads made`;
  });
  report(
    'reconcile',
    `reconciliation ticks for ${FOLLOWED.toLocaleString('en-US')} followed deliveries, every one due`,
    measured,
  );
  for (const end of ends) end();
  reconciler.stop();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}

if (wanted('metrics')) {
  const bus = createEventBus();
  const metrics = createMetrics({
    upstream: { breakerState: () => ({ platform: 'closed', partner: 'closed' }) },
    bus,
    webhooks: undefined,
  });
  // Sockets held open, as subscribers' connections are.
  const server = createServer((socket) => socket.on('error', () => undefined));
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const clients = [];
  for (let k = 0; k < SOCKETS; k += 1) {
    const socket = connect(server.address().port, '127.0.0.1');
    socket.on('error', () => undefined);
    clients.push(socket);
    if (k % 500 === 499) await turn();
  }
  await sleep(500);
  const collections = [];
  const measured = await holds(async () => {
    for (let k = 0; k < 5; k += 1) {
      const started = performance.now();
      await (metrics.text ? metrics.text() : metrics.registry.metrics());
      collections.push(performance.now() - started);
      await sleep(20);
    }
    return `each collection ${collections.map((ms) => ms.toFixed(1)).join(', ')} ms`;
  });
  report('metrics', `/metrics collected 5 times with ${SOCKETS.toLocaleString('en-US')} sockets open`, measured);
  metrics.stop?.();
  for (const socket of clients) socket.destroy();
  await new Promise((resolve) => server.close(resolve));
}

if (wanted('writer-answers')) {
  const dir = await prefilledDir({});
  const store = new SqliteStore(dir);
  await store.ping();
  const bus = createEventBus();
  // 10 subscribers per delivery, each doing about what a subscriber's message costs (serializing it, about 30 µs here).
  const deliveries = 512;
  const unlisten = [];
  let messages = 0;
  for (let d = 0; d < deliveries; d += 1) {
    for (let s = 0; s < 10; s += 1) {
      unlisten.push(
        bus.listen(uuid(d), (event) => {
          // The subscriber's message is sent in a microtask, as a graphql-ws subscriber's is.
          queueMicrotask(() => {
            const until = performance.now() + 0.03;
            let text = '';
            while (performance.now() < until)
              text = JSON.stringify({
                data: { deliveryEvents: { uid: event.uid, name: event.name, payload: event.payload } },
              });
            messages += text ? 1 : 0;
          });
        }),
      );
    }
  }
  const batcher = new AppendBatcher(store, bus, () => undefined);
  // Warm the path first.
  await Promise.all(
    Array.from({ length: 64 }, (_, d) =>
      batcher.append({ uid: uuid(d), event_name: 'delivery.created', status: 'warm' }, new Date().toISOString()),
    ),
  );
  const measured = await holds(async () => {
    const started = performance.now();
    await Promise.all(
      Array.from({ length: deliveries }, (_, d) =>
        batcher.append(
          { uid: uuid(d), event_name: 'delivery.assigned', status: 'burst', n: d },
          new Date().toISOString(),
        ),
      ),
    );
    return `${messages} subscriber messages; the batch stored and published in ${(performance.now() - started).toFixed(1)} ms`;
  });
  report(
    'writer-answers',
    `a batch of ${deliveries} events answered by the writer thread, published to 10 subscribers each`,
    measured,
  );
  for (const off of unlisten) off();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
}

console.log(
  '\n| cause | what | longest hold (main-thread CPU between two 1 ms beats) | holds over 5 ms | longest wall gap | took |\n| --- | --- | --- | --- | --- | --- |',
);
for (const r of results)
  console.log(
    `| ${r.cause} | ${r.what}${r.detail ? ` (${r.detail})` : ''} | ${r.maxMs.toFixed(1)} ms | ${r.over5} | ${r.wallMaxMs.toFixed(1)} ms | ${(r.wallMs / 1000).toFixed(1)} s |`,
  );
