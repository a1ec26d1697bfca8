// Two facade instances on Redis through Sentinel: a primary, a replica and three
// Sentinels, each a real redis-server process (scripts/sentinel-set.ts). The
// primary is killed with SIGKILL during a flood of signed webhooks through both
// instances; every event acknowledged with 200 must be in the log afterwards
// (each batch waited for the replica's confirmation, Redis WAIT), and the
// subscriber on the other instance must have had each exactly once. Then a
// replica that stops answering makes acknowledgements wait and fail with 503,
// never a silent 200.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { exportPKCS8, exportSPKI, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { callerCursors, type CallerCursors } from '../../src/domain/cursor.js';
import { connectRedis } from '../../src/redis/connection.js';
import { RedisStore } from '../../src/store/redis.js';
import type { StoredEvent } from '../../src/store/store.js';
import { startSandbox, type Sandbox } from '@delivery-graph/sandbox';
import { redisCommand, startSentinelSet, type SentinelSet } from '../../scripts/sentinel-set.js';
import { redisAvailable } from '../helpers/redis.js';
import { deliveryInput, type GraphQLResponse, TEST_CLIENT_TOKEN_SECRET } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { __typename ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const READ = `query($uid: ID!) { delivery(uid: $uid) { uid status } }`;
const EVENTS = `subscription($uids: [ID!], $after: String) { deliveryEvents(uids: $uids, after: $after) { cursor uid name statusText } }`;

type WireEvent = Record<string, unknown> & { uid: string; event_name: string };
interface Posted {
  status: number;
  body: { status?: string; cursor?: string; error?: string };
}

const withRedis = redisAvailable('redis-failover.test.ts');

let set: SentinelSet;
let sandbox: Sandbox;
let privateKey: CryptoKey;
let workDir: string;
let a: App;
let b: App;
const apps: App[] = [];
let merchant: CallerCursors;

async function startInstance(name: string, env: Record<string, string> = {}): Promise<App> {
  const app = await startApp(
    loadConfig({
      PORT: '0',
      UPSTREAM_URL: sandbox.url,
      PLATFORM_ID: sandbox.platformId,
      WEBHOOK_PUBLIC_KEY_FILE: path.join(workDir, 'webhook-public.pem'),
      WEBHOOK_ISSUER: sandbox.issuer,
      DATA_DIR: path.join(workDir, name),
      REDIS_SENTINELS: set.sentinels,
      REDIS_SENTINEL_NAME: set.name,
      CLIENT_TOKEN_SECRET: TEST_CLIENT_TOKEN_SECRET,
      LOG_LEVEL: 'silent',
      SHUTDOWN_GRACE_MS: '2000',
      ...env,
    }),
  );
  apps.push(app);
  return app;
}

beforeAll(async () => {
  if (!withRedis) return;
  workDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-failover-'));
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey as CryptoKey;
  writeFileSync(path.join(workDir, 'webhook-public.pem'), await exportSPKI(pair.publicKey));
  [set, sandbox] = await Promise.all([
    startSentinelSet(),
    startSandbox({ privateKeyPem: await exportPKCS8(pair.privateKey), knobs: { stepMs: 0 } }),
  ]);
  sandbox.setWebhookUrl(undefined);
  [a, b] = await Promise.all([startInstance('a'), startInstance('b')]);
  merchant = await callerCursors(a.services.store, await a.services.merchants.of(sandbox.merchants[0]!.key));
}, 90_000);
afterAll(async () => {
  for (const app of apps) await app.stop().catch(() => {});
  await sandbox?.stop();
  await set?.stop();
  if (workDir) rmSync(workDir, { recursive: true, force: true });
});

function sign(event: WireEvent): Promise<string> {
  return new SignJWT({ payload: event })
    .setProtectedHeader({ alg: 'RS256' })
    .setIssuer(sandbox.issuer)
    .setExpirationTime('10m')
    .sign(privateKey);
}

async function post(app: App, event: WireEvent, token?: string): Promise<Posted> {
  const response = await fetch(`${app.url}/webhooks`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token ?? (await sign(event))}` },
    body: JSON.stringify(event),
    signal: AbortSignal.timeout(20_000),
  });
  return { status: response.status, body: (await response.json()) as Posted['body'] };
}

async function gql<T = any>(app: App, query: string, variables: Record<string, unknown>): Promise<GraphQLResponse<T>> {
  const response = await fetch(`${app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${sandbox.merchants[0]!.key}` },
    body: JSON.stringify({ query, variables }),
  });
  return (await response.json()) as GraphQLResponse<T>;
}

async function book(app: App): Promise<string> {
  const response = await fetch(`${app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${sandbox.merchants[0]!.key}` },
    body: JSON.stringify({ query: CREATE, variables: { input: deliveryInput() } }),
  });
  const result = (await response.json()) as GraphQLResponse<any>;
  expect(result.data?.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
  return result.data.createDelivery.data.uid as string;
}

const tick = (uid: string, n: number): WireEvent => ({
  uid,
  event_name: 'delivery.assigned',
  status: `tick ${n}`,
  platform_payload: { n },
});
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe.skipIf(!withRedis)('two instances through Redis Sentinel', () => {
  it('the primary killed with SIGKILL during a flood: every acknowledged event survives, the other instance delivers each exactly once, both serve again', async () => {
    for (const app of [a, b]) expect(app.services.store).toBeInstanceOf(RedisStore);
    const uid = await book(a);
    const created = await post(a, { uid, event_name: 'delivery.created', status: 'created' });
    expect(created).toMatchObject({ status: 200, body: { status: 'stored' } });
    // The subscriber is on B; webhooks go to both.
    const client = wsClient(b.url, sandbox.merchants[0]!.key);
    const sub = collect<any>(client, EVENTS, {
      uids: [uid],
      after: merchant.cursorOf(Number(created.body.cursor) - 1),
    });
    await sub.waitFor(1);

    const events: WireEvent[] = [];
    const tokens: string[] = [];
    const answers: Array<{ status: number; body: Posted['body']; app: 'a' | 'b'; at: number; tookMs: number }> = [];
    let next = 0;
    let phase: 'before' | 'after' | 'done' = 'before';
    const acked = { before: 0, after: 0 };
    let killedAt = 0;
    const sender = async (worker: number) => {
      while (phase !== 'done') {
        const n = next++;
        events[n] = tick(uid, n);
        tokens[n] = await sign(events[n]!);
        const which = worker % 2 ? 'a' : 'b';
        const current = phase;
        const sentAt = Date.now();
        const answer = await post(which === 'a' ? a : b, events[n]!, tokens[n]);
        answers[n] = { ...answer, app: which, at: Date.now(), tookMs: Date.now() - sentAt };
        if (answer.status === 200) acked[current] += 1;
        else await sleep(20);
      }
    };
    const senders = Array.from({ length: 6 }, (_, worker) => sender(worker));
    await waitUntil(() => acked.before >= 30, 'thirty events acknowledged before the kill', 20_000);
    // The replica falls behind just before the primary dies, as a partitioned one would: paused, and its link
    // to the primary cut (so what the primary takes meanwhile is on no replica: acknowledging it would lose it).
    const primaryBefore = await set.primaryPort();
    const replica = set.dataPorts.find((port) => port !== primaryBefore)!;
    set.pause(replica);
    await redisCommand(primaryBefore, ['CLIENT', 'KILL', 'TYPE', 'replica']);
    const before = acked.before;
    await sleep(400);
    const ackedWhileBehind = acked.before - before;
    // B has read the delivery once: its owner record is in B's memory, so reading it needs no Redis.
    expect((await gql(b, READ, { uid })).data?.delivery.uid).toBe(uid);
    const killedPort = await set.killPrimary();
    set.resume(replica);
    killedAt = Date.now();
    phase = 'after';
    // While no primary answers: /ready says why, and a read that needs no Redis is served.
    let outage = true;
    const readiness: Array<{ status: number; body: { status?: string; store?: string } }> = [];
    const readinessWatch = (async () => {
      while (outage) {
        const response = await fetch(`${a.url}/ready`);
        readiness.push({
          status: response.status,
          body: (await response.json()) as { status?: string; store?: string },
        });
        await sleep(100);
      }
    })();
    const readDuringOutage = await gql(b, READ, { uid });
    const promoted = await set.failedOverFrom(killedPort);
    const promotedAt = Date.now();
    outage = false;
    await readinessWatch;
    expect(readDuringOutage.errors).toBeUndefined();
    expect(readDuringOutage.data?.delivery.uid).toBe(uid);
    expect(
      readiness.find((x) => x.status === 503),
      JSON.stringify(readiness),
    ).toMatchObject({ body: { status: 'store unavailable', store: expect.any(String) } });
    // Both instances acknowledge again.
    await waitUntil(
      () =>
        answers.some((x) => x && x.app === 'a' && x.status === 200 && x.at > promotedAt) &&
        answers.some((x) => x && x.app === 'b' && x.status === 200 && x.at > promotedAt),
      'both instances acknowledging after the failover',
      30_000,
    );
    const recoveredAt = Date.now();
    await waitUntil(() => acked.after >= 30, 'thirty events acknowledged after the failover', 30_000);
    phase = 'done';
    await Promise.all(senders);

    // Refused quickly, never held: the slowest 503 took at most the replica wait and a few reconnection attempts.
    const slowest503 = Math.max(0, ...answers.filter((x) => x.status === 503).map((x) => x.tookMs));
    expect(slowest503).toBeLessThan(5000);
    const statuses = new Set(answers.map((x) => x.status));
    expect([...statuses].every((status) => status === 200 || status === 503)).toBe(true);
    for (const x of answers) if (x.status === 503) expect(x.body.error).toBe('store_unavailable');

    // Read back through the Sentinels, on a connection of its own: every acknowledged event, once, at the cursor it was
    // acknowledged with.
    const reader = new RedisStore(
      connectRedis(
        {
          sentinels: set.sentinels.split(',').map((hp) => ({ host: '127.0.0.1', port: Number(hp.split(':')[1]) })),
          name: set.name,
          password: undefined,
          username: undefined,
          sentinelPassword: undefined,
          tls: false,
          sentinelTls: false,
        },
        'test-reader',
      ),
      { ownsClient: true },
    );
    try {
      const byN = async () => {
        const log: StoredEvent[] = await reader.eventsAfter(0, 1_000_000, { uids: [uid] });
        const found = new Map<number, StoredEvent[]>();
        for (const event of log) {
          const n = (event.payload.platform_payload as { n?: number } | undefined)?.n;
          if (n !== undefined) found.set(n, [...(found.get(n) ?? []), event]);
        }
        return found;
      };
      const stored = await byN();
      const acknowledged = answers.map((x, n) => ({ ...x, n })).filter((x) => x.status === 200);
      for (const x of acknowledged) {
        expect(stored.get(x.n), `acknowledged event ${x.n}`).toHaveLength(1);
        expect(String(stored.get(x.n)![0]!.seq)).toBe(x.body.cursor);
      }

      // The subscriber on B had every acknowledged event, and none twice.
      const seen = () =>
        sub.items.slice(1).map((item) => Number(/^tick (\d+)$/.exec(item.deliveryEvents.statusText)![1]));
      await waitUntil(
        () => acknowledged.every((x) => seen().includes(x.n)),
        'every acknowledged event at the subscriber on B',
        20_000,
      );
      expect(new Set(seen()).size).toBe(seen().length);

      // The upstream retries what was refused: each is stored now, and the subscriber gets it, still once.
      const refused = answers.map((x, n) => ({ ...x, n })).filter((x) => x.status !== 200);
      for (const x of refused) expect((await post(a, events[x.n]!, tokens[x.n])).status).toBe(200);
      const after = await byN();
      for (let n = 0; n < answers.length; n += 1) expect(after.get(n), `event ${n}`).toHaveLength(1);
      await waitUntil(() => seen().length >= answers.length, 'every event at the subscriber on B', 20_000);
      expect(new Set(seen()).size).toBe(seen().length);
      expect(seen().length).toBe(answers.length);

      for (const app of [a, b])
        await waitUntil(async () => (await fetch(`${app.url}/ready`)).status === 200, 'ready again', 15_000);
      const recovery = (recoveredAt - killedAt) / 1000;
      console.log(
        `sentinel failover under load: replica paused 400 ms and cut off (${ackedWhileBehind} acknowledged meanwhile), then primary ${killedPort} killed (SIGKILL), replica ${promoted} promoted after ${((promotedAt - killedAt) / 1000).toFixed(1)} s; ` +
          `${answers.length} webhooks sent, ${acknowledged.length} acknowledged (${acked.before} before the kill, ${acked.after} after), ${refused.length} answered 503 (slowest ${slowest503} ms) and stored on retry; ` +
          `found after the kill: ${acknowledged.length} of ${acknowledged.length} acknowledged, duplicates 0; subscriber on the other instance: ${seen().length} events, each once; both instances acknowledging again ${recovery.toFixed(1)} s after the kill`,
      );
      expect(recovery).toBeLessThan(20);
    } finally {
      await reader.close();
      await client.dispose();
    }
  }, 120_000);

  it('a replica that stops answering makes acknowledgements wait REDIS_REPLICA_ACK_TIMEOUT_MS and answer 503, never a silent 200', async () => {
    // The killed server comes back as a replica of the promoted one.
    const primary = await set.primaryPort();
    const replica = set.dataPorts.find((port) => port !== primary)!;
    const alive = await redisCommand(replica, ['PING'], 300).then(
      () => true,
      () => false,
    );
    if (!alive) await set.restartAsReplica(replica);
    await waitUntil(
      async () => String(await redisCommand(replica, ['INFO', 'replication'])).includes('master_link_status:up'),
      'the replica in sync',
      20_000,
    );
    const c = await startInstance('c', { REDIS_MIN_REPLICAS_ACK: '1', REDIS_REPLICA_ACK_TIMEOUT_MS: '500' });
    const uid = `lagging-${Date.now()}`;
    await waitUntil(
      async () => (await post(c, tick(uid, 1))).status === 200,
      'an event acknowledged with the replica answering',
      15_000,
    );
    set.pause(replica);
    try {
      const started = Date.now();
      const answer = await post(c, tick(uid, 2));
      const waited = Date.now() - started;
      expect(answer).toMatchObject({ status: 503, body: { error: 'store_unavailable' } });
      expect(waited).toBeGreaterThanOrEqual(450);
      expect(waited).toBeLessThan(5000);
      expect((c.services.store as RedisStore).counters.replicaAckFailures).toBeGreaterThan(0);
    } finally {
      set.resume(replica);
    }
    // Caught up: the retry is acknowledged.
    await waitUntil(
      async () => (await post(c, tick(uid, 2))).status === 200,
      'the retry acknowledged once the replica answers',
      15_000,
    );
  }, 90_000);
});
