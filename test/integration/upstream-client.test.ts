// The platform and partner clients against local misbehaving upstreams on port 0:
// what each failure becomes (class and code), which calls are retried (counted on
// the server), the time budget, the wire format, and that no error carries the key.
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { inspect } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import {
  BadUserInputError,
  CancelRefusedError,
  DeliveryGraphError,
  NotCancelableError,
  NotFoundError,
  UnauthenticatedError,
  UpstreamProtocolError,
  UpstreamTimeoutError,
  UpstreamUnavailableError,
  UpstreamValidationError,
} from '../../src/errors.js';
import { createUpstream, type Upstream } from '../../src/upstream/clients.js';
import { UpstreamHttp, type UpstreamCallRecord, type UpstreamHttpOptions } from '../../src/upstream/http.js';
import { PartnerClient } from '../../src/upstream/partner.js';
import { PlatformClient } from '../../src/upstream/platform.js';
import type { WireDeliveryRequest } from '../../src/upstream/wire.js';
import { firstSettled } from '../helpers/wait.js';

/** A merchant key with characters that must travel unchanged ('/', '+', '='). */
const KEY = 'mk_live_Q7vR2pX9w/secret+Tk==';
const UID = '0b6f1c1e-6f7a-4f65-9d8e-3c2a1b0f9e77';
const PLATFORM = 'p1';

const REQUEST: WireDeliveryRequest = {
  pickup_address_street: 'Market St',
  pickup_address_city: 'San Francisco',
  pickup_address_country: 'US',
  pickup_name: 'Sandbox Bakery',
  dropoff_address_street: 'Lakeshore Ave',
  dropoff_address_city: 'Oakland',
  dropoff_address_country: 'US',
  dropoff_name: 'Ada Lovelace',
  email: 'bakery@example.com',
  tip: 250,
  platform_payload: { order: 'A-17' },
};

const DELIVERY = { uid: UID, status: 'DROPOFF_COMPLETE', tracking_link: 'https://track.example.com/x' };

// ---------------------------------------------------------------------------
// Fake upstreams and the clients that talk to them, closed after each test.

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

type Handler = (req: IncomingMessage, res: ServerResponse, n: number) => void;

interface FakeUpstream {
  /** Base URL ending in /api/v1. */
  base: string;
  /** Every request the server received, in order. */
  seen: Seen[];
}

const servers: Server[] = [];
const clients: Array<{ close(): Promise<void> }> = [];
const timers: NodeJS.Timeout[] = [];

afterEach(async () => {
  for (const timer of timers.splice(0)) clearInterval(timer);
  // Drop server sockets first so no client call is left waiting, then close the pools.
  await Promise.all(
    servers.splice(0).map(
      (server) =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    ),
  );
  await Promise.all(clients.splice(0).map((client) => client.close()));
});

/** A node:http server on port 0 whose handler runs once the request body has been read. */
async function fakeUpstream(handler: Handler): Promise<FakeUpstream> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      seen.push({
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        at: performance.now(),
      });
      handler(req, res, seen.length);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  servers.push(server);
  const { port } = server.address() as AddressInfo;
  return { base: `http://127.0.0.1:${port}/api/v1`, seen };
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** Answers every request with the same JSON. */
const always =
  (status: number, body: unknown, headers?: Record<string, string>): Handler =>
  (_req, res) =>
    json(res, status, body, headers);

/** Never answers. */
const hang: Handler = () => undefined;

/** Resets the connection as soon as the request has arrived. */
const reset: Handler = (req) => req.socket.destroy();

function upstreamFor(fake: FakeUpstream, options: { timeoutMs?: number; maxResponseBytes?: number } = {}): Upstream {
  const upstream = createUpstream({
    url: fake.base,
    platformId: PLATFORM,
    timeoutMs: options.timeoutMs ?? 2000,
    connections: 4,
    maxResponseBytes: options.maxResponseBytes ?? 64 * 1024,
  });
  clients.push(upstream);
  return upstream;
}

/** The clients built by hand, for a small retry base and the call records. */
function handBuilt(fake: FakeUpstream, options: Partial<UpstreamHttpOptions> = {}) {
  const records: UpstreamCallRecord[] = [];
  const http = new UpstreamHttp({
    baseUrl: fake.base,
    timeoutMs: 2000,
    connections: 4,
    maxResponseBytes: 64 * 1024,
    retryBaseMs: 5,
    onCall: (record) => records.push(record),
    ...options,
  });
  clients.push(http);
  return { platform: new PlatformClient(http, PLATFORM), partner: new PartnerClient(http), records };
}

/** Awaits the rejection, checks its class and code, and that it carries no key anywhere. */
async function failure<E extends DeliveryGraphError>(
  call: Promise<unknown>,
  type: abstract new (...args: never[]) => E,
  code: string,
): Promise<E> {
  const error: unknown = await call.then(
    (value) => {
      throw new Error(`expected ${code}, the call succeeded with ${JSON.stringify(value)}`);
    },
    (rejection: unknown) => rejection,
  );
  expect(error).toBeInstanceOf(type);
  expect((error as DeliveryGraphError).code).toBe(code);
  expectNoKey(error);
  return error as E;
}

function expectNoKey(error: unknown): void {
  expect(String((error as Error).message)).not.toContain(KEY);
  expect(JSON.stringify(error)).not.toContain(KEY);
  // The cause chain (undici errors, abort reasons) must not carry it either.
  expect(inspect(error, { depth: 10 })).not.toContain(KEY);
}

const elapsedSince = (started: number) => performance.now() - started;

/**
 * A call that ends when a budget of `budgetMs` runs out: a GET on an upstream of
 * its own that never answers. Started beside a call under test, it says whether
 * that call ended sooner, by its own budget or at once, than this one could:
 * both wait on the same kind of timer, so a busy machine delays both alike.
 */
async function budgetOf(budgetMs: number): Promise<() => Promise<unknown>> {
  const upstream = upstreamFor(await fakeUpstream(hang), { timeoutMs: budgetMs });
  return () => upstream.platform.get(KEY, UID);
}

// Every call of both groups, by HTTP method.
type Call = (upstream: Pick<Upstream, 'platform' | 'partner'>) => Promise<unknown>;
const GETS: Array<[string, Call]> = [
  ['platform get', (u) => u.platform.get(KEY, UID)],
  ['platform availability', (u) => u.platform.availability(KEY)],
  ['partner getOrder', (u) => u.partner.getOrder(KEY, UID)],
  ['partner getOrderByReference', (u) => u.partner.getOrderByReference(KEY, 'ref-1')],
  ['partner availability', (u) => u.partner.availability(KEY)],
];
const POSTS: Array<[string, Call]> = [
  ['platform quote', (u) => u.platform.quote(KEY, REQUEST)],
  ['platform create', (u) => u.platform.create(KEY, REQUEST)],
  ['platform cancel', (u) => u.platform.cancel(KEY, UID)],
  ['partner quote', (u) => u.partner.quote(KEY, { ...REQUEST, currency: 'USD' })],
  ['partner cancel', (u) => u.partner.cancel(KEY, UID)],
];

// ---------------------------------------------------------------------------

describe('error answers are classified by status and body code', () => {
  it('401 with invalid_api_key → UNAUTHENTICATED, not retried', async () => {
    const fake = await fakeUpstream(
      always(401, { code: 'invalid_api_key', message: 'The key is not valid for this platform.' }),
    );
    await failure(upstreamFor(fake).platform.get(KEY, UID), UnauthenticatedError, 'UNAUTHENTICATED');
    expect(fake.seen).toHaveLength(1);
  });

  it('401 with an empty body → UNAUTHENTICATED', async () => {
    const fake = await fakeUpstream((_req, res) => res.writeHead(401).end());
    await failure(upstreamFor(fake).platform.quote(KEY, REQUEST), UnauthenticatedError, 'UNAUTHENTICATED');
  });

  it('invalid_api_key under another status (403) → UNAUTHENTICATED', async () => {
    const fake = await fakeUpstream(always(403, { code: 'invalid_api_key', message: 'no' }));
    await failure(upstreamFor(fake).platform.cancel(KEY, UID), UnauthenticatedError, 'UNAUTHENTICATED');
  });

  it('partner 401 {error, message} → UNAUTHENTICATED', async () => {
    const fake = await fakeUpstream(always(401, { error: 'unauthorized', message: 'Bad token.' }));
    await failure(upstreamFor(fake).partner.getOrder(KEY, UID), UnauthenticatedError, 'UNAUTHENTICATED');
  });

  it('404 {code: not_found} → NOT_FOUND, not retried', async () => {
    const fake = await fakeUpstream(always(404, { code: 'not_found', message: 'No such delivery.' }));
    await failure(upstreamFor(fake).platform.get(KEY, UID), NotFoundError, 'NOT_FOUND');
    expect(fake.seen).toHaveLength(1);
  });

  it('404 with an HTML body → NOT_FOUND', async () => {
    const fake = await fakeUpstream((_req, res) =>
      res.writeHead(404, { 'content-type': 'text/html' }).end('<h1>Not Found</h1>'),
    );
    await failure(upstreamFor(fake).platform.cancel(KEY, UID), NotFoundError, 'NOT_FOUND');
  });

  it('{code: not_found} under 400 → NOT_FOUND, not validation', async () => {
    const fake = await fakeUpstream(always(400, { code: 'not_found', message: 'No such delivery.' }));
    await failure(upstreamFor(fake).platform.cancel(KEY, UID), NotFoundError, 'NOT_FOUND');
  });

  it.each([
    ['getOrder', (u: Upstream) => u.partner.getOrder(KEY, UID)],
    ['getOrderByReference', (u: Upstream) => u.partner.getOrderByReference(KEY, 'ref-1')],
    ['cancel', (u: Upstream) => u.partner.cancel(KEY, UID)],
  ])('partner {error: not_found} → NOT_FOUND (%s)', async (_, call) => {
    const fake = await fakeUpstream(always(404, { error: 'not_found', message: 'Order not found.' }));
    await failure(call(upstreamFor(fake)), NotFoundError, 'NOT_FOUND');
  });

  it.each([409, 400, 422])('{code: not_cancelable} with status %i → NOT_CANCELABLE', async (status) => {
    const fake = await fakeUpstream(always(status, { code: 'not_cancelable', message: 'Already picked up.' }));
    await failure(upstreamFor(fake).platform.cancel(KEY, UID), NotCancelableError, 'NOT_CANCELABLE');
    expect(fake.seen).toHaveLength(1);
  });

  // CONTRACT: "a 409 to a cancel whatever its code → not cancelable".
  it.each([
    ['an unknown platform code', { code: 'conflict', message: 'Courier already at pickup.' }],
    ['an unknown partner code', { error: 'state_conflict', message: 'Order is being picked up.' }],
    ['a validation shape', { message: 'Cannot cancel.', errors: { status: ['is Picked Up'] } }],
    ['invalid_api_key', { code: 'invalid_api_key', message: 'odd, but a conflict' }],
    ['not_found', { error: 'not_found', message: 'odd, but a conflict' }],
    ['an HTML page', '<html><body>409 Conflict</body></html>'],
    ['an empty body', ''],
  ])('a 409 to a cancel with %s → NOT_CANCELABLE, on both groups, sent once', async (_, body) => {
    const fake = await fakeUpstream((_req, res) =>
      typeof body === 'string' ? res.writeHead(409, { 'content-type': 'text/html' }).end(body) : json(res, 409, body),
    );
    const upstream = upstreamFor(fake);
    await failure(upstream.platform.cancel(KEY, UID), NotCancelableError, 'NOT_CANCELABLE');
    await failure(upstream.partner.cancel(KEY, UID), NotCancelableError, 'NOT_CANCELABLE');
    expect(fake.seen).toHaveLength(2);
  });

  it('a 409 to anything but a cancel is not read as "not cancelable"', async () => {
    const fake = await fakeUpstream(always(409, { code: 'conflict', message: 'Busy.' }));
    const upstream = upstreamFor(fake);
    await failure(upstream.platform.create(KEY, REQUEST), UpstreamProtocolError, 'UPSTREAM_ERROR');
    await failure(
      upstream.partner.quote(KEY, { ...REQUEST, currency: 'USD' }),
      UpstreamProtocolError,
      'UPSTREAM_ERROR',
    );
    await failure(upstream.platform.get(KEY, UID), UpstreamProtocolError, 'UPSTREAM_ERROR');
  });

  it('a 401 to a cancel stays UNAUTHENTICATED', async () => {
    const fake = await fakeUpstream(always(401, { error: 'not_cancelable', message: 'no' }));
    await failure(upstreamFor(fake).partner.cancel(KEY, UID), UnauthenticatedError, 'UNAUTHENTICATED');
  });

  // The document gives cancel "three error responses of Error shape" and names no more codes: any other 4xx is the
  // upstream's answer about the delivery, typed, with its words.
  it.each([
    [400, { code: 'already_canceled', message: 'The delivery was already canceled.' }, 'already_canceled'],
    [403, { code: 'forbidden', message: 'Deliveries of this merchant cannot be canceled here.' }, 'forbidden'],
    [422, { error: 'unprocessable', message: 'The order is locked.' }, 'unprocessable'],
    [422, { message: 'Cannot cancel.', errors: { status: ['is locked'] } }, null],
    [410, '', null],
  ])('a %i to a cancel → CANCEL_REFUSED with its words, on both groups, sent once', async (status, body, code) => {
    const fake = await fakeUpstream((_req, res) =>
      typeof body === 'string' ? res.writeHead(status).end(body) : json(res, status, body),
    );
    const upstream = upstreamFor(fake);
    for (const call of [upstream.platform.cancel(KEY, UID), upstream.partner.cancel(KEY, UID)]) {
      const error = await failure(call, CancelRefusedError, 'CANCEL_REFUSED');
      const message = typeof body === 'string' ? null : body.message;
      expect(error.upstream).toEqual({ status, error: code, message });
      expect(error.message).toBe(
        message
          ? `The delivery service refused to cancel the delivery: ${message}`
          : `The delivery service refused to cancel the delivery (HTTP ${status}).`,
      );
    }
    expect(fake.seen).toHaveLength(2);
  });

  it('a 408 or 429 to a cancel is not about the delivery: it stays an error', async () => {
    const fake408 = await fakeUpstream(always(408, { code: 'timeout', message: 'Request timeout.' }));
    await failure(upstreamFor(fake408).platform.cancel(KEY, UID), UpstreamProtocolError, 'UPSTREAM_ERROR');
    const fake429 = await fakeUpstream(always(429, { code: 'rate_limited', message: 'Slow down.' }));
    await failure(upstreamFor(fake429).platform.cancel(KEY, UID), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
  });

  it('a 403 or 400 to a read or a quote is not a cancel refusal', async () => {
    const fake = await fakeUpstream(always(403, { code: 'forbidden', message: 'no' }));
    await failure(upstreamFor(fake).platform.get(KEY, UID), UpstreamProtocolError, 'UPSTREAM_ERROR');
    const fake400 = await fakeUpstream(always(400, { code: 'already_canceled', message: 'no' }));
    await failure(upstreamFor(fake400).platform.quote(KEY, REQUEST), UpstreamValidationError, 'VALIDATION');
  });

  it('partner {error: not_cancelable} → NOT_CANCELABLE', async () => {
    const fake = await fakeUpstream(always(400, { error: 'not_cancelable', message: 'Already picked up.' }));
    await failure(upstreamFor(fake).partner.cancel(KEY, UID), NotCancelableError, 'NOT_CANCELABLE');
  });

  it('422 {message, errors} → VALIDATION carrying the errors object', async () => {
    const errors = { pickup_name: ['The pickup name field is required.'], email: ['must be an email'] };
    const fake = await fakeUpstream(always(422, { message: 'The pickup name field is required.', errors }));
    const error = await failure(upstreamFor(fake).platform.quote(KEY, REQUEST), UpstreamValidationError, 'VALIDATION');
    expect(error.errors).toEqual(errors);
    expect(error.message).toBe('The pickup name field is required.');
    expect(fake.seen).toHaveLength(1);
  });

  it('a body with errors under another status (409) → VALIDATION', async () => {
    const errors = { package_minimum_vehicle_size: ['must match Oversize'] };
    const fake = await fakeUpstream(always(409, { message: 'Oversize needs a vehicle size.', errors }));
    const error = await failure(upstreamFor(fake).platform.create(KEY, REQUEST), UpstreamValidationError, 'VALIDATION');
    expect(error.errors).toEqual(errors);
  });

  it('400 with an unknown code → VALIDATION with an empty errors object', async () => {
    const fake = await fakeUpstream(
      always(400, { code: 'oversize_requires_vehicle', message: 'Set package_minimum_vehicle_size.' }),
    );
    const error = await failure(upstreamFor(fake).platform.create(KEY, REQUEST), UpstreamValidationError, 'VALIDATION');
    expect(error.errors).toEqual({});
    expect(error.message).toBe('Set package_minimum_vehicle_size.');
  });

  it.each([
    ['a string', 'The email field is required.', {}],
    ['null', null, {}],
    ['a list of messages', ['The email field is required.'], { '': ['The email field is required.'] }],
    ['an empty list', [], {}],
  ])('422 whose errors is %s → VALIDATION with field errors only from an object', async (_, errors, expected) => {
    const fake = await fakeUpstream(always(422, { message: 'The email field is required.', errors }));
    const error = await failure(upstreamFor(fake).platform.quote(KEY, REQUEST), UpstreamValidationError, 'VALIDATION');
    expect(error.errors).toEqual(expected);
    expect(error.message).toBe('The email field is required.');
  });

  it('partner 422 {error: validation_error, message} → VALIDATION', async () => {
    const fake = await fakeUpstream(
      always(422, { error: 'validation_error', message: 'The currency must be 3 characters.' }),
    );
    const error = await failure(
      upstreamFor(fake).partner.quote(KEY, { ...REQUEST, currency: 'USDX' }),
      UpstreamValidationError,
      'VALIDATION',
    );
    expect(error.message).toBe('The currency must be 3 characters.');
    expect(error.errors).toEqual({});
  });

  it('an HTML error page under 418 → UPSTREAM_ERROR without the raw body', async () => {
    const page = '<html><body><h1>I am a teapot</h1><p>trace id 1234</p></body></html>';
    const fake = await fakeUpstream((_req, res) => res.writeHead(418, { 'content-type': 'text/html' }).end(page));
    const error = await failure(upstreamFor(fake).platform.get(KEY, UID), UpstreamProtocolError, 'UPSTREAM_ERROR');
    expect(error.message).not.toContain('teapot');
    expect(fake.seen).toHaveLength(1);
  });
});

describe('time budget', () => {
  it('a hanging GET → UPSTREAM_TIMEOUT after timeoutMs, not retried', async () => {
    const fake = await fakeUpstream(hang);
    const longer = await budgetOf(1000);
    const started = performance.now();
    const call = upstreamFor(fake, { timeoutMs: 300 }).platform.get(KEY, UID);
    // Its own 300 ms, not a longer budget.
    expect(await firstSettled({ call, longer: longer() })).toBe('call');
    await failure(call, UpstreamTimeoutError, 'UPSTREAM_TIMEOUT');
    expect(elapsedSince(started)).toBeGreaterThanOrEqual(280);
    expect(fake.seen).toHaveLength(1);
  });

  it('a hanging POST → UPSTREAM_TIMEOUT after timeoutMs', async () => {
    const fake = await fakeUpstream(hang);
    const longer = await budgetOf(1000);
    const call = upstreamFor(fake, { timeoutMs: 300 }).platform.create(KEY, REQUEST);
    expect(await firstSettled({ call, longer: longer() })).toBe('call');
    await failure(call, UpstreamTimeoutError, 'UPSTREAM_TIMEOUT');
    expect(fake.seen).toHaveLength(1);
  });

  it('the budget covers retries: 503, then a hang → UPSTREAM_TIMEOUT at timeoutMs in all', async () => {
    // The 503 comes late (200 ms of the 400), so the retry meets less than a whole budget.
    const fresh = await budgetOf(300);
    let call: Promise<unknown> | undefined;
    let first: Promise<string> | undefined;
    const fake = await fakeUpstream((req, res, n) => {
      if (n === 1)
        return void timers.push(setTimeout(() => json(res, 503, { code: 'unavailable', message: 'busy' }), 200));
      // The retry has arrived: a fresh 300 ms from now ends after what is left of the call's 400.
      first = firstSettled({ call: call!, fresh: fresh() });
      hang(req, res, n);
    });
    const started = performance.now();
    call = upstreamFor(fake, { timeoutMs: 400 }).partner.getOrder(KEY, UID);
    await failure(call, UpstreamTimeoutError, 'UPSTREAM_TIMEOUT');
    expect(fake.seen).toHaveLength(2);
    expect(await first).toBe('call');
    expect(elapsedSince(started)).toBeGreaterThanOrEqual(380);
  });

  it('headers on time but a body trickling past the budget → UPSTREAM_TIMEOUT', async () => {
    const fake = await fakeUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"data":{"uid":"');
      // Each byte arrives well inside any per-chunk timeout; the whole body never does.
      timers.push(setInterval(() => res.write('x'), 40));
    });
    const longer = await budgetOf(1000);
    const call = upstreamFor(fake, { timeoutMs: 300 }).platform.get(KEY, UID);
    expect(await firstSettled({ call, longer: longer() })).toBe('call');
    await failure(call, UpstreamTimeoutError, 'UPSTREAM_TIMEOUT');
    expect(fake.seen).toHaveLength(1);
  });

  it("a caller's abort ends a hanging call early and is not retried", async () => {
    const controller = new AbortController();
    // The caller gives up once the request is at the upstream, long before the 2 s budget.
    const fake = await fakeUpstream(() => controller.abort());
    const call = upstreamFor(fake, { timeoutMs: 2000 }).platform.get(KEY, UID, { signal: controller.signal });
    // The code reports a caller's abort as UPSTREAM_UNAVAILABLE ("The upstream call was aborted."); the budget
    // running out would have been UPSTREAM_TIMEOUT.
    await failure(call, UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(fake.seen).toHaveLength(1);
  });
});

describe('connection failures and retries', () => {
  it.each(GETS)('a reset %s → UPSTREAM_UNAVAILABLE after 1 + 2 retries', async (_, call) => {
    const fake = await fakeUpstream(reset);
    await failure(call(upstreamFor(fake)), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(fake.seen).toHaveLength(3);
    expect(new Set(fake.seen.map((request) => request.method))).toEqual(new Set(['GET']));
  });

  it.each(POSTS)('a reset %s → UPSTREAM_UNAVAILABLE, sent exactly once', async (_, call) => {
    const fake = await fakeUpstream(reset);
    await failure(call(upstreamFor(fake)), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(fake.seen).toHaveLength(1);
    expect(fake.seen[0]!.method).toBe('POST');
  });

  it('a reset GET followed by a good answer succeeds on the retry', async () => {
    const fake = await fakeUpstream((req, res, n) =>
      n === 1 ? reset(req, res, n) : json(res, 200, { data: DELIVERY }),
    );
    await expect(upstreamFor(fake).platform.get(KEY, UID)).resolves.toMatchObject({ uid: UID });
    expect(fake.seen).toHaveLength(2);
  });

  it('nothing listening → UPSTREAM_UNAVAILABLE', async () => {
    const fake = await fakeUpstream(hang);
    const server = servers.pop()!;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await failure(upstreamFor(fake).platform.get(KEY, UID), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    await failure(upstreamFor(fake).platform.create(KEY, REQUEST), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
  });

  it.each([502, 503, 504])('%i on every GET → retried twice, then UPSTREAM_UNAVAILABLE', async (status) => {
    const fake = await fakeUpstream(always(status, { code: 'unavailable', message: 'Try later.' }));
    const { platform, records } = handBuilt(fake);
    const error = await failure(platform.get(KEY, UID), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(error.message).toContain(String(status));
    expect(fake.seen).toHaveLength(3);
    expect(records).toHaveLength(1);
    expect(records[0]).toMatchObject({
      method: 'GET',
      route: '/{platform}/deliveries/{uid}',
      status,
      outcome: 'UPSTREAM_UNAVAILABLE',
      attempts: 3,
    });
  });

  it.each([502, 503, 504])('%i once, then 200 → success after one retry', async (status) => {
    const fake = await fakeUpstream((_req, res, n) =>
      n === 1 ? json(res, status, { code: 'unavailable', message: 'Try later.' }) : json(res, 200, { data: DELIVERY }),
    );
    const { partner, records } = handBuilt(fake);
    await expect(partner.getOrder(KEY, UID)).resolves.toEqual(DELIVERY);
    expect(fake.seen).toHaveLength(2);
    expect(records[0]).toMatchObject({ outcome: 'ok', status: 200, attempts: 2 });
  });

  it('503 with an HTML body on a GET is retried the same way', async () => {
    const fake = await fakeUpstream((_req, res) =>
      res.writeHead(503, { 'content-type': 'text/html' }).end('<h1>Service Unavailable</h1>'),
    );
    await failure(upstreamFor(fake).platform.availability(KEY), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(fake.seen).toHaveLength(3);
  });

  it.each(POSTS)('503 on %s → UPSTREAM_UNAVAILABLE, sent exactly once', async (_, call) => {
    const fake = await fakeUpstream(always(503, { code: 'unavailable', message: 'Try later.' }));
    await failure(call(upstreamFor(fake)), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(fake.seen).toHaveLength(1);
  });

  it('500 on a GET → UPSTREAM_UNAVAILABLE, not retried (only 502/503/504 and 429 are)', async () => {
    const fake = await fakeUpstream(always(500, { code: 'server_error', message: 'Boom.' }));
    const error = await failure(
      upstreamFor(fake).platform.get(KEY, UID),
      UpstreamUnavailableError,
      'UPSTREAM_UNAVAILABLE',
    );
    expect(error.message).not.toContain('Boom');
    expect(fake.seen).toHaveLength(1);
  });

  it('429 on a GET is retried like 503', async () => {
    const fake = await fakeUpstream((_req, res, n) =>
      n === 1
        ? json(res, 429, { code: 'rate_limited', message: 'Slow down.' })
        : json(res, 200, { service: 'lastmile', available: true }),
    );
    const { platform } = handBuilt(fake);
    await expect(platform.availability(KEY)).resolves.toEqual({ service: 'lastmile', available: true });
    expect(fake.seen).toHaveLength(2);
  });

  it('Retry-After is honoured between attempts', async () => {
    const fake = await fakeUpstream((_req, res, n) =>
      n === 1
        ? json(res, 503, { code: 'unavailable', message: 'busy' }, { 'retry-after': '1' })
        : json(res, 200, { data: DELIVERY }),
    );
    const { platform } = handBuilt(fake, { timeoutMs: 3000 });
    await expect(platform.get(KEY, UID)).resolves.toEqual(DELIVERY);
    expect(fake.seen).toHaveLength(2);
    expect(fake.seen[1]!.at - fake.seen[0]!.at).toBeGreaterThanOrEqual(950);
  });

  it('a Retry-After beyond the budget ends the call at once, with the wait in the error', async () => {
    const fake = await fakeUpstream(
      always(429, { code: 'rate_limited', message: 'Slow down.' }, { 'retry-after': '30' }),
    );
    // Both the wait (30 s) and the budget (20 s) are longer than the test may run: only ending at once passes.
    const { platform } = handBuilt(fake, { timeoutMs: 20_000 });
    const shorter = await budgetOf(5_000);
    const call = platform.get(KEY, UID);
    expect(await firstSettled({ call, shorter: shorter() })).toBe('call');
    const error = await failure(call, UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(error.retryAfterSeconds).toBe(30);
    expect(fake.seen).toHaveLength(1);
  });

  it('no retry starts when its gap would not fit in the budget', async () => {
    const fake = await fakeUpstream(always(503, { code: 'unavailable', message: 'busy' }));
    // A first gap of 5 to 15 s in a 3 s budget: the call ends at once, well before half its budget.
    const { platform } = handBuilt(fake, { timeoutMs: 3000, retryBaseMs: 10_000 });
    const half = await budgetOf(1500);
    const call = platform.get(KEY, UID);
    expect(await firstSettled({ call, half: half() })).toBe('call');
    await failure(call, UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(fake.seen).toHaveLength(1);
  });
});

describe('answers the facade does not understand', () => {
  it('a non-JSON 200 body → UPSTREAM_ERROR, not retried', async () => {
    const fake = await fakeUpstream((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('OK'));
    await failure(upstreamFor(fake).platform.get(KEY, UID), UpstreamProtocolError, 'UPSTREAM_ERROR');
    expect(fake.seen).toHaveLength(1);
  });

  it.each([
    ['a string', '"ok"'],
    ['a number', '42'],
    ['null', 'null'],
    ['empty', ''],
  ])('a 200 body that is %s → UPSTREAM_ERROR', async (_, text) => {
    const fake = await fakeUpstream((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(text),
    );
    await failure(upstreamFor(fake).platform.quote(KEY, REQUEST), UpstreamProtocolError, 'UPSTREAM_ERROR');
  });

  it('a read without data.uid → UPSTREAM_ERROR', async () => {
    const fake = await fakeUpstream(always(200, { uid: UID, status: 'DROPOFF_COMPLETE' }));
    const upstream = upstreamFor(fake);
    await failure(upstream.platform.get(KEY, UID), UpstreamProtocolError, 'UPSTREAM_ERROR');
    await failure(upstream.partner.getOrder(KEY, UID), UpstreamProtocolError, 'UPSTREAM_ERROR');
  });

  it('a body over maxResponseBytes (Content-Length) → UPSTREAM_ERROR, not retried', async () => {
    const fake = await fakeUpstream(always(200, { data: { ...DELIVERY, filler: 'x'.repeat(4096) } }));
    const upstream = upstreamFor(fake, { maxResponseBytes: 1024 });
    await failure(upstream.platform.get(KEY, UID), UpstreamProtocolError, 'UPSTREAM_ERROR');
    expect(fake.seen).toHaveLength(1);
    // Dropping the unread body must not leave an unheard 'error' behind (an uncaught exception in the facade):
    // once the client is closed, its sockets are gone and anything they had to say was said, inside this test.
    await clients.splice(clients.indexOf(upstream), 1)[0]!.close();
  });

  it('a chunked body growing over maxResponseBytes → UPSTREAM_ERROR', async () => {
    const fake = await fakeUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"data":{"filler":"');
      let sent = 0;
      const timer = setInterval(() => {
        sent += 1;
        if (sent > 50) return void clearInterval(timer);
        res.write('x'.repeat(512));
      }, 2);
      timers.push(timer);
    });
    await failure(
      upstreamFor(fake, { maxResponseBytes: 2048 }).platform.get(KEY, UID),
      UpstreamProtocolError,
      'UPSTREAM_ERROR',
    );
    expect(fake.seen).toHaveLength(1);
  });

  it('a body of exactly maxResponseBytes is accepted', async () => {
    const base = JSON.stringify({ data: { ...DELIVERY, filler: '' } });
    const body = JSON.stringify({ data: { ...DELIVERY, filler: 'x'.repeat(1024 - base.length) } });
    expect(body.length).toBe(1024);
    const fake = await fakeUpstream((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end(body),
    );
    await expect(upstreamFor(fake, { maxResponseBytes: 1024 }).platform.get(KEY, UID)).resolves.toMatchObject({
      uid: UID,
    });
  });

  it('a truncated body (Content-Length larger than sent, then the socket ends) → UPSTREAM_UNAVAILABLE', async () => {
    const fake = await fakeUpstream((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
      res.write('{"data":{"uid":"', () => req.socket.end());
    });
    const error = await failure(upstreamFor(fake).platform.get(KEY, UID), DeliveryGraphError, 'UPSTREAM_UNAVAILABLE');
    expect(error).toBeInstanceOf(UpstreamUnavailableError);
    // A dropped connection counts as a connection failure, so the GET is retried.
    expect(fake.seen).toHaveLength(3);
  });

  it('a truncated body on a POST → UPSTREAM_UNAVAILABLE, sent once', async () => {
    const fake = await fakeUpstream((req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '500' });
      res.write('{"uid":"', () => req.socket.end());
    });
    await failure(upstreamFor(fake).platform.create(KEY, REQUEST), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    expect(fake.seen).toHaveLength(1);
  });
});

describe('the wire', () => {
  it('platform calls: paths, bearer key unchanged, JSON bodies', async () => {
    const fake = await fakeUpstream((req, res) => {
      if (req.url?.endsWith('/quote'))
        return json(res, 200, {
          message: 'ok',
          data: { price: { delivery_fee: 12.5, tip: 2.5, currency: 'USD' }, distance: 13.6 },
        });
      if (req.url?.endsWith('/cancel'))
        return json(res, 200, {
          message: 'ok',
          uid: UID,
          data: { status: 'Canceled', cancellation_fee: { amount: '0.00', currency: 'USD' } },
        });
      if (req.url?.endsWith('/availability')) return json(res, 200, { service: 'lastmile', available: true });
      if (req.method === 'POST') return json(res, 201, { uid: UID, tracking_link: DELIVERY.tracking_link });
      return json(res, 200, { data: DELIVERY });
    });
    const { platform } = upstreamFor(fake);
    await platform.quote(KEY, REQUEST);
    await platform.create(KEY, REQUEST);
    await platform.get(KEY, UID);
    await platform.cancel(KEY, UID);
    await platform.availability(KEY);

    expect(fake.seen.map((request) => `${request.method} ${request.url}`)).toEqual([
      `POST /api/v1/${PLATFORM}/quote`,
      `POST /api/v1/${PLATFORM}/deliveries`,
      `GET /api/v1/${PLATFORM}/deliveries/${UID}`,
      `POST /api/v1/${PLATFORM}/deliveries/${UID}/cancel`,
      `GET /api/v1/${PLATFORM}/availability`,
    ]);
    for (const request of fake.seen) expect(request.headers.authorization).toBe(`Bearer ${KEY}`);
    for (const request of fake.seen.slice(0, 2)) {
      expect(request.headers['content-type']).toMatch(/^application\/json\b/);
      expect(JSON.parse(request.body)).toEqual(REQUEST);
    }
    // cancel has no body
    expect(fake.seen[3]!.body).toBe('');
    expect(fake.seen[3]!.headers['content-type']).toBeUndefined();
  });

  it('partner calls: paths directly under /api/v1, the reference URL-encoded', async () => {
    const fake = await fakeUpstream((req, res) => {
      if (req.url?.endsWith('/quote'))
        return json(res, 200, {
          message: 'ok',
          data: { price: { delivery_fee: 9, tip: 0, currency: 'EUR' }, distance: 2 },
        });
      if (req.url?.endsWith('/cancel'))
        return json(res, 200, {
          message: 'ok',
          uid: UID,
          data: { status: 'Canceled', partner_reference: 'r', cancelation_fee: { value: 0, currency: 'EUR' } },
        });
      if (req.url?.endsWith('/availability')) return json(res, 200, { service: 'lastmile', available: false });
      return json(res, 200, { data: { ...DELIVERY, partner_reference: 'ref/2024 #1?x=ü&y' } });
    });
    const { partner } = upstreamFor(fake);
    const body = { ...REQUEST, currency: 'EUR', partner_reference: 'ref/2024 #1?x=ü&y' };
    await partner.quote(KEY, body);
    await partner.getOrder(KEY, UID);
    await partner.getOrderByReference(KEY, 'ref/2024 #1?x=ü&y');
    await partner.cancel(KEY, UID);
    await expect(partner.availability(KEY)).resolves.toEqual({ service: 'lastmile', available: false });

    expect(fake.seen.map((request) => `${request.method} ${request.url}`)).toEqual([
      'POST /api/v1/quote',
      `GET /api/v1/orders/${UID}`,
      'GET /api/v1/orders/partner/ref%2F2024%20%231%3Fx%3D%C3%BC%26y',
      `POST /api/v1/orders/${UID}/cancel`,
      'GET /api/v1/availability',
    ]);
    for (const request of fake.seen) expect(request.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(fake.seen[0]!.headers['content-type']).toMatch(/^application\/json\b/);
    expect(JSON.parse(fake.seen[0]!.body)).toEqual(body);
  });

  it('a uid that is not one plain path segment is refused by every call that takes one, before any request', async () => {
    const fake = await fakeUpstream(always(200, { data: DELIVERY }));
    const { platform, partner } = upstreamFor(fake);
    for (const uid of ['..', '.', '../../other/deliveries/x?y=1#z', 'a\\b', 'a b', 'x'.repeat(65)]) {
      for (const call of [
        () => platform.get(KEY, uid),
        () => platform.cancel(KEY, uid),
        () => partner.getOrder(KEY, uid),
        () => partner.cancel(KEY, uid),
      ]) {
        const error = await failure(call(), BadUserInputError, 'BAD_USER_INPUT');
        expect(error.message).toMatch(/^uid /);
      }
    }
    for (const reference of ['..', '.', 'a\u0000b', 'r'.repeat(201)]) {
      const error = await failure(partner.getOrderByReference(KEY, reference), BadUserInputError, 'BAD_USER_INPUT');
      expect(error.message).toMatch(/^partnerReference /);
    }
    expect(fake.seen).toEqual([]);
  });

  it('a base URL with a trailing slash gives the same paths', async () => {
    const fake = await fakeUpstream(always(200, { data: DELIVERY }));
    const upstream = upstreamFor({ ...fake, base: `${fake.base}/` });
    await upstream.platform.get(KEY, UID);
    expect(fake.seen[0]!.url).toBe(`/api/v1/${PLATFORM}/deliveries/${UID}`);
  });

  it('each call forwards its own key', async () => {
    const fake = await fakeUpstream(always(200, { data: DELIVERY }));
    const { platform } = upstreamFor(fake);
    await Promise.all([platform.get('merchant-a', UID), platform.get('merchant-b', UID), platform.get(KEY, UID)]);
    expect(fake.seen.map((request) => request.headers.authorization).sort()).toEqual(
      [`Bearer ${KEY}`, 'Bearer merchant-a', 'Bearer merchant-b'].sort(),
    );
  });

  it('any 2xx is success', async () => {
    const fake = await fakeUpstream(always(202, { data: DELIVERY }));
    await expect(upstreamFor(fake).platform.get(KEY, UID)).resolves.toEqual(DELIVERY);
  });

  it('the call records name the route and never the key', async () => {
    const fake = await fakeUpstream((_req, res, n) =>
      n === 1
        ? json(res, 200, { data: DELIVERY })
        : json(res, 401, { code: 'invalid_api_key', message: `bad key ${KEY}` }),
    );
    const { platform, records } = handBuilt(fake);
    await platform.get(KEY, UID);
    await failure(platform.cancel(KEY, UID), UnauthenticatedError, 'UNAUTHENTICATED');
    expect(records.map((record) => [record.route, record.outcome, record.status])).toEqual([
      ['/{platform}/deliveries/{uid}', 'ok', 200],
      ['/{platform}/deliveries/{uid}/cancel', 'UNAUTHENTICATED', 401],
    ]);
    expect(JSON.stringify(records)).not.toContain(KEY);
    expect(JSON.stringify(records)).not.toContain(UID);
  });
});

describe('the create response', () => {
  it('reads {uid, tracking_link} from the top level', async () => {
    const fake = await fakeUpstream(always(201, { uid: UID, tracking_link: 'https://track.example.com/top' }));
    await expect(upstreamFor(fake).platform.create(KEY, REQUEST)).resolves.toEqual({
      uid: UID,
      trackingLink: 'https://track.example.com/top',
    });
  });

  it('reads {data: {uid, tracking_link}}', async () => {
    const fake = await fakeUpstream(
      always(200, {
        message: 'created',
        data: { uid: UID, tracking_link: 'https://track.example.com/data', status: 'CREATED' },
      }),
    );
    await expect(upstreamFor(fake).platform.create(KEY, REQUEST)).resolves.toEqual({
      uid: UID,
      trackingLink: 'https://track.example.com/data',
    });
  });

  it('takes each field from wherever it is', async () => {
    const fake = await fakeUpstream(
      always(200, { uid: UID, data: { tracking_link: 'https://track.example.com/mixed' } }),
    );
    await expect(upstreamFor(fake).platform.create(KEY, REQUEST)).resolves.toEqual({
      uid: UID,
      trackingLink: 'https://track.example.com/mixed',
    });
  });

  it('a uid without a tracking link is still a delivery', async () => {
    const fake = await fakeUpstream(always(201, { uid: UID, tracking_link: null }));
    await expect(upstreamFor(fake).platform.create(KEY, REQUEST)).resolves.toEqual({
      uid: UID,
      trackingLink: undefined,
    });
  });

  it.each([
    ['neither place', { message: 'created', tracking_link: 'https://track.example.com/x' }],
    ['an empty uid', { uid: '', data: { uid: '' } }],
    ['a non-string uid', { uid: 17 }],
    ['data that is not an object', { data: 'created' }],
  ])('a uid in %s → UPSTREAM_ERROR', async (_, body) => {
    const fake = await fakeUpstream(always(201, body));
    await failure(upstreamFor(fake).platform.create(KEY, REQUEST), UpstreamProtocolError, 'UPSTREAM_ERROR');
    expect(fake.seen).toHaveLength(1);
  });
});

describe('no error carries the key', () => {
  it('not even when the upstream echoes it in an auth error', async () => {
    const fake = await fakeUpstream(always(401, { code: 'invalid_api_key', message: `The key ${KEY} is not valid.` }));
    const error = await failure(upstreamFor(fake).platform.get(KEY, UID), UnauthenticatedError, 'UNAUTHENTICATED');
    expect(error.message).not.toContain('is not valid');
  });

  it('not even when it echoes it in a 5xx or not-found body', async () => {
    const fake = await fakeUpstream((_req, res, n) =>
      json(res, n === 1 ? 500 : 404, { code: n === 1 ? 'server_error' : 'not_found', message: `key=${KEY}` }),
    );
    const upstream = upstreamFor(fake);
    await failure(upstream.platform.cancel(KEY, UID), UpstreamUnavailableError, 'UPSTREAM_UNAVAILABLE');
    await failure(upstream.platform.cancel(KEY, UID), NotFoundError, 'NOT_FOUND');
  });

  it('a key that cannot be a header value never reaches the wire and is not repeated', async () => {
    const fake = await fakeUpstream(always(200, { data: DELIVERY }));
    const badKey = `${KEY}\r\nx-injected: 1`;
    const error: unknown = await upstreamFor(fake)
      .platform.get(badKey, UID)
      .then(
        () => {
          throw new Error('a key with CRLF was sent');
        },
        (rejection: unknown) => rejection,
      );
    // Refused before undici sees it (undici would keep a pool slot); the code reports that as UPSTREAM_ERROR.
    expect(error).toBeInstanceOf(UpstreamProtocolError);
    expect((error as DeliveryGraphError).code).toBe('UPSTREAM_ERROR');
    expectNoKey(error);
    expect(fake.seen).toHaveLength(0);
  });
});
