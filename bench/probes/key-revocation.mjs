// What re-confirming subscriptions' keys costs and how fast a revocation ends a
// stream (issue 31 item 3), against the embedded sandbox in this process:
//
// 1. cost: --subscriptions unfiltered deliveryEvents spread over --keys merchant
//    keys (100 to a socket), then the sandbox's availability requests counted for
//    --intervals intervals of --interval ms: the calls the key watch adds, per
//    minute and per 1,000 subscriptions (nothing else asks availability then);
// 2. latency: --runs times, a fresh key books a delivery the sandbox keeps moving
//    (a milestone every 800 ms or half an interval, and three positions in between:
//    webhooks keep arriving), subscribes deliveryUpdated
//    and an unfiltered deliveryEvents, waits a random part of an interval (a
//    revocation comes at any moment), revokes the key (POST /sandbox/revoke-key)
//    and times each stream's end; prints the median, for each --latency-interval.
//
//   npm run build && node bench/probes/key-revocation.mjs [--keys=10] [--subscriptions=1000]
//     [--interval=1000] [--intervals=10] [--runs=5] [--latency-intervals=300,30000]
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';
import { startApp } from '../../dist/app.js';
import { loadConfig } from '../../dist/config.js';
import { DEFAULT_PLATFORM_ID, startSandbox } from '@delivery-graph/sandbox';

const { values } = parseArgs({
  options: {
    keys: { type: 'string', default: '10' },
    subscriptions: { type: 'string', default: '1000' },
    interval: { type: 'string', default: '1000' },
    intervals: { type: 'string', default: '10' },
    runs: { type: 'string', default: '5' },
    'latency-intervals': { type: 'string', default: '300,30000' },
    quick: { type: 'boolean', default: false },
  },
});
const quick = values.quick;
const KEYS = Number(values.keys);
const SUBSCRIPTIONS = quick ? 100 : Number(values.subscriptions);
const INTERVAL_MS = Number(values.interval);
const INTERVALS = quick ? 3 : Number(values.intervals);
const RUNS = quick ? 2 : Number(values.runs);
const LATENCY_INTERVALS = (quick ? '300' : values['latency-intervals']).split(',').filter(Boolean).map(Number);
const PER_SOCKET = 100;

const merchant = (name) => ({
  key: `sk_test_${name}_${randomBytes(12).toString('hex')}`,
  name,
  platformId: DEFAULT_PLATFORM_ID,
});
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
};

async function stack(merchants, env, stepMs) {
  const sandbox = await startSandbox({ merchants, knobs: { stepMs } });
  const dataDir = mkdtempSync(path.join(tmpdir(), 'dg-key-revocation-'));
  const keyFile = path.join(dataDir, 'webhook.pem');
  writeFileSync(keyFile, sandbox.publicKeyPem);
  const app = await startApp(
    loadConfig({
      PORT: '0',
      UPSTREAM_URL: sandbox.url,
      PLATFORM_ID: sandbox.platformId,
      WEBHOOK_PUBLIC_KEY_FILE: keyFile,
      WEBHOOK_ISSUER: sandbox.issuer,
      DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      UPSTREAM_CHECK_INTERVAL_MS: '3600000',
      RATE_LIMIT_PER_MINUTE: '0',
      // Many new keys from one address at once: no budget of tries, no address cap on their first subscriptions.
      AUTH_FAILURES_PER_MINUTE: '0',
      SUBSCRIPTIONS_PER_ADDRESS: '0',
      ...env,
    }),
  );
  sandbox.setWebhookUrl(app.webhookUrl);
  return {
    app,
    sandbox,
    async stop() {
      await app.stop();
      await sandbox.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

const socket = (app, key) =>
  createClient({
    url: `${app.url.replace('http', 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${key}` },
    retryAttempts: 0,
    lazy: true,
  });

/** Subscribes; resolves `first` on the first message, `ended` when it ends (with its errors' codes). */
function subscribe(client, query, variables) {
  let first;
  let ended;
  const firstMessage = new Promise((resolve) => (first = resolve));
  const end = new Promise((resolve) => (ended = resolve));
  const codes = [];
  client.subscribe(
    { query, variables },
    {
      next: (message) => {
        for (const error of message.errors ?? []) codes.push(error.extensions?.code);
        first();
      },
      error: (error) => {
        for (const item of Array.isArray(error) ? error : [error])
          codes.push(item?.extensions?.code ?? String(item?.code ?? item));
        ended(codes);
      },
      complete: () => ended(codes),
    },
  );
  return { first: firstMessage, ended: end };
}

async function cost() {
  const merchants = Array.from({ length: KEYS }, (_, i) => merchant(`cost${i}`));
  const { app, sandbox, stop } = await stack(merchants, { KEY_RECONFIRM_INTERVAL_MS: String(INTERVAL_MS) }, 0);
  const clients = [];
  try {
    const started = [];
    for (let i = 0; i < SUBSCRIPTIONS; i += 1) {
      const key = merchants[i % KEYS].key;
      // 100 to a socket, each socket one key's.
      const slot = Math.floor(i / (KEYS * PER_SOCKET)) * KEYS + (i % KEYS);
      clients[slot] ??= socket(app, key);
      started.push(subscribe(clients[slot], 'subscription { deliveryEvents { uid } }', {}));
    }
    // An unfiltered deliveryEvents asks availability as it starts, then listens: wait until all listen.
    const deadline = Date.now() + 120_000;
    while (app.services.subscriptions.open < SUBSCRIPTIONS || app.services.keyWatch.keys < KEYS) {
      if (Date.now() > deadline)
        throw new Error(`only ${app.services.subscriptions.open} of ${SUBSCRIPTIONS} subscriptions open`);
      await sleep(50);
    }
    await sleep(500);
    const mark = sandbox.requestCount;
    const from = Date.now();
    await sleep(INTERVALS * INTERVAL_MS);
    const seconds = (Date.now() - from) / 1000;
    const calls = sandbox.requestsSince(mark).filter((request) => request.path.endsWith('/availability')).length;
    const perMinute = (calls / seconds) * 60;
    console.log(
      `cost: ${SUBSCRIPTIONS} subscriptions over ${KEYS} keys, KEY_RECONFIRM_INTERVAL_MS=${INTERVAL_MS}: ${calls} availability calls in ${seconds.toFixed(1)} s`,
    );
    console.log(
      `  = ${perMinute.toFixed(1)} a minute, ${(perMinute / KEYS).toFixed(2)} per key (at most ${(60_000 / INTERVAL_MS).toFixed(1)}: one per key per interval), whatever the ${SUBSCRIPTIONS} subscriptions`,
    );
    console.log(
      `  so at the 30 s default: ${((perMinute / KEYS) * (INTERVAL_MS / 30_000)).toFixed(2)} per key a minute, ${((perMinute / KEYS) * (INTERVAL_MS / 30_000) * KEYS).toFixed(1)} for these ${KEYS} keys`,
    );
    const counters = app.services.keyWatch.counters;
    console.log(`  key watch: ${JSON.stringify(counters)}`);
  } finally {
    for (const client of clients) await client?.dispose();
    await stop();
  }
}

async function latency(intervalMs) {
  const merchants = Array.from({ length: RUNS }, (_, i) => merchant(`revoked${i}`));
  // Each delivery must outlive the wait and the end (two intervals at most): 8 milestones, one every step.
  const stepMs = Math.max(800, Math.ceil(intervalMs / 2));
  const { app, sandbox, stop } = await stack(merchants, { KEY_RECONFIRM_INTERVAL_MS: String(intervalMs) }, stepMs);
  const times = [];
  try {
    for (const { key } of merchants) {
      const booked = await (
        await fetch(`${app.url}/graphql`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
          body: JSON.stringify({
            query: `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`,
            variables: { input: deliveryInput() },
          }),
        })
      ).json();
      const uid = booked.data?.createDelivery?.data?.uid;
      if (!uid) throw new Error(`booking failed: ${JSON.stringify(booked)}`);
      const client = socket(app, key);
      const updated = subscribe(client, 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name } }', { uid });
      const events = subscribe(client, 'subscription { deliveryEvents { uid } }', {});
      await Promise.all([updated.first, events.first]);
      await sleep(Math.random() * intervalMs);
      const revokedAt = Date.now();
      const response = await fetch(`${sandbox.origin}/sandbox/revoke-key`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}` },
      });
      if (response.status !== 200) throw new Error(`revoke-key answered ${response.status}`);
      const ends = await Promise.all(
        [updated.ended, events.ended].map((ended) => ended.then((codes) => ({ ms: Date.now() - revokedAt, codes }))),
      );
      for (const end of ends)
        if (!end.codes.includes('UNAUTHENTICATED'))
          throw new Error(`a stream ended without UNAUTHENTICATED: ${JSON.stringify(end.codes)}`);
      times.push(...ends.map((end) => end.ms));
      await client.dispose();
    }
    console.log(
      `latency: KEY_RECONFIRM_INTERVAL_MS=${intervalMs}, ${RUNS} revocations, 2 streams each: revocation to end median ${median(times)} ms, min ${Math.min(...times)}, max ${Math.max(...times)} (${times.join(', ')})`,
    );
  } finally {
    await stop();
  }
}

function deliveryInput() {
  return {
    pickup: {
      name: 'Ada Shop',
      phone: '+15550100',
      email: 'shop@example.com',
      address: { street: 'Main St', number: '1', city: 'Springfield', country: 'US', postalCode: '12345' },
    },
    dropoff: {
      name: 'Grace Customer',
      phone: '+15550199',
      email: 'grace@example.com',
      address: { street: 'Elm St', number: '42', city: 'Springfield', country: 'US' },
      windowStart: '2030-05-01T16:00:00+02:00',
    },
    deliveryDate: '2030-05-01',
    description: 'Two books',
    tip: '3.50',
    declaredValue: '45.10',
    currency: 'USD',
  };
}

await cost();
for (const intervalMs of LATENCY_INTERVALS) await latency(intervalMs);
