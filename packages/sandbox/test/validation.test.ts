// The sandbox applies upstream-api.md's request rules on both groups, with each
// group's error shape, over real HTTP.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSandbox, type Sandbox } from '../src/index.js';

let sandbox: Sandbox;
let key: string;

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: { stepMs: 0 } });
  key = sandbox.merchants[0]!.key;
});
afterAll(() => sandbox.stop());

async function post(path: string, body: unknown, raw = false): Promise<{ status: number; body: any }> {
  const res = await fetch(`${sandbox.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: raw ? (body as string) : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json() };
}
const platformQuote = (body: unknown) => post(`/${sandbox.platformId}/quote`, body);
const partnerQuote = (body: unknown) => post('/quote', body);

const platformRequest = (): Record<string, unknown> => ({
  pickup_address_street: 'Market St',
  pickup_address_number: '1',
  pickup_address_city: 'San Francisco',
  pickup_address_country: 'US',
  pickup_name: 'Sandbox Bakery',
  email: 'bakery@example.com',
  dropoff_address_street: 'Howard St',
  dropoff_address_city: 'San Francisco',
  dropoff_address_country: 'US',
  dropoff_name: 'Ada Lovelace',
  dropoff_start_time: '2030-05-01T14:00:00Z',
  delivery_date: '2030-05-01',
});

const partnerRequest = (): Record<string, unknown> => ({
  pickup_address_street: 'Market St',
  pickup_address_city: 'San Francisco',
  pickup_address_country: 'US',
  pickup_name: 'Sandbox Bakery',
  dropoff_name: 'Ada Lovelace',
  email: 'bakery@example.com',
  currency: 'EUR',
  dropoff_start_time: '2030-05-01T14:00:00Z',
  delivery_date: '2030-05-01',
});

describe('platform group validation', () => {
  it('accepts the minimal valid request', async () => {
    const res = await platformQuote(platformRequest());
    expect(res.status).toBe(200);
    expect(res.body.message).toBe('Quote created');
  });

  it('reports every problem at once and names the first missing field in the message', async () => {
    const res = await platformQuote({});
    expect(res.status).toBe(422);
    expect(res.body.message).toMatch(/^The pickup_address_street field is required\./);
    expect(Object.keys(res.body.errors).sort()).toEqual(
      [
        'pickup_address_street',
        'pickup_address_city',
        'pickup_address_country',
        'pickup_name',
        'dropoff_address_street',
        'dropoff_address_city',
        'dropoff_address_country',
        'dropoff_name',
        'email',
        'dropoff_start_time',
        'delivery_date',
      ].sort(),
    );
    for (const messages of Object.values(res.body.errors)) {
      expect(messages).toEqual([expect.any(String)]);
    }
  });

  it.each([
    'pickup_address_street',
    'pickup_address_city',
    'pickup_address_country',
    'pickup_name',
    'dropoff_address_street',
    'dropoff_address_city',
    'dropoff_address_country',
    'dropoff_name',
    'email',
  ])('requires %s (missing, null or blank)', async (field) => {
    for (const value of [undefined, null, '  ']) {
      const body = { ...platformRequest(), [field]: value };
      const res = await platformQuote(body);
      expect(res.status).toBe(422);
      expect(res.body.message).toBe(`The ${field} field is required.`);
      expect(Object.keys(res.body.errors)).toEqual([field]);
    }
  });

  const rejects: [string, Record<string, unknown>, string][] = [
    ['a pickup phone over 15 characters', { pickup_phone_number: '+15555555555555' + '5' }, 'pickup_phone_number'],
    ['pickup instructions over 512 characters', { pickup_instructions: 'x'.repeat(513) }, 'pickup_instructions'],
    ['a numeric offset on pickup_start_time', { pickup_start_time: '2030-05-01T12:00:00+02:00' }, 'pickup_start_time'],
    [
      'a numeric offset on dropoff_start_time',
      { dropoff_start_time: '2030-05-01T14:00:00+00:00' },
      'dropoff_start_time',
    ],
    ['a time without seconds', { pickup_start_time: '2030-05-01T12:00Z' }, 'pickup_start_time'],
    ['an impossible date in a time', { pickup_start_time: '2030-02-30T12:00:00Z' }, 'pickup_start_time'],
    ['a delivery_date that is not YYYY-MM-DD', { delivery_date: '2030/05/01' }, 'delivery_date'],
    ['a delivery_date with a time', { delivery_date: '2030-05-01T00:00:00Z' }, 'delivery_date'],
    ['an unknown delivery mode', { package_delivery_mode: 'LATER' }, 'package_delivery_mode'],
    ['a lower-case delivery mode', { package_delivery_mode: 'now' }, 'package_delivery_mode'],
    ['an unknown delivery style', { delivery_style: 'Express' }, 'delivery_style'],
    ['Oversize without a vehicle size', { delivery_style: 'Oversize' }, 'package_minimum_vehicle_size'],
    [
      'Oversize with a car',
      { delivery_style: 'Oversize', package_minimum_vehicle_size: 'CAR' },
      'package_minimum_vehicle_size',
    ],
    ['a two-letter currency', { currency: 'US' }, 'currency'],
    ['a currency with digits', { currency: 'U5D' }, 'currency'],
    ['a weight that is not a number', { weight: 'heavy' }, 'weight'],
    ['a tip that is not a number', { tip: '100' }, 'tip'],
    ['package_requirements that is not an array of strings', { package_requirements: [1] }, 'package_requirements'],
    ['an item with a non-numeric quantity', { items: [{ name: 'Bread', quantity: 'two' }] }, 'items'],
    ['a platform_payload that is not an object', { platform_payload: [1, 2] }, 'platform_payload'],
    ['partner_reference (partner group only)', { partner_reference: 'ref-1' }, 'partner_reference'],
    ['partner_payload (partner group only)', { partner_payload: { a: 1 } }, 'partner_payload'],
    [
      'delivery_start_time (partner group only)',
      { delivery_start_time: '2030-05-01T14:00:00Z' },
      'delivery_start_time',
    ],
    ['delivery_end_time (partner group only)', { delivery_end_time: '2030-05-01T15:00:00Z' }, 'delivery_end_time'],
  ];
  it.each(rejects)('rejects %s', async (_, patch, field) => {
    const res = await platformQuote({ ...platformRequest(), ...patch });
    expect(res.status).toBe(422);
    expect(Object.keys(res.body.errors)).toEqual([field]);
    expect(res.body.message).toContain(field);
  });

  const accepts: [string, Record<string, unknown>][] = [
    ['a 15-character pickup phone', { pickup_phone_number: '+15555555555555' }],
    ['512 characters of pickup instructions', { pickup_instructions: 'x'.repeat(512) }],
    ['fractional seconds', { pickup_start_time: '2030-05-01T12:00:00.250Z' }],
    [
      'NOW without a dropoff window or date',
      { package_delivery_mode: 'NOW', dropoff_start_time: undefined, delivery_date: undefined },
    ],
    ['explicit SCHEDULED', { package_delivery_mode: 'SCHEDULED' }],
    ['Oversize with a van, any case', { delivery_style: 'Oversize', package_minimum_vehicle_size: 'van' }],
    ['Oversize with an SUV', { delivery_style: 'Oversize', package_minimum_vehicle_size: 'SUV' }],
    ['Oversize with a truck', { delivery_style: 'Oversize', package_minimum_vehicle_size: 'Truck' }],
    ['Hybrid', { delivery_style: 'Hybrid' }],
    ['Special Handling', { delivery_style: 'Special Handling' }],
    ['a lower-case currency', { currency: 'eur' }],
    ['unknown extra fields', { colour: 'blue' }],
    ['items as documented', { items: [{ name: 'Bread', quantity: 2, price: 350, barcode: '123' }] }],
  ];
  it.each(accepts)('accepts %s', async (_, patch) => {
    const res = await platformQuote({ ...platformRequest(), ...patch });
    expect(res.body.errors).toBeUndefined();
    expect(res.status).toBe(200);
  });

  it('requires dropoff_start_time unless the mode is NOW, and delivery_date when scheduled', async () => {
    const scheduled = await platformQuote({
      ...platformRequest(),
      package_delivery_mode: 'SCHEDULED',
      dropoff_start_time: undefined,
      delivery_date: undefined,
    });
    expect(scheduled.status).toBe(422);
    expect(Object.keys(scheduled.body.errors).sort()).toEqual(['delivery_date', 'dropoff_start_time']);

    const nowWithoutWindow = await platformQuote({
      ...platformRequest(),
      package_delivery_mode: 'NOW',
      dropoff_start_time: undefined,
    });
    expect(nowWithoutWindow.status).toBe(200);
  });

  it('validates a create like a quote', async () => {
    const res = await post(`/${sandbox.platformId}/deliveries`, {
      ...platformRequest(),
      pickup_name: undefined,
      currency: 'EURO',
    });
    expect(res.status).toBe(422);
    expect(res.body.message).toMatch(/^The pickup_name field is required\. \(and 1 more error\)$/);
    expect(Object.keys(res.body.errors).sort()).toEqual(['currency', 'pickup_name']);
  });

  it('answers malformed JSON and non-object bodies with 400 in the platform shape', async () => {
    const malformed = await post(`/${sandbox.platformId}/quote`, '{"pickup_name":', true);
    expect(malformed.status).toBe(400);
    expect(malformed.body).toEqual({ code: 'bad_request', message: expect.any(String) });
    const array = await post(`/${sandbox.platformId}/deliveries`, [platformRequest()]);
    expect(array.status).toBe(400);
    expect(array.body.code).toBe('bad_request');
  });
});

describe('partner group validation', () => {
  it('accepts a request without a dropoff address', async () => {
    const res = await partnerQuote(partnerRequest());
    expect(res.status).toBe(200);
    expect(res.body.data.price.currency).toBe('EUR');
  });

  it('names every missing required field in one {error, message}', async () => {
    const res = await partnerQuote({});
    expect(res.status).toBe(422);
    expect(Object.keys(res.body).sort()).toEqual(['error', 'message']);
    expect(res.body.error).toBe('validation_error');
    for (const field of [
      'pickup_address_street',
      'pickup_address_city',
      'pickup_address_country',
      'pickup_name',
      'dropoff_name',
      'email',
      'currency',
    ]) {
      expect(res.body.message).toContain(`The ${field} field is required.`);
    }
    expect(res.body.message).not.toContain('dropoff_address_street');
  });

  it.each([
    'pickup_address_street',
    'pickup_address_city',
    'pickup_address_country',
    'pickup_name',
    'dropoff_name',
    'email',
    'currency',
  ])('requires %s', async (field) => {
    const res = await partnerQuote({ ...partnerRequest(), [field]: undefined });
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ error: 'validation_error', message: `The ${field} field is required.` });
  });

  const rejects: [string, Record<string, unknown>, string][] = [
    ['a currency longer than 3', { currency: 'EURO' }, 'currency'],
    ['platform_payload (platform group only)', { platform_payload: { a: 1 } }, 'platform_payload'],
    ['a pickup phone over 15 characters', { pickup_phone_number: '1234567890123456' }, 'pickup_phone_number'],
    ['pickup instructions over 512 characters', { pickup_instructions: 'y'.repeat(513) }, 'pickup_instructions'],
    ['a numeric offset on delivery_end_time', { delivery_end_time: '2030-05-01T15:00:00-05:00' }, 'delivery_end_time'],
    ['a missing dropoff window on a scheduled order', { dropoff_start_time: undefined }, 'dropoff_start_time'],
    ['a missing delivery_date on a scheduled order', { delivery_date: undefined }, 'delivery_date'],
    ['an unknown mode', { package_delivery_mode: 'ASAP' }, 'package_delivery_mode'],
    ['an unknown style', { delivery_style: 'Bulky' }, 'delivery_style'],
    [
      'Oversize with a bike',
      { delivery_style: 'Oversize', package_minimum_vehicle_size: 'BIKE' },
      'package_minimum_vehicle_size',
    ],
    ['a partner_payload that is not an object', { partner_payload: 'x' }, 'partner_payload'],
  ];
  it.each(rejects)('rejects %s', async (_, patch, field) => {
    const res = await partnerQuote({ ...partnerRequest(), ...patch });
    expect(res.status).toBe(422);
    expect(res.body.error).toBe('validation_error');
    expect(res.body.message).toContain(field);
  });

  it('accepts its own optional fields', async () => {
    const res = await partnerQuote({
      ...partnerRequest(),
      partner_reference: 'po-1',
      partner_payload: { shop: 7 },
      delivery_start_time: '2030-05-01T13:00:00Z',
      delivery_end_time: '2030-05-01T15:00:00Z',
      tip: 250,
    });
    expect(res.status).toBe(200);
    expect(res.body.data.price.tip).toBe(2.5);
  });

  it('answers malformed JSON with 400 in the partner shape', async () => {
    const res = await post('/quote', 'not json', true);
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'bad_request', message: expect.any(String) });
  });
});
