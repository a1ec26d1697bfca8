// The SQLite writer thread against better-sqlite3's own way (synchronous, on
// the caller's thread): the same batches of webhook events, at the realtime-one
// pace (a batch of --batch events every --batch ms, as the group commit's window
// makes them at 1,000 events/s), appended (a) through SqliteStore, whose writes
// run on its writer thread, and (b) with the store's own event writes
// (dist/store/sqlite-append.js) on this thread, each batch one IMMEDIATE
// transaction with synchronous = FULL. Prints, per event, the CPU of this
// process over all its threads and of its main thread alone, and the event
// loop's delay while it ran (what every other request would wait): with (b) each
// commit's fsync holds the loop.
//
//   npm run build && node bench/probes/writer-thread.mjs [--events=5000] [--batch=5] [--rounds=3]
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '5000' },
    batch: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
  },
});
const EVENTS = Number(values.events);
const BATCH = Number(values.batch);
const ROUNDS = Number(values.rounds);
const dist = new URL('../../dist/', import.meta.url);
const { SqliteStore } = await import(new URL('store/sqlite.js', dist).href);
const { EventAppender } = await import(new URL('store/sqlite-append.js', dist).href);

const TICK_US = 1e4;
const mainCpuUs = () => {
  const fields = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_US;
};
const processCpuUs = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};

let serial = 0;
const batchOf = () =>
  Array.from({ length: BATCH }, () => {
    serial += 1;
    return {
      payload: {
        uid: `00000000-0000-4000-9000-${String(serial % 1000).padStart(12, '0')}`,
        event_name: 'delivery.dropoff_enroute',
        status: `e${serial}`,
      },
      receivedAt: new Date().toISOString(),
    };
  });
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Appends EVENTS events a batch at a time, one batch per BATCH ms; CPU per event and the loop's delay. */
async function run(append) {
  const loop = monitorEventLoopDelay({ resolution: 1 });
  const cpu = [processCpuUs(), mainCpuUs()];
  loop.enable();
  for (let sent = 0; sent < EVENTS; sent += BATCH) {
    const began = performance.now();
    await append(batchOf());
    await pause(Math.max(0, BATCH - (performance.now() - began)));
  }
  loop.disable();
  return {
    all: (processCpuUs() - cpu[0]) / EVENTS,
    main: (mainCpuUs() - cpu[1]) / EVENTS,
    loopP99: loop.percentile(99) / 1e6,
    loopMax: loop.max / 1e6,
  };
}

const variants = {
  'SqliteStore: the writer thread commits': async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'dg-writer-thread-'));
    const store = new SqliteStore(dir);
    await store.ping();
    const result = await run((events) => store.appendEvents(events));
    await store.close();
    rmSync(dir, { recursive: true, force: true });
    return result;
  },
  "better-sqlite3's way: the same writes on this thread": async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'dg-writer-thread-'));
    // The schema, made by the store as it opens the file.
    await new SqliteStore(dir).close();
    const db = new Database(path.join(dir, 'delivery-graph.sqlite'));
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    const appender = new EventAppender(db);
    const commit = db.transaction((events) => appender.append(events));
    const result = await run(async (events) =>
      commit.immediate(events.map(({ payload, receivedAt }) => ({ json: JSON.stringify(payload), receivedAt }))),
    );
    db.close();
    rmSync(dir, { recursive: true, force: true });
    return result;
  },
};

const results = Object.fromEntries(Object.keys(variants).map((name) => [name, []]));
for (let round = 0; round < ROUNDS; round += 1)
  for (const [name, variant] of Object.entries(variants)) results[name].push(await variant());
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const fmt = (value) => value.toFixed(1);
console.log(`${EVENTS} events in batches of ${BATCH}, one batch every ${BATCH} ms; medians of ${ROUNDS} round(s)`);
console.log('| variant | CPU per event, all threads | main thread | event-loop delay p99 / max |');
console.log('| --- | --- | --- | --- |');
for (const [name, rounds] of Object.entries(results)) {
  const m = (pick) => median(rounds.map(pick));
  console.log(
    `| ${name} | ${fmt(m((r) => r.all))} µs | ${fmt(m((r) => r.main))} µs | ${fmt(m((r) => r.loopP99))} / ${fmt(m((r) => r.loopMax))} ms |`,
  );
}
