// CPU of mapping one upstream read and writing the answer: the fixed upstream's
// body (bench/lib/fixed-upstream.mjs) read into the Delivery model by
// fromPlatformDelivery, then the operation run by graphql-jit over the real
// schema (the build's own OperationPlan) and written by its compiled stringify, as the facade does for a
// cached plan. No HTTP, no upstream call: the loader answers with the mapped
// body. Three variants per build: the mapping alone, the single read's
// selection (bench/scenarios/single-read.mjs, about 25 fields) and a small one
// (what a tracking page asks). With --before=<other checkout>/dist, that build
// runs the same variants in the same rounds, alternating, so the ratio holds
// however busy the machine is.
//
//   npm run build && node bench/probes/mapping.mjs [--reads=20000] [--rounds=3] [--before=<checkout>/dist]
import path from 'node:path';
import { parseArgs } from 'node:util';
import { parse } from 'graphql';
import { cannedDelivery } from '../lib/fixed-upstream.mjs';
import { FACADE_SINGLE_READ } from '../scenarios/single-read.mjs';

const { values } = parseArgs({
  options: {
    reads: { type: 'string', default: '20000' },
    rounds: { type: 'string', default: '3' },
    before: { type: 'string' },
  },
});
const reads = Number(values.reads);

const SMALL_READ = `query Track($uid: ID!) {
  delivery(uid: $uid) { uid status estimatedDropoffAt trackingUrl courier { name location { lat lng } } }
}`;

// Distinct bodies, parsed once: the upstream client hands the mapping a fresh object per read.
const bodies = Array.from({ length: 1000 }, (_, i) =>
  JSON.parse(JSON.stringify(cannedDelivery(`00000000-0000-4000-8000-${String(i).padStart(12, '0')}`))),
);

async function buildOf(dist) {
  const { fromPlatformDelivery } = await import(path.join(dist, 'mapping/delivery.js'));
  const { toSchema } = await import(path.join(dist, 'graphql/schema.js'));
  const schema = toSchema();
  const { planOf } = await import(path.join(dist, 'pipeline/plan.js'));
  // The build's own plan, so its own graphql and graphql-jit compile it (an AST is plain data, parsed anywhere).
  const compile = (query) => planOf(parse(query), undefined, { schema, maxBatch: 100, hideSuggestions: true });
  return { fromPlatformDelivery, full: compile(FACADE_SINGLE_READ), small: compile(SMALL_READ) };
}

function contextFor(delivery) {
  return {
    requireKey: () => 'sk_bench_merchant',
    deliveryLoader: () => ({ load: () => Promise.resolve(delivery) }),
    services: { config: { upstream: { amountUnit: 'cents', itemPriceUnit: 'cents' } } },
    clientGone: () => undefined,
  };
}

const builds = { after: await buildOf(path.resolve(new URL('../../dist', import.meta.url).pathname)) };
if (values.before) builds.before = await buildOf(path.resolve(values.before));

let serial = 0;
const variants = {
  'mapping alone': async (build) => build.fromPlatformDelivery(bodies[serial++ % bodies.length]).uid.length,
  'mapping + single read (25 fields)': (build) => run(build, build.full),
  'mapping + small read (7 fields)': (build) => run(build, build.small),
};

async function run(build, plan) {
  const body = bodies[serial++ % bodies.length];
  const result = await plan.run(contextFor(build.fromPlatformDelivery(body)), { uid: body.uid }, true);
  if (result.errors || !result.stringify) throw new Error(`not run by the jit: ${JSON.stringify(result.errors)}`);
  return result.stringify(result).length;
}

/** µs of this process's CPU per read, over `reads` reads. */
async function measure(build, variant) {
  let sink = 0;
  const start = process.cpuUsage();
  for (let i = 0; i < reads; i += 1) sink += await variant(build);
  const used = process.cpuUsage(start);
  if (sink === 0) throw new Error('nothing written');
  return (used.user + used.system) / reads;
}

// Warm-up: every build and variant, so the JIT has seen them all before counting.
for (const build of Object.values(builds)) for (const variant of Object.values(variants)) await measure(build, variant);

const figures = {};
for (let round = 0; round < Number(values.rounds); round += 1) {
  for (const [name, variant] of Object.entries(variants)) {
    for (const [label, build] of Object.entries(builds))
      (figures[`${name}|${label}`] ??= []).push(await measure(build, variant));
  }
}
for (const name of Object.keys(variants)) {
  const after = figures[`${name}|after`];
  const before = figures[`${name}|before`];
  const fmt = (list) => list.map((us) => us.toFixed(1)).join(', ');
  const median = (list) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)];
  console.log(
    `${name}: ${fmt(after)} us${before ? ` (before: ${fmt(before)} us; median after/before ${(median(after) / median(before)).toFixed(2)})` : ''}`,
  );
}
