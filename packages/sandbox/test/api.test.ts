// What a client of the sandbox sees over real HTTP: auth, error shapes, the
// create/read/cancel round trip on both groups, tenancy, and the API knobs.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/index.js';

let sandbox: Sandbox;
let keyA: string;
let keyB: string;
/** A merchant of another platform. */
let keyOther: string;

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: { stepMs: 0 } });
  [keyA, keyB, keyOther] = sandbox.merchants.map((m) => m.key) as [string, string, string];
});
afterEach(() => sandbox.setKnobs({ latencyMs: 0, errorRate: 0, stepMs: 0 }));
afterAll(() => sandbox.stop());

interface Answer {
  status: number;
  body: any;
}

async function call(
  method: string,
  path: string,
  options: { key?: string | null; body?: unknown; base?: string } = {},
): Promise<Answer> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (options.key !== null) headers.authorization = `Bearer ${options.key ?? keyA}`;
  const res = await fetch(`${options.base ?? sandbox.url}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}
const platform = (path: string) => `/${sandbox.platformId}${path}`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const WIRE_DATETIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\+00:00$/;

// Market St, San Francisco → Lake Merritt, Oakland: ~13.6 km as the crow flies.
const PICKUP = { lat: 37.7936, lng: -122.3958 };
const DROPOFF = { lat: 37.8024, lng: -122.2587 };

const deliveryRequest = (patch: Record<string, unknown> = {}): Record<string, unknown> => ({
  pickup_address_street: 'Market St',
  pickup_address_number: '1',
  pickup_address_city: 'San Francisco',
  pickup_address_state: 'CA',
  pickup_address_postal_code: '94105',
  pickup_address_country: 'US',
  pickup_address_latitude: PICKUP.lat,
  pickup_address_longitude: PICKUP.lng,
  pickup_name: 'Sandbox Bakery',
  pickup_phone_number: '+14155550100',
  pickup_instructions: 'Back door',
  pickup_start_time: '2030-05-01T13:30:00Z',
  email: 'bakery@example.com',
  dropoff_address_street: 'Lakeshore Ave',
  dropoff_address_number: '3300',
  dropoff_address_city: 'Oakland',
  dropoff_address_country: 'US',
  dropoff_address_latitude: DROPOFF.lat,
  dropoff_address_longitude: DROPOFF.lng,
  dropoff_name: 'Ada Lovelace',
  dropoff_phone_number: '+15105550199',
  dropoff_email: 'ada@example.com',
  dropoff_start_time: '2030-05-01T14:00:00.500Z',
  delivery_date: '2030-05-01',
  package_description: 'Two loaves',
  package_requirements: ['photo_proof_of_delivery'],
  items: [{ name: 'Sourdough', quantity: 2, price: 650, external_id: 'sku-1' }],
  items_count: 2,
  weight: 2,
  package_value: 1299,
  tip: 1234,
  currency: 'USD',
  platform_payload: { order: { id: 42, tags: ['a', 'b'] }, note: null },
  ...patch,
});

async function createDelivery(patch: Record<string, unknown> = {}, key = keyA): Promise<string> {
  const res = await call('POST', platform('/deliveries'), { key, body: deliveryRequest(patch) });
  expect(res.status).toBe(201);
  return res.body.uid as string;
}

describe('authentication', () => {
  const platformCalls: [string, string, unknown?][] = [
    ['POST', '/quote', {}],
    ['POST', '/deliveries', {}],
    ['GET', '/deliveries/00000000-0000-4000-8000-000000000000'],
    ['POST', '/deliveries/00000000-0000-4000-8000-000000000000/cancel'],
    ['GET', '/availability'],
  ];
  it.each(platformCalls)(
    'platform %s %s: 401 invalid_api_key without a key, with an unknown key, or a key of another platform',
    async (method, path, body) => {
      for (const key of [null, 'sk_test_nope', keyOther]) {
        const res = await call(method, platform(path), { key, body });
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ code: 'invalid_api_key', message: expect.any(String) });
        if (key) expect(res.body.message).not.toContain(key);
      }
    },
  );

  it('refuses a valid key on an unknown platform id', async () => {
    const res = await call('GET', '/no-such-platform/availability');
    expect(res.status).toBe(401);
    expect(res.body.code).toBe('invalid_api_key');
  });

  it('names the platform problem', async () => {
    const res = await call('GET', platform('/availability'), { key: keyOther });
    expect(res.body.message).toMatch(/not valid for this platform/);
  });

  const partnerCalls: [string, string, unknown?][] = [
    ['POST', '/quote', {}],
    ['GET', '/orders/00000000-0000-4000-8000-000000000000'],
    ['GET', '/orders/partner/ref-1'],
    ['POST', '/orders/00000000-0000-4000-8000-000000000000/cancel'],
    ['GET', '/availability'],
  ];
  it.each(partnerCalls)(
    'partner %s %s: 401 {error: invalid_api_key} without a key or with an unknown key',
    async (method, path, body) => {
      for (const key of [null, 'sk_test_nope', 'Basic abc']) {
        const res = await call(method, path, { key, body });
        expect(res.status).toBe(401);
        expect(res.body).toEqual({ error: 'invalid_api_key', message: expect.any(String) });
      }
    },
  );

  it('accepts valid keys: on its own platform, and any merchant key on the partner group', async () => {
    expect((await call('GET', platform('/availability'))).status).toBe(200);
    expect((await call('GET', `/${sandbox.merchants[2]!.platformId}/availability`, { key: keyOther })).status).toBe(
      200,
    );
    expect((await call('GET', '/availability', { key: keyOther })).status).toBe(200);
  });
});

describe('error shapes and routes', () => {
  it('answers availability on both groups', async () => {
    expect(await call('GET', platform('/availability'))).toEqual({
      status: 200,
      body: { service: 'lastmile', available: true },
    });
    expect(await call('GET', '/availability')).toEqual({ status: 200, body: { service: 'lastmile', available: true } });
  });

  it('answers unknown routes with 404 in each group’s shape', async () => {
    expect(await call('GET', platform('/nothing-here'))).toEqual({
      status: 404,
      body: { code: 'not_found', message: expect.any(String) },
    });
    expect(await call('GET', '/orders')).toEqual({
      status: 404,
      body: { error: 'not_found', message: expect.any(String) },
    });
  });

  it('answers a wrong method with 405 in the group’s shape', async () => {
    const res = await call('GET', platform('/quote'));
    expect(res.status).toBe(405);
    expect(res.body.code).toBe('method_not_allowed');
  });

  it('answers unknown uids with 404 not_found on read and cancel', async () => {
    const uid = '00000000-0000-4000-8000-000000000000';
    expect(await call('GET', platform(`/deliveries/${uid}`))).toEqual({
      status: 404,
      body: { code: 'not_found', message: expect.any(String) },
    });
    expect((await call('POST', platform(`/deliveries/${uid}/cancel`))).body.code).toBe('not_found');
    expect(await call('GET', `/orders/${uid}`)).toEqual({
      status: 404,
      body: { error: 'not_found', message: expect.any(String) },
    });
    expect((await call('GET', '/orders/partner/never-seen')).body.error).toBe('not_found');
    expect((await call('POST', `/orders/${uid}/cancel`)).status).toBe(404);
  });
});

describe('platform quote', () => {
  it('prices from the given coordinates: haversine km, fee in major units, tip converted from cents', async () => {
    const res = await call('POST', platform('/quote'), { body: deliveryRequest() });
    expect(res.status).toBe(200);
    const { price, distance } = res.body.data;
    expect(res.body.message).toBe('Quote created');
    expect(distance).toBeGreaterThan(12);
    expect(distance).toBeLessThan(13);
    expect(Math.round(distance * 100) / 100).toBe(distance);
    // 4.99 + 1.20 per km, computed in cents: no float noise.
    expect(price.delivery_fee).toBe((499 + Math.round(120 * distance)) / 100);
    expect(price.tip).toBe(12.34);
    expect(price.currency).toBe('USD');
  });

  it('places addresses without coordinates deterministically, and defaults the currency to USD', async () => {
    const body = deliveryRequest({
      pickup_address_latitude: undefined,
      pickup_address_longitude: undefined,
      dropoff_address_latitude: undefined,
      dropoff_address_longitude: undefined,
      currency: undefined,
      tip: undefined,
    });
    const first = await call('POST', platform('/quote'), { body });
    const second = await call('POST', platform('/quote'), { body });
    expect(first.status).toBe(200);
    expect(second.body).toEqual(first.body);
    expect(first.body.data.price).toMatchObject({ currency: 'USD', tip: 0 });
    expect(first.body.data.distance).toBeGreaterThan(0);
  });
});

describe('platform create, read, cancel', () => {
  it('creates with 201 {uid, tracking_link} and reads every field back under its documented spelling', async () => {
    const created = await call('POST', platform('/deliveries'), { body: deliveryRequest() });
    expect(created.status).toBe(201);
    expect(created.body).toEqual({
      message: expect.any(String),
      uid: expect.stringMatching(UUID),
      tracking_link: `${sandbox.origin}/track/${created.body.uid}`,
    });

    const read = await call('GET', platform(`/deliveries/${created.body.uid}`));
    expect(read.status).toBe(200);
    const d = read.body.data;
    expect(d).toMatchObject({
      uid: created.body.uid,
      status: 'CREATED',
      distance: { value: expect.any(Number), unit: 'km' },
      pickup_name: 'Sandbox Bakery',
      dropoff_name: 'Ada Lovelace',
      delivery_date: '2030-05-01T00:00:00+00:00',
      driver_id: null,
      driver_name: null,
      driver_location: null,
      driver_pickup_phone_number: null,
      driver_dropoff_phone_number: null,
      driver_vehicle_make: null,
      driver_vehicle_model: null,
      driver_vehicle_year: null,
      pickup_address_street: 'Market St',
      pickup_address_number: '1',
      pickup_address_city: 'San Francisco',
      pickup_address_state: 'CA',
      pickup_address_postal_code: '94105',
      pickup_address_country: 'US',
      pickup_address_secondary_number: null,
      pickup_address_latitude: PICKUP.lat,
      pickup_address_longitude: PICKUP.lng,
      dropoff_address_city: 'Oakland',
      dropoff_address_latitude: DROPOFF.lat,
      pickup_phone_number: '+14155550100',
      dropoff_phone_number: '+15105550199',
      pickup_instructions: 'Back door',
      dropoff_instructions: null,
      email: 'bakery@example.com',
      dropoff_email: 'ada@example.com',
      package_description: 'Two loaves',
      package_delivery_mode: 'SCHEDULED',
      package_requirements: ['photo_proof_of_delivery'],
      items_count: 2,
      // Items come back as sent: unlike tip and package_value, the document converts nothing of an item on read.
      items: [{ name: 'Sourdough', quantity: 2, price: 650, external_id: 'sku-1' }],
      weight: 2,
      package_value: 12.99,
      tip: 12.34,
      pickup_start_time: '2030-05-01T13:30:00+00:00',
      dropoff_start_time: '2030-05-01T14:00:00+00:00',
      delivery_end_time: '2030-05-01T15:00:00+00:00',
      dropoff_verification_image_url: null,
      dropoff_signature_image_url: null,
      cancellation_reason: null,
      delivery_style: 'Standard',
      platform_payload: { order: { id: 42, tags: ['a', 'b'] }, note: null },
      tracking_link: created.body.tracking_link,
      expected_cancellation_fee: { amount: '0.00', currency: 'USD' },
    });
    // No courier yet: pricing has not settled.
    expect(d.price).toEqual({ value: null, currency: 'USD' });
    expect(d.dropoff_time_estimated).toMatch(WIRE_DATETIME);
    expect(d.dimensions).toEqual({ height: expect.any(Number), length: expect.any(Number), width: expect.any(Number) });
    // The partner spellings belong to the other group only.
    for (const field of [
      'dimentions',
      'tracking_url',
      'expected_cancelation_fee',
      'partner_reference',
      'partner_payload',
    ]) {
      expect(d).not.toHaveProperty(field);
    }
    // Once a courier takes it, the price is the quote's for the same request.
    const quote = await call('POST', platform('/quote'), { body: deliveryRequest() });
    expect(d.distance.value).toBe(quote.body.data.distance);
    await sandbox.advance(created.body.uid);
    const assigned = (await call('GET', platform(`/deliveries/${created.body.uid}`))).body.data;
    expect(assigned.status).toBe('ASSIGNED');
    expect(assigned.price).toEqual({ value: quote.body.data.price.delivery_fee, currency: 'USD' });
  });

  it('serves the public tracking page without a key', async () => {
    const uid = await createDelivery();
    const page = await fetch(`${sandbox.origin}/track/${uid}`);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('CREATED');
    expect((await fetch(`${sandbox.origin}/track/not-a-delivery`)).status).toBe(404);
  });

  it('moves through every status, filling courier fields on assignment and proofs on dropoff arrival', async () => {
    const uid = await createDelivery({ delivery_style: 'Oversize', package_minimum_vehicle_size: 'VAN' });
    const read = async () => (await call('GET', platform(`/deliveries/${uid}`))).body.data;
    const seen: string[] = [(await read()).status];
    let assigned: any;
    for (let i = 0; i < 7; i++) {
      await sandbox.advance(uid);
      const d = await read();
      seen.push(d.status);
      if (d.status === 'ASSIGNED') assigned = d;
      if (d.status === 'PICKUP_ARRIVED') expect(d.driver_location).toEqual(PICKUP);
      if (d.status === 'PICKUP_ENROUTE' || d.status === 'DROPOFF_ENROUTE')
        expect(d.dropoff_verification_image_url).toBeNull();
      if (d.status === 'DROPOFF_ARRIVED') {
        expect(d.dropoff_verification_image_url).toMatch(/^http:\/\/.+\.svg$/);
        expect(d.dropoff_signature_image_url).toMatch(/^http:\/\/.+\.svg$/);
        expect(d.driver_location).toEqual(DROPOFF);
      }
    }
    expect(seen).toEqual([
      'CREATED',
      'ASSIGNED',
      'PICKUP_ENROUTE',
      'PICKUP_ARRIVED',
      'PICKUP_COMPLETE',
      'DROPOFF_ENROUTE',
      'DROPOFF_ARRIVED',
      'DROPOFF_COMPLETE',
    ]);
    expect(assigned).toMatchObject({
      driver_id: null,
      driver_name: expect.any(String),
      driver_location: { lat: expect.any(Number), lng: expect.any(Number) },
      driver_pickup_phone_number: expect.stringMatching(/^\+\d{1,14}$/),
      driver_dropoff_phone_number: expect.stringMatching(/^\+\d{1,14}$/),
      driver_vehicle_make: expect.any(String),
      driver_vehicle_model: expect.any(String),
      driver_vehicle_year: expect.any(Number),
      expected_cancellation_fee: { amount: '2.50', currency: 'USD' },
      delivery_style: 'Oversize',
    });
    // The courier starts a few km from the pickup, not on it.
    expect(assigned.driver_location).not.toEqual(PICKUP);

    const final = await read();
    expect(final.expected_cancellation_fee).toBeNull();
    await expect(sandbox.advance(uid)).rejects.toThrow(/already delivered/);
    await expect(sandbox.advance('00000000-0000-4000-8000-000000000000')).rejects.toThrow(/no delivery/);
  });

  it('cancels for free before assignment, then refuses a second cancel', async () => {
    const uid = await createDelivery({ currency: 'EUR' });
    const res = await call('POST', platform(`/deliveries/${uid}/cancel`));
    expect(res).toEqual({
      status: 200,
      body: {
        message: expect.any(String),
        uid,
        data: { status: 'Canceled', cancellation_fee: { amount: '0.00', currency: 'EUR' } },
      },
    });
    const read = (await call('GET', platform(`/deliveries/${uid}`))).body.data;
    expect(read.status).toBe('Canceled');
    expect(read.cancellation_reason).toBe('Canceled by platform');

    const again = await call('POST', platform(`/deliveries/${uid}/cancel`));
    expect(again).toEqual({ status: 409, body: { code: 'not_cancelable', message: expect.any(String) } });
    await expect(sandbox.advance(uid)).rejects.toThrow(/canceled/);
  });

  it('charges a fee once a courier is assigned, and refuses from pickup on', async () => {
    const early = await createDelivery();
    await sandbox.advance(early); // assigned
    await sandbox.advance(early); // pickup_enroute
    const fee = await call('POST', platform(`/deliveries/${early}/cancel`));
    expect(fee.body.data.cancellation_fee).toEqual({ amount: '2.50', currency: 'USD' });

    const late = await createDelivery();
    for (let i = 0; i < 4; i++) await sandbox.advance(late); // → pickup_complete
    const refused = await call('POST', platform(`/deliveries/${late}/cancel`));
    expect(refused.status).toBe(409);
    expect(refused.body.code).toBe('not_cancelable');
    expect((await call('GET', platform(`/deliveries/${late}`))).body.data.status).toBe('PICKUP_COMPLETE');
  });

  it('derives no dimensions without a weight', async () => {
    const uid = await createDelivery({ weight: undefined });
    expect((await call('GET', platform(`/deliveries/${uid}`))).body.data.dimensions).toBeNull();
  });

  it('fills the delivery date of an on-demand delivery with the booking day', async () => {
    const uid = await createDelivery({
      package_delivery_mode: 'NOW',
      delivery_date: undefined,
      dropoff_start_time: undefined,
    });
    const d = (await call('GET', platform(`/deliveries/${uid}`))).body.data;
    expect(d.delivery_date).toBe(`${new Date().toISOString().slice(0, 10)}T00:00:00+00:00`);
    expect(d.package_delivery_mode).toBe('NOW');
    expect(d.dropoff_start_time).toBeNull();
  });
});

describe('tenant isolation', () => {
  it('shows a merchant’s delivery to nobody else, as not found', async () => {
    const uid = await createDelivery({}, keyA);
    const asB = await call('GET', platform(`/deliveries/${uid}`), { key: keyB });
    expect(asB).toEqual({ status: 404, body: { code: 'not_found', message: expect.any(String) } });
    expect(JSON.stringify(asB.body)).not.toContain(keyA);
    expect((await call('POST', platform(`/deliveries/${uid}/cancel`), { key: keyB })).status).toBe(404);
    // Still there, still uncanceled, for its owner.
    expect((await call('GET', platform(`/deliveries/${uid}`), { key: keyA })).body.data.status).toBe('CREATED');
    // Platform deliveries are not partner orders.
    expect((await call('GET', `/orders/${uid}`, { key: keyA })).status).toBe(404);
  });

  it('keeps partner orders and references per key', async () => {
    const order = sandbox.seedPartnerOrder(keyA, { partner_reference: 'shared-ref' });
    expect((await call('GET', `/orders/${order.uid}`, { key: keyB })).status).toBe(404);
    expect((await call('GET', '/orders/partner/shared-ref', { key: keyB })).status).toBe(404);
    expect((await call('POST', `/orders/${order.uid}/cancel`, { key: keyB })).status).toBe(404);
    expect((await call('GET', platform(`/deliveries/${order.uid}`), { key: keyA })).status).toBe(404);
    // B may use the same reference for its own order.
    const mine = sandbox.seedPartnerOrder(keyB, { partner_reference: 'shared-ref' });
    expect((await call('GET', '/orders/partner/shared-ref', { key: keyB })).body.data.uid).toBe(mine.uid);
    expect((await call('GET', '/orders/partner/shared-ref', { key: keyA })).body.data.uid).toBe(order.uid);
  });
});

describe('partner orders', () => {
  it('reads a seeded order by uid (no delivery_style) and by reference (with it), in the partner spellings', async () => {
    const seeded = sandbox.seedPartnerOrder(keyA, {
      partner_reference: 'PO 77/b',
      partner_payload: { shop: 'north', lines: [1, 2] },
      delivery_start_time: '2030-06-01T09:00:00Z',
      delivery_end_time: '2030-06-01T11:00:00.999Z',
      delivery_style: 'Special Handling',
      currency: 'GBP',
      tip: 500,
      package_value: 10050,
      weight: 5,
    });
    expect(seeded.uid).toMatch(UUID);

    const byUid = await call('GET', `/orders/${seeded.uid}`);
    expect(byUid.status).toBe(200);
    const o = byUid.body.data;
    expect(o).toMatchObject({
      uid: seeded.uid,
      status: 'CREATED',
      partner_reference: 'PO 77/b',
      partner_payload: { shop: 'north', lines: [1, 2] },
      delivery_start_time: '2030-06-01T09:00:00+00:00',
      delivery_end_time: '2030-06-01T11:00:00+00:00',
      tracking_url: `${sandbox.origin}/track/${seeded.uid}`,
      expected_cancelation_fee: { amount: '0.00', currency: 'GBP' },
      price: { value: null, currency: 'GBP' },
      tip: 5,
      package_value: 100.5,
      driver_id: null,
    });
    expect(o.dimentions).toEqual({ height: expect.any(Number), length: expect.any(Number), width: expect.any(Number) });
    for (const field of [
      'delivery_style',
      'dimensions',
      'tracking_link',
      'expected_cancellation_fee',
      'platform_payload',
    ]) {
      expect(o).not.toHaveProperty(field);
    }

    const byReference = await call('GET', `/orders/partner/${encodeURIComponent('PO 77/b')}`);
    expect(byReference.status).toBe(200);
    expect(byReference.body.data).toEqual({ ...o, delivery_style: 'Special Handling' });
  });

  it('cancels with {status, partner_reference, cancelation_fee: {value}} and then refuses', async () => {
    const seeded = sandbox.seedPartnerOrder(keyA, { partner_reference: 'cancel-me', currency: 'EUR' });
    await sandbox.advance(seeded.uid); // assigned: a fee applies
    const res = await call('POST', `/orders/${seeded.uid}/cancel`);
    expect(res).toEqual({
      status: 200,
      body: {
        message: expect.any(String),
        uid: seeded.uid,
        data: { status: 'Canceled', partner_reference: 'cancel-me', cancelation_fee: { value: 2.5, currency: 'EUR' } },
      },
    });
    expect((await call('GET', '/orders/partner/cancel-me')).body.data.status).toBe('Canceled');
    expect(await call('POST', `/orders/${seeded.uid}/cancel`)).toEqual({
      status: 409,
      body: { error: 'not_cancelable', message: expect.any(String) },
    });
  });

  it('refuses to cancel once picked up', async () => {
    const seeded = sandbox.seedPartnerOrder(keyA, { partner_reference: 'picked-up' });
    for (let i = 0; i < 4; i++) await sandbox.advance(seeded.uid);
    const res = await call('POST', `/orders/${seeded.uid}/cancel`);
    expect(res.status).toBe(409);
    expect(res.body.error).toBe('not_cancelable');
  });

  it('rejects a seed with a reused reference, an invalid body or an unknown key', () => {
    sandbox.seedPartnerOrder(keyA, { partner_reference: 'once' });
    expect(() => sandbox.seedPartnerOrder(keyA, { partner_reference: 'once' })).toThrow(/already used/);
    expect(() => sandbox.seedPartnerOrder(keyA, { partner_reference: 'bad-currency', currency: 'EURO' })).toThrow(
      /currency/,
    );
    expect(() => sandbox.seedPartnerOrder('sk_test_nope', { partner_reference: 'x' })).toThrow(/invalid/);
  });

  it('seeds over the control route with the caller’s key', async () => {
    const res = await call('POST', '/sandbox/orders', {
      base: sandbox.origin,
      body: { partner_reference: 'via-http' },
    });
    expect(res.status).toBe(201);
    expect(res.body.data.partner_reference).toBe('via-http');
    expect((await call('GET', '/orders/partner/via-http')).body.data.uid).toBe(res.body.data.uid);
    expect(
      (await call('POST', '/sandbox/orders', { base: sandbox.origin, key: null, body: { partner_reference: 'x' } }))
        .status,
    ).toBe(401);
    expect(
      (await call('POST', '/sandbox/orders', { base: sandbox.origin, body: { partner_reference: 'via-http' } })).status,
    ).toBe(409);
    expect((await call('POST', '/sandbox/orders', { base: sandbox.origin, body: {} })).status).toBe(422);
  });
});

describe('knobs and request log', () => {
  it('adds latency to API responses but not to control routes', async () => {
    sandbox.setKnobs({ latencyMs: 150 });
    const started = Date.now();
    expect((await call('GET', '/availability')).status).toBe(200);
    expect(Date.now() - started).toBeGreaterThanOrEqual(145);
    // With a latency far longer than the test may run, and an API request waiting it out, a control route still
    // answers.
    sandbox.setKnobs({ latencyMs: 600_000 });
    const waiting = new AbortController();
    const api = fetch(`${sandbox.url}/availability`, {
      headers: { authorization: `Bearer ${keyA}` },
      signal: waiting.signal,
    }).then(
      (res) => res.status,
      () => 'aborted',
    );
    expect((await call('GET', '/sandbox/info', { base: sandbox.origin })).status).toBe(200);
    waiting.abort();
    expect(await api).toBe('aborted');
  });

  it('answers every API request 503 unavailable at errorRate 1, in each group’s shape', async () => {
    sandbox.setKnobs({ errorRate: 1 });
    expect(await call('GET', platform('/availability'))).toEqual({
      status: 503,
      body: { code: 'unavailable', message: expect.any(String) },
    });
    expect(await call('POST', '/quote', { body: {} })).toEqual({
      status: 503,
      body: { error: 'unavailable', message: expect.any(String) },
    });
    expect((await call('GET', '/sandbox/info', { base: sandbox.origin })).status).toBe(200);
  });

  it('fails about the configured share of requests', async () => {
    sandbox.setKnobs({ errorRate: 0.5 });
    const statuses = await Promise.all(
      Array.from({ length: 80 }, () => call('GET', '/availability').then((r) => r.status)),
    );
    const failed = statuses.filter((s) => s === 503).length;
    expect(failed).toBeGreaterThan(15);
    expect(failed).toBeLessThan(65);
    expect(statuses.every((s) => s === 200 || s === 503)).toBe(true);
  });

  it('records every request with its group and status, and forgets them on reset', async () => {
    sandbox.resetRequests();
    await call('GET', platform('/availability'));
    await call('GET', '/orders/partner/nope');
    await call('GET', '/sandbox/info', { base: sandbox.origin });
    expect(sandbox.requests.map(({ method, path, group, status }) => ({ method, path, group, status }))).toEqual([
      { method: 'GET', path: `/api/v1/${sandbox.platformId}/availability`, group: 'platform', status: 200 },
      { method: 'GET', path: '/api/v1/orders/partner/nope', group: 'partner', status: 404 },
      { method: 'GET', path: '/sandbox/info', group: 'control', status: 200 },
    ]);
    sandbox.resetRequests();
    expect(sandbox.requests).toHaveLength(0);
  });

  it('changes knobs over the control route and rejects bad ones', async () => {
    const ok = await call('POST', '/sandbox/knobs', {
      base: sandbox.origin,
      body: { latencyMs: 5, duplicateRate: 0.25 },
    });
    expect(ok.status).toBe(200);
    expect(sandbox.knobs).toMatchObject({ latencyMs: 5, duplicateRate: 0.25 });
    for (const bad of [
      { errorRate: 2 },
      { stepMs: -1 },
      { nonsense: 1 },
      { latencyMs: 'slow' },
      { readScope: 'world' },
      { readScope: 1 },
      { partnerWebhookFields: 1 },
    ]) {
      const res = await call('POST', '/sandbox/knobs', { base: sandbox.origin, body: bad });
      expect(res.status).toBe(400);
    }
    expect(sandbox.knobs.errorRate).toBe(0);
    expect(sandbox.knobs).toMatchObject({ readScope: 'merchant', partnerWebhookFields: false });
    const scoped = await call('POST', '/sandbox/knobs', {
      base: sandbox.origin,
      body: { readScope: 'platform', partnerWebhookFields: true },
    });
    expect(scoped.status).toBe(200);
    expect(sandbox.knobs).toMatchObject({ readScope: 'platform', partnerWebhookFields: true });
    sandbox.setKnobs({ readScope: 'merchant', partnerWebhookFields: false });
    sandbox.setKnobs({ duplicateRate: 0 });
    expect(() => sandbox.setKnobs({ reorderRate: 1.5 })).toThrow(RangeError);
  });

  it('exposes info, the public key and advance over the control routes', async () => {
    const info = await call('GET', '/sandbox/info', { base: sandbox.origin });
    expect(info.body).toMatchObject({ platformId: sandbox.platformId, issuer: 'lastmile', url: sandbox.url });
    expect(info.body.merchants.map((m: { key: string }) => m.key)).toEqual([keyA, keyB, keyOther]);
    const pem = await fetch(`${sandbox.origin}/sandbox/public-key.pem`);
    expect(await pem.text()).toBe(sandbox.publicKeyPem);
    expect(sandbox.publicKeyPem).toMatch(/^-----BEGIN PUBLIC KEY-----/);

    const uid = await createDelivery();
    const advanced = await call('POST', `/sandbox/deliveries/${uid}/advance`, { base: sandbox.origin });
    expect(advanced).toEqual({ status: 200, body: { uid, status: 'ASSIGNED' } });
    expect((await call('POST', '/sandbox/deliveries/nope/advance', { base: sandbox.origin })).status).toBe(404);
  });

  it('runs deliveries on their own once stepMs is set', async () => {
    const uid = await createDelivery();
    sandbox.setKnobs({ stepMs: 10, locationTicks: 0 });
    await expect
      .poll(async () => (await call('GET', platform(`/deliveries/${uid}`))).body.data.status, { timeout: 2000 })
      .toBe('DROPOFF_COMPLETE');
    sandbox.setKnobs({ locationTicks: 3 });
  });
});
