// The webhook receiver over real HTTP, as the upstream (or an attacker) sees
// it: tokens signed in the test with a key the facade was told to trust, every
// forged class answered 401 with nothing stored, payload and body errors,
// de-duplication, milestone ordering, and a failing store never acknowledged.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import {
  exportPKCS8,
  exportSPKI,
  generateKeyPair,
  SignJWT,
  type CryptoKey,
  type JWTPayload,
  type KeyObject,
} from 'jose';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { callerCursors } from '../../src/domain/cursor.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { EventInput, Store } from '../../src/store/store.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

const CREATE = /* GraphQL */ `
  mutation Create($input: DeliveryInput!) {
    createDelivery(input: $input) {
      __typename
      ... on MutationCreateDeliverySuccess {
        data {
          uid
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;

const EVENTS = /* GraphQL */ `
  query Events($uid: ID!) {
    delivery(uid: $uid) {
      uid
      events {
        edges {
          cursor
          node {
            name
            cursor
            stale
            uid
          }
        }
      }
    }
  }
`;

type SigningKey = CryptoKey | KeyObject | Uint8Array;
type Event = Record<string, unknown> & { uid?: string; event_name?: string };

interface SignOptions {
  issuer?: string;
  /** Unix seconds; null: no exp claim at all. Default: five minutes from now. */
  exp?: number | null;
  key?: SigningKey;
  alg?: string;
}

interface Posted {
  status: number;
  text: string;
  body: any;
  headers: Headers;
}

const now = () => Math.floor(Date.now() / 1000);
const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');

let stack: Stack;
let privateKey: CryptoKey;
let privateKeyPem: string;
let publicKeyPem: string;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey;
  privateKeyPem = await exportPKCS8(pair.privateKey);
  publicKeyPem = await exportSPKI(pair.publicKey);
  stack = await startStack({ sandbox: { privateKeyPem } });
  // Every event in this file is signed by the test itself: the sandbox's own
  // webhooks (delivery.created on booking) would race with them.
  stack.sandbox.setWebhookUrl(undefined);
});
afterAll(async () => {
  await stack?.stop();
});

function sign(payload: Event, options: SignOptions = {}): Promise<string> {
  const jwt = new SignJWT({ payload })
    .setProtectedHeader({ alg: options.alg ?? 'RS256', typ: 'JWT' })
    .setIssuedAt()
    .setIssuer(options.issuer ?? stack.sandbox.issuer);
  const exp = options.exp === undefined ? now() + 300 : options.exp;
  if (exp !== null) jwt.setExpirationTime(exp);
  return jwt.sign(options.key ?? privateKey);
}

async function post(
  url: string,
  options: {
    authorization?: string | null;
    body?: string | Uint8Array<ArrayBuffer>;
    contentType?: string | null;
    method?: string;
  } = {},
): Promise<Posted> {
  const headers: Record<string, string> = {};
  const contentType = options.contentType === undefined ? 'application/json' : options.contentType;
  if (contentType !== null) headers['content-type'] = contentType;
  if (options.authorization != null) headers.authorization = options.authorization;
  const response = await fetch(`${url}/webhooks`, { method: options.method ?? 'POST', headers, body: options.body });
  const text = await response.text();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  return { status: response.status, text, body, headers: response.headers };
}

/** POSTs `event` signed (unless a token is given) with the body the upstream sends: the event as JSON. */
async function send(event: Event, options: SignOptions & { token?: string; url?: string } = {}): Promise<Posted> {
  const token = options.token ?? (await sign(event, options));
  return post(options.url ?? stack.app.url, { authorization: `Bearer ${token}`, body: JSON.stringify(event) });
}

function event(uid: string, eventName: string, extra: Record<string, unknown> = {}): Event {
  return {
    uid,
    event_name: eventName,
    status: eventName.replace(/^\w+\./, '').replace(/_/g, ' '),
    platform_payload: { orderId: 'A-1' },
    price: null,
    ...extra,
  };
}

async function book(): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput() });
  expect(result.errors).toBeUndefined();
  expect(result.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
  return result.data.createDelivery.data.uid as string;
}

/**
 * The delivery's events as a merchant reads them through GraphQL, each with the
 * log position its opaque cursor stands for: what the receiver answered the upstream.
 */
async function eventsOf(uid: string): Promise<Array<{ name: string; cursor: string; stale: boolean; uid: string }>> {
  const result = await stack.gql(EVENTS, { uid });
  expect(result.errors).toBeUndefined();
  expect(result.data.delivery?.uid).toBe(uid);
  const edges = result.data.delivery.events.edges as Array<{
    cursor: string;
    node: { name: string; cursor: string; stale: boolean; uid: string };
  }>;
  const cursors = await callerCursors(stack.app.services.store, await stack.app.services.merchants.of(stack.key));
  return edges.map((edge) => {
    expect(edge.node.cursor).toBe(edge.cursor);
    expect(edge.cursor).not.toMatch(/^\d+$/);
    return { ...edge.node, cursor: String(cursors.seqOf(edge.cursor)) };
  });
}

const lastSeq = () => stack.app.services.store.lastSeq();

/** Runs `request` and checks it left the event log, and the delivery's events, as they were. */
async function expectNothingStored(uid: string, request: () => Promise<Posted>): Promise<Posted> {
  const seq = await lastSeq();
  const before = await eventsOf(uid);
  const response = await request();
  expect(await lastSeq()).toBe(seq);
  expect(await eventsOf(uid)).toEqual(before);
  return response;
}

describe('a valid event', () => {
  let uid: string;
  beforeAll(async () => {
    uid = await book();
  });

  it('is stored and answered 200 with its cursor; the same event again is a duplicate stored once', async () => {
    expect(await eventsOf(uid)).toEqual([]);
    const created = event(uid, 'delivery.created');
    const token = await sign(created);

    const first = await send(created, { token });
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toMatch(/^application\/json/);
    expect(first.body).toEqual({ status: 'stored', cursor: expect.stringMatching(/^\d+$/), stale: false });

    // The very same request (a retry of the upstream)...
    const again = await send(created, { token });
    expect(again.status).toBe(200);
    expect(again.body).toMatchObject({ status: 'duplicate', cursor: first.body.cursor });
    // ...and the same event signed anew, with its keys in another order.
    const reordered = Object.fromEntries(Object.entries(created).reverse()) as Event;
    const resigned = await send(reordered);
    expect(resigned.status).toBe(200);
    expect(resigned.body).toMatchObject({ status: 'duplicate', cursor: first.body.cursor });

    expect(await eventsOf(uid)).toEqual([{ uid, name: 'delivery.created', cursor: first.body.cursor, stale: false }]);
  });

  it('is a new event when its payload differs, even with the same uid and name', async () => {
    const before = await eventsOf(uid);
    const moved = await send(event(uid, 'location.assigned_driver', { driver_location: { lat: 40.1, lng: -73.9 } }));
    const movedOn = await send(event(uid, 'location.assigned_driver', { driver_location: { lat: 40.2, lng: -73.8 } }));
    expect([moved.body.status, movedOn.body.status]).toEqual(['stored', 'stored']);
    expect(Number(movedOn.body.cursor)).toBeGreaterThan(Number(moved.body.cursor));
    expect(await eventsOf(uid)).toHaveLength(before.length + 2);
  });

  it.each([
    ['application/json; charset=utf-8', 'application/json; charset=utf-8'],
    ['no content-type at all', null],
  ])('is accepted with %s', async (_label, contentType) => {
    const fresh = await book();
    const created = event(fresh, 'delivery.created');
    const token = await sign(created);
    // A Uint8Array body: fetch adds no content-type of its own.
    const response = await post(stack.app.url, {
      authorization: `Bearer ${token}`,
      body: new TextEncoder().encode(JSON.stringify(created)),
      contentType,
    });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ status: 'stored', stale: false });
    expect((await eventsOf(fresh)).map((e) => e.name)).toEqual(['delivery.created']);
  });
});

describe('forged or unverifiable requests', () => {
  let uid: string;
  let otherPrivateKey: CryptoKey;

  beforeAll(async () => {
    uid = await book();
    ({ privateKey: otherPrivateKey } = await generateKeyPair('RS256'));
    // One genuine event first, so "unchanged" is not trivially "empty".
    expect((await send(event(uid, 'delivery.created'))).status).toBe(200);
    expect(await eventsOf(uid)).toHaveLength(1);
  });

  const forgeries: Array<[string, (e: Event) => Promise<string | null>]> = [
    [
      'a tampered payload segment (bad signature)',
      async (e) => {
        const [header, , signature] = (await sign({ ...e, event_name: 'delivery.created' })).split('.');
        return `${header}.${b64url({ payload: e, iss: stack.sandbox.issuer, exp: now() + 300 })}.${signature}`;
      },
    ],
    [
      'a token whose signature bytes were flipped',
      async (e) => {
        const token = await sign(e);
        const [header, payload, signature] = token.split('.') as [string, string, string];
        const bytes = Buffer.from(signature, 'base64url');
        bytes[0] = bytes[0]! ^ 0xff;
        return `${header}.${payload}.${bytes.toString('base64url')}`;
      },
    ],
    ['a token signed by another RSA key', (e) => sign(e, { key: otherPrivateKey })],
    [
      'HS256 with the public key PEM as the HMAC secret',
      (e) => sign(e, { alg: 'HS256', key: new TextEncoder().encode(publicKeyPem) }),
    ],
    [
      'alg none (unsecured JWT)',
      async (e) => `${b64url({ alg: 'none' })}.${b64url({ payload: e, iss: stack.sandbox.issuer, exp: now() + 300 })}.`,
    ],
    [
      'alg none with typ JWT and a leftover signature',
      async (e) => {
        const signature = (await sign(e)).split('.')[2];
        return `${b64url({ alg: 'none', typ: 'JWT' })}.${b64url({ payload: e, iss: stack.sandbox.issuer, exp: now() + 300 })}.${signature}`;
      },
    ],
    ['no exp claim', (e) => sign(e, { exp: null })],
    [
      'an exp that is not a number',
      (e) =>
        new SignJWT({ payload: e, exp: String(now() + 300) } as unknown as JWTPayload)
          .setProtectedHeader({ alg: 'RS256' })
          .setIssuer(stack.sandbox.issuer)
          .sign(privateKey),
    ],
    ['expired two minutes ago', (e) => sign(e, { exp: now() - 120 })],
    ['expired an hour ago', (e) => sign(e, { exp: now() - 3600 })],
    ['a wrong iss', (e) => sign(e, { issuer: 'someone-else' })],
    ['an upper-cased iss', (e) => sign(e, { issuer: stack.sandbox.issuer.toUpperCase() })],
    ['an iss with trailing space', (e) => sign(e, { issuer: `${stack.sandbox.issuer} ` })],
  ];

  it.each(forgeries)('refuses %s with 401 and stores nothing', async (_label, forge) => {
    const forged = event(uid, 'delivery.pickup_complete', { status: 'Picked Up' });
    const token = (await forge(forged))!;
    const response = await expectNothingStored(uid, () => send(forged, { token }));
    expect(response.status).toBe(401);
    expect(response.body).toMatchObject({ error: 'invalid_token' });
    // Nothing of the token comes back.
    for (const part of token.split('.').filter((p) => p.length > 8)) expect(response.text).not.toContain(part);
    expect(response.text).not.toContain(token);
  });

  it.each([
    ['a malformed JWT', 'Bearer abc.def'],
    ['a bearer of garbage', 'Bearer !!not a token!!'],
    ['an empty bearer', 'Bearer '],
    ['a Basic scheme', `Basic ${Buffer.from('lastmile:secret').toString('base64')}`],
    ['a lowercase scheme with nothing else', 'bearer'],
  ])('refuses %s with 401 and stores nothing', async (_label, authorization) => {
    const response = await expectNothingStored(uid, () =>
      post(stack.app.url, { authorization, body: JSON.stringify(event(uid, 'delivery.pickup_complete')) }),
    );
    expect(response.status).toBe(401);
    expect(response.text).not.toContain(authorization.replace(/^\w+ /, '') || authorization);
  });

  it('refuses a request without an Authorization header with 401 and stores nothing', async () => {
    const response = await expectNothingStored(uid, () =>
      post(stack.app.url, { authorization: null, body: JSON.stringify(event(uid, 'delivery.pickup_complete')) }),
    );
    expect(response.status).toBe(401);
  });

  it('refuses a genuine token sent under the Basic scheme', async () => {
    const forged = event(uid, 'delivery.pickup_complete');
    const token = await sign(forged);
    const response = await expectNothingStored(uid, () =>
      post(stack.app.url, { authorization: `Basic ${token}`, body: JSON.stringify(forged) }),
    );
    expect(response.status).toBe(401);
    expect(response.text).not.toContain(token.split('.')[2]);
  });

  it('stores the signed claim, never the unsigned body', async () => {
    const signed = event(uid, 'delivery.assigned', { driver_name: 'Signed Driver' });
    const token = await sign(signed);
    const before = await eventsOf(uid);
    const response = await post(stack.app.url, {
      authorization: `Bearer ${token}`,
      body: JSON.stringify(event(uid, 'delivery.dropoff_complete', { driver_name: 'Unsigned Driver' })),
    });
    expect(response.status).toBe(200);
    expect((await eventsOf(uid)).map((e) => e.name)).toEqual([...before.map((e) => e.name), 'delivery.assigned']);
    const stored = await stack.app.services.store.eventsAfter(Number(response.body.cursor) - 1, 1);
    expect(stored[0]!.payload).toEqual(signed);
  });
});

describe('bad payloads and bodies', () => {
  let uid: string;
  beforeAll(async () => {
    uid = await book();
  });

  it.each([
    ['no uid', (_u: string) => ({ event_name: 'delivery.created', status: 'created' }) as Event],
    ['no event_name', (u: string) => ({ uid: u, status: 'created' }) as Event],
    ['an empty uid', (_u: string) => ({ uid: '', event_name: 'delivery.created' }) as Event],
    ['a numeric uid', (u: string) => ({ uid: 42, event_name: 'delivery.created', note: u }) as unknown as Event],
    [
      'an event_name that is not a string',
      (u: string) => ({ uid: u, event_name: ['delivery.created'] }) as unknown as Event,
    ],
  ])('answers 400 to a signed payload with %s and stores nothing', async (_label, make) => {
    const payload = make(uid);
    const response = await expectNothingStored(uid, () => send(payload));
    expect(response.status).toBe(400);
  });

  it.each([
    ['a string', 'delivery.created'],
    ['an array', [{ uid: 'x', event_name: 'delivery.created' }]],
    ['null', null],
  ])('answers 400 when the payload claim is %s', async (_label, claim) => {
    const token = await new SignJWT({ payload: claim })
      .setProtectedHeader({ alg: 'RS256' })
      .setIssuer(stack.sandbox.issuer)
      .setExpirationTime(now() + 300)
      .sign(privateKey);
    const response = await expectNothingStored(uid, () =>
      post(stack.app.url, { authorization: `Bearer ${token}`, body: JSON.stringify(claim) }),
    );
    expect(response.status).toBe(400);
  });

  it('answers 400 to a body that is not JSON, even with a valid token, and stores nothing', async () => {
    const token = await sign(event(uid, 'delivery.created'));
    const response = await expectNothingStored(uid, () =>
      post(stack.app.url, { authorization: `Bearer ${token}`, body: '{"uid": "half an object' }),
    );
    expect(response.status).toBe(400);
  });

  it('answers 413 to a body over 1 MiB and stores nothing', async () => {
    const big = event(uid, 'delivery.created', { padding: 'x'.repeat(1024 * 1024) });
    const token = await sign(event(uid, 'delivery.created'));
    const response = await expectNothingStored(uid, () =>
      post(stack.app.url, { authorization: `Bearer ${token}`, body: JSON.stringify(big) }),
    );
    expect(response.status).toBe(413);
  });

  it('answers 413 to a chunked body over 1 MiB, and the connection does not hang the next request', async () => {
    // One keep-alive connection, so the follow-up goes wherever the oversized body went.
    const agent = new Agent({ connections: 1 });
    try {
      const chunk = new Uint8Array(64 * 1024).fill(0x20);
      let chunks = 0;
      // No content-length: the receiver only learns the size by reading.
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (chunks++ === 24) controller.close();
          else controller.enqueue(chunk);
        },
      });
      const big = await expectNothingStored(uid, async () => {
        const response = await undiciFetch(`${stack.app.url}/webhooks`, {
          method: 'POST',
          headers: {
            authorization: `Bearer ${await sign(event(uid, 'delivery.created'))}`,
            'content-type': 'application/json',
          },
          body,
          duplex: 'half',
          dispatcher: agent,
          signal: AbortSignal.timeout(5_000),
        });
        return {
          status: response.status,
          text: await response.text(),
          body: undefined,
          headers: response.headers as unknown as Headers,
        };
      });
      expect(big.status).toBe(413);

      const next = event(uid, 'location.assigned_driver', { driver_location: { lat: 5, lng: 6 }, note: 'after a 413' });
      const response = await undiciFetch(`${stack.app.url}/webhooks`, {
        method: 'POST',
        headers: { authorization: `Bearer ${await sign(next)}`, 'content-type': 'application/json' },
        body: JSON.stringify(next),
        dispatcher: agent,
        signal: AbortSignal.timeout(5_000),
      });
      expect(response.status).toBe(200);
      expect(await response.json()).toMatchObject({ status: 'stored' });
    } finally {
      await agent.destroy();
    }
  });

  it('accepts a body just under 1 MiB', async () => {
    const created = event(uid, 'location.assigned_driver', {
      driver_location: { lat: 3, lng: 4 },
      note: 'just under the cap',
    });
    const token = await sign(created);
    const json = JSON.stringify(created);
    const body = `${json}${' '.repeat(1024 * 1024 - Buffer.byteLength(json))}`;
    expect(Buffer.byteLength(body)).toBe(1024 * 1024);
    const before = await eventsOf(uid);
    const response = await post(stack.app.url, { authorization: `Bearer ${token}`, body });
    expect(response.status).toBe(200);
    expect(response.body).toMatchObject({ status: 'stored' });
    expect((await eventsOf(uid)).map((e) => e.cursor)).toEqual([...before.map((e) => e.cursor), response.body.cursor]);
  });

  it.each(['GET', 'PUT', 'DELETE'])('answers 405 to %s with Allow: POST', async (method) => {
    const token = await sign(event(uid, 'delivery.assigned'));
    const response = await expectNothingStored(uid, () =>
      post(stack.app.url, {
        method,
        authorization: `Bearer ${token}`,
        body: method === 'GET' ? undefined : JSON.stringify(event(uid, 'delivery.assigned')),
      }),
    );
    expect(response.status).toBe(405);
    expect(response.headers.get('allow')).toBe('POST');
  });
});

describe('out-of-order events', () => {
  it('stores an event below the current milestone as stale, and everything after a terminal one', async () => {
    const uid = await book();
    const pickedUp = await send(event(uid, 'delivery.pickup_complete', { status: 'Picked Up' }));
    expect(pickedUp.body).toMatchObject({ status: 'stored', stale: false });
    const late = await send(event(uid, 'delivery.assigned'));
    expect(late.status).toBe(200);
    expect(late.body).toMatchObject({ status: 'stored', stale: true });
    expect(Number(late.body.cursor)).toBeGreaterThan(Number(pickedUp.body.cursor));
    // A late milestone does not lower the rank: the next one is still current.
    const enroute = await send(event(uid, 'delivery.dropoff_enroute'));
    expect(enroute.body).toMatchObject({ status: 'stored', stale: false });
    const delivered = await send(event(uid, 'delivery.dropoff_complete'));
    expect(delivered.body).toMatchObject({ status: 'stored', stale: false });
    // After the terminal milestone, anything is late: a lower one, a higher one, a location.
    const afterwards = [
      await send(event(uid, 'delivery.dropoff_arrived')),
      await send(event(uid, 'delivery.canceled', { cancellation_reason: 'too late' })),
      await send(event(uid, 'location.dropoff_enroute', { driver_location: { lat: 1, lng: 2 } })),
    ];
    for (const response of afterwards) expect(response.body).toMatchObject({ status: 'stored', stale: true });

    expect(await eventsOf(uid)).toEqual([
      { uid, name: 'delivery.pickup_complete', cursor: pickedUp.body.cursor, stale: false },
      { uid, name: 'delivery.assigned', cursor: late.body.cursor, stale: true },
      { uid, name: 'delivery.dropoff_enroute', cursor: enroute.body.cursor, stale: false },
      { uid, name: 'delivery.dropoff_complete', cursor: delivered.body.cursor, stale: false },
      { uid, name: 'delivery.dropoff_arrived', cursor: afterwards[0]!.body.cursor, stale: true },
      { uid, name: 'delivery.canceled', cursor: afterwards[1]!.body.cursor, stale: true },
      { uid, name: 'location.dropoff_enroute', cursor: afterwards[2]!.body.cursor, stale: true },
    ]);
    // The current state is the last non-stale milestone.
    expect((await stack.app.services.store.latestEvent(uid, 'delivery'))?.name).toBe('delivery.dropoff_complete');
  });

  it('ranks events of one batch against each other (sent concurrently)', async () => {
    const uid = await book();
    await send(event(uid, 'delivery.dropoff_complete'));
    const responses = await Promise.all(
      ['delivery.created', 'delivery.assigned', 'delivery.pickup_complete'].map((name) => send(event(uid, name))),
    );
    for (const response of responses) expect(response.body).toMatchObject({ status: 'stored', stale: true });
    expect((await eventsOf(uid)).filter((e) => !e.stale).map((e) => e.name)).toEqual(['delivery.dropoff_complete']);
  });
});

describe('a store that fails', () => {
  /** A real SQLite store whose appends fail (or stall, then fail) while `mode` says so. */
  class FlakyStore implements Store {
    mode: 'ok' | 'reject' | 'throw' | 'stall' = 'reject';
    appendCalls = 0;
    constructor(readonly inner: SqliteStore) {}
    appendEvents = ((events: ReadonlyArray<EventInput>) => {
      this.appendCalls += 1;
      if (this.mode === 'throw') throw new Error('SQLITE_IOERR: disk I/O error');
      if (this.mode === 'reject') return Promise.reject(new Error('SQLITE_FULL: database or disk is full'));
      if (this.mode === 'stall')
        return new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error('SQLITE_BUSY: database is locked')), 300),
        );
      return this.inner.appendEvents(events);
    }) as Store['appendEvents'];
    eventsAfter: Store['eventsAfter'] = (...args) => this.inner.eventsAfter(...args);
    latestEvent: Store['latestEvent'] = (...args) => this.inner.latestEvent(...args);
    lastSeq: Store['lastSeq'] = () => this.inner.lastSeq();
    claimIdempotency: Store['claimIdempotency'] = (...args) => this.inner.claimIdempotency(...args);
    completeIdempotency: Store['completeIdempotency'] = (...args) => this.inner.completeIdempotency(...args);
    releaseIdempotency: Store['releaseIdempotency'] = (...args) => this.inner.releaseIdempotency(...args);
    markIdempotencyUnknown: Store['markIdempotencyUnknown'] = (...args) => this.inner.markIdempotencyUnknown(...args);
    resolveBookingMarker: Store['resolveBookingMarker'] = (...args) => this.inner.resolveBookingMarker(...args);
    recordOwner: Store['recordOwner'] = (...args) => this.inner.recordOwner(...args);
    ownerOf: Store['ownerOf'] = (...args) => this.inner.ownerOf(...args);
    recordOwners: Store['recordOwners'] = (...args) => this.inner.recordOwners(...args);
    ownersOf: Store['ownersOf'] = (...args) => this.inner.ownersOf(...args);
    merchantLinks: Store['merchantLinks'] = (...args) => this.inner.merchantLinks(...args);
    linkMerchant: Store['linkMerchant'] = (...args) => this.inner.linkMerchant(...args);
    mergeMerchant: Store['mergeMerchant'] = (...args) => this.inner.mergeMerchant(...args);
    unlinkMerchant: Store['unlinkMerchant'] = (...args) => this.inner.unlinkMerchant(...args);
    unfinishedDeliveries: Store['unfinishedDeliveries'] = (...args) => this.inner.unfinishedDeliveries(...args);
    leaseReads: Store['leaseReads'] = (...args) => this.inner.leaseReads(...args);
    releaseReads: Store['releaseReads'] = (...args) => this.inner.releaseReads(...args);
    ownerClaimsAfter: Store['ownerClaimsAfter'] = (...args) => this.inner.ownerClaimsAfter(...args);
    deliveryState: Store['deliveryState'] = (...args) => this.inner.deliveryState(...args);
    deliveryView: Store['deliveryView'] = (...args) => this.inner.deliveryView(...args);
    recordRead: Store['recordRead'] = (...args) => this.inner.recordRead(...args);
    confirmedViews: Store['confirmedViews'] = (...args) => this.inner.confirmedViews(...args);
    cursorSecret: Store['cursorSecret'] = () => this.inner.cursorSecret();
    ping: Store['ping'] = () => this.inner.ping();
    close: Store['close'] = () => this.inner.close();
  }

  let app: App;
  let store: FlakyStore;
  let dataDir: string;

  beforeAll(async () => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-flaky-'));
    const keyFile = path.join(dataDir, 'webhook-public.pem');
    writeFileSync(keyFile, stack.sandbox.publicKeyPem);
    const config = loadConfig({
      PORT: '0',
      UPSTREAM_URL: stack.sandbox.url,
      PLATFORM_ID: stack.sandbox.platformId,
      WEBHOOK_PUBLIC_KEY_FILE: keyFile,
      WEBHOOK_ISSUER: stack.sandbox.issuer,
      DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
    });
    store = new FlakyStore(new SqliteStore(config.dataDir));
    app = await startApp(config, { store });
  });
  afterAll(async () => {
    await app?.stop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it.each(['reject', 'throw', 'stall'] as const)(
    'answers 503, never 2xx, when the append fails (%s), and 200 once it recovers',
    async (mode) => {
      const uid = `flaky-${mode}`;
      const created = event(uid, 'delivery.created');
      const token = await sign(created);
      store.mode = mode;
      const calls = store.appendCalls;
      const accepted = app.receiver!.counters.accepted;
      const responses = await Promise.all([1, 2, 3].map(() => send(created, { token, url: app.url })));
      for (const response of responses) {
        expect(response.status).toBe(503);
        expect(response.body).toMatchObject({ error: 'store_unavailable' });
      }
      expect(store.appendCalls).toBeGreaterThan(calls);
      expect(await store.inner.eventsAfter(0, 10, { uids: [uid] })).toEqual([]);
      expect(app.receiver!.counters.accepted).toBe(accepted);

      // The upstream retries; by then the store works again.
      store.mode = 'ok';
      const retried = await send(created, { token, url: app.url });
      expect(retried.status).toBe(200);
      expect(retried.body).toMatchObject({ status: 'stored', stale: false });
      expect((await store.inner.eventsAfter(0, 10, { uids: [uid] })).map((e) => e.name)).toEqual(['delivery.created']);
    },
  );
});
