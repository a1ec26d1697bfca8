// The lifecycles the document allows beyond "delivered" and the two returns: a
// second attempt after a failure at the door, a provider cancel right after
// pickup followed by the return, and a cancel or failure before pickup. Forced
// per delivery with `sandbox_outcome`, drawn with the outcomeWeights knob, and
// replayable with the seed knob; seen through reads, webhooks and the history.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  OUTCOMES,
  plannedWebhooks,
  startSandbox,
  type Outcome,
  type Sandbox,
  type SandboxKnobs,
} from '../src/index.js';
import {
  startWebhookReceiver,
  type ReceivedEvent,
  type WebhookReceiver,
} from '../../../test/helpers/webhook-receiver.js';

const QUIET: Partial<SandboxKnobs> = {
  stepMs: 0,
  locationTicks: 3,
  duplicateRate: 0,
  reorderRate: 0,
  dropRate: 0,
  returnRate: 0,
  outcomeWeights: null,
  seed: null,
  retryBaseMs: 10,
  webhookTimeoutMs: 1000,
};

let sandbox: Sandbox;
let receiver: WebhookReceiver | undefined;
let key: string;

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: QUIET });
  key = sandbox.merchants[0]!.key;
});
afterEach(async () => {
  sandbox.setKnobs(QUIET);
  sandbox.setWebhookUrl(undefined);
  await receiver?.close();
  receiver = undefined;
});
afterAll(() => sandbox.stop());

async function listen(): Promise<WebhookReceiver> {
  receiver = await startWebhookReceiver({ publicKeyPem: sandbox.publicKeyPem, issuer: sandbox.issuer });
  sandbox.setWebhookUrl(receiver.url);
  return receiver;
}

const PICKUP = { lat: 40.7306, lng: -73.9866 };
const DROPOFF = { lat: 40.758, lng: -73.9855 };

async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${sandbox.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

async function createDelivery(payload?: Record<string, unknown>): Promise<string> {
  const res = await call('POST', `/${sandbox.platformId}/deliveries`, {
    pickup_address_street: 'E 10th St',
    pickup_address_city: 'New York',
    pickup_address_country: 'US',
    pickup_address_latitude: PICKUP.lat,
    pickup_address_longitude: PICKUP.lng,
    pickup_name: 'Corner Deli',
    email: 'deli@example.com',
    dropoff_address_street: 'W 42nd St',
    dropoff_address_city: 'New York',
    dropoff_address_country: 'US',
    dropoff_address_latitude: DROPOFF.lat,
    dropoff_address_longitude: DROPOFF.lng,
    dropoff_name: 'Grace Hopper',
    package_delivery_mode: 'NOW',
    ...(payload === undefined ? {} : { platform_payload: payload }),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.uid as string;
}

const read = async (uid: string) => (await call('GET', `/${sandbox.platformId}/deliveries/${uid}`)).body.data;
const cancel = (uid: string) => call('POST', `/${sandbox.platformId}/deliveries/${uid}/cancel`);
const history = async (uid: string) => {
  const res = await fetch(`${sandbox.origin}/sandbox/deliveries/${uid}/history`);
  expect(res.status).toBe(200);
  return (await res.json()) as any;
};

/** Advances to the end, reading after each step: the read statuses in order. */
async function walk(uid: string): Promise<{ statuses: string[] }> {
  const statuses: string[] = [];
  for (let steps = 0; steps < 20; steps++) {
    try {
      await sandbox.advance(uid);
    } catch (error) {
      expect(String(error)).toMatch(/already (delivered|returned|failed|canceled)/);
      return { statuses };
    }
    statuses.push((await read(uid)).status);
  }
  throw new Error(`delivery ${uid} never finished`);
}

const ofDelivery = (uid: string, events: ReceivedEvent[]) => events.filter((e) => e.uid === uid);
const milestones = (events: ReceivedEvent[]) => events.filter((e) => e.event_name.startsWith('delivery.'));
const distance = (a: { lat: number; lng: number }, b: { lat: number; lng: number }) =>
  Math.hypot(a.lat - b.lat, a.lng - b.lng);

describe('a failure at the door, then a second attempt that delivers', () => {
  it('reads FAILED, then DROPOFF_ENROUTE, DROPOFF_ARRIVED and DROPOFF_COMPLETE, with a webhook for each and the proof on the final read', async () => {
    await listen();
    const uid = await createDelivery({ sandbox_outcome: 'failed_then_delivered' });
    const { statuses } = await walk(uid);
    expect(statuses).toEqual([
      'ASSIGNED',
      'PICKUP_ENROUTE',
      'PICKUP_ARRIVED',
      'PICKUP_COMPLETE',
      'DROPOFF_ENROUTE',
      'DROPOFF_ARRIVED',
      'FAILED',
      'DROPOFF_ENROUTE',
      'DROPOFF_ARRIVED',
      'DROPOFF_COMPLETE',
    ]);
    const done = await read(uid);
    expect(done).toMatchObject({
      status: 'DROPOFF_COMPLETE',
      driver_location: DROPOFF,
      cancellation_reason: null,
      expected_cancellation_fee: null,
    });
    expect(done.dropoff_verification_image_url).toMatch(/photo\.svg$/);

    await sandbox.idle();
    const events = ofDelivery(uid, receiver!.events());
    expect(milestones(events).map((e) => [e.event_name, e.status])).toEqual([
      ['delivery.created', 'Created'],
      ['delivery.assigned', 'Assigned'],
      ['delivery.pickup_enroute', 'Pickup Enroute'],
      ['delivery.pickup_arrived', 'Pickup Arrived'],
      ['delivery.pickup_complete', 'Picked Up'],
      ['delivery.dropoff_enroute', 'Dropoff Enroute'],
      ['delivery.dropoff_arrived', 'Dropoff Arrived'],
      ['delivery.failed', 'Failed'],
      ['delivery.dropoff_enroute', 'Dropoff Enroute'],
      ['delivery.dropoff_arrived', 'Dropoff Arrived'],
      ['delivery.dropoff_complete', 'Delivered'],
    ]);
    expect(events.map((e) => e.event_name)).toEqual(plannedWebhooks('failed_then_delivered'));
    // The second attempt starts from where the courier waited, not from the pickup.
    const legs = events.filter((e) => e.event_name === 'location.dropoff_enroute').map((e) => e.driver_location!);
    expect(legs).toHaveLength(2);
    expect(distance(legs[1]!, DROPOFF)).toBeLessThan(distance(legs[0]!, DROPOFF));
    expect(events.find((e) => e.event_name === 'delivery.failed')!.driver_location).toEqual(DROPOFF);
  });
});

describe('a provider cancel right after pickup, then the return', () => {
  it('reads Canceled after PICKUP_COMPLETE with a provider reason, then RETURN_IN_PROGRESS and RETURNED; the merchant may not cancel', async () => {
    await listen();
    const uid = await createDelivery({ sandbox_outcome: 'canceled_after_pickup_then_returned' });
    const statuses: string[] = [];
    for (let step = 0; step < 7; step++) {
      await sandbox.advance(uid);
      statuses.push((await read(uid)).status);
    }
    expect(statuses).toEqual([
      'ASSIGNED',
      'PICKUP_ENROUTE',
      'PICKUP_ARRIVED',
      'PICKUP_COMPLETE',
      'Canceled',
      'RETURN_IN_PROGRESS',
      'RETURNED',
    ]);
    await expect(sandbox.advance(uid)).rejects.toThrow(/already returned/);
    expect((await cancel(uid)).body.code).toBe('not_cancelable');
    const done = await read(uid);
    expect(done).toMatchObject({
      status: 'RETURNED',
      driver_location: PICKUP,
      cancellation_reason: expect.stringMatching(/^provider: /),
      expected_cancellation_fee: null,
    });

    await sandbox.idle();
    const events = ofDelivery(uid, receiver!.events());
    expect(milestones(events).map((e) => e.event_name)).toEqual([
      'delivery.created',
      'delivery.assigned',
      'delivery.pickup_enroute',
      'delivery.pickup_arrived',
      'delivery.pickup_complete',
      'delivery.canceled',
      'delivery.return_in_progress',
      'delivery.returned',
    ]);
    const canceled = events.find((e) => e.event_name === 'delivery.canceled')!;
    expect(canceled).toMatchObject({ status: 'Canceled', cancellation_reason: done.cancellation_reason });
    // The courier had just driven off with the package: between the ends, near the pickup.
    expect(distance(canceled.driver_location!, PICKUP)).toBeGreaterThan(0);
    expect(distance(canceled.driver_location!, PICKUP)).toBeLessThan(distance(DROPOFF, PICKUP) / 4);
    expect(events.at(-1)).toMatchObject({ event_name: 'delivery.returned', driver_location: PICKUP });
  });
});

describe('ends before pickup', () => {
  it('a provider cancel after the courier reached the pickup: Canceled, final, no fee to expect, nothing to cancel', async () => {
    await listen();
    const uid = await createDelivery({ sandbox_outcome: 'canceled_before_pickup' });
    const { statuses } = await walk(uid);
    expect(statuses).toEqual(['ASSIGNED', 'PICKUP_ENROUTE', 'PICKUP_ARRIVED', 'Canceled']);
    expect(await read(uid)).toMatchObject({
      status: 'Canceled',
      cancellation_reason: expect.stringMatching(/^provider: /),
      expected_cancellation_fee: null,
    });
    expect((await cancel(uid)).status).toBe(409);
    await sandbox.idle();
    const events = ofDelivery(uid, receiver!.events());
    expect(events.map((e) => e.event_name)).toEqual(plannedWebhooks('canceled_before_pickup'));
    expect(events.at(-1)).toMatchObject({
      event_name: 'delivery.canceled',
      status: 'Canceled',
      cancellation_reason: expect.stringMatching(/^provider: /),
    });
    expect((await history(uid)).finished).toBe(true);
  });

  it('a failure at the pickup: FAILED, final, and the read says so for good', async () => {
    await listen();
    const uid = await createDelivery({ sandbox_outcome: 'failed_before_pickup' });
    const { statuses } = await walk(uid);
    expect(statuses).toEqual(['ASSIGNED', 'PICKUP_ENROUTE', 'PICKUP_ARRIVED', 'FAILED']);
    await expect(sandbox.advance(uid)).rejects.toThrow(/already failed/);
    expect(await read(uid)).toMatchObject({
      status: 'FAILED',
      driver_location: PICKUP,
      cancellation_reason: null,
      expected_cancellation_fee: null,
    });
    expect((await cancel(uid)).status).toBe(409);
    await sandbox.idle();
    expect(milestones(ofDelivery(uid, receiver!.events())).map((e) => e.event_name)).toEqual([
      'delivery.created',
      'delivery.assigned',
      'delivery.pickup_enroute',
      'delivery.pickup_arrived',
      'delivery.failed',
    ]);
  });

  it('works the same for a partner order', async () => {
    const order = sandbox.seedPartnerOrder(key, {
      partner_reference: `early-${Date.now()}`,
      partner_payload: { sandbox_outcome: 'failed_before_pickup' },
    });
    for (let i = 0; i < 4; i++) await sandbox.advance(order.uid);
    expect((await call('GET', `/orders/${order.uid}`)).body.data).toMatchObject({
      status: 'FAILED',
      expected_cancelation_fee: null,
    });
    expect((await call('POST', `/orders/${order.uid}/cancel`)).body.error).toBe('not_cancelable');
  });
});

describe('every outcome', () => {
  it('sends exactly its planned webhooks in manual mode, and its history ends at the status the read ends at', async () => {
    await listen();
    for (const outcome of OUTCOMES) {
      const uid = await createDelivery({ sandbox_outcome: outcome });
      await walk(uid);
      await sandbox.idle();
      const planned = plannedWebhooks(outcome);
      expect(
        ofDelivery(uid, receiver!.events()).map((e) => e.event_name),
        outcome,
      ).toEqual(planned);
      const story = await history(uid);
      expect(story).toMatchObject({
        uid,
        outcome,
        finished: true,
        scripted: false,
        order: 'as_emitted',
        sent: planned.map((_, i) => i),
      });
      expect(story.events.map((e: any) => e.event_name)).toEqual(planned);
      expect(story.plan).toEqual(planned.filter((name) => name.startsWith('delivery.')));
      expect(story.events.every((e: any) => e.fate === 'delivered' && e.copies === 1 && e.acknowledged === 1)).toBe(
        true,
      );
      expect(story.events.at(-1).read_status).toBe((await read(uid)).status);
      expect(story.status).toBe((await read(uid)).status);
    }
  });

  it('refuses an outcome it does not know, naming all it does', async () => {
    const res = await call('POST', `/${sandbox.platformId}/deliveries`, {
      pickup_name: 'x',
      platform_payload: { sandbox_outcome: 'delivered_twice' },
    });
    expect(res.status).toBe(422);
    expect(res.body.errors.platform_payload.join(' ')).toContain(OUTCOMES.join(', '));
  });
});

describe('the outcomeWeights and seed knobs', () => {
  it('draws outcomes by weight at booking, before-pickup ones included, and checks the weights', async () => {
    sandbox.setKnobs({ outcomeWeights: { failed_before_pickup: 1, failed_then_delivered: 1 } });
    const uids = await Promise.all(Array.from({ length: 24 }, () => createDelivery()));
    const outcomes = await Promise.all(uids.map(async (uid) => (await history(uid)).outcome as Outcome));
    expect(new Set(outcomes)).toEqual(new Set(['failed_before_pickup', 'failed_then_delivered']));
    for (const [i, uid] of uids.entries()) {
      await walk(uid);
      expect((await read(uid)).status).toBe(outcomes[i] === 'failed_before_pickup' ? 'FAILED' : 'DROPOFF_COMPLETE');
    }
    // The payload still wins.
    expect((await history(await createDelivery({ sandbox_outcome: 'delivered' }))).outcome).toBe('delivered');

    const knobs = (body: unknown) =>
      fetch(`${sandbox.origin}/sandbox/knobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    for (const bad of [
      { outcomeWeights: { lost: 1 } },
      { outcomeWeights: { delivered: -1 } },
      { outcomeWeights: { delivered: 0 } },
      { outcomeWeights: [1] },
      { seed: -1 },
      { seed: 1.5 },
      { seed: 'x' },
    ]) {
      expect((await knobs(bad)).status, JSON.stringify(bad)).toBe(400);
    }
    expect((await knobs({ outcomeWeights: null, seed: 42 })).status).toBe(200);
    expect(sandbox.knobs).toMatchObject({ outcomeWeights: null, seed: 42 });
  });

  it('replays the same draws for the same seed, booking by booking, in a fresh sandbox', async () => {
    const run = async (seed: number) => {
      const fresh = await startSandbox({ knobs: { ...QUIET, seed, returnRate: 0.5, reassignRate: 0.5 } });
      try {
        const merchant = fresh.merchants[0]!.key;
        const stories = [];
        for (let i = 0; i < 12; i++) {
          const res = await fetch(`${fresh.url}/${fresh.platformId}/deliveries`, {
            method: 'POST',
            headers: { authorization: `Bearer ${merchant}`, 'content-type': 'application/json' },
            body: JSON.stringify({
              pickup_address_street: 'A',
              pickup_address_city: 'New York',
              pickup_address_country: 'US',
              pickup_name: 'P',
              email: 'p@example.com',
              dropoff_address_street: 'B',
              dropoff_address_city: 'New York',
              dropoff_address_country: 'US',
              dropoff_name: 'D',
              package_delivery_mode: 'NOW',
            }),
          });
          const { uid } = (await res.json()) as { uid: string };
          for (let step = 0; step < 5; step++) await fresh.advance(uid);
          const story = fresh.history(uid)!;
          // Outcome (drawn at pickup) and reassignment (drawn on the way to it) both follow from the seed.
          stories.push({
            seed: story.seed,
            outcome: story.outcome,
            reassigned: story.events.filter((e) => e.event_name === 'delivery.assigned').length > 1,
          });
        }
        return stories;
      } finally {
        await fresh.stop();
      }
    };
    const first = await run(1234);
    expect(await run(1234)).toEqual(first);
    expect(new Set(first.map((s) => s.outcome)).size).toBeGreaterThan(1);
    expect(new Set(first.map((s) => s.reassigned)).size).toBe(2);
    const other = await run(99);
    expect(other.map((s) => s.seed)).not.toEqual(first.map((s) => s.seed));
  });
});
