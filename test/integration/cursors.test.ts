// Cursors as merchants see them: opaque, their own, stable. The same event has
// the same cursor for the same key in Delivery.events and deliveryEvents, after a
// restart, and on every instance sharing one Redis; another key's cursor, a
// made-up or altered one, and a bare log position are refused (BAD_USER_INPUT).
// Also: Delivery.events asked many times for one delivery in one request reads once.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { exportPKCS8, exportSPKI, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { callerCursors } from '../../src/domain/cursor.js';
import { startSandbox, type Sandbox } from '@delivery-graph/sandbox';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import {
  deliveryInput,
  startStack,
  type GraphQLResponse,
  type Stack,
  TEST_CLIENT_TOKEN_SECRET,
} from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const PAGE = `query($uid: ID!, $first: Int, $after: String) {
  delivery(uid: $uid) { events(first: $first, after: $after) { edges { cursor node { cursor name } } pageInfo { hasNextPage endCursor } } }
}`;
const EVENTS = `subscription($uids: [ID!], $after: String) { deliveryEvents(uids: $uids, after: $after) { cursor name } }`;
const OPAQUE = /^[A-Za-z0-9_-]{22}$/;

let privateKey: CryptoKey;
let privateKeyPem: string;
let publicKeyPem: string;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey as CryptoKey;
  privateKeyPem = await exportPKCS8(pair.privateKey);
  publicKeyPem = await exportSPKI(pair.publicKey);
});

async function postTo(url: string, issuer: string, event: Record<string, unknown>): Promise<string> {
  const token = await new SignJWT({ payload: event })
    .setProtectedHeader({ alg: 'RS256' })
    .setIssuer(issuer)
    .setExpirationTime('5m')
    .sign(privateKey);
  const response = await fetch(`${url}/webhooks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
    body: JSON.stringify(event),
  });
  expect(response.status).toBe(200);
  // The receiver answers the upstream with the log position.
  return ((await response.json()) as { cursor: string }).cursor;
}

async function gqlAt<T = any>(
  url: string,
  key: string,
  query: string,
  variables: Record<string, unknown>,
): Promise<GraphQLResponse<T>> {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ query, variables }),
  });
  return (await response.json()) as GraphQLResponse<T>;
}

/**
 * What deliveryEvents(after:) replays for one delivery, up to a marker event posted meanwhile (replayed or live, it
 * comes last).
 */
async function replayAt(
  url: string,
  key: string,
  uid: string,
  after: string,
  mark: () => Promise<unknown>,
): Promise<{ cursors: string[]; errors: unknown[] }> {
  const client = wsClient(url, key);
  try {
    const sub = collect(client, EVENTS, { uids: [uid], after });
    let ended = false;
    void sub.done.then(() => (ended = true));
    await mark();
    // Until the marker arrives, or the subscription ends (refused).
    const deadline = Date.now() + 10_000;
    while (!ended && !sub.items.some((item) => item.deliveryEvents.name === 'delivery.marker')) {
      if (Date.now() > deadline) throw new Error(`no marker: ${JSON.stringify(sub.items)}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    return {
      cursors: sub.items
        .filter((item) => item.deliveryEvents.name !== 'delivery.marker')
        .map((item) => item.deliveryEvents.cursor),
      errors: sub.errors,
    };
  } finally {
    await client.dispose();
  }
}

describe('on the embedded store', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ sandbox: { privateKeyPem } });
    stack.sandbox.setWebhookUrl(undefined);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  const post = (event: Record<string, unknown>) => postTo(stack.app.url, stack.sandbox.issuer, event);
  async function book(key = stack.key): Promise<string> {
    const result = await stack.gql(CREATE, { input: deliveryInput() }, key);
    return result.data.createDelivery.data.uid;
  }
  async function page(uid: string, args: { first?: number; after?: string } = {}, key = stack.key) {
    return stack.gql(PAGE, { uid, ...args }, key);
  }
  const replay = (uid: string, after: string, key = stack.key) =>
    replayAt(stack.app.url, key, uid, after, () =>
      post({ uid, event_name: 'delivery.marker', status: `marker ${Math.random()}` }),
    );

  it('are opaque, and the same for the same event and key wherever they are read', async () => {
    const uid = await book();
    const positions = [];
    for (const name of ['delivery.created', 'delivery.assigned', 'delivery.pickup_enroute'])
      positions.push(await post({ uid, event_name: name, status: name }));
    const first = await page(uid);
    expect(first.errors).toBeUndefined();
    const edges = first.data.delivery.events.edges as Array<{ cursor: string; node: { cursor: string; name: string } }>;
    expect(edges.map((edge) => edge.node.name)).toEqual([
      'delivery.created',
      'delivery.assigned',
      'delivery.pickup_enroute',
    ]);
    for (const [n, edge] of edges.entries()) {
      expect(edge.cursor).toMatch(OPAQUE);
      expect(edge.node.cursor).toBe(edge.cursor);
      // The log position does not show: the cursor is neither it nor any decimal number.
      expect(edge.cursor).not.toBe(positions[n]!);
      expect(edge.cursor).not.toMatch(/^\d+$/);
    }
    expect(new Set(edges.map((edge) => edge.cursor)).size).toBe(3);
    // Asked again: the same cursors. Replayed from the start: the same cursors again.
    expect((await page(uid)).data.delivery.events.edges).toEqual(edges);
    expect((await replay(uid, '0')).cursors).toEqual(edges.map((edge) => edge.cursor));

    // Paging with them walks the same events, one by one.
    const walked: string[] = [];
    let after: string | undefined;
    for (;;) {
      const next = await page(uid, { first: 1, after });
      const connection = next.data.delivery.events;
      walked.push(...connection.edges.map((edge: { cursor: string }) => edge.cursor));
      after = connection.pageInfo.endCursor;
      if (!connection.pageInfo.hasNextPage) break;
    }
    expect(walked.slice(0, 3)).toEqual(edges.map((edge) => edge.cursor));
    // deliveryEvents(after:) with one of them replays what follows it.
    expect((await replay(uid, edges[0]!.cursor)).cursors.slice(0, 2)).toEqual(
      edges.slice(1).map((edge) => edge.cursor),
    );
  });

  it('are refused when another key was given them, when made up or altered, and as bare log positions', async () => {
    const mine = await book();
    const theirs = await book(stack.otherKey);
    const position = await post({ uid: mine, event_name: 'delivery.created', status: 'created' });
    await post({ uid: theirs, event_name: 'delivery.created', status: 'created' });
    const own = (await page(mine)).data.delivery.events.edges[0].cursor as string;
    const given = (await page(theirs, {}, stack.otherKey)).data.delivery.events.edges[0].cursor as string;
    expect(given).toMatch(OPAQUE);

    // The same log position is another cursor for another key, and means nothing to the first.
    const [forMe, forThem] = await Promise.all(
      [stack.key, stack.otherKey].map(async (key) =>
        callerCursors(stack.app.services.store, await stack.app.services.merchants.of(key)),
      ),
    );
    expect(forMe!.cursorOf(Number(position))).toBe(own);
    expect(forThem!.cursorOf(Number(position))).not.toBe(own);
    expect(forMe!.seqOf(forThem!.cursorOf(Number(position)))).toBeUndefined();

    // "0" is the start of the log, for every key.
    expect(
      (await page(mine, { after: '0' })).data.delivery.events.edges.map((edge: { cursor: string }) => edge.cursor),
    ).toEqual([own]);

    const altered = `${own.slice(0, 5)}${own[5] === 'A' ? 'B' : 'A'}${own.slice(6)}`;
    const refused = [given, altered, 'AAAAAAAAAAAAAAAAAAAAAA', `${own}A`, position, '1', '00', 'not-a-cursor'];
    for (const after of refused) {
      const read = await page(mine, { after });
      expect(read.data?.delivery ?? null, after).toBeNull();
      expect(read.errors?.[0]?.extensions?.code, after).toBe('BAD_USER_INPUT');
      const replayed = await replay(mine, after);
      expect(replayed.cursors, after).toEqual([]);
      expect(JSON.stringify(replayed.errors), after).toContain('BAD_USER_INPUT');
    }
  });

  it('stay the same across a restart, and replay from there', async () => {
    const uid = await book();
    for (const name of ['delivery.created', 'delivery.assigned']) await post({ uid, event_name: name, status: name });
    const before = (await page(uid)).data.delivery.events.edges.map((edge: { cursor: string }) => edge.cursor);
    await stack.restart();
    const after = (await page(uid)).data.delivery.events.edges.map((edge: { cursor: string }) => edge.cursor);
    expect(after).toEqual(before);
    expect(
      (await page(uid, { after: before[0] })).data.delivery.events.edges.map((edge: { cursor: string }) => edge.cursor),
    ).toEqual([before[1]]);
    expect((await replay(uid, before[0])).cursors.slice(0, 1)).toEqual([before[1]]);
  });

  it('Delivery.events asked for one delivery many times in one request reads the store once', async () => {
    const uid = await book();
    await post({ uid, event_name: 'delivery.created', status: 'created' });
    const store = stack.app.services.store;
    const reads = vi.spyOn(store, 'eventsAfter');
    try {
      const result = await stack.gql(
        `query($uids: [ID!]!) { deliveries(uids: $uids) { events(first: 5) { edges { cursor node { name } } } } }`,
        { uids: Array(20).fill(uid) },
      );
      expect(result.errors).toBeUndefined();
      const pages = result.data.deliveries.map((delivery: { events: unknown }) => delivery.events);
      expect(pages).toHaveLength(20);
      for (const each of pages) expect(each).toEqual(pages[0]);
      expect(reads).toHaveBeenCalledTimes(1);
      // Other arguments are another page: read on their own.
      reads.mockClear();
      const mixed = await stack.gql(
        `query($uid: ID!) { a: delivery(uid: $uid) { events(first: 1) { edges { cursor } } } b: delivery(uid: $uid) { events(first: 2) { edges { cursor } } } }`,
        { uid },
      );
      expect(mixed.errors).toBeUndefined();
      expect(reads).toHaveBeenCalledTimes(2);
    } finally {
      reads.mockRestore();
    }
  });
});

const withRedis = redisAvailable('cursors.test.ts');

describe.skipIf(!withRedis)('on two instances sharing one Redis', () => {
  let redis: RedisServer;
  let sandbox: Sandbox;
  let workDir: string;
  const apps: App[] = [];

  async function instance(name: string): Promise<App> {
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
        UPSTREAM_CHECK_INTERVAL_MS: '3600000',
      }),
    );
    apps.push(app);
    return app;
  }

  beforeAll(async () => {
    workDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-cursors-'));
    writeFileSync(path.join(workDir, 'webhook-public.pem'), publicKeyPem);
    [redis, sandbox] = await Promise.all([startRedisServer(), startSandbox({ privateKeyPem, knobs: { stepMs: 0 } })]);
    sandbox.setWebhookUrl(undefined);
  });
  afterAll(async () => {
    for (const app of apps) await app.stop().catch(() => {});
    await sandbox?.stop();
    await redis?.stop();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  it('give the same cursor for the same event on both, accept each other’s, and keep them across a restart', async () => {
    let [a, b] = await Promise.all([instance('a'), instance('b')]);
    const key = sandbox.merchants[0]!.key;
    const uid = (await gqlAt(a.url, key, CREATE, { input: deliveryInput() })).data.createDelivery.data.uid as string;
    for (const name of ['delivery.created', 'delivery.assigned', 'delivery.pickup_enroute'])
      await postTo(a.url, sandbox.issuer, { uid, event_name: name, status: name });
    const cursorsAt = async (app: App) =>
      (await gqlAt(app.url, key, PAGE, { uid })).data.delivery.events.edges.map(
        (edge: { cursor: string }) => edge.cursor,
      ) as string[];

    const onA = await cursorsAt(a);
    expect(onA).toHaveLength(3);
    for (const cursor of onA) expect(cursor).toMatch(OPAQUE);
    expect(await cursorsAt(b)).toEqual(onA);
    const mark = (app: App) => () =>
      postTo(app.url, sandbox.issuer, { uid, event_name: 'delivery.marker', status: `marker ${Math.random()}` });
    // A cursor from A resumes on B.
    expect((await replayAt(b.url, key, uid, onA[0]!, mark(a))).cursors.slice(0, 2)).toEqual(onA.slice(1));

    // Both restarted (one secret in Redis, none in the processes): still the same, still accepted.
    await Promise.all([a.stop(), b.stop()]);
    [a, b] = await Promise.all([instance('a-again'), instance('b-again')]);
    expect((await cursorsAt(b)).slice(0, 3)).toEqual(onA);
    expect((await replayAt(a.url, key, uid, onA[1]!, mark(b))).cursors.slice(0, 1)).toEqual([onA[2]]);
  });
});
