// A delivery's state under every order the upstream's document allows (events
// repeat, arrive out of order, some are lost; reads may be all there is), as a
// subscriber sees it. The sandbox books and serves reads over real HTTP; every
// webhook is signed and posted by the test itself, in the order it chooses, and
// awaited (200) before the next. Once on the embedded SQLite store and once on a
// private Redis.
import type { KeyObject } from 'node:crypto';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadSigningKeys } from '@delivery-graph/sandbox/webhook-sender';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const CANCEL = `mutation($uid: ID!) { cancelDelivery(uid: $uid) { __typename } }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name status source stale delivery { status cancellationReason courier { name } } } }`;
const LOCATION = `subscription($uid: ID!) { courierLocation(uid: $uid) { milestone location { lat lng } } }`;
const HISTORY = `query($uid: ID!) { delivery(uid: $uid) { status events { edges { node { name status source stale } } } } }`;
const DELIVERY_FIELDS = `status proofOfDelivery { photoUrl signatureUrl } trackingUrl style scheduledAt deliveryDate expectedCancellationFee { amount currency } courier { name }`;
const COMPLETING = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name status delivery { ${DELIVERY_FIELDS} } reported { proofOfDelivery { photoUrl } trackingUrl } } }`;
const REPLAY = `subscription($uids: [ID!], $after: String) { deliveryEvents(uids: $uids, after: $after) { name delivery { ${DELIVERY_FIELDS} } reported { proofOfDelivery { photoUrl } } } }`;

const withRedis = redisAvailable('delivery-state.test.ts');

let privateKey: KeyObject;
let privateKeyPem: string;
let redis: RedisServer | undefined;

beforeAll(async () => {
  ({ privateKey } = await loadSigningKeys());
  privateKeyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  if (withRedis) redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

type Point = { lat: number; lng: number };
const SHOP = { lat: 40.7484, lng: -73.9878 };
const AT = (n: number): Point => ({ lat: 40.7 + n / 100, lng: -73.99 });
const COURIER = { driver_id: 7, driver_name: 'Rosa Diaz', driver_pickup_phone_number: '+15550101' };

/** Starts a stack whose sandbox sends no webhooks: the test signs and posts each one. */
async function quietStack(env: Record<string, string>): Promise<Stack> {
  const stack = await startStack({ sandbox: { privateKeyPem }, env });
  stack.sandbox.setWebhookUrl(undefined);
  return stack;
}

/** Signs one event as the upstream would and posts it; resolves once the facade answered 200. */
async function post(stack: Stack, uid: string, name: string, fields: Record<string, unknown> = {}): Promise<void> {
  const payload = {
    uid,
    event_name: name,
    status: name.slice(name.indexOf('.') + 1),
    platform_payload: { orderId: 'A-1' },
    ...COURIER,
    ...fields,
  };
  const token = await new SignJWT({ payload })
    .setProtectedHeader({ alg: 'RS256', typ: 'JWT' })
    .setIssuer(stack.sandbox.issuer)
    .setIssuedAt()
    .setExpirationTime('5m')
    .sign(privateKey);
  const response = await fetch(stack.app.webhookUrl, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(payload),
  });
  expect(response.status, `${name} for ${uid}`).toBe(200);
}

async function book(stack: Stack, overrides: Record<string, unknown> = {}): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput(overrides) });
  return result.data.createDelivery.data.uid;
}

async function history(
  stack: Stack,
  uid: string,
): Promise<{ status: string; events: Array<{ name: string; status: string; source: string; stale: boolean }> }> {
  const result = await stack.gql(HISTORY, { uid });
  return {
    status: result.data.delivery.status,
    events: result.data.delivery.events.edges.map((edge: any) => edge.node),
  };
}

const stores: Array<[string, boolean, () => Record<string, string>]> = [
  ['SQLite', true, () => ({})],
  ['Redis', withRedis, () => ({ REDIS_URL: redis!.url })],
];

describe.each(stores)('with webhooks sent out of order, on %s', (_name, enabled, storeEnv) => {
  let stack: Stack;
  beforeAll(async () => {
    if (!enabled) return;
    // Reconciliation's periodic reads (30 s) and the finality grace (120 s) never come within a test: only reads the
    // rule asks for.
    stack = await quietStack(storeEnv());
  });
  afterAll(async () => {
    await stack?.stop();
  });
  const test = it.skipIf(!enabled);

  test('the reordered cancel: assigned, pickup_enroute, pickup_arrived, canceled, then the retried pickup_complete, return_in_progress, returned: the subscriber sees the return and ends at RETURNED', async () => {
    // The upstream's own story (its reads): canceled by the provider after pickup, then returned.
    const uid = await book(stack, { payload: { sandbox_outcome: 'canceled_then_returned' } });
    const client = wsClient(stack.app.url, stack.key);
    try {
      const updates = collect(client, UPDATED, { uid });
      const positions = collect(client, LOCATION, { uid });
      expect((await updates.waitFor(1))[0].deliveryUpdated).toMatchObject({
        name: 'snapshot',
        status: 'CREATED',
        source: 'read',
      });
      await post(stack, uid, 'delivery.assigned', { driver_location: AT(1) });
      await positions.waitFor(1);
      await post(stack, uid, 'delivery.pickup_enroute', { driver_location: AT(2) });
      await post(stack, uid, 'delivery.pickup_arrived', { driver_location: SHOP });
      await post(stack, uid, 'delivery.canceled', {
        driver_location: AT(3),
        cancellation_reason: 'Canceled by the provider',
      });
      await updates.waitForItem((item) => item.deliveryUpdated.status === 'CANCELED');
      // Not the end: nothing proved the pickup yet, and nothing confirmed the cancel.
      expect(updates.completed).toBe(false);
      // The retried pickup_complete arrives late: stale, but it proves the pickup.
      await post(stack, uid, 'delivery.pickup_complete', { driver_location: SHOP });
      await post(stack, uid, 'delivery.return_in_progress', { driver_location: AT(4) });
      await post(stack, uid, 'delivery.returned', { driver_location: SHOP });
      await Promise.all([updates.done, positions.done]);

      expect(updates.errors).toEqual([]);
      expect(updates.completed).toBe(true);
      // What the subscriber sees, message by message.
      expect(updates.items.map((item) => item.deliveryUpdated)).toEqual([
        {
          name: 'snapshot',
          status: 'CREATED',
          source: 'read',
          stale: false,
          delivery: { status: 'CREATED', cancellationReason: null, courier: null },
        },
        {
          name: 'delivery.assigned',
          status: 'ASSIGNED',
          source: 'webhook',
          stale: false,
          delivery: { status: 'ASSIGNED', cancellationReason: null, courier: { name: 'Rosa Diaz' } },
        },
        {
          name: 'delivery.pickup_enroute',
          status: 'PICKUP_ENROUTE',
          source: 'webhook',
          stale: false,
          delivery: { status: 'PICKUP_ENROUTE', cancellationReason: null, courier: { name: 'Rosa Diaz' } },
        },
        {
          name: 'delivery.pickup_arrived',
          status: 'PICKUP_ARRIVED',
          source: 'webhook',
          stale: false,
          delivery: { status: 'PICKUP_ARRIVED', cancellationReason: null, courier: { name: 'Rosa Diaz' } },
        },
        {
          name: 'delivery.canceled',
          status: 'CANCELED',
          source: 'webhook',
          stale: false,
          delivery: {
            status: 'CANCELED',
            cancellationReason: 'Canceled by the provider',
            courier: { name: 'Rosa Diaz' },
          },
        },
        {
          name: 'delivery.return_in_progress',
          status: 'RETURN_IN_PROGRESS',
          source: 'webhook',
          stale: false,
          delivery: {
            status: 'RETURN_IN_PROGRESS',
            cancellationReason: 'Canceled by the provider',
            courier: { name: 'Rosa Diaz' },
          },
        },
        {
          name: 'delivery.returned',
          status: 'RETURNED',
          source: 'webhook',
          stale: false,
          delivery: {
            status: 'RETURNED',
            cancellationReason: 'Canceled by the provider',
            courier: { name: 'Rosa Diaz' },
          },
        },
      ]);
      // The pin: every position up to the end, the trip back included; the late pickup's is not sent, nor the final
      // event's.
      expect(positions.items.map((item) => item.courierLocation)).toEqual([
        { milestone: 'assigned', location: AT(1) },
        { milestone: 'pickup_enroute', location: AT(2) },
        { milestone: 'pickup_arrived', location: SHOP },
        { milestone: 'canceled', location: AT(3) },
        { milestone: 'return_in_progress', location: AT(4) },
      ]);
      expect(positions.completed).toBe(true);
      // The log keeps every event; only the late pickup is stale.
      const stored = await history(stack, uid);
      expect(stored.events.map((e) => [e.name, e.stale])).toEqual([
        ['delivery.assigned', false],
        ['delivery.pickup_enroute', false],
        ['delivery.pickup_arrived', false],
        ['delivery.canceled', false],
        ['delivery.pickup_complete', true],
        ['delivery.return_in_progress', false],
        ['delivery.returned', false],
      ]);
      // A subscriber arriving now, when the upstream reads RETURNED too, starts (and ends) at RETURNED.
      for (let step = 0; step < 8; step += 1) await stack.sandbox.advance(uid);
      const late = collect(client, UPDATED, { uid });
      await late.done;
      expect(late.items.map((item) => item.deliveryUpdated.status)).toEqual(['RETURNED']);
    } finally {
      await client.dispose();
    }
  });

  test('FAILED, then a second attempt the upstream completes: the open subscription, a new subscriber and the log all end at DROPOFF_COMPLETE', async () => {
    const uid = await book(stack);
    const client = wsClient(stack.app.url, stack.key);
    try {
      const updates = collect(client, UPDATED, { uid });
      await updates.waitFor(1);
      for (const name of [
        'assigned',
        'pickup_enroute',
        'pickup_arrived',
        'pickup_complete',
        'dropoff_enroute',
        'dropoff_arrived',
        'failed',
      ])
        await post(stack, uid, `delivery.${name}`);
      await updates.waitForItem((item) => item.deliveryUpdated.status === 'FAILED');
      expect(updates.completed).toBe(false);
      // The upstream delivers it on a second attempt: its read says DROPOFF_COMPLETE.
      for (let step = 0; step < 7; step += 1) await stack.sandbox.advance(uid);
      // The second attempt's webhooks contradict FAILED: one read settles it, and the read wins.
      await post(stack, uid, 'delivery.dropoff_enroute', { attempt: 2 });
      await post(stack, uid, 'delivery.dropoff_arrived', { attempt: 2 });
      await updates.done;
      expect(updates.errors).toEqual([]);
      const seen = updates.items.map((item) => [item.deliveryUpdated.status, item.deliveryUpdated.source]);
      expect(seen.slice(-2)).toEqual([
        ['FAILED', 'webhook'],
        ['DROPOFF_COMPLETE', 'poll'],
      ]);
      // The completing webhook, when it comes, is a repeat.
      await post(stack, uid, 'delivery.dropoff_complete', { attempt: 2 });
      const fresh = collect(client, UPDATED, { uid });
      await fresh.done;
      expect(fresh.items.map((item) => [item.deliveryUpdated.name, item.deliveryUpdated.status])).toEqual([
        ['delivery.dropoff_complete', 'DROPOFF_COMPLETE'],
      ]);
      const stored = await history(stack, uid);
      expect(stored.status).toBe('DROPOFF_COMPLETE');
      expect(stored.events.filter((e) => !e.stale).at(-1)).toMatchObject({
        name: 'delivery.dropoff_complete',
        source: 'poll',
      });
      expect(stored.events.at(-1)).toMatchObject({ name: 'delivery.dropoff_complete', source: 'webhook', stale: true });
    } finally {
      await client.dispose();
    }
  });

  test("a read that contradicts the stored final state is a new subscriber's first message, stored and pushed like an event", async () => {
    const uid = await book(stack, { payload: { sandbox_outcome: 'failed_then_returned' } });
    // The webhooks say delivered; the upstream's read says it failed at the door (the sandbox's plan: …
    // dropoff_arrived, failed).
    for (const name of ['assigned', 'pickup_complete', 'dropoff_arrived', 'dropoff_complete'])
      await post(stack, uid, `delivery.${name}`);
    for (let step = 0; step < 7; step += 1) await stack.sandbox.advance(uid);
    const client = wsClient(stack.app.url, stack.key);
    try {
      const updates = collect(client, UPDATED, { uid });
      const [first] = await updates.waitFor(1);
      expect(first.deliveryUpdated).toMatchObject({
        name: 'delivery.failed',
        status: 'FAILED',
        source: 'poll',
        stale: false,
        delivery: { status: 'FAILED' },
      });
      // Past pickup, a failure is followed by the return; the read named the upstream's courier, and so do its
      // webhooks.
      expect(updates.completed).toBe(false);
      const courier = { driver_id: null, driver_name: first.deliveryUpdated.delivery.courier.name };
      await post(stack, uid, 'delivery.return_in_progress', courier);
      await post(stack, uid, 'delivery.returned', courier);
      await updates.done;
      expect(updates.items.map((item) => item.deliveryUpdated.status)).toEqual([
        'FAILED',
        'RETURN_IN_PROGRESS',
        'RETURNED',
      ]);
      const stored = await history(stack, uid);
      expect(stored.events.map((e) => [e.name, e.source, e.stale])).toEqual([
        ['delivery.assigned', 'webhook', false],
        ['delivery.pickup_complete', 'webhook', false],
        ['delivery.dropoff_arrived', 'webhook', false],
        ['delivery.dropoff_complete', 'webhook', false],
        ['delivery.failed', 'poll', false],
        ['delivery.return_in_progress', 'webhook', false],
        ['delivery.returned', 'webhook', false],
      ]);
    } finally {
      await client.dispose();
    }
  });

  test("a webhook cannot pass for a read: the facade's own markers are dropped from what the upstream sends", async () => {
    const uid = await book(stack);
    for (const name of ['pickup_complete', 'failed']) await post(stack, uid, `delivery.${name}`);
    await post(stack, uid, 'delivery.dropoff_complete', {
      facade_source: 'poll',
      facade_read_basis: 1e12,
      facade_confirms: true,
    });
    const stored = await history(stack, uid);
    expect(stored.events.at(-1)).toEqual({
      name: 'delivery.dropoff_complete',
      status: 'DROPOFF_COMPLETE',
      source: 'webhook',
      stale: true,
    });
  });

  test('every message carries the delivery as known after it: the completing one has the proof from dropoff_arrived and what only the read had', async () => {
    const uid = await book(stack);
    // A first event, so the read the subscription starts with has a state to be kept by.
    await post(stack, uid, 'delivery.created', { delivery_date: '2030-05-01' });
    const client = wsClient(stack.app.url, stack.key);
    try {
      const updates = collect(client, COMPLETING, { uid });
      await updates.waitFor(1);
      await post(stack, uid, 'delivery.assigned', { delivery_date: '2030-05-01' });
      await post(stack, uid, 'delivery.pickup_complete', { delivery_date: '2030-05-01' });
      await post(stack, uid, 'delivery.dropoff_arrived', {
        dropoff_verification_image_url: 'https://proof.example/photo.jpg',
        dropoff_signature_image_url: 'https://proof.example/signature.png',
      });
      // The completing event carries no proof (null is absence) and a plain date.
      await post(stack, uid, 'delivery.dropoff_complete', {
        dropoff_verification_image_url: null,
        delivery_date: '2030-05-01',
      });
      await updates.done;
      const read = (
        await stack.gql(`query($uid: ID!) { delivery(uid: $uid) { trackingUrl style scheduledAt } }`, { uid })
      ).data.delivery;
      expect(read.trackingUrl).toMatch(/^http/);
      expect(read.scheduledAt).toMatch(/^2030-05-01T/);
      const expected = {
        status: 'DROPOFF_COMPLETE',
        proofOfDelivery: {
          photoUrl: 'https://proof.example/photo.jpg',
          signatureUrl: 'https://proof.example/signature.png',
        },
        trackingUrl: read.trackingUrl,
        style: read.style,
        scheduledAt: read.scheduledAt,
        deliveryDate: '2030-05-01',
        // "Fee expected if cancelled now": past pickup there is no cancel, whatever the read at the start said.
        expectedCancellationFee: null,
        courier: { name: 'Rosa Diaz' },
      };
      // Before pickup the message carries the fee only the read had.
      expect(
        updates.items.find((item) => item.deliveryUpdated.name === 'delivery.assigned').deliveryUpdated.delivery
          .expectedCancellationFee,
      ).toEqual({
        amount: expect.stringMatching(/^\d+\.\d{2}$/),
        currency: 'USD',
      });
      const completing = updates.items.at(-1).deliveryUpdated;
      expect(completing).toMatchObject({
        name: 'delivery.dropoff_complete',
        status: 'DROPOFF_COMPLETE',
        delivery: expected,
      });
      // The event's own payload is still there: no proof, no tracking link.
      expect(completing.reported).toEqual({ proofOfDelivery: null, trackingUrl: null });
      // The same from the log: a replay gives each event the delivery as known after it.
      const replay = collect(client, REPLAY, { uids: [uid], after: '0' });
      const replayed = await replay.waitForItem((item) => item.deliveryEvents.name === 'delivery.dropoff_complete');
      replay.dispose();
      expect(replayed.at(-1).deliveryEvents).toMatchObject({ delivery: expected, reported: { proofOfDelivery: null } });
      // Before dropoff_arrived there was no proof to carry.
      expect(
        replayed.find((item) => item.deliveryEvents.name === 'delivery.pickup_complete').deliveryEvents.delivery,
      ).toMatchObject({ status: 'PICKUP_COMPLETE', proofOfDelivery: null, trackingUrl: read.trackingUrl });
    } finally {
      await client.dispose();
    }
  });
});

describe.each(stores)('with polling alone, on %s', (_name, enabled, storeEnv) => {
  let stack: Stack;
  let confirming: Stack;
  beforeAll(async () => {
    if (!enabled) return;
    stack = await quietStack({ ...storeEnv(), RECONCILE_INTERVAL_MS: '100' });
    // A grace short enough for a test to see a cancel confirmed by a read.
    confirming = await quietStack({ ...storeEnv(), RECONCILE_INTERVAL_MS: '100', FINALITY_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await stack?.stop();
    await confirming?.stop();
  });
  const test = it.skipIf(!enabled);

  test('reads that never saw Picked Up read Canceled, then Returned: tracking ends at RETURNED, not at a cancel before pickup', async () => {
    const uid = await book(stack, { payload: { sandbox_outcome: 'canceled_then_returned' } });
    // Picked up, on the way, canceled by the provider: all before the first read.
    for (let step = 0; step < 6; step += 1) await stack.sandbox.advance(uid);
    const client = wsClient(stack.app.url, stack.key);
    try {
      const updates = collect(client, UPDATED, { uid });
      // The first state is the read: Canceled. It proves nothing about the pickup, so it does not end the subscription.
      expect((await updates.waitFor(1))[0].deliveryUpdated).toMatchObject({
        name: 'snapshot',
        status: 'CANCELED',
        source: 'read',
      });
      // Reconciliation stores what the read shows; the subscriber has had it already.
      await waitUntil(
        async () => (await history(stack, uid)).events.some((e) => e.name === 'delivery.canceled'),
        'the cancel read and stored',
      );
      expect(updates.completed).toBe(false);
      await stack.sandbox.advance(uid);
      await updates.waitForItem((item) => item.deliveryUpdated.status === 'RETURN_IN_PROGRESS');
      await stack.sandbox.advance(uid);
      await updates.done;
      expect(updates.errors).toEqual([]);
      expect(updates.items.map((item) => [item.deliveryUpdated.status, item.deliveryUpdated.source])).toEqual([
        ['CANCELED', 'read'],
        ['RETURN_IN_PROGRESS', 'poll'],
        ['RETURNED', 'poll'],
      ]);
      const stored = await history(stack, uid);
      expect(stored.events.map((e) => [e.name, e.source, e.stale])).toEqual([
        ['delivery.canceled', 'poll', false],
        ['delivery.return_in_progress', 'poll', false],
        ['delivery.returned', 'poll', false],
      ]);
    } finally {
      await client.dispose();
    }
  });

  test('FAILED, then a second attempt whose webhooks are all lost: a reconciliation read of DROPOFF_COMPLETE repairs it', async () => {
    const uid = await book(stack);
    const client = wsClient(stack.app.url, stack.key);
    try {
      const updates = collect(client, UPDATED, { uid });
      await updates.waitFor(1);
      // The webhooks run ahead of the upstream's reads (still CREATED): the reads in between move nothing back.
      for (const name of [
        'assigned',
        'pickup_enroute',
        'pickup_arrived',
        'pickup_complete',
        'dropoff_enroute',
        'dropoff_arrived',
        'failed',
      ])
        await post(stack, uid, `delivery.${name}`);
      await updates.waitForItem((item) => item.deliveryUpdated.status === 'FAILED');
      expect(updates.completed).toBe(false);
      // Delivered on a second attempt; not one webhook of it arrives.
      for (let step = 0; step < 7; step += 1) await stack.sandbox.advance(uid);
      await updates.done;
      expect(updates.errors).toEqual([]);
      expect(updates.items.map((item) => [item.deliveryUpdated.status, item.deliveryUpdated.source])).toEqual([
        ['CREATED', 'read'],
        ['ASSIGNED', 'webhook'],
        ['PICKUP_ENROUTE', 'webhook'],
        ['PICKUP_ARRIVED', 'webhook'],
        ['PICKUP_COMPLETE', 'webhook'],
        ['DROPOFF_ENROUTE', 'webhook'],
        ['DROPOFF_ARRIVED', 'webhook'],
        ['FAILED', 'webhook'],
        ['DROPOFF_COMPLETE', 'poll'],
      ]);
      expect(
        (await history(stack, uid)).events
          .filter((e) => !e.stale)
          .map((e) => e.name)
          .at(-1),
      ).toBe('delivery.dropoff_complete');
    } finally {
      await client.dispose();
    }
  });

  test('a cancel before pickup read again after the grace is final: the subscription completes, without a second CANCELED', async () => {
    const uid = await book(confirming);
    const client = wsClient(confirming.app.url, confirming.key);
    try {
      const updates = collect(client, UPDATED, { uid });
      await updates.waitFor(1);
      expect((await confirming.gql(CANCEL, { uid })).data.cancelDelivery.__typename).toBe(
        'MutationCancelDeliverySuccess',
      );
      await updates.done;
      expect(updates.errors).toEqual([]);
      expect(updates.items.map((item) => [item.deliveryUpdated.status, item.deliveryUpdated.source])).toEqual([
        ['CREATED', 'read'],
        ['CANCELED', 'poll'],
      ]);
      // The log holds the read that confirmed it.
      const stored = await history(confirming, uid);
      expect(stored.events.map((e) => [e.name, e.source, e.stale])).toEqual([
        ['delivery.canceled', 'poll', false],
        ['delivery.canceled', 'poll', false],
      ]);
    } finally {
      await client.dispose();
    }
  });
});
