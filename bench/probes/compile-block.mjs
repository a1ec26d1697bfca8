// How long one operation holds the event loop when its plan is run for the
// second time, which is when the facade compiles it with graphql-jit (issue 29:
// "each token-triggered compile blocks the event loop about 300 ms"). For each
// build, each document and each caller, the build's own Documents decide as the
// pipeline does (this build: Documents.mayCompile; a build without it: compile
// on the second run of anyone who earned the cache), and that second run is
// timed, compile and execution: what every other request waits behind. No HTTP,
// no upstream: the loader answers with the fixed upstream's delivery.
//   documents: the single read (bench/scenarios/single-read.mjs, 40 fields), a
//   full delivery (about 50 fields), issue 29's fragment-heavy document (28
//   aliases spreading one fragment: 1,456 fields, 2 KB of text).
// With --before=<other checkout>/dist, that build runs the same documents in the
// same rounds, alternating.
//
//   npm run build && node bench/probes/compile-block.mjs [--rounds=5] [--before=<checkout>/dist]
import path from 'node:path';
import { parseArgs } from 'node:util';
import { cannedDelivery } from '../lib/fixed-upstream.mjs';
import { FACADE_SINGLE_READ } from '../scenarios/single-read.mjs';
import { fragmentHeavyDocument, FULL_DELIVERY_FIELDS } from '../lib/flood-documents.mjs';

const { values } = parseArgs({ options: { rounds: { type: 'string', default: '5' }, before: { type: 'string' } } });
const rounds = Number(values.rounds);

const UID = '00000000-0000-4000-8000-000000000001';
const DOCUMENTS = {
  'single read (40 fields)': (n) => FACADE_SINGLE_READ.replace('query Read', `query Read${n}`),
  'full delivery (about 50 fields)': (n) =>
    `query Full${n}($uid: ID!) { delivery(uid: $uid) { ${FULL_DELIVERY_FIELDS} } }`,
  "issue 29's fragment-heavy document (1,456 fields)": (n) => fragmentHeavyDocument(n, UID),
};
const CALLERS = {
  'merchant key': { kind: 'merchant', key: 'sk_bench_merchant' },
  'client token': {
    kind: 'client-token',
    key: 'sk_bench_merchant',
    token: { key: 'sk_bench_merchant', uids: [UID], expiresAt: new Date(Date.now() + 3_600_000), token: 'probe' },
  },
};

async function buildOf(dist) {
  const { toSchema } = await import(path.join(dist, 'graphql/schema.js'));
  const { Documents } = await import(path.join(dist, 'pipeline/documents.js'));
  const { fromPlatformDelivery } = await import(path.join(dist, 'mapping/delivery.js'));
  const { loadConfig } = await import(path.join(dist, 'config.js'));
  // The build's defaults, as its facade would start with them (an older build ignores settings it does not know).
  const { graphql } = loadConfig({ UPSTREAM_URL: 'http://127.0.0.1:1/api/v1', PLATFORM_ID: 'probe', DATA_DIR: '/tmp' });
  const documents = new Documents({
    schema: toSchema(),
    maxBatch: 100,
    hideSuggestions: true,
    introspection: false,
    federationSdl: false,
    ...graphql,
  });
  const delivery = fromPlatformDelivery(cannedDelivery(UID));
  // As pipeline.ts decides: this build asks its Documents; an older one compiled from the second run of any earned
  // caller.
  const compiles = (plan, caller) =>
    documents.mayCompile ? documents.mayCompile(plan, caller, 'earned') : ++plan.runs >= 2;
  return { documents, delivery, compiles };
}

function contextFor(delivery) {
  return {
    requireKey: () => 'sk_bench_merchant',
    deliveryLoader: () => ({ load: () => Promise.resolve(delivery) }),
    services: { config: { upstream: { amountUnit: 'cents' } }, store: { eventsAfter: async () => [] } },
    clientGone: () => undefined,
  };
}

/**
 * A plan's second run (the first runs on graphql-js either way), start to
 * answer: the loader's delivery is there at once, so all of it is the loop's
 * (its synchronous part and the microtasks after it, which nothing else can
 * interrupt). Its ms, and whether it compiled.
 */
async function secondRun(build, text, caller) {
  const entry = build.documents.entry(text, true);
  if (entry.validation().length > 0) throw new Error(`invalid: ${entry.validation()[0].message}`);
  const plan = entry.plan(undefined);
  const context = contextFor(build.delivery);
  await plan.run(context, { uid: UID }, build.compiles(plan, caller));
  const started = performance.now();
  await plan.run(context, { uid: UID }, build.compiles(plan, caller));
  return { held: performance.now() - started, compiled: plan.compiled };
}

const builds = { after: await buildOf(path.resolve(new URL('../../dist', import.meta.url).pathname)) };
if (values.before) builds.before = await buildOf(path.resolve(values.before));

let serial = 0;
const figures = {};
for (let round = 0; round < rounds; round += 1) {
  for (const [documentName, make] of Object.entries(DOCUMENTS)) {
    for (const [callerName, caller] of Object.entries(CALLERS)) {
      for (const [label, build] of Object.entries(builds)) {
        // A distinct text each time: a compile of a text already compiled is V8's cache, not the compiler.
        const { held, compiled } = await secondRun(build, make((serial += 1)), caller);
        const cell = (figures[`${documentName}|${callerName}|${label}`] ??= { held: [], compiled: 0 });
        cell.held.push(held);
        if (compiled) cell.compiled += 1;
      }
    }
  }
}
const median = (list) => [...list].sort((a, b) => a - b)[Math.floor(list.length / 2)];
const max = (list) => Math.max(...list);
console.log(
  `loop held by a plan's second run (compile, if any, and execution), ms: median / max of ${rounds} (compiled in how many)`,
);
for (const documentName of Object.keys(DOCUMENTS)) {
  for (const callerName of Object.keys(CALLERS)) {
    const cells = Object.keys(builds).map((label) => {
      const { held, compiled } = figures[`${documentName}|${callerName}|${label}`];
      return `${label} ${median(held).toFixed(1)} / ${max(held).toFixed(1)} (${compiled}/${rounds} compiled)`;
    });
    console.log(`${documentName}, ${callerName}: ${cells.join('; ')}`);
  }
}
