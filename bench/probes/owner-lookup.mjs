// What looking up the owner record of a delivery nobody recorded costs the embedded store (the common first read), over
// a file of --records owner records, on the compiled code (dist/): ownersOf of a fresh uid (a query by primary key)
// against ownersOf of nothing (the same call without the query). The difference is what a filter of recorded uids in
// memory could save a read (docs/architecture.md, "Mechanisms beside a library's own": such a filter was
// measured and removed). Usage: npm run build && node bench/probes/owner-lookup.mjs [--records=100000]
// [--lookups=50000] [--rounds=3]
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { probeFlags } from '../scenarios/single-read.mjs';

const flags = probeFlags();
const records = Number(flags.records ?? 100_000);
const lookups = Number(flags.lookups ?? 50_000);
const rounds = Number(flags.rounds ?? 3);
const { SqliteStore } = await import(new URL('../../dist/store/sqlite.js', import.meta.url).href);
const dir = mkdtempSync(path.join(tmpdir(), 'dg-owner-lookup-'));
const store = new SqliteStore(dir);
for (let written = 0; written < records; written += 1000)
  await store.recordOwners(
    Array.from({ length: 1000 }, () => ({
      uid: randomUUID(),
      owner: 'a'.repeat(64),
      group: 'PLATFORM',
      proof: 'read',
    })),
  );
console.log(
  `| round | ownersOf a fresh uid (µs) | ownersOf nothing (µs) | the query (µs) |\n| --- | --- | --- | --- |`,
);
for (let round = 1; round <= rounds; round += 1) {
  const uids = Array.from({ length: lookups }, () => randomUUID());
  let started = performance.now();
  for (const uid of uids) await store.ownersOf([uid]);
  const fresh = ((performance.now() - started) * 1000) / lookups;
  started = performance.now();
  for (let i = 0; i < lookups; i += 1) await store.ownersOf([]);
  const none = ((performance.now() - started) * 1000) / lookups;
  console.log(`| ${round} | ${fresh.toFixed(2)} | ${none.toFixed(2)} | ${(fresh - none).toFixed(2)} |`);
}
await store.close();
rmSync(dir, { recursive: true, force: true });
