// One execution per event across instances on Redis: every instance hears each
// event once (redis-bus.ts) and executes it once for its own subscribers of the
// same operation, variables and key, whichever instance stored it.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { exportPKCS8, exportSPKI, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { startSandbox, type Sandbox } from '@delivery-graph/sandbox';
import { countExecutions } from '../helpers/executions.js';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { deliveryInput, TEST_CLIENT_TOKEN_SECRET } from '../helpers/stack.js';
import { listenersAttached } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const EVENTS = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { cursor uid name statusText } }`;

const withRedis = redisAvailable('fanout-redis.test.ts');

let redis: RedisServer;
let sandbox: Sandbox;
let privateKey: CryptoKey;
let workDir: string;
const apps: App[] = [];

async function startInstance(name: string): Promise<App> {
  const app = await startApp(
    loadConfig({
      PORT: '0',
      UPSTREAM_URL: sandbox.url,
      PLATFORM_ID: sandbox.platformId,
      WEBHOOK_PUBLIC_KEY_FILE: path.join(workDir, 'webhook-public.pem'),
      WEBHOOK_ISSUER: sandbox.issuer,
      DATA_DIR: path.join(workDir, name),
      REDIS_URL: redis.url,
      CLIENT_TOKEN_SECRET: TEST_CLIENT_TOKEN_SECRET,
      LOG_LEVEL: 'silent',
    }),
  );
  apps.push(app);
  return app;
}

beforeAll(async () => {
  if (!withRedis) return;
  workDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-fanout-'));
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey as CryptoKey;
  writeFileSync(path.join(workDir, 'webhook-public.pem'), await exportSPKI(pair.publicKey));
  [redis, sandbox] = await Promise.all([
    startRedisServer(),
    startSandbox({ privateKeyPem: await exportPKCS8(pair.privateKey), knobs: { stepMs: 0 } }),
  ]);
  // Every event is the test's own.
  sandbox.setWebhookUrl(undefined);
  await Promise.all([startInstance('a'), startInstance('b')]);
});
afterAll(async () => {
  for (const app of apps) await app.stop().catch(() => {});
  await sandbox?.stop();
  await redis?.stop();
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

describe.skipIf(!withRedis)('two instances on one Redis', () => {
  it('each executes an event once for all its own subscribers of it, whichever instance stored it', async () => {
    const [a, b] = apps as [App, App];
    const key = sandbox.merchants[0]!.key;
    const booked = await fetch(`${a.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      body: JSON.stringify({ query: CREATE, variables: { input: deliveryInput() } }),
    });
    const uid = ((await booked.json()) as { data: { createDelivery: { data: { uid: string } } } }).data.createDelivery
      .data.uid;

    const clients = [wsClient(a.url, key), wsClient(a.url, key), wsClient(b.url, key), wsClient(b.url, key)];
    try {
      const attached = Promise.all([listenersAttached(a.services.bus, 6), listenersAttached(b.services.bus, 6)]);
      const subs = clients.flatMap((client) => [0, 1, 2].map(() => collect(client, EVENTS, { uids: [uid] })));
      await attached;
      const onA = countExecutions(a);
      const onB = countExecutions(b);
      try {
        // Stored through either instance: A, then B, then A.
        for (const [n, app] of [a, b, a].entries()) {
          const event = { uid, event_name: 'delivery.assigned', status: `tick ${n}` };
          const token = await new SignJWT({ payload: event })
            .setProtectedHeader({ alg: 'RS256' })
            .setIssuer(sandbox.issuer)
            .setExpirationTime('5m')
            .sign(privateKey);
          const answer = await fetch(`${app.url}/webhooks`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}` },
            body: JSON.stringify(event),
          });
          expect(answer.status).toBe(200);
        }
        await Promise.all(subs.map((sub) => sub.waitFor(3)));
        for (const sub of subs) {
          expect(sub.errors).toEqual([]);
          expect(sub.items.map((item) => item.deliveryEvents.statusText)).toEqual(['tick 0', 'tick 1', 'tick 2']);
        }
        // Both instances' subscribers saw the same cursors (one merchant, one log).
        expect(new Set(subs.map((sub) => JSON.stringify(sub.items)))).toHaveProperty('size', 1);
        expect(onA.counts.deliveryEvents).toBe(3);
        expect(onB.counts.deliveryEvents).toBe(3);
      } finally {
        onB.restore();
        onA.restore();
      }
    } finally {
      for (const client of clients) await client.dispose();
    }
  });
});
