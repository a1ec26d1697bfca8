// A package picked up and then not delivered goes back: after delivery.failed
// (or canceled) past pickup, return_in_progress and returned still count. Real
// webhooks, signed and sent by the sandbox's own WebhookSender (every one sent
// twice), to a real facade; real graphql-ws subscribers watch deliveryUpdated
// and courierLocation. Once on the embedded SQLite store, once on two instances
// sharing a real Redis (webhooks alternate between them).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import {
  DEFAULT_KNOBS,
  loadSigningKeys,
  WebhookSender,
  type SandboxWebhookEvent,
  type SigningKeys,
} from '@delivery-graph/sandbox/webhook-sender';
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
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { cursor name status statusText stale delivery { status rawStatus } } }`;
const LOCATION = `subscription($uid: ID!) { courierLocation(uid: $uid) { milestone location { lat lng } } }`;
const HISTORY = `query($uid: ID!) { delivery(uid: $uid) { events { edges { node { name status statusText stale delivery { status } reported { status } } } } } }`;

const withRedis = redisAvailable('return-path.test.ts');

let keys: SigningKeys;
let stack: Stack;
const senders: WebhookSender[] = [];

beforeAll(async () => {
  keys = await loadSigningKeys();
  const privateKeyPem = keys.privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  stack = await startStack({ sandbox: { privateKeyPem } });
  // The sandbox books and reads; every webhook is sent by the test's own sender, in the order it chooses.
  stack.sandbox.setWebhookUrl(undefined);
});
afterAll(async () => {
  for (const sender of senders) await sender.close();
  await stack?.stop();
});

/** The sandbox's signer and sender, posting to `urls` in turn, every event twice. */
function senderTo(urls: string[]): WebhookSender {
  let attempt = 0;
  const sender = new WebhookSender({
    knobs: { ...DEFAULT_KNOBS, duplicateRate: 1, reorderRate: 0, retryBaseMs: 20 },
    issuer: stack.sandbox.issuer,
    privateKey: keys.privateKey,
    webhookUrl: () => `${urls[attempt++ % urls.length]}/webhooks`,
  });
  senders.push(sender);
  return sender;
}

async function gql<T = any>(
  url: string,
  query: string,
  variables: Record<string, unknown>,
): Promise<GraphQLResponse<T>> {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.key}` },
    body: JSON.stringify({ query, variables }),
  });
  return (await response.json()) as GraphQLResponse<T>;
}

async function book(url: string): Promise<string> {
  const result = await gql(url, CREATE, { input: deliveryInput() });
  return result.data.createDelivery.data.uid;
}

type Point = { lat: number; lng: number };

function webhook(uid: string, name: string, label: string, at?: Point): SandboxWebhookEvent {
  return {
    uid,
    event_name: name,
    // Labels the facade does not know: the status must come from event_name.
    status: label,
    platform_payload: { orderId: 'A-1' },
    driver_name: 'Rosa Diaz',
    ...(at ? { driver_location: at } : {}),
  };
}

const SHOP = { lat: 40.7484, lng: -73.9878 };

/** After assigned: through pickup, a failure on the way to the recipient, and the trip back to the shop. */
const AFTER_ASSIGNED: Array<[name: string, label: string, at?: Point]> = [
  ['delivery.pickup_enroute', 'Courier on the way', { lat: 40.74, lng: -73.99 }],
  ['location.pickup_enroute', 'Courier on the way', { lat: 40.745, lng: -73.988 }],
  ['delivery.pickup_arrived', 'Courier at the shop', SHOP],
  ['delivery.pickup_complete', 'Package collected', SHOP],
  ['delivery.dropoff_enroute', 'Heading to you', { lat: 40.72, lng: -73.98 }],
  ['location.dropoff_enroute', 'Heading to you', { lat: 40.7, lng: -73.985 }],
  ['delivery.failed', 'Recipient not home', { lat: 40.6881, lng: -73.9867 }],
  ['location.return_in_progress', 'Returning', { lat: 40.7, lng: -73.986 }],
  ['delivery.return_in_progress', 'On the way back', { lat: 40.71, lng: -73.987 }],
  ['location.return_in_progress', 'On the way back', { lat: 40.73, lng: -73.987 }],
  ['delivery.returned', 'Back at the shop', SHOP],
];
const ASSIGNED_AT = { lat: 40.75, lng: -74 };

/**
 * Books on `bookOn`, follows deliveryUpdated on `updatesOn` and courierLocation
 * on `positionsOn`, and sends the whole failed-then-returned lifecycle.
 */
async function followTheReturn(sender: WebhookSender, bookOn: string, updatesOn: string, positionsOn: string) {
  const uid = await book(bookOn);
  const updatesClient = wsClient(updatesOn, stack.key);
  const positionsClient = wsClient(positionsOn, stack.key);
  try {
    const updates = collect(updatesClient, UPDATED, { uid });
    const positions = collect(positionsClient, LOCATION, { uid });
    // No event stored yet: the first message is the state read from the upstream, and the listener is attached.
    expect((await updates.waitFor(1))[0].deliveryUpdated).toMatchObject({ name: 'snapshot', status: 'CREATED' });
    sender.enqueue(uid, webhook(uid, 'delivery.assigned', 'Courier found', ASSIGNED_AT), false);
    // Live, or as its first message: either way its listener is attached from here on.
    expect((await positions.waitFor(1))[0].courierLocation).toEqual({ milestone: 'assigned', location: ASSIGNED_AT });
    AFTER_ASSIGNED.forEach(([name, label, at], i) =>
      sender.enqueue(uid, webhook(uid, name, label, at), i === AFTER_ASSIGNED.length - 1),
    );
    await sender.idle();
    await Promise.all([updates.done, positions.done]);

    const seen = updates.items.map((item) => item.deliveryUpdated);
    expect(updates.errors).toEqual([]);
    expect(updates.completed).toBe(true);
    expect(seen.map((u) => u.status)).toEqual([
      'CREATED',
      'ASSIGNED',
      'PICKUP_ENROUTE',
      'PICKUP_ARRIVED',
      'PICKUP_COMPLETE',
      'DROPOFF_ENROUTE',
      'FAILED',
      'RETURN_IN_PROGRESS',
      'RETURNED',
    ]);
    // The delivery each event describes stands where its name says; the label stays as text.
    expect(seen.map((u) => u.delivery.status)).toEqual(seen.map((u) => u.status));
    const labels = [
      'Courier found',
      ...AFTER_ASSIGNED.filter(([name]) => name.startsWith('delivery.')).map(([, label]) => label),
    ];
    expect(seen.slice(1).map((u) => u.statusText)).toEqual(labels);
    expect(seen.slice(1).map((u) => u.delivery.rawStatus)).toEqual(labels);
    expect(seen.every((u) => u.stale === false)).toBe(true);

    expect(positions.errors).toEqual([]);
    expect(positions.completed).toBe(true);
    // Every position up to the end, the trip back included; the final event's own position is not sent.
    const sent = [
      ['assigned', ASSIGNED_AT],
      ...AFTER_ASSIGNED.filter(([, , at]) => at)
        .slice(0, -1)
        .map(([name, , at]) => [name.slice(name.indexOf('.') + 1), at]),
    ];
    expect(positions.items.map((item) => [item.courierLocation.milestone, item.courierLocation.location])).toEqual(
      sent,
    );

    // Stored once each (every webhook came twice), none stale, each status from its name.
    const history = await gql(updatesOn, HISTORY, { uid });
    const stored = history.data.delivery.events.edges.map((edge: any) => edge.node);
    expect(stored.map((e: any) => e.name)).toEqual(['delivery.assigned', ...AFTER_ASSIGNED.map(([name]) => name)]);
    expect(stored.filter((e: any) => e.stale)).toEqual([]);
    expect(stored.find((e: any) => e.name === 'delivery.pickup_complete')).toMatchObject({
      status: 'PICKUP_COMPLETE',
      statusText: 'Package collected',
      delivery: { status: 'PICKUP_COMPLETE' },
    });
  } finally {
    await Promise.all([updatesClient.dispose(), positionsClient.dispose()]);
  }
}

/**
 * A cancel with no evidence of pickup is not final on arrival (only a read after
 * FINALITY_GRACE_MS confirms it): a return that follows proves the pickup, and
 * deliveryUpdated follows it to RETURNED.
 */
async function cancelThenReturn(sender: WebhookSender, bookOn: string, updatesOn: string) {
  const uid = await book(bookOn);
  const client = wsClient(updatesOn, stack.key);
  try {
    const updates = collect(client, UPDATED, { uid });
    await updates.waitFor(1);
    sender.enqueue(uid, webhook(uid, 'delivery.assigned', 'Courier found', ASSIGNED_AT), false);
    sender.enqueue(uid, webhook(uid, 'delivery.canceled', 'Cancelled by the shop'), false);
    await sender.idle();
    await updates.waitForItem((item) => item.deliveryUpdated.status === 'CANCELED');
    expect(updates.completed).toBe(false);
    sender.enqueue(uid, webhook(uid, 'delivery.return_in_progress', 'On the way back', ASSIGNED_AT), false);
    sender.enqueue(uid, webhook(uid, 'delivery.returned', 'Back at the shop', SHOP), true);
    await sender.idle();
    await updates.done;
    expect(updates.completed).toBe(true);
    expect(updates.items.map((item) => item.deliveryUpdated.status)).toEqual([
      'CREATED',
      'ASSIGNED',
      'CANCELED',
      'RETURN_IN_PROGRESS',
      'RETURNED',
    ]);
    const history = await gql(updatesOn, HISTORY, { uid });
    expect(history.data.delivery.events.edges.map((edge: any) => [edge.node.name, edge.node.stale])).toEqual([
      ['delivery.assigned', false],
      ['delivery.canceled', false],
      ['delivery.return_in_progress', false],
      ['delivery.returned', false],
    ]);
  } finally {
    await client.dispose();
  }
}

describe('the return path on the embedded store', () => {
  it('deliveryUpdated follows pickup_complete → failed → return_in_progress → returned, then completes; courierLocation follows the courier back', async () => {
    const url = stack.app.url;
    await followTheReturn(senderTo([url]), url, url, url);
  });

  it('a subscriber arriving after the failure starts there and still follows the return', async () => {
    const url = stack.app.url;
    const uid = await book(url);
    const sender = senderTo([url]);
    const failedAt = AFTER_ASSIGNED.findIndex(([name]) => name === 'delivery.failed');
    for (const [name, label, at] of [
      ['delivery.assigned', 'Courier found', ASSIGNED_AT] as const,
      ...AFTER_ASSIGNED.slice(0, failedAt + 1),
    ]) {
      sender.enqueue(uid, webhook(uid, name, label, at), false);
    }
    await sender.idle();
    const client = wsClient(url, stack.key);
    try {
      const updates = collect(client, UPDATED, { uid });
      const positions = collect(client, LOCATION, { uid });
      expect((await updates.waitFor(1))[0].deliveryUpdated).toMatchObject({
        name: 'delivery.failed',
        status: 'FAILED',
      });
      expect((await positions.waitFor(1))[0].courierLocation.milestone).toBe('failed');
      AFTER_ASSIGNED.slice(failedAt + 1).forEach(([name, label, at]) =>
        sender.enqueue(uid, webhook(uid, name, label, at), false),
      );
      await sender.idle();
      await Promise.all([updates.done, positions.done]);
      expect(updates.items.map((item) => item.deliveryUpdated.status)).toEqual([
        'FAILED',
        'RETURN_IN_PROGRESS',
        'RETURNED',
      ]);
      expect(updates.completed).toBe(true);
      expect(positions.items.map((item) => item.courierLocation.milestone)).toEqual([
        'failed',
        'return_in_progress',
        'return_in_progress',
        'return_in_progress',
      ]);
      expect(positions.completed).toBe(true);
    } finally {
      await client.dispose();
    }
  });

  it('a cancel with no evidence of pickup does not end the delivery: the return after it is followed to RETURNED', async () => {
    const url = stack.app.url;
    await cancelThenReturn(senderTo([url]), url, url);
  });
});

describe('the status of an event', () => {
  it('comes from its name; only a name the facade does not know is read from the label', async () => {
    const url = stack.app.url;
    const uid = await book(url);
    const sender = senderTo([url]);
    sender.enqueue(uid, webhook(uid, 'delivery.pickup_complete', 'Package collected', SHOP), false);
    sender.enqueue(uid, webhook(uid, 'delivery.rerouted', 'Dropoff En Route'), true);
    await sender.idle();
    const history = await gql(url, HISTORY, { uid });
    // The unknown name moved nothing: the delivery as known after it is still picked up; its own payload reads as its
    // label says.
    expect(history.data.delivery.events.edges.map((edge: any) => edge.node)).toEqual([
      {
        name: 'delivery.pickup_complete',
        status: 'PICKUP_COMPLETE',
        statusText: 'Package collected',
        stale: false,
        delivery: { status: 'PICKUP_COMPLETE' },
        reported: { status: 'PICKUP_COMPLETE' },
      },
      {
        name: 'delivery.rerouted',
        status: 'DROPOFF_ENROUTE',
        statusText: 'Dropoff En Route',
        stale: false,
        delivery: { status: 'PICKUP_COMPLETE' },
        reported: { status: 'DROPOFF_ENROUTE' },
      },
    ]);
  });
});

describe.skipIf(!withRedis)('the return path on two instances sharing Redis', () => {
  let redis: RedisServer;
  let workDir: string;
  const apps: App[] = [];

  beforeAll(async () => {
    redis = await startRedisServer();
    workDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-return-'));
    const keyFile = path.join(workDir, 'webhook-public.pem');
    writeFileSync(keyFile, stack.sandbox.publicKeyPem);
    for (const name of ['a', 'b']) {
      const config = loadConfig({
        PORT: '0',
        UPSTREAM_URL: stack.sandbox.url,
        PLATFORM_ID: stack.sandbox.platformId,
        WEBHOOK_PUBLIC_KEY_FILE: keyFile,
        WEBHOOK_ISSUER: stack.sandbox.issuer,
        DATA_DIR: path.join(workDir, name),
        REDIS_URL: redis.url,
        CLIENT_TOKEN_SECRET: TEST_CLIENT_TOKEN_SECRET,
        LOG_LEVEL: 'silent',
      });
      apps.push(await startApp(config));
    }
  });
  afterAll(async () => {
    for (const app of apps) await app.stop().catch(() => {});
    await redis?.stop();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  it('the same lifecycle, with webhooks to both instances and subscribers on either', async () => {
    const [a, b] = apps.map((app) => app.url) as [string, string];
    await followTheReturn(senderTo([a, b]), a, b, a);
  });

  it('a cancel with no evidence of pickup does not end the delivery there either', async () => {
    const [a, b] = apps.map((app) => app.url) as [string, string];
    await cancelThenReturn(senderTo([b, a]), a, b);
  });
});
