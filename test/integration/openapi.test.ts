// openapi/upstream.yaml against the sandbox's real answers: every endpoint of both
// groups, over real HTTP, with every documented status (success and error),
// each body validated against the operation's response schema for that status;
// and the webhook bodies a real receiver gets through whole lifecycles,
// validated against WebhookEvent. Closed schemas (additionalProperties: false)
// make a field the sandbox sends but the description lacks fail here.
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { decodeJwt } from 'jose';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { startSandbox, type Sandbox } from '@delivery-graph/sandbox';

const SPEC_PATH = new URL('../../openapi/upstream.yaml', import.meta.url);
const SPEC_ID = 'upstream.yaml';
const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

type Json = Record<string, any>;

interface Operation {
  id: string;
  method: string;
  /** The path template, e.g. `/{platform}/deliveries/{uid}`. */
  path: string;
  op: Json;
}

// ---------------------------------------------------------------------------
// Loading the description

/**
 * OpenAPI 3.0 is not JSON Schema: turns `nullable: true` into a null-admitting
 * type, or into an anyOf with null for a composed schema (the nullable
 * `{type: object, allOf: [$ref]}` idiom, which JSON Schema would otherwise
 * reject null for through the allOf), and drops the annotation keywords Ajv's strict mode would
 * reject (`example`, `x-*` extensions). Everything else is kept, so Ajv's strict
 * mode still catches a misspelt keyword in the YAML.
 */
function toJsonSchema(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(toJsonSchema);
  if (node === null || typeof node !== 'object') return node;
  const out: Json = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === 'example' || key.startsWith('x-')) continue;
    out[key] = toJsonSchema(value);
  }
  if (!('nullable' in out)) return out;
  const nullable = out.nullable === true;
  delete out.nullable;
  if (!nullable) return out;
  const composed = ['allOf', 'anyOf', 'oneOf', '$ref'].some((k) => k in out);
  if (typeof out.type === 'string' && !composed) {
    out.type = [out.type, 'null'];
    if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
    return out;
  }
  const { description, ...rest } = out;
  return { ...(description === undefined ? {} : { description }), anyOf: [{ type: 'null' }, rest] };
}

const rawSpec = parseYaml(readFileSync(SPEC_PATH, 'utf8')) as Json;
const spec = toJsonSchema(rawSpec) as Json;

const ajv = new Ajv({ strict: true, strictTypes: true, allowUnionTypes: true, allErrors: true });
addFormatsModule.default(ajv);
// The document's top-level OpenAPI fields are not schema keywords: let strict mode pass over them.
ajv.addVocabulary(['openapi', 'info', 'servers', 'security', 'tags', 'paths', 'components', 'externalDocs']);
// The whole document is one schema resource: `#/components/...` refs resolve inside it.
ajv.addSchema(spec, SPEC_ID);

function operations(): Operation[] {
  const list: Operation[] = [];
  for (const [path, item] of Object.entries(spec.paths as Json)) {
    for (const method of METHODS) {
      const op = (item as Json)[method];
      if (op) list.push({ id: op.operationId, method: method.toUpperCase(), path, op });
    }
  }
  return list;
}
const OPERATIONS = operations();
const operation = (id: string): Operation => {
  const found = OPERATIONS.find((o) => o.id === id);
  if (!found) throw new Error(`no operation ${id} in ${SPEC_ID}`);
  return found;
};

/** `#/a/b` for a location in the document, escaped as a URI fragment JSON pointer. */
function pointer(...segments: string[]): string {
  return `#/${segments.map((s) => encodeURIComponent(s.replace(/~/g, '~0').replace(/\//g, '~1'))).join('/')}`;
}

function deref(node: Json): Json {
  let current = node;
  while (typeof current.$ref === 'string') {
    const path = (current.$ref as string).replace(/^#\//, '').split('/');
    current = path.reduce((at: Json, key) => at[key.replace(/~1/g, '/').replace(/~0/g, '~')], spec);
  }
  return current;
}

const validators = new Map<string, ValidateFunction>();
function validatorAt(ref: string): ValidateFunction {
  let validate = validators.get(ref);
  if (!validate) {
    validate = ajv.getSchema(`${SPEC_ID}${ref}`);
    if (!validate) throw new Error(`cannot compile ${ref}`);
    validators.set(ref, validate);
  }
  return validate;
}
const componentValidator = (name: string) => validatorAt(pointer('components', 'schemas', name));

/** The JSON schema (as a ref into the document) of an operation's response for `status`. */
function responseSchemaRef(op: Operation, status: number): string {
  const response = op.op.responses[String(status)];
  if (!response) throw new Error(`${op.id} documents no ${status} response`);
  const resolved = deref(response);
  const schema = resolved.content?.['application/json']?.schema;
  if (!schema) throw new Error(`${op.id} ${status} has no application/json schema`);
  if (typeof schema.$ref === 'string') return schema.$ref;
  return pointer(
    'paths',
    op.path,
    op.method.toLowerCase(),
    'responses',
    String(status),
    'content',
    'application/json',
    'schema',
  );
}

function describeErrors(errors: ErrorObject[] | null | undefined): string[] {
  return (errors ?? []).map(
    (e) => `${e.instancePath || '(root)'} ${e.message}${e.params ? ` ${JSON.stringify(e.params)}` : ''}`,
  );
}

/** [] when `value` conforms; else readable Ajv errors (so a failure shows what broke). */
function problems(validate: ValidateFunction, value: unknown): string[] {
  return validate(value) ? [] : describeErrors(validate.errors);
}

// ---------------------------------------------------------------------------
// Calling the sandbox

let sandbox: Sandbox;
let keyA: string;
let keyB: string;
/** A merchant of another platform: its key is not valid for the sandbox's platform. */
let keyOther: string;
/** `${operationId} ${status}` pairs seen and validated. */
const exercised = new Set<string>();

interface Answer {
  status: number;
  body: any;
}

interface CallOptions {
  params?: Record<string, string>;
  /** null: no Authorization header. Default: merchant A's key. */
  key?: string | null;
  body?: unknown;
  /** Sent as is, instead of `body`. */
  raw?: string;
}

async function send(id: string, options: CallOptions = {}): Promise<Answer & { contentType: string | null }> {
  const op = operation(id);
  const params = { platform: sandbox.platformId, ...options.params };
  const path = op.path.replace(/\{([^}]+)\}/g, (_, name: string) => {
    const value = params[name as keyof typeof params];
    if (value === undefined) throw new Error(`${id}: no value for {${name}}`);
    return encodeURIComponent(value);
  });
  const headers: Record<string, string> = {};
  if (options.key !== null) headers.authorization = `Bearer ${options.key ?? keyA}`;
  let body: string | undefined;
  if (options.raw !== undefined) body = options.raw;
  else if (options.body !== undefined) body = JSON.stringify(options.body);
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(`${sandbox.url}${path}`, { method: op.method, headers, body });
  const text = await res.text();
  return {
    status: res.status,
    body: text ? JSON.parse(text) : undefined,
    contentType: res.headers.get('content-type'),
  };
}

/**
 * Calls an operation, expects `status`, and validates the body against the
 * operation's documented response for that status.
 */
async function call(id: string, status: number, options: CallOptions = {}): Promise<any> {
  const answer = await send(id, options);
  expect(answer.status, `${id}: ${JSON.stringify(answer.body)}`).toBe(status);
  expect(answer.contentType).toMatch(/^application\/json\b/);
  const ref = responseSchemaRef(operation(id), status);
  expect(
    problems(validatorAt(ref), answer.body),
    `${id} ${status} against ${ref}: ${JSON.stringify(answer.body)}`,
  ).toEqual([]);
  exercised.add(`${id} ${status}`);
  return answer.body;
}

// Market St, San Francisco → Lake Merritt, Oakland.
const fullRequest = (patch: Json = {}): Json => ({
  pickup_address_street: 'Market St',
  pickup_address_number: '1',
  pickup_address_secondary_number: 'Suite 2',
  pickup_address_city: 'San Francisco',
  pickup_address_county: 'San Francisco County',
  pickup_address_state: 'CA',
  pickup_address_postal_code: '94105',
  pickup_address_country: 'US',
  pickup_address_latitude: 37.7936,
  pickup_address_longitude: -122.3958,
  pickup_name: 'Sandbox Bakery',
  pickup_phone_number: '+14155550100',
  pickup_instructions: 'Back door',
  pickup_start_time: '2030-05-01T13:30:00Z',
  email: 'bakery@example.com',
  dropoff_address_street: 'Lakeshore Ave',
  dropoff_address_number: '3300',
  dropoff_address_city: 'Oakland',
  dropoff_address_state: 'CA',
  dropoff_address_postal_code: '94610',
  dropoff_address_country: 'US',
  dropoff_address_latitude: 37.8024,
  dropoff_address_longitude: -122.2587,
  dropoff_name: 'Ada Lovelace',
  dropoff_phone_number: '+15105550199',
  dropoff_instructions: 'Ring twice',
  dropoff_email: 'ada@example.com',
  dropoff_start_time: '2030-05-01T14:00:00Z',
  delivery_date: '2030-05-01',
  package_delivery_mode: 'SCHEDULED',
  package_minimum_vehicle_size: 'CAR',
  delivery_style: 'Special Handling',
  package_description: 'Two loaves',
  package_requirements: ['photo_proof_of_delivery'],
  items: [
    {
      name: 'Sourdough',
      quantity: 2,
      description: 'Loaf',
      price: 650,
      external_id: 'sku-1',
      external_instance_id: 'i-1',
      barcode: '123',
    },
  ],
  items_count: 2,
  weight: 2,
  package_value: 1299,
  tip: 300,
  currency: 'USD',
  platform_payload: { order: { id: 42, tags: ['a', 'b'] }, note: null },
  ...patch,
});

/** The least the platform group accepts: required fields, on-demand. */
const minimalRequest = (): Json => ({
  pickup_address_street: 'E 10th St',
  pickup_address_city: 'New York',
  pickup_address_country: 'US',
  pickup_name: 'Corner Deli',
  dropoff_address_street: 'W 42nd St',
  dropoff_address_city: 'New York',
  dropoff_address_country: 'US',
  dropoff_name: 'Grace Hopper',
  email: 'deli@example.com',
  package_delivery_mode: 'NOW',
});

const partnerQuoteBody = (patch: Json = {}): Json => {
  const { platform_payload: _dropped, ...rest } = fullRequest();
  return {
    ...rest,
    currency: 'EUR',
    delivery_start_time: '2030-05-01T13:00:00Z',
    delivery_end_time: '2030-05-01T16:00:00Z',
    partner_reference: 'quote-only',
    partner_payload: { cart: 'c-1' },
    ...patch,
  };
};

async function createDelivery(body: Json = fullRequest(), key = keyA): Promise<string> {
  const created = await call('platformCreateDelivery', 201, { body, key });
  return created.uid as string;
}

async function advance(uid: string, times: number): Promise<void> {
  for (let i = 0; i < times; i++) await sandbox.advance(uid);
}

let references = 0;
function seedOrder(patch: Json = {}): { uid: string; reference: string } {
  const reference = `oas-${++references}-${randomUUID().slice(0, 8)}`;
  const order = sandbox.seedPartnerOrder(keyA, {
    partner_reference: reference,
    partner_payload: { cart: reference, lines: [1, 2] },
    delivery_start_time: '2030-05-01T13:00:00Z',
    delivery_end_time: '2030-05-01T16:00:00Z',
    weight: 3,
    items: [{ name: 'Tulips', quantity: 12 }],
    items_count: 12,
    tip: 150,
    ...patch,
  });
  // The seed returns the order as the read by reference writes it.
  expect(problems(componentValidator('Order'), order)).toEqual([]);
  return { uid: order.uid, reference };
}

beforeAll(async () => {
  sandbox = await startSandbox({ knobs: { stepMs: 0 } });
  [keyA, keyB, keyOther] = sandbox.merchants.map((m) => m.key) as [string, string, string];
});
afterEach(() => sandbox.setKnobs({ errorRate: 0, stepMs: 0 }));
afterAll(() => sandbox?.stop());

// ---------------------------------------------------------------------------

const EXPECTED_OPERATIONS: [id: string, method: string, path: string][] = [
  ['platformQuote', 'POST', '/{platform}/quote'],
  ['platformCreateDelivery', 'POST', '/{platform}/deliveries'],
  ['platformGetDelivery', 'GET', '/{platform}/deliveries/{uid}'],
  ['platformCancelDelivery', 'POST', '/{platform}/deliveries/{uid}/cancel'],
  ['platformAvailability', 'GET', '/{platform}/availability'],
  ['partnerQuote', 'POST', '/quote'],
  ['partnerGetOrder', 'GET', '/orders/{uid}'],
  ['partnerGetOrderByReference', 'GET', '/orders/partner/{partner_reference}'],
  ['partnerCancelOrder', 'POST', '/orders/{uid}/cancel'],
  ['partnerAvailability', 'GET', '/availability'],
];

/** Response components that must reject fields they do not list. */
const CLOSED_COMPONENTS = [
  'Delivery',
  'DeliveryResponse',
  'Order',
  'OrderResponse',
  'Price',
  'Distance',
  'LatLng',
  'Dimensions',
  'FeeAmount',
  'FeeValue',
  'QuoteResult',
  'QuotePrice',
  'PlatformCancellation',
  'PartnerCancellation',
  'Availability',
  'PlatformError',
  'PartnerError',
  'ValidationError',
  'WebhookEvent',
  'WebhookAddress',
];

describe('the description itself', () => {
  it('is OpenAPI 3.0.3, version 1.0.0, with a {base_url} server and global bearer auth', () => {
    expect(rawSpec.openapi).toBe('3.0.3');
    expect(rawSpec.info.version).toBe('1.0.0');
    expect(rawSpec.servers[0].url).toBe('{base_url}');
    expect(rawSpec.servers[0].variables.base_url.default).toMatch(/\/api\/v1$/);
    expect(rawSpec.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer' });
    expect(rawSpec.security).toEqual([{ bearerAuth: [] }]);
    // `webhooks:` is OpenAPI 3.1: the event body lives under components only.
    expect(rawSpec.webhooks).toBeUndefined();
  });

  it('has exactly the ten endpoints of both groups, with unique camelCase operationIds', () => {
    expect(OPERATIONS.map((o) => [o.id, o.method, o.path]).sort()).toEqual([...EXPECTED_OPERATIONS].sort());
    for (const { id } of OPERATIONS) expect(id).toMatch(/^[a-z][a-zA-Z0-9]*$/);
  });

  it('declares every path parameter its template uses', () => {
    for (const op of OPERATIONS) {
      const item = (spec.paths as Json)[op.path] as Json;
      const declared = [...(item.parameters ?? []), ...(op.op.parameters ?? [])]
        .map((p: Json) => deref(p))
        .filter((p) => p.in === 'path');
      const names = [...op.path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]);
      expect(declared.map((p) => p.name).sort(), op.id).toEqual(names.sort());
      for (const p of declared) expect(p.required, `${op.id} ${p.name}`).toBe(true);
    }
  });

  it('compiles every component schema, and closes the response ones', () => {
    for (const name of Object.keys(spec.components.schemas)) expect(() => componentValidator(name), name).not.toThrow();
    for (const name of CLOSED_COMPONENTS)
      expect(rawSpec.components.schemas[name]?.additionalProperties, name).toBe(false);
  });

  it('marks the sandbox-only webhook fields as an extension', () => {
    const props = rawSpec.components.schemas.WebhookEvent.properties;
    for (const field of ['partner_reference', 'partner_payload']) {
      expect(props[field]['x-sandbox-addition'], field).toBe(true);
      expect(props[field].description).toMatch(/not in the upstream's document/);
    }
  });

  it('accepts the request bodies this test sends and rejects the invalid ones', () => {
    const platform = componentValidator('DeliveryRequest');
    const partner = componentValidator('PartnerQuoteRequest');
    expect(problems(platform, fullRequest())).toEqual([]);
    expect(problems(platform, minimalRequest())).toEqual([]);
    expect(problems(partner, partnerQuoteBody())).toEqual([]);
    expect(platform({ pickup_name: 'x' })).toBe(false);
    expect(partner({ ...partnerQuoteBody(), currency: undefined })).toBe(false);
    expect(platform(fullRequest({ pickup_phone_number: '+1 415 555 0100 ext 9' }))).toBe(false);
  });
});

describe('platform group', () => {
  it('POST /{platform}/quote: 200 QuoteResult, for a full and a minimal body', async () => {
    const quote = await call('platformQuote', 200, { body: fullRequest() });
    expect(quote.data.price.currency).toBe('USD');
    await call('platformQuote', 200, { body: minimalRequest() });
  });

  it('POST /{platform}/deliveries: 201 CreateResult', async () => {
    const created = await call('platformCreateDelivery', 201, { body: fullRequest() });
    expect(created.uid).toEqual(expect.any(String));
    expect(created.tracking_link).toMatch(/^http/);
  });

  it('GET /{platform}/deliveries/{uid}: 200 Delivery at every step, nulls before a courier, proofs at the end', async () => {
    const uid = await createDelivery();
    const fresh = await call('platformGetDelivery', 200, { params: { uid } });
    expect(fresh.data.driver_name).toBeNull();
    expect(fresh.data.expected_cancellation_fee).not.toBeNull();
    // Pricing settles when a courier takes the job.
    expect(fresh.data.price).toEqual({ value: null, currency: 'USD' });

    for (let step = 1; step <= 7; step++) {
      await sandbox.advance(uid);
      const { data } = await call('platformGetDelivery', 200, { params: { uid } });
      expect(data.price.value).toEqual(expect.any(Number));
    }
    const done = (await call('platformGetDelivery', 200, { params: { uid } })).data;
    expect(done.status).toBe('DROPOFF_COMPLETE');
    for (const field of [
      'driver_name',
      'driver_location',
      'driver_vehicle_make',
      'driver_vehicle_year',
      'dropoff_verification_image_url',
      'dropoff_signature_image_url',
      'dimensions',
    ]) {
      expect(done[field], field).not.toBeNull();
    }
    expect(done.expected_cancellation_fee).toBeNull();
  });

  it('GET /{platform}/deliveries/{uid}: 200 Delivery at every step of both return paths', async () => {
    for (const [outcome, ends] of [
      ['failed_then_returned', ['DROPOFF_ARRIVED', 'FAILED', 'RETURN_IN_PROGRESS', 'RETURNED']],
      ['canceled_then_returned', ['DROPOFF_ENROUTE', 'Canceled', 'RETURN_IN_PROGRESS', 'RETURNED']],
    ] as const) {
      const uid = await createDelivery(fullRequest({ platform_payload: { sandbox_outcome: outcome } }));
      const statuses: string[] = [];
      for (let step = 1; step <= 9 && statuses.at(-1) !== 'RETURNED'; step++) {
        await sandbox.advance(uid);
        statuses.push((await call('platformGetDelivery', 200, { params: { uid } })).data.status);
      }
      expect(statuses.slice(-4), outcome).toEqual(ends);
    }
  });

  it('GET /{platform}/deliveries/{uid}: a minimal on-demand delivery (most fields null)', async () => {
    const uid = await createDelivery(minimalRequest());
    const { data } = await call('platformGetDelivery', 200, { params: { uid } });
    expect(data.dimensions).toBeNull();
    expect(data.platform_payload).toBeNull();
    expect(data.items).toBeNull();
  });

  it('POST /{platform}/deliveries/{uid}/cancel: 200 PlatformCancellation, then a Canceled read', async () => {
    const uid = await createDelivery();
    await sandbox.advance(uid); // assigned: a late-cancellation fee applies
    const canceled = await call('platformCancelDelivery', 200, { params: { uid } });
    expect(canceled.data.status).toBe('Canceled');
    const { data } = await call('platformGetDelivery', 200, { params: { uid } });
    expect(data.status).toBe('Canceled');
    expect(data.cancellation_reason).toEqual(expect.any(String));
  });

  it('GET /{platform}/availability: 200 Availability', async () => {
    const body = await call('platformAvailability', 200);
    expect(body.available).toBe(true);
  });

  it('401 PlatformError on every operation: no key, an unknown key, a key of another platform', async () => {
    const uid = await createDelivery(minimalRequest());
    const cases: [string, CallOptions][] = [
      ['platformQuote', { body: minimalRequest() }],
      ['platformCreateDelivery', { body: minimalRequest() }],
      ['platformGetDelivery', { params: { uid } }],
      ['platformCancelDelivery', { params: { uid } }],
      ['platformAvailability', {}],
    ];
    for (const [id, options] of cases) {
      for (const key of [null, 'sk_test_nope', keyOther]) {
        const body = await call(id, 401, { ...options, key });
        expect(body.code).toBe('invalid_api_key');
      }
    }
  });

  it("404 PlatformError: an unknown uid, and another merchant's delivery", async () => {
    const uid = await createDelivery(minimalRequest());
    for (const id of ['platformGetDelivery', 'platformCancelDelivery']) {
      expect((await call(id, 404, { params: { uid: randomUUID() } })).code).toBe('not_found');
      expect((await call(id, 404, { params: { uid }, key: keyB })).code).toBe('not_found');
    }
  });

  it('409 PlatformError not_cancelable: after pickup (advanced 4 times), and when already canceled', async () => {
    const picked = await createDelivery();
    await advance(picked, 4);
    expect((await call('platformCancelDelivery', 409, { params: { uid: picked } })).code).toBe('not_cancelable');

    const twice = await createDelivery();
    await call('platformCancelDelivery', 200, { params: { uid: twice } });
    expect((await call('platformCancelDelivery', 409, { params: { uid: twice } })).code).toBe('not_cancelable');
  });

  it('422 ValidationError on quote and create: missing and invalid fields', async () => {
    for (const id of ['platformQuote', 'platformCreateDelivery']) {
      const missing = await call(id, 422, { body: { pickup_name: 'Only me' } });
      expect(missing.errors.pickup_address_street).toBeDefined();
      const invalid = await call(id, 422, {
        body: fullRequest({
          pickup_start_time: '2030-05-01T13:30:00+02:00',
          delivery_style: 'Oversize',
          package_minimum_vehicle_size: 'BIKE',
        }),
      });
      expect(Object.keys(invalid.errors)).toEqual(
        expect.arrayContaining(['pickup_start_time', 'package_minimum_vehicle_size']),
      );
    }
  });

  it('400 and 413 PlatformError on the JSON-body operations', async () => {
    for (const id of ['platformQuote', 'platformCreateDelivery']) {
      expect((await call(id, 400, { raw: '{not json' })).code).toBe('bad_request');
      expect((await call(id, 400, { raw: '[1,2]' })).code).toBe('bad_request');
      expect((await call(id, 413, { raw: JSON.stringify({ pad: 'x'.repeat(1024 * 1024) }) })).code).toBe(
        'payload_too_large',
      );
    }
  });
});

describe('second (partner) group', () => {
  it('POST /quote: 200 QuoteResult, with and without a dropoff address', async () => {
    const quote = await call('partnerQuote', 200, { body: partnerQuoteBody() });
    expect(quote.data.price.currency).toBe('EUR');
    await call('partnerQuote', 200, {
      body: {
        pickup_address_street: 'Market St',
        pickup_address_city: 'San Francisco',
        pickup_address_country: 'US',
        pickup_name: 'Shop',
        dropoff_name: 'Someone',
        email: 'shop@example.com',
        currency: 'USD',
        package_delivery_mode: 'NOW',
      },
    });
  });

  it('GET /orders/{uid} and /orders/partner/{ref}: 200 Order at every step; delivery_style only by reference', async () => {
    const { uid, reference } = seedOrder();
    const byUid = (await call('partnerGetOrder', 200, { params: { uid } })).data;
    expect(byUid).not.toHaveProperty('delivery_style');
    const byRef = (await call('partnerGetOrderByReference', 200, { params: { partner_reference: reference } })).data;
    expect(byRef.delivery_style).toBe('Standard');
    expect(byRef.partner_reference).toBe(reference);

    for (let step = 1; step <= 7; step++) {
      await sandbox.advance(uid);
      await call('partnerGetOrder', 200, { params: { uid } });
      await call('partnerGetOrderByReference', 200, { params: { partner_reference: reference } });
    }
    expect(byUid.price.value).toBeNull();
    const done = (await call('partnerGetOrder', 200, { params: { uid } })).data;
    expect(done.status).toBe('DROPOFF_COMPLETE');
    for (const field of [
      'driver_name',
      'driver_location',
      'dropoff_verification_image_url',
      'dropoff_signature_image_url',
      'dimentions',
      'tracking_url',
      'delivery_start_time',
    ]) {
      expect(done[field], field).not.toBeNull();
    }
  });

  it('GET /orders/{uid}: an order without a dropoff address', async () => {
    const { uid } = seedOrder({
      dropoff_address_street: undefined,
      dropoff_address_city: undefined,
      dropoff_address_country: undefined,
    });
    const { data } = await call('partnerGetOrder', 200, { params: { uid } });
    expect(data.dropoff_address_latitude).toBeNull();
  });

  it('POST /orders/{uid}/cancel: 200 PartnerCancellation, then a Canceled read', async () => {
    const { uid, reference } = seedOrder({ currency: 'EUR' });
    await sandbox.advance(uid);
    const canceled = await call('partnerCancelOrder', 200, { params: { uid } });
    expect(canceled.data).toMatchObject({ status: 'Canceled', partner_reference: reference });
    const { data } = await call('partnerGetOrderByReference', 200, { params: { partner_reference: reference } });
    expect(data.status).toBe('Canceled');
  });

  it('GET /availability: 200 Availability', async () => {
    expect((await call('partnerAvailability', 200)).service).toEqual(expect.any(String));
  });

  it('401 PartnerError on every operation: no token, an unknown token', async () => {
    const { uid, reference } = seedOrder();
    const cases: [string, CallOptions][] = [
      ['partnerQuote', { body: partnerQuoteBody() }],
      ['partnerGetOrder', { params: { uid } }],
      ['partnerGetOrderByReference', { params: { partner_reference: reference } }],
      ['partnerCancelOrder', { params: { uid } }],
      ['partnerAvailability', {}],
    ];
    for (const [id, options] of cases) {
      for (const key of [null, 'sk_test_nope']) {
        expect((await call(id, 401, { ...options, key })).error).toBe('invalid_api_key');
      }
    }
  });

  it("404 PartnerError: unknown uid or reference, another caller's order, a platform delivery", async () => {
    const { uid, reference } = seedOrder();
    const platformUid = await createDelivery(minimalRequest());
    for (const id of ['partnerGetOrder', 'partnerCancelOrder']) {
      expect((await call(id, 404, { params: { uid: randomUUID() } })).error).toBe('not_found');
      expect((await call(id, 404, { params: { uid }, key: keyB })).error).toBe('not_found');
      expect((await call(id, 404, { params: { uid: platformUid } })).error).toBe('not_found');
    }
    expect(
      (await call('partnerGetOrderByReference', 404, { params: { partner_reference: 'no-such-ref' } })).error,
    ).toBe('not_found');
    expect(
      (await call('partnerGetOrderByReference', 404, { params: { partner_reference: reference }, key: keyB })).error,
    ).toBe('not_found');
  });

  it('409 PartnerError not_cancelable: after pickup (advanced 4 times)', async () => {
    const { uid } = seedOrder();
    await advance(uid, 4);
    expect((await call('partnerCancelOrder', 409, { params: { uid } })).error).toBe('not_cancelable');
  });

  it('422 PartnerError validation_error on quote: missing currency, a prohibited platform_payload', async () => {
    const { currency: _none, ...noCurrency } = partnerQuoteBody();
    expect((await call('partnerQuote', 422, { body: noCurrency })).error).toBe('validation_error');
    expect(
      (await call('partnerQuote', 422, { body: partnerQuoteBody({ platform_payload: { a: 1 } }) })).message,
    ).toMatch(/platform_payload/);
  });

  it('400 and 413 PartnerError on quote', async () => {
    expect((await call('partnerQuote', 400, { raw: 'nope' })).error).toBe('bad_request');
    expect((await call('partnerQuote', 413, { raw: JSON.stringify({ pad: 'x'.repeat(1024 * 1024) }) })).error).toBe(
      'payload_too_large',
    );
  });
});

describe('both groups', () => {
  it('503 on every operation when the service is unavailable', async () => {
    const uid = await createDelivery(minimalRequest());
    const { uid: orderUid, reference } = seedOrder();
    sandbox.setKnobs({ errorRate: 1 });
    const cases: [string, CallOptions][] = [
      ['platformQuote', { body: minimalRequest() }],
      ['platformCreateDelivery', { body: minimalRequest() }],
      ['platformGetDelivery', { params: { uid } }],
      ['platformCancelDelivery', { params: { uid } }],
      ['platformAvailability', {}],
      ['partnerQuote', { body: partnerQuoteBody() }],
      ['partnerGetOrder', { params: { uid: orderUid } }],
      ['partnerGetOrderByReference', { params: { partner_reference: reference } }],
      ['partnerCancelOrder', { params: { uid: orderUid } }],
      ['partnerAvailability', {}],
    ];
    for (const [id, options] of cases) {
      const body = await call(id, 503, options);
      expect(body.code ?? body.error).toBe('unavailable');
    }
  });

  it('a field the description lacks fails validation (the schemas are closed)', async () => {
    const uid = await createDelivery(minimalRequest());
    const body = await call('platformGetDelivery', 200, { params: { uid } });
    const validate = validatorAt(responseSchemaRef(operation('platformGetDelivery'), 200));
    expect(validate({ data: { ...body.data, surprise: 1 } })).toBe(false);
    expect(validate({ data: { ...body.data, dimentions: body.data.dimensions } })).toBe(false);
    expect(validate({ data: { ...body.data, delivery_date: '2030-05-01' } })).toBe(false);
    expect(componentValidator('PlatformError')({ error: 'not_found', message: 'x' })).toBe(false);
  });
});

describe('webhooks', () => {
  let receiver: Server;
  const received: { body: any; token: string | undefined }[] = [];

  beforeAll(async () => {
    receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? '')?.[1];
        received.push({ body: JSON.parse(Buffer.concat(chunks).toString('utf8')), token });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    sandbox.setWebhookUrl(`http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`);
  });
  afterAll(async () => {
    sandbox?.setWebhookUrl(undefined);
    await new Promise<void>((resolve) => receiver.close(() => resolve()));
  });

  it('every body (and every JWT payload claim) through whole lifecycles conforms to WebhookEvent', async () => {
    // A platform delivery all the way, a minimal one canceled after assignment,
    // a partner order all the way and one canceled at once.
    const full = await createDelivery();
    await advance(full, 7);
    const minimal = await createDelivery(minimalRequest());
    await sandbox.advance(minimal);
    await call('platformCancelDelivery', 200, { params: { uid: minimal } });
    const order = seedOrder();
    await advance(order.uid, 7);
    const canceledOrder = seedOrder({
      dropoff_address_street: undefined,
      dropoff_address_city: undefined,
      dropoff_address_country: undefined,
    });
    await call('partnerCancelOrder', 200, { params: { uid: canceledOrder.uid } });
    // Both return paths: a platform delivery that fails at the door, a partner order the provider cancels.
    const failed = await createDelivery(fullRequest({ platform_payload: { sandbox_outcome: 'failed_then_returned' } }));
    await advance(failed, 9);
    const returnedOrder = seedOrder({ partner_payload: { sandbox_outcome: 'canceled_then_returned' } });
    await advance(returnedOrder.uid, 8);
    await sandbox.idle();

    const validate = componentValidator('WebhookEvent');
    expect(received.length).toBeGreaterThan(30);
    for (const { body, token } of received) {
      expect(problems(validate, body), `${body.event_name}: ${JSON.stringify(body)}`).toEqual([]);
      expect(token).toBeDefined();
      const claim = decodeJwt(token!).payload;
      expect(problems(validate, claim), `JWT payload of ${body.event_name}`).toEqual([]);
    }

    const names = new Set(received.map((r) => r.body.event_name));
    for (const name of [
      'delivery.created',
      'delivery.assigned',
      'delivery.pickup_enroute',
      'delivery.pickup_arrived',
      'delivery.pickup_complete',
      'delivery.dropoff_enroute',
      'delivery.dropoff_arrived',
      'delivery.dropoff_complete',
      'delivery.canceled',
      'location.assigned_driver',
      'location.pickup_enroute',
      'location.pickup_arrived',
      'location.pickup_complete',
      'location.dropoff_enroute',
      'location.dropoff_arrived',
      'delivery.failed',
      'delivery.return_in_progress',
      'delivery.returned',
      'location.return_in_progress',
    ]) {
      expect(names.has(name), name).toBe(true);
    }
    const arrived = received.find((r) => r.body.uid === full && r.body.event_name === 'delivery.dropoff_arrived')!.body;
    expect(arrived.dropoff_verification_image_url).toEqual(expect.any(String));
    expect(arrived.pickup_address).toMatchObject({ street: 'Market St', latitude: expect.any(Number) });
    expect(
      received.find((r) => r.body.uid === minimal && r.body.event_name === 'delivery.canceled')!.body
        .cancellation_reason,
    ).toEqual(expect.any(String));
    // As the document's body: no partner field on a partner order's event (the sandbox adds them only with
    // partnerWebhookFields).
    const orderEvent = received.find((r) => r.body.uid === order.uid)!.body;
    expect(orderEvent).not.toHaveProperty('partner_reference');
    expect(orderEvent.platform_payload).toBeNull();
    expect(received.find((r) => r.body.uid === canceledOrder.uid)!.body).not.toHaveProperty('dropoff_address');
    const providerCancel = received.find(
      (r) => r.body.uid === returnedOrder.uid && r.body.event_name === 'delivery.canceled',
    )!.body;
    expect(providerCancel.cancellation_reason).toMatch(/^provider: /);
    // No courier yet at delivery.created: no settled price.
    const createdPrices = received
      .filter((r) => r.body.event_name === 'delivery.created')
      .map((r) => r.body.price.value);
    expect(new Set(createdPrices)).toEqual(new Set([null]));
  });
});

describe('coverage', () => {
  it('exercised every documented response of every operation', () => {
    const documented = OPERATIONS.flatMap((op) => Object.keys(op.op.responses).map((status) => `${op.id} ${status}`));
    expect(documented.filter((pair) => !exercised.has(pair))).toEqual([]);
  });
});
