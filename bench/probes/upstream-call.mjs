// CPU of one upstream read in the facade's client, against the same GET made with bare undici (pool.request,
// body.text(), JSON.parse). The fixed upstream runs in a process of its own, so this process's CPU time is the
// client's. 32 reads in flight at a time, each of a uid of its own, with a request signal as a GraphQL read passes one;
// the two variants alternate per round.
//
//   npm run build && node bench/probes/upstream-call.mjs [--reads=20000] [--rounds=3] [--dist=<other checkout>/dist] [--only=facade|bare]
// (--only and node --cpu-prof: a profile of one variant.)
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { startUpstream } from '../lib/contenders.mjs';
import { PLATFORM_ID } from '../lib/fixed-upstream.mjs';
import { stop } from '../lib/proc.mjs';

const { values } = parseArgs({
  options: {
    reads: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    dist: { type: 'string' },
    only: { type: 'string' },
  },
});
const dist = path.resolve(values.dist ?? new URL('../../dist', import.meta.url).pathname);
const { createUpstream } = await import(path.join(dist, 'upstream/clients.js'));
const reads = Number(values.reads);
const KEY = 'sk_bench_merchant';
const CONCURRENCY = 32;

const upstream = await startUpstream();
const client = createUpstream({
  url: upstream.url,
  platformId: PLATFORM_ID,
  timeoutMs: 10_000,
  connections: 32,
  maxResponseBytes: 1_048_576,
});
const pool = new Pool(upstream.origin, { connections: 32, pipelining: 1 });

const variants = {
  'facade client (platform.get)': (uid, signal) => client.platform.get(KEY, uid, { signal }),
  'bare undici': async (uid) => {
    const response = await pool.request({
      method: 'GET',
      path: `/api/v1/${PLATFORM_ID}/deliveries/${uid}`,
      headers: { accept: 'application/json', authorization: `Bearer ${KEY}` },
    });
    return JSON.parse(await response.body.text()).data;
  },
};

if (values.only) for (const name of Object.keys(variants)) if (!name.startsWith(values.only)) delete variants[name];

let serial = 0;
/** µs of this process's CPU per read, over `reads` reads. */
async function measure(read) {
  const controller = new AbortController();
  let next = 0;
  const worker = async () => {
    while (next < reads) {
      next += 1;
      serial += 1;
      const delivery = await read(`probe-${serial}`, controller.signal);
      if (!delivery?.uid) throw new Error('no delivery in the answer');
    }
  };
  const cpu = process.cpuUsage();
  const started = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  const used = process.cpuUsage(cpu);
  return { cpuUs: (used.user + used.system) / reads, rps: reads / ((performance.now() - started) / 1000) };
}

// Warm-up (JIT, connections) before anything is counted.
for (const read of Object.values(variants)) await measure(read);
const results = Object.fromEntries(Object.keys(variants).map((name) => [name, []]));
for (let round = 0; round < Number(values.rounds); round += 1) {
  for (const [name, read] of Object.entries(variants)) results[name].push(await measure(read));
}
await client.close();
await pool.close();
await stop(upstream.child);

console.log(`${reads} reads per round, ${CONCURRENCY} in flight, client from ${dist}`);
for (const [name, runs] of Object.entries(results)) {
  const cpu = runs.map((r) => r.cpuUs.toFixed(1)).join(', ');
  const rps = runs.map((r) => r.rps.toFixed(0)).join(', ');
  console.log(`${name}: CPU per read ${cpu} µs; reads/s ${rps}`);
}
