// How long one group commit of the SQLite event store holds the event loop.
// better-sqlite3 is synchronous: a commit, with its WAL fsync under
// `synchronous = FULL`, runs on the main thread, and nothing else (webhook
// acknowledgements, fan-out to subscribers) runs meanwhile. This appends single
// events one at a time, at about the realtime scenario's pace, and prints the
// distribution of the time each append took.
//
//   npm run build && node bench/probes/sqlite-commit.mjs [--events=5000] [--synchronous=FULL|NORMAL|OFF] [--dir=/path]
//
// --synchronous other than FULL is for comparison only: the facade keeps FULL so
// that an acknowledged event survives a power loss.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: { events: { type: 'string', default: '5000' }, synchronous: { type: 'string', default: 'FULL' }, dir: { type: 'string' } },
});
const { SqliteStore } = await import(new URL('../../dist/store/sqlite.js', import.meta.url).href);

const dir = mkdtempSync(path.join(values.dir ?? tmpdir(), 'dg-commit-probe-'));
const store = new SqliteStore(dir);
if (values.synchronous !== 'FULL') store.db.pragma(`synchronous = ${values.synchronous}`);
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
await store.close();
rmSync(dir, { recursive: true, force: true });

took.sort((a, b) => a - b);
const at = (q) => took[Math.min(took.length - 1, Math.floor(q * took.length))].toFixed(2);
console.log(
  `${events} single-event commits, synchronous=${values.synchronous}: p50 ${at(0.5)} / p99 ${at(0.99)} / p99.9 ${at(0.999)} / max ${took.at(-1).toFixed(2)} ms; ` +
    `${took.filter((ms) => ms > 10).length} over 10 ms`,
);
