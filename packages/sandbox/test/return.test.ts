// The return path: a package that was picked up but not delivered fails at the
// door or is canceled by the provider on the way, then goes back to the pickup.
// Forced per delivery with `sandbox_outcome` in the payload, or drawn with the
// returnRate knob; seen through reads, webhooks and the fault knobs.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox, type SandboxKnobs } from '../src/index.js';
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
  returnRate: 0,
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

async function listen(respond?: Parameters<typeof startWebhookReceiver>[0]['respond']): Promise<WebhookReceiver> {
  receiver = await startWebhookReceiver({ publicKeyPem: sandbox.publicKeyPem, issuer: sandbox.issuer, respond });
  sandbox.setWebhookUrl(receiver.url);
  return receiver;
}

const PICKUP = { lat: 40.7306, lng: -73.9866 };
const DROPOFF = { lat: 40.758, lng: -73.9855 };

interface Answer {
  status: number;
  body: any;
}

async function call(method: string, path: string, body?: unknown): Promise<Answer> {
  const res = await fetch(`${sandbox.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}

const deliveryBody = (payload: Record<string, unknown> | undefined) => ({
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

async function createDelivery(payload?: Record<string, unknown>): Promise<string> {
  const res = await call('POST', `/${sandbox.platformId}/deliveries`, deliveryBody(payload));
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.uid as string;
}

const read = async (uid: string) => (await call('GET', `/${sandbox.platformId}/deliveries/${uid}`)).body.data;
const cancel = (uid: string) => call('POST', `/${sandbox.platformId}/deliveries/${uid}/cancel`);

/** Advances until the sandbox says the delivery is finished; returns how many steps that took. */
async function advanceToEnd(uid: string): Promise<number> {
  for (let steps = 0; steps < 20; steps++) {
    try {
      await sandbox.advance(uid);
    } catch {
      return steps;
    }
  }
  throw new Error(`delivery ${uid} never finished`);
}

const ofDelivery = (uid: string, events: ReceivedEvent[]) => events.filter((e) => e.uid === uid);
const deliveryEvents = (events: ReceivedEvent[]) => events.filter((e) => e.event_name.startsWith('delivery.'));
const distance = (a: { lat: number; lng: number }, b: { lat: number; lng: number }) =>
  Math.hypot(a.lat - b.lat, a.lng - b.lng);

const UP_TO_PICKUP = [
  'delivery.created',
  'delivery.assigned',
  'delivery.pickup_enroute',
  'delivery.pickup_arrived',
  'delivery.pickup_complete',
];

describe('a delivery forced to fail at the door', () => {
  it('reads FAILED, RETURN_IN_PROGRESS, RETURNED after dropoff_arrived, with a webhook for each and the courier back at the pickup', async () => {
    await listen();
    const payload = { store: 'deli-1', sandbox_outcome: 'failed_then_returned', nested: { keep: [1, 2] } };
    const uid = await createDelivery(payload);

    const statuses: string[] = [];
    const refusals: number[] = [];
    for (let step = 0; step < 9; step++) {
      await sandbox.advance(uid);
      const data = await read(uid);
      statuses.push(data.status);
      // The merchant may not cancel once the package is in the vehicle, on the way back included.
      if (step >= 3) refusals.push((await cancel(uid)).status);
    }
    expect(statuses).toEqual([
      'ASSIGNED',
      'PICKUP_ENROUTE',
      'PICKUP_ARRIVED',
      'PICKUP_COMPLETE',
      'DROPOFF_ENROUTE',
      'DROPOFF_ARRIVED',
      'FAILED',
      'RETURN_IN_PROGRESS',
      'RETURNED',
    ]);
    expect(new Set(refusals)).toEqual(new Set([409]));
    await expect(sandbox.advance(uid)).rejects.toThrow(/already returned/);

    const done = await read(uid);
    expect(done).toMatchObject({
      status: 'RETURNED',
      driver_location: PICKUP,
      platform_payload: payload,
      cancellation_reason: null,
      dropoff_verification_image_url: null,
      expected_cancellation_fee: null,
      price: { value: expect.any(Number), currency: 'USD' },
    });

    await sandbox.idle();
    const events = ofDelivery(uid, receiver!.events());
    expect(deliveryEvents(events).map((e) => [e.event_name, e.status])).toEqual([
      ['delivery.created', 'Created'],
      ['delivery.assigned', 'Assigned'],
      ['delivery.pickup_enroute', 'Pickup Enroute'],
      ['delivery.pickup_arrived', 'Pickup Arrived'],
      ['delivery.pickup_complete', 'Picked Up'],
      ['delivery.dropoff_enroute', 'Dropoff Enroute'],
      ['delivery.dropoff_arrived', 'Dropoff Arrived'],
      ['delivery.failed', 'Failed'],
      ['delivery.return_in_progress', 'Return In Progress'],
      ['delivery.returned', 'Returned'],
    ]);
    // Manual steps send no ticks: one pin with the return milestone, a tenth of the way back.
    const back = events.filter((e) => e.event_name === 'location.return_in_progress');
    expect(back).toHaveLength(1);
    expect(distance(back[0]!.driver_location!, PICKUP)).toBeLessThan(distance(DROPOFF, PICKUP));
    expect(distance(back[0]!.driver_location!, PICKUP)).toBeGreaterThan(0);
    const at = (name: string) => events.find((e) => e.event_name === name)!;
    expect(at('delivery.failed').driver_location).toEqual(DROPOFF);
    expect(at('delivery.returned').driver_location).toEqual(PICKUP);
    expect(events.at(-1)!.event_name).toBe('delivery.returned');
    for (const e of events) {
      expect(e.platform_payload, e.event_name).toEqual(payload);
      expect(e, e.event_name).not.toHaveProperty('cancellation_reason');
    }
  });
});

describe('a delivery forced to be canceled by the provider', () => {
  it('is canceled on the way to the recipient, then driven back to the pickup with location ticks', async () => {
    await listen();
    sandbox.setKnobs({ stepMs: 30, locationTicks: 3 });
    const uid = await createDelivery({ sandbox_outcome: 'canceled_then_returned' });
    const all = ofDelivery(
      uid,
      await receiver!.waitFor((events) => ofDelivery(uid, events).some((e) => e.event_name === 'delivery.returned')),
    );
    await sandbox.idle();

    expect(deliveryEvents(all).map((e) => e.event_name)).toEqual([
      ...UP_TO_PICKUP,
      'delivery.dropoff_enroute',
      'delivery.canceled',
      'delivery.return_in_progress',
      'delivery.returned',
    ]);
    const names = all.map((e) => e.event_name);
    const fromCancel = names.slice(names.indexOf('delivery.canceled'));
    expect(fromCancel).toEqual([
      'delivery.canceled',
      'delivery.return_in_progress',
      'location.return_in_progress',
      'location.return_in_progress', // ticks while driving back
      'location.return_in_progress',
      'location.return_in_progress',
      'delivery.returned',
    ]);

    const canceled = all.find((e) => e.event_name === 'delivery.canceled')!;
    expect(canceled).toMatchObject({ status: 'Canceled', cancellation_reason: expect.stringMatching(/^provider: /) });
    // Canceled where the courier was on the dropoff leg, not at either end.
    const lastTowardsDropoff = all.filter((e) => e.event_name === 'location.dropoff_enroute').at(-1)!;
    expect(canceled.driver_location).toEqual(lastTowardsDropoff.driver_location);
    expect(canceled.driver_location).not.toEqual(DROPOFF);

    // Back towards the pickup, closer at every pin, and there at the end.
    const towardsPickup = all
      .filter((e) => e.event_name === 'location.return_in_progress')
      .map((e) => distance(e.driver_location!, PICKUP));
    expect(towardsPickup).toEqual([...towardsPickup].sort((a, b) => b - a));
    expect(new Set(towardsPickup).size).toBe(4);
    expect(towardsPickup[0]!).toBeLessThan(distance(canceled.driver_location!, PICKUP));
    const returned = all.at(-1)!;
    expect(returned).toMatchObject({ event_name: 'delivery.returned', status: 'Returned', driver_location: PICKUP });
    expect(all.filter((e) => e.cancellation_reason !== undefined).map((e) => e.event_name)).toEqual([
      'delivery.canceled',
    ]);

    const data = await read(uid);
    expect(data).toMatchObject({
      status: 'RETURNED',
      driver_location: PICKUP,
      cancellation_reason: canceled.cancellation_reason,
    });
    expect((await cancel(uid)).body.code).toBe('not_cancelable');
  });

  it('works the same for a partner order, read by uid and by reference', async () => {
    const order = sandbox.seedPartnerOrder(key, {
      partner_reference: `return-${Date.now()}`,
      partner_payload: { sandbox_outcome: 'canceled_then_returned', basket: 9 },
    });
    const byUid = async () => (await call('GET', `/orders/${order.uid}`)).body.data;
    const byReference = async () =>
      (await call('GET', `/orders/partner/${encodeURIComponent(order.partner_reference!)}`)).body.data;

    for (let i = 0; i < 6; i++) await sandbox.advance(order.uid);
    expect(await byUid()).toMatchObject({
      status: 'Canceled',
      cancellation_reason: expect.stringMatching(/^provider: /),
      expected_cancelation_fee: null,
    });
    expect((await call('POST', `/orders/${order.uid}/cancel`)).body.error).toBe('not_cancelable');
    await sandbox.advance(order.uid);
    expect((await byReference()).status).toBe('RETURN_IN_PROGRESS');
    await sandbox.advance(order.uid);
    const done = await byReference();
    expect(done).toMatchObject({
      status: 'RETURNED',
      partner_payload: { sandbox_outcome: 'canceled_then_returned', basket: 9 },
    });
    expect(done.driver_location).toEqual({ lat: done.pickup_address_latitude, lng: done.pickup_address_longitude });
  });
});

describe('choosing the outcome', () => {
  it('delivers everything at the default returnRate 0', async () => {
    expect(sandbox.knobs.returnRate).toBe(0);
    const uid = await createDelivery();
    expect(await advanceToEnd(uid)).toBe(7);
    expect((await read(uid)).status).toBe('DROPOFF_COMPLETE');
  });

  it('sends every delivery back at returnRate 1, some after a failure and some after a provider cancel', async () => {
    sandbox.setKnobs({ returnRate: 1 });
    const uids = await Promise.all(Array.from({ length: 30 }, () => createDelivery()));
    const ends = new Set<string>();
    for (const uid of uids) {
      await advanceToEnd(uid);
      const data = await read(uid);
      expect(data.status).toBe('RETURNED');
      ends.add(data.cancellation_reason === null ? 'failed' : 'canceled');
    }
    expect(ends).toEqual(new Set(['failed', 'canceled']));
  });

  it('decides at pickup, so a knob change before then still applies', async () => {
    const uid = await createDelivery();
    await sandbox.advance(uid);
    await sandbox.advance(uid);
    sandbox.setKnobs({ returnRate: 1 });
    await advanceToEnd(uid);
    expect((await read(uid)).status).toBe('RETURNED');
  });

  it('lets the payload force an outcome over the knob', async () => {
    sandbox.setKnobs({ returnRate: 1 });
    const delivered = await createDelivery({ sandbox_outcome: 'delivered' });
    expect(await advanceToEnd(delivered)).toBe(7);
    expect((await read(delivered)).status).toBe('DROPOFF_COMPLETE');

    sandbox.setKnobs({ returnRate: 0 });
    const failed = await createDelivery({ sandbox_outcome: 'failed_then_returned' });
    expect(await advanceToEnd(failed)).toBe(9);
    expect((await read(failed)).status).toBe('RETURNED');
  });

  it('refuses an unknown sandbox_outcome on both groups, and takes returnRate over the control route', async () => {
    const res = await call(
      'POST',
      `/${sandbox.platformId}/deliveries`,
      deliveryBody({ sandbox_outcome: 'lost_at_sea' }),
    );
    expect(res.status).toBe(422);
    expect(res.body.errors.platform_payload[0]).toMatch(
      /sandbox_outcome.*delivered, failed_then_returned, canceled_then_returned/,
    );
    expect(() =>
      sandbox.seedPartnerOrder(key, { partner_reference: 'bad-outcome', partner_payload: { sandbox_outcome: 7 } }),
    ).toThrow(/sandbox_outcome/);

    const knobs = (body: unknown) =>
      fetch(`${sandbox.origin}/sandbox/knobs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    expect((await knobs({ returnRate: 0.25 })).status).toBe(200);
    expect(sandbox.knobs.returnRate).toBe(0.25);
    expect((await knobs({ returnRate: 1.5 })).status).toBe(400);
    expect(sandbox.knobs.returnRate).toBe(0.25);
    const info = (await (await fetch(`${sandbox.origin}/sandbox/info`)).json()) as { knobs: SandboxKnobs };
    expect(info.knobs.returnRate).toBe(0.25);
  });
});

describe('the fault knobs on the return path', () => {
  it('delivers every return event, duplicated, reordered and retried, ending with delivery.returned', async () => {
    const refusedOnce = new Set<string>();
    await listen((event) => {
      // The first attempt of each failure event is refused: it must come again.
      if (event.event_name !== 'delivery.failed' || refusedOnce.has(event.uid)) return 200;
      refusedOnce.add(event.uid);
      return 503;
    });
    sandbox.setKnobs({ duplicateRate: 1, reorderRate: 1, stepMs: 15, locationTicks: 0 });
    const uid = await createDelivery({ sandbox_outcome: 'failed_then_returned' });
    const expected = [
      ...UP_TO_PICKUP,
      'delivery.dropoff_enroute',
      'delivery.dropoff_arrived',
      'delivery.failed',
      'delivery.return_in_progress',
      'delivery.returned',
    ];
    await receiver!.waitFor((events) => deliveryEvents(ofDelivery(uid, events)).length === expected.length * 2, 10_000);
    await sandbox.idle();

    const received = deliveryEvents(ofDelivery(uid, receiver!.events())).map((e) => e.event_name);
    expect([...received].sort()).toEqual([...expected, ...expected].sort());
    expect(received).not.toEqual(expected.flatMap((name) => [name, name]));
    const attempts = receiver!.attempts
      .filter((a) => a.event.uid === uid && a.event.event_name === 'delivery.failed')
      .map((a) => a.status);
    expect(attempts).toEqual([503, 200, 200]);
    expect(sandbox.webhookStats().pending).toBe(0);
    expect((await read(uid)).status).toBe('RETURNED');
  });
});
