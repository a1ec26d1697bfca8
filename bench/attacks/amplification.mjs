// Amplification attack against /health: one client repeats a small request whose
// answer multiplies (aliases × one uid repeated in deliveries(uids:) × a page of
// events × each event's delivery payload) while a prober times GET /health.
// Starts its own facade (embedded sandbox, production mode, SQLite), books one
// delivery, lets it run to DROPOFF_COMPLETE so it has its events, then runs each
// phase for --seconds and prints /health p50/p99/max, the facade's peak RSS, and
// what the attacker got back.
//
//   node bench/attacks/amplification.mjs [--seconds 10] [--payload-bytes 1024] [--dist]
//
// --dist runs the compiled dist/main.js (npm run build first); by default the
// sources run through tsx. Traffic stays on 127.0.0.1; every loop ends by time.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { ROOT, sleep, spawnReady } from '../lib/proc.mjs';

const { values: options } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    'payload-bytes': { type: 'string', default: '1024' },
    dist: { type: 'boolean', default: false },
  },
});
const SECONDS = Number(options.seconds);
const PAYLOAD_BYTES = Number(options['payload-bytes']);
const KEY = 'sk_test_demo_merchant';

/** The reported attack: 30 aliases of deliveries(uids: one uid × 100) { events { delivery { payload } } }. */
const ATTACK = `query Amplify($uids: [ID!]!) { ${Array.from(
  { length: 30 },
  (_, i) => `a${i}: deliveries(uids: $uids) { events { edges { node { delivery { payload } } } } }`,
).join(' ')} }`;
/** The heaviest page of events that the cost limit still lets through for 100 copies of one uid. */
const NEAR_LIMIT =
  'query Amplify($uids: [ID!]!) { deliveries(uids: $uids) { events(first: 120) { edges { node { delivery { payload } } } } } }';
/** No events at all: 30 aliases × 100 copies × the payload (cost 6,000, let through; bounded by the response size). */
const PAYLOADS = `query Amplify($uids: [ID!]!) { ${Array.from({ length: 30 }, (_, i) => `a${i}: deliveries(uids: $uids) { payload }`).join(' ')} }`;

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function startFacade() {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dg-attack-'));
  const entry = options.dist ? [path.join(ROOT, 'dist/main.js')] : ['--import', 'tsx', path.join(ROOT, 'src/main.ts')];
  const facade = await spawnReady(process.execPath, entry, {
    env: {
      PORT: '0',
      DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      NODE_ENV: 'production',
      SANDBOX_PORT: '0',
      SANDBOX_STEP_MS: '20',
      SANDBOX_RETURN_RATE: '0',
      // The simulator in production must be asked for by name.
      UPSTREAM_URL: 'sandbox',
    },
    ready: /serving on (http:\/\/\S+)/,
    timeoutMs: 120_000,
  });
  return { ...facade, origin: facade.match[1], dataDir };
}

async function gql(origin, query, variables) {
  const response = await fetch(`${origin}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ query, variables }),
  });
  const text = await response.text();
  return { status: response.status, bytes: Buffer.byteLength(text), text };
}

/** Books one delivery with a payload of about `bytes` and waits (bounded) until its last milestone is stored. */
async function bookFinishedDelivery(origin, bytes) {
  const booked = await gql(
    origin,
    'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } ... on Error { code message } } }',
    {
      input: {
        pickup: {
          name: 'Ada Shop',
          email: 'shop@example.com',
          address: { street: 'Main St', city: 'Springfield', country: 'US' },
        },
        dropoff: { name: 'Grace', address: { street: 'Elm St', city: 'Springfield', country: 'US' } },
        mode: 'NOW',
        payload: { orderId: 'attack-1', note: 'n'.repeat(Math.max(0, bytes - 40)) },
      },
    },
  );
  const uid = JSON.parse(booked.text).data?.createDelivery?.data?.uid;
  if (!uid) throw new Error(`booking failed: ${booked.text.slice(0, 300)}`);
  const deadline = Date.now() + 60_000;
  let events = 0;
  while (Date.now() < deadline) {
    const read = JSON.parse(
      (
        await gql(origin, 'query($uid: ID!) { delivery(uid: $uid) { status events { edges { node { name } } } } }', {
          uid,
        })
      ).text,
    );
    events = read.data?.delivery?.events.edges.length ?? 0;
    if (read.data?.delivery?.status === 'DROPOFF_COMPLETE' && events > 0) break;
    await sleep(100);
  }
  return { uid, events };
}

/** One phase: the attacker repeats `query` (if any) while /health is probed every 10 ms and RSS sampled. */
async function phase(facade, name, query, variables) {
  const until = performance.now() + SECONDS * 1000;
  const health = [];
  let peakRssKb = facade.rssKb();
  const answers = new Map();
  let attackerBytes = 0;
  let attackerMs = 0;
  let attacks = 0;

  const prober = (async () => {
    while (performance.now() < until) {
      const started = performance.now();
      const response = await fetch(`${facade.origin}/health`);
      await response.arrayBuffer();
      health.push(performance.now() - started);
      await sleep(10);
    }
  })();
  const sampler = (async () => {
    while (performance.now() < until) {
      peakRssKb = Math.max(peakRssKb, facade.rssKb());
      await sleep(50);
    }
  })();
  const attacker = (async () => {
    if (!query) return;
    while (performance.now() < until) {
      const started = performance.now();
      let outcome;
      try {
        const answer = await gql(facade.origin, query, variables);
        attackerBytes += answer.bytes;
        const body = JSON.parse(answer.text);
        outcome = body.errors?.length
          ? `${answer.status} ${body.errors[0].extensions?.code ?? '-'}: ${body.errors[0].message.slice(0, 70)}`
          : `${answer.status} data`;
      } catch (error) {
        outcome = `failed: ${error.message}`;
      }
      attackerMs += performance.now() - started;
      attacks += 1;
      answers.set(outcome, (answers.get(outcome) ?? 0) + 1);
    }
  })();
  await Promise.all([prober, sampler, attacker]);

  const sorted = [...health].sort((a, b) => a - b);
  return {
    name,
    probes: sorted.length,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.at(-1),
    peakRssMb: peakRssKb / 1024,
    attacks,
    meanAnswerKb: attacks ? attackerBytes / attacks / 1024 : 0,
    meanAnswerMs: attacks ? attackerMs / attacks : 0,
    answers: [...answers].map(([outcome, count]) => `${count} × ${outcome}`),
  };
}

const facade = await startFacade();
try {
  const { uid, events } = await bookFinishedDelivery(facade.origin, PAYLOAD_BYTES);
  const uids = Array(100).fill(uid);
  console.log(
    `facade ${facade.origin}; one delivery with ${events} events and a payload of ~${PAYLOAD_BYTES} bytes; ${SECONDS} s per phase`,
  );
  const results = [];
  results.push(await phase(facade, 'no attack', undefined));
  results.push(
    await phase(facade, 'the attack: 30 aliases × 100 copies × events × delivery × payload', ATTACK, { uids }),
  );
  results.push(
    await phase(facade, 'near the limit: 100 copies × events(first: 120) × delivery × payload', NEAR_LIMIT, { uids }),
  );
  results.push(await phase(facade, 'payloads only: 30 aliases × 100 copies × payload', PAYLOADS, { uids }));
  console.log(
    '\n| phase | /health probes | p50 ms | p99 ms | max ms | peak RSS MB | attacks | mean answer KB | mean answer ms |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|');
  for (const r of results) {
    console.log(
      `| ${r.name} | ${r.probes} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.max.toFixed(2)} | ${r.peakRssMb.toFixed(0)} | ${r.attacks} | ${r.meanAnswerKb.toFixed(1)} | ${r.meanAnswerMs.toFixed(1)} |`,
    );
  }
  console.log('\nWhat the attacker got:');
  for (const r of results.filter((result) => result.attacks > 0)) console.log(`- ${r.name}: ${r.answers.join('; ')}`);
} finally {
  await facade.stop();
  rmSync(facade.dataDir, { recursive: true, force: true });
}
