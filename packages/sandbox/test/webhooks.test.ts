// The simulated lifecycle as a webhook receiver sees it: signed events for every
// milestone in order, a moving courier, retries, duplicates and reordering.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox, type SandboxKnobs } from '../src/index.js';
import { DELIVERY_EVENT_NAMES } from '../src/wire.js';
import {
  startWebhookReceiver,
  type ReceivedEvent,
  type WebhookReceiver,
} from '../../../test/helpers/webhook-receiver.js';

const MILESTONE_EVENTS = DELIVERY_EVENT_NAMES.slice(0, 8);
const QUIET: Partial<SandboxKnobs> = {
  stepMs: 0,
  locationTicks: 3,
  duplicateRate: 0,
  reorderRate: 0,
  retryBaseMs: 10,
  webhookTimeoutMs: 1000,
};

let sandbox: Sandbox;
let receiver: WebhookReceiver;
let key: string;

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: QUIET });
  key = sandbox.merchants[0]!.key;
});
afterEach(async () => {
  sandbox.setKnobs(QUIET);
  sandbox.setWebhookUrl(undefined);
  await receiver?.close();
});
afterAll(() => sandbox.stop());

async function listen(respond?: Parameters<typeof startWebhookReceiver>[0]['respond']): Promise<WebhookReceiver> {
  receiver = await startWebhookReceiver({ publicKeyPem: sandbox.publicKeyPem, issuer: sandbox.issuer, respond });
  sandbox.setWebhookUrl(receiver.url);
  return receiver;
}

const PICKUP = { lat: 40.7306, lng: -73.9866 };
const DROPOFF = { lat: 40.758, lng: -73.9855 };

async function createDelivery(patch: Record<string, unknown> = {}): Promise<string> {
  const res = await fetch(`${sandbox.url}/${sandbox.platformId}/deliveries`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      pickup_address_street: 'E 10th St',
      pickup_address_number: '100',
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
      tip: 300,
      platform_payload: { store: 'deli-1', nested: { ok: true } },
      ...patch,
    }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { uid: string }).uid;
}

const ofDelivery = (uid: string) => (events: ReceivedEvent[]) => events.filter((e) => e.uid === uid);
const names = (events: ReceivedEvent[]) => events.map((e) => e.event_name);
const deliveryNames = (events: ReceivedEvent[]) => names(events).filter((n) => n.startsWith('delivery.'));

describe('a simulated delivery, as the webhook receiver sees it', () => {
  it('announces every milestone in order with signed events and a moving courier', async () => {
    await listen();
    sandbox.setKnobs({ stepMs: 30, locationTicks: 2 });
    const uid = await createDelivery();
    const all = ofDelivery(uid)(
      await receiver.waitFor((events) => names(ofDelivery(uid)(events)).includes('delivery.dropoff_complete')),
    );
    await sandbox.idle();

    expect(receiver.rejected).toBe(0);
    expect(deliveryNames(all)).toEqual(MILESTONE_EVENTS);
    expect(names(all)).toEqual([
      'delivery.created',
      'delivery.assigned',
      'location.assigned_driver',
      'delivery.pickup_enroute',
      'location.pickup_enroute',
      'location.pickup_enroute', // ticks while driving
      'location.pickup_enroute',
      'delivery.pickup_arrived',
      'location.pickup_arrived',
      'delivery.pickup_complete',
      'location.pickup_complete',
      'delivery.dropoff_enroute',
      'location.dropoff_enroute',
      'location.dropoff_enroute',
      'location.dropoff_enroute',
      'delivery.dropoff_arrived',
      'location.dropoff_arrived',
      'delivery.dropoff_complete',
    ]);
    expect(all.filter((e) => e.event_name.startsWith('delivery.')).map((e) => e.status)).toEqual([
      'Created',
      'Assigned',
      'Pickup Enroute',
      'Pickup Arrived',
      'Picked Up',
      'Dropoff Enroute',
      'Dropoff Arrived',
      'Delivered',
    ]);

    // The courier moves: towards the pickup, waits there, then towards the dropoff.
    const pins = all.filter((e) => e.event_name.startsWith('location.')).map((e) => e.driver_location!);
    expect(pins.every((p) => typeof p.lat === 'number' && typeof p.lng === 'number')).toBe(true);
    expect(new Set(pins.map((p) => `${p.lat},${p.lng}`)).size).toBeGreaterThanOrEqual(8);
    const at = (name: string) => all.find((e) => e.event_name === name)!.driver_location;
    expect(at('location.pickup_arrived')).toEqual(PICKUP);
    expect(at('location.dropoff_arrived')).toEqual(DROPOFF);
    const towardsDropoff = all
      .filter((e) => e.event_name === 'location.dropoff_enroute')
      .map((e) => distance(e.driver_location!, DROPOFF));
    expect(towardsDropoff).toEqual([...towardsDropoff].sort((a, b) => b - a));
    expect(new Set(towardsDropoff).size).toBe(3);

    // What each event carries.
    const created = all[0]!;
    expect(created).toMatchObject({
      uid,
      status: 'Created',
      platform_payload: { store: 'deli-1', nested: { ok: true } },
      // Pricing settles when a courier takes the job.
      price: { value: null, currency: 'USD' },
      distance: { value: expect.any(Number), unit: 'km' },
      tip: 3,
      pickup_name: 'Corner Deli',
      email: 'deli@example.com',
      pickup_address: {
        street: 'E 10th St',
        number: '100',
        city: 'New York',
        country: 'US',
        latitude: PICKUP.lat,
        longitude: PICKUP.lng,
      },
      dropoff_address: {
        street: 'W 42nd St',
        city: 'New York',
        country: 'US',
        latitude: DROPOFF.lat,
        longitude: DROPOFF.lng,
      },
      dropoff_name: 'Grace Hopper',
      package_delivery_mode: 'NOW',
      delivery_date: new Date().toISOString().slice(0, 10),
    });
    expect(created.dropoff_time_estimated).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+00:00$/);
    expect(created).not.toHaveProperty('pickup_address_street');
    expect(created).not.toHaveProperty('driver_name');
    expect(created).not.toHaveProperty('driver_location');
    expect(created).not.toHaveProperty('partner_reference');

    const assigned = all.find((e) => e.event_name === 'delivery.assigned')!;
    expect(assigned).toMatchObject({
      driver_name: expect.any(String),
      driver_location: { lat: expect.any(Number), lng: expect.any(Number) },
      driver_pickup_phone_number: expect.any(String),
      driver_dropoff_phone_number: expect.any(String),
      driver_vehicle_make: expect.any(String),
      driver_vehicle_model: expect.any(String),
      driver_vehicle_year: expect.any(Number),
    });
    for (const e of all.slice(1)) expect(e.driver_name).toBe(assigned.driver_name);
    for (const e of all.slice(1)) expect(e.price).toEqual({ value: expect.any(Number), currency: 'USD' });
    expect(new Set(all.slice(1).map((e) => e.price!.value)).size).toBe(1);

    // Proof only on delivery.dropoff_arrived; no cancellation reason anywhere.
    for (const e of all) {
      const proofs = e.event_name === 'delivery.dropoff_arrived';
      expect(e.dropoff_verification_image_url !== undefined, e.event_name).toBe(proofs);
      expect(e.dropoff_signature_image_url !== undefined, e.event_name).toBe(proofs);
      expect(e).not.toHaveProperty('cancellation_reason');
    }

    // The HTTP body is the signed payload; the JWT carries iss, iat and exp.
    for (const attempt of receiver.attempts) {
      expect(attempt.body).toEqual(attempt.event);
      expect(attempt.claims).toMatchObject({ iss: 'lastmile', iat: expect.any(Number), exp: expect.any(Number) });
      expect(attempt.claims.exp!).toBeGreaterThan(attempt.claims.iat!);
    }
    expect(sandbox.webhookStats()).toMatchObject({ failed: 0, retries: 0, pending: 0 });

    // Reads agree with the last event.
    const read = await fetch(`${sandbox.url}/${sandbox.platformId}/deliveries/${uid}`, {
      headers: { authorization: `Bearer ${key}` },
    });
    const { data } = (await read.json()) as { data: { status: string; driver_location: unknown; driver_name: string } };
    expect(data).toMatchObject({
      status: 'DROPOFF_COMPLETE',
      driver_location: DROPOFF,
      driver_name: assigned.driver_name,
    });
  });

  it('announces a cancellation with its reason and stops the lifecycle', async () => {
    await listen();
    const uid = await createDelivery();
    await sandbox.advance(uid);
    const res = await fetch(`${sandbox.url}/${sandbox.platformId}/deliveries/${uid}/cancel`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}` },
    });
    expect(res.status).toBe(200);
    sandbox.setKnobs({ stepMs: 10 }); // would move it on, were it still running
    // A delivery booked now runs on the same clock: once it has moved on three milestones, the canceled one had
    // every chance to move on too.
    const running = await createDelivery();
    await receiver.waitFor((events) => deliveryNames(ofDelivery(running)(events)).includes('delivery.pickup_arrived'));
    await sandbox.idle();
    const events = ofDelivery(uid)(receiver.events());
    expect(names(events)).toEqual([
      'delivery.created',
      'delivery.assigned',
      'location.assigned_driver',
      'delivery.canceled',
    ]);
    expect(events.at(-1)).toMatchObject({
      status: 'Canceled',
      cancellation_reason: 'Canceled by platform',
      driver_location: expect.any(Object),
    });
  });

  it("sends a partner order's events with the document's body (platform_payload null, no partner fields), and with them only when partnerWebhookFields asks", async () => {
    await listen();
    const seed = (reference: string) =>
      sandbox.seedPartnerOrder(key, {
        partner_reference: reference,
        partner_payload: { basket: 9 },
        delivery_start_time: '2030-01-01T09:00:00Z',
        dropoff_address_street: undefined,
        dropoff_address_city: undefined,
        dropoff_address_country: undefined,
      });
    const plain = seed('hook-plain');
    await sandbox.advance(plain.uid);
    await sandbox.idle();
    const [created, assigned] = ofDelivery(plain.uid)(receiver.events());
    expect(created).toMatchObject({
      event_name: 'delivery.created',
      platform_payload: null,
      delivery_start_time: '2030-01-01T09:00:00+00:00',
    });
    expect(created).not.toHaveProperty('partner_reference');
    expect(created).not.toHaveProperty('partner_payload');
    // No dropoff address was given: the nested object is left out.
    expect(created).not.toHaveProperty('dropoff_address');
    expect(created!.pickup_address).toMatchObject({ street: '1 Market St', city: 'San Francisco' });
    expect(assigned!.event_name).toBe('delivery.assigned');

    sandbox.setKnobs({ partnerWebhookFields: true });
    try {
      const order = seed('hook-ref');
      await sandbox.idle();
      const [withFields] = ofDelivery(order.uid)(receiver.events());
      expect(withFields).toMatchObject({
        event_name: 'delivery.created',
        partner_reference: 'hook-ref',
        partner_payload: { basket: 9 },
      });
      expect(withFields).not.toHaveProperty('platform_payload');
    } finally {
      sandbox.setKnobs({ partnerWebhookFields: false });
    }
  });

  it('sends nothing while no webhook URL is set', async () => {
    const before = sandbox.webhookStats().sent;
    const uid = await createDelivery();
    await sandbox.advance(uid);
    expect(sandbox.webhookStats().sent).toBe(before);
  });
});

describe('delivery guarantees', () => {
  it('retries a 5xx with growing gaps and delivers once', async () => {
    await listen((_, n) => (n <= 2 ? 500 : 200));
    sandbox.setKnobs({ retryBaseMs: 40 });
    const before = sandbox.webhookStats();
    const uid = await createDelivery();
    await sandbox.idle();

    const attempts = receiver.attempts.filter((a) => a.event.uid === uid);
    expect(attempts.map((a) => [a.event.event_name, a.status])).toEqual([
      ['delivery.created', 500],
      ['delivery.created', 500],
      ['delivery.created', 200],
    ]);
    expect(names(ofDelivery(uid)(receiver.events()))).toEqual(['delivery.created']);
    const [first, second, third] = attempts.map((a) => a.at) as [number, number, number];
    expect(second - first).toBeGreaterThanOrEqual(35); // retryBaseMs
    expect(third - second).toBeGreaterThanOrEqual(75); // 2 × retryBaseMs
    const after = sandbox.webhookStats();
    expect({
      sent: after.sent - before.sent,
      delivered: after.delivered - before.delivered,
      retries: after.retries - before.retries,
      failed: after.failed - before.failed,
      pending: after.pending,
    }).toEqual({ sent: 1, delivered: 1, retries: 2, failed: 0, pending: 0 });
  });

  it('gives up after 5 retries (6 attempts) and moves on to the delivery’s next event', async () => {
    await listen((event) => (event.event_name === 'delivery.created' ? 503 : 200));
    const before = sandbox.webhookStats();
    const uid = await createDelivery();
    await sandbox.advance(uid);
    await sandbox.idle();

    const attempts = receiver.attempts.filter((a) => a.event.uid === uid);
    expect(attempts.filter((a) => a.event.event_name === 'delivery.created').map((a) => a.status)).toEqual([
      503, 503, 503, 503, 503, 503,
    ]);
    // Growing: the fifth retry waits 2⁴ times retryBaseMs; a busy machine can only make a gap longer.
    const gaps = attempts.slice(0, 6).map((a, i, list) => (i === 0 ? 0 : a.at - list[i - 1]!.at));
    expect(gaps[5]!).toBeGreaterThanOrEqual(2 ** 4 * QUIET.retryBaseMs! - 5);
    // Order holds: the next event went out only after the first was given up.
    expect(names(attempts.map((a) => a.event))).toEqual([
      ...Array(6).fill('delivery.created'),
      'delivery.assigned',
      'location.assigned_driver',
    ]);
    const after = sandbox.webhookStats();
    expect(after.failed - before.failed).toBe(1);
    expect(after.retries - before.retries).toBe(5);
    expect(after.delivered - before.delivered).toBe(2);
  });

  it('treats a receiver slower than webhookTimeoutMs as failed and retries', async () => {
    await listen((_, n) => (n === 1 ? 'hang' : 200));
    sandbox.setKnobs({ webhookTimeoutMs: 100 });
    const before = sandbox.webhookStats();
    const started = Date.now();
    const uid = await createDelivery();
    await sandbox.idle();
    expect(Date.now() - started).toBeGreaterThanOrEqual(100);
    expect(receiver.attempts.filter((a) => a.event.uid === uid).map((a) => a.status)).toEqual([0, 200]);
    expect(sandbox.webhookStats().retries - before.retries).toBe(1);
    expect(sandbox.webhookStats().delivered - before.delivered).toBe(1);
  });

  it('sends every event twice at duplicateRate 1', async () => {
    await listen();
    sandbox.setKnobs({ duplicateRate: 1 });
    const uid = await createDelivery();
    await sandbox.advance(uid);
    await sandbox.idle();
    expect(names(ofDelivery(uid)(receiver.events()))).toEqual([
      'delivery.created',
      'delivery.created',
      'delivery.assigned',
      'delivery.assigned',
      'location.assigned_driver',
      'location.assigned_driver',
    ]);
  });

  it('delivers every milestone, some out of order, at reorderRate 1', async () => {
    await listen();
    sandbox.setKnobs({ reorderRate: 1, stepMs: 15, locationTicks: 0 });
    const uid = await createDelivery();
    await receiver.waitFor((events) => deliveryNames(ofDelivery(uid)(events)).length === 8);
    await sandbox.idle();
    const received = deliveryNames(ofDelivery(uid)(receiver.events()));
    expect([...received].sort()).toEqual([...MILESTONE_EVENTS].sort());
    expect(received).not.toEqual(MILESTONE_EVENTS);
    // The first event is held back until the next one has gone.
    expect(received.indexOf('delivery.assigned')).toBeLessThan(received.indexOf('delivery.created'));
  });
});

/** Plain Euclidean distance in degrees: enough to order points along a short leg. */
function distance(a: { lat: number; lng: number }, b: { lat: number; lng: number }): number {
  return Math.hypot(a.lat - b.lat, a.lng - b.lng);
}
