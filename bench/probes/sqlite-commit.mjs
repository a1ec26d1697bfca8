// How long one commit of the SQLite event store takes, and how long it holds
// the event loop. Every write goes to the store's writer thread
// (src/store/sqlite-writer.ts): an append resolves after its commit and WAL
// fsync (`synchronous = FULL`), but the main thread's event loop goes on
// meanwhile. This appends single events one at a time, at about the realtime
// scenario's pace, and prints the distribution of the time each append took
// (what an acknowledgement waits) and of the event loop's delay (what every
// other request waits).
//
//   npm run build && node bench/probes/sqlite-commit.mjs [--events=5000] [--dir=/path]
//
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { events: { type: 'string', default: '5000' }, dir: { type: 'string' } },
});
const { SqliteStore } = await import(new URL('../../dist/store/sqlite.js', import.meta.url).href);

const dir = mkdtempSync(path.join(values.dir ?? tmpdir(), 'dg-commit-probe-'));
const store = new SqliteStore(dir);
await store.ping();
const loop = monitorEventLoopDelay({ resolution: 1 });
loop.enable();
const events = Number(values.events);
const event = (n) => ({
  event_id: `probe-${n}`,
  event_name: 'delivery.assigned',
  uid: `probe-delivery-${n % 100}`,
  status: 'Assigned',
  created: new Date().toISOString(),
  driver_location: { lat: 37.77, lng: -122.42 },
});

const took = [];
for (let n = 0; n < events; n += 1) {
  const start = process.hrtime.bigint();
  await store.appendEvents([{ payload: event(n), receivedAt: new Date().toISOString() }]);
  took.push(Number(process.hrtime.bigint() - start) / 1e6);
  // About 500 commits a second, as at the realtime scenario's rate.
  await new Promise((resolve) => setTimeout(resolve, 2));
}
loop.disable();
await store.close();
rmSync(dir, { recursive: true, force: true });

took.sort((a, b) => a - b);
const at = (q) => took[Math.min(took.length - 1, Math.floor(q * took.length))].toFixed(2);
console.log(
  `${events} single-event commits: p50 ${at(0.5)} / p99 ${at(0.99)} / p99.9 ${at(0.999)} / max ${took.at(-1).toFixed(2)} ms; ` +
    `${took.filter((ms) => ms > 10).length} over 10 ms`,
);
const ms = (ns) => (ns / 1e6).toFixed(2);
console.log(
  `event-loop delay meanwhile: p50 ${ms(loop.percentile(50))} / p99 ${ms(loop.percentile(99))} / max ${ms(loop.max)} ms`,
);
