// Made-up merchant keys do not reach the upstream in bulk. Each client address
// may try AUTH_FAILURES_PER_MINUTE keys the upstream has not accepted; past that
// it gets RATE_LIMITED before any upstream call, on every transport. A key the
// upstream refused is answered from memory for a while; keys it accepted are
// unaffected. Over WebSocket the key is judged once, at connection_init. A
// subscriber whose key is refused mid-stream ends at once. With REDIS_URL, the
// per-key rate limit and this budget hold across instances (two on one Redis).
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createClient, type Client } from 'graphql-ws';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { startApp, type App } from '../../src/app.js';
import type { RedisStore } from '../../src/store/redis.js';
import { loadConfig } from '../../src/config.js';
import { DEFAULT_PLATFORM_ID, startSandbox, type Sandbox } from '@delivery-graph/sandbox';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import {
  deliveryInput,
  KEYLESS_BUDGETS_OFF,
  partnerOrderBody,
  startStack,
  type GraphQLResponse,
  type Stack,
  TEST_CLIENT_TOKEN_SECRET,
} from '../helpers/stack.js';

const AVAILABILITY = '{ availability { group available errorCode } }';
const CREATE =
  'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }';
const EVENTS = 'subscription { deliveryEvents { uid name } }';
const UPDATED = 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { uid status } }';
const BUDGET = 5;

const madeUp = () => `sk_made_up_${randomBytes(12).toString('hex')}`;
const merchant = (name: string, platformId = DEFAULT_PLATFORM_ID) => ({
  key: `sk_test_${name}_${randomBytes(12).toString('hex')}`,
  name,
  platformId,
});
/**
 * [0] books and reads; [1] subscribes in the access test; [2] and [3] are first seen in their tests; [4] is valid for
 * the partner group only.
 */
const MERCHANTS = [
  merchant('demo'),
  merchant('reader'),
  merchant('burst'),
  merchant('socket'),
  merchant('elsewhere', 'elsewhere-platform'),
];
const [DEMO, READER, BURST, SOCKET, ELSEWHERE] = MERCHANTS.map((m) => m.key) as [
  string,
  string,
  string,
  string,
  string,
];

const codeOf = (answer: GraphQLResponse) => answer.errors?.[0]?.extensions?.code;

/** POSTs one operation as a client at `address` (the facade trusts one proxy: X-Forwarded-For's last entry). */
async function post(
  stack: Stack,
  address: string,
  key: string | undefined,
  body: unknown,
  accept?: string,
): Promise<{ status: number; text: string }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-forwarded-for': address };
  if (key) headers.authorization = `Bearer ${key}`;
  if (accept) headers.accept = accept;
  const response = await fetch(`${stack.app.url}/graphql`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: response.status, text: await response.text() };
}

/** The direct JSON path. */
async function gqlFrom(
  stack: Stack,
  address: string,
  key: string | undefined,
  query = AVAILABILITY,
  variables?: Record<string, unknown>,
): Promise<GraphQLResponse> {
  return JSON.parse((await post(stack, address, key, { query, variables })).text) as GraphQLResponse;
}

type Closed = { code: number; reason: string };

/** Opens a graphql-ws connection from `address`; resolves once it is acknowledged or closed. */
function connect(
  stack: Stack,
  address: string,
  connectionParams: Record<string, unknown>,
): Promise<{ client: Client; closed?: Closed }> {
  class FromAddress extends WebSocket {
    constructor(url: string | URL, protocols?: string | string[]) {
      super(url, protocols, { headers: { 'x-forwarded-for': address } });
    }
  }
  return new Promise((resolve) => {
    const client: Client = createClient({
      url: `${stack.app.url.replace(/^http/, 'ws')}/graphql`,
      webSocketImpl: FromAddress,
      connectionParams,
      lazy: false,
      retryAttempts: 0,
      onNonLazyError: () => undefined,
      on: {
        connected: () => resolve({ client }),
        closed: (event) =>
          resolve({ client, closed: { code: (event as CloseEvent).code, reason: (event as CloseEvent).reason } }),
      },
    });
  });
}

/** Runs one operation on a connected client: its data and errors. */
function runOn(
  client: Client,
  query: string,
  variables?: Record<string, unknown>,
): Promise<{ data: unknown[]; errors: unknown[] }> {
  const data: unknown[] = [];
  const errors: unknown[] = [];
  return new Promise((resolve) => {
    client.subscribe(
      { query, variables },
      {
        next: (message) => {
          if (message.data) data.push(message.data);
          if (message.errors) errors.push(...message.errors);
        },
        error: (error) => {
          errors.push(error);
          resolve({ data, errors });
        },
        complete: () => resolve({ data, errors }),
      },
    );
  });
}

describe('unknown merchant keys per client address', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack({
      faultProxy: true,
      sandbox: { merchants: MERCHANTS },
      env: { AUTH_FAILURES_PER_MINUTE: String(BUDGET), TRUST_PROXY: '1' },
    });
  });
  afterAll(() => stack?.stop());

  it('answers rotating made-up keys RATE_LIMITED past the budget, before any upstream call; accepted keys and other addresses go on', async () => {
    const address = '198.51.100.7';
    // The demo key is accepted (its first try was another address's).
    expect((await gqlFrom(stack, '198.51.100.6', DEMO)).errors).toBeUndefined();
    stack.sandbox.resetRequests();

    const answers: GraphQLResponse[] = [];
    for (let i = 0; i < 30; i += 1) answers.push(await gqlFrom(stack, address, madeUp()));
    expect(answers.map(codeOf)).toEqual([
      ...Array(BUDGET).fill('UNAUTHENTICATED'),
      ...Array(30 - BUDGET).fill('RATE_LIMITED'),
    ]);
    const limited = answers[BUDGET]!.errors![0]!;
    expect(limited.message).toBe('Too many unknown merchant keys from this address; slow down.');
    // One try every 12 s at 5 a minute.
    expect(limited.extensions!.retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(limited.extensions!.retryAfterSeconds).toBeLessThanOrEqual(12);
    // The budget's keys went upstream (availability asks both groups); the other 25 did not.
    expect(stack.sandbox.requests.map((r) => r.status)).toEqual(Array(2 * BUDGET).fill(401));

    // A key the upstream accepted is not held back, from the same address.
    const demo = await gqlFrom(stack, address, DEMO);
    expect(demo.errors).toBeUndefined();
    expect(demo.data.availability).toHaveLength(2);
    // Another address has its own budget.
    expect(codeOf(await gqlFrom(stack, '198.51.100.8', madeUp()))).toBe('UNAUTHENTICATED');
    // Entries the client writes left of the proxy's do not open a fresh budget.
    expect(codeOf(await gqlFrom(stack, `203.0.113.${randomBytes(1)[0]}, ${address}`, madeUp()))).toBe('RATE_LIMITED');
  });

  it('answers a refused key from memory; the budget counts distinct keys, so repeating one costs a single try', async () => {
    const address = '198.51.100.20';
    const key = madeUp();
    stack.sandbox.resetRequests();
    const first = await gqlFrom(stack, address, key);
    expect(codeOf(first)).toBe('UNAUTHENTICATED');
    expect(stack.sandbox.requests.map((r) => r.status)).toEqual([401, 401]);

    stack.sandbox.resetRequests();
    const again = [
      await gqlFrom(stack, address, key),
      await gqlFrom(stack, address, key, CREATE, { input: deliveryInput() }),
      await gqlFrom(stack, address, key, '{ delivery(uid: "00000000-0000-4000-8000-000000000000") { uid } }'),
      await gqlFrom(stack, address, key),
    ];
    expect(again.map(codeOf)).toEqual(Array(4).fill('UNAUTHENTICATED'));
    expect(again[0]!.errors![0]!.message).toBe('The delivery service refused the merchant key.');
    expect(stack.sandbox.requests).toEqual([]);
    // One try so far (the same key five times): BUDGET - 1 other keys still fit, the next one does not.
    for (let i = 1; i < BUDGET; i += 1) expect(codeOf(await gqlFrom(stack, address, madeUp()))).toBe('UNAUTHENTICATED');
    expect(codeOf(await gqlFrom(stack, address, madeUp()))).toBe('RATE_LIMITED');
    // The refused key itself, already paid for, is still answered from memory.
    expect(codeOf(await gqlFrom(stack, address, key))).toBe('UNAUTHENTICATED');
    expect(JSON.stringify(again)).not.toContain(key);
  });

  it('lets a burst with one new key wait for its first try: a real key is never held back, a made-up one costs one try upstream', async () => {
    const real = await Promise.all(Array.from({ length: 40 }, () => gqlFrom(stack, '198.51.100.30', BURST)));
    expect(real.map(codeOf)).toEqual(Array(40).fill(undefined));

    stack.sandbox.resetRequests();
    const key = madeUp();
    const forged = await Promise.all(Array.from({ length: 40 }, () => gqlFrom(stack, '198.51.100.31', key)));
    expect(stack.sandbox.requests.map((r) => r.status)).toEqual([401, 401]);
    // One key is one try, however many requests carry it.
    expect(forged.map(codeOf)).toEqual(Array(40).fill('UNAUTHENTICATED'));
  });

  it('takes the client address the same way on every transport: direct JSON, yoga, GET, SSE and WebSocket', async () => {
    const spent = '198.51.100.40';
    const fresh = '198.51.100.41';
    for (let i = 0; i < BUDGET; i += 1) expect(codeOf(await gqlFrom(stack, spent, madeUp()))).toBe('UNAUTHENTICATED');
    stack.sandbox.resetRequests();

    const viaYoga = (address: string) =>
      post(stack, address, madeUp(), { query: AVAILABILITY }, 'application/graphql-response+json');
    const viaGet = async (address: string) => {
      const response = await fetch(`${stack.app.url}/graphql?query=${encodeURIComponent(AVAILABILITY)}`, {
        headers: { authorization: `Bearer ${madeUp()}`, 'x-forwarded-for': address },
      });
      return response.text();
    };
    const viaSse = (address: string) =>
      post(
        stack,
        address,
        madeUp(),
        { query: UPDATED, variables: { uid: '00000000-0000-4000-8000-000000000000' } },
        'text/event-stream',
      );

    expect(JSON.parse((await viaYoga(spent)).text).errors[0].extensions.code).toBe('RATE_LIMITED');
    expect(JSON.parse(await viaGet(spent)).errors[0].extensions.code).toBe('RATE_LIMITED');
    const sse = await viaSse(spent);
    expect(sse.text).toContain('event: next');
    expect(sse.text).toContain('"RATE_LIMITED"');
    const socket = await connect(stack, spent, { authorization: `Bearer ${madeUp()}` });
    expect(socket.closed?.code).toBe(4429);
    expect(socket.closed?.reason).toMatch(/^too many unknown keys from this address; retry in \d+ s$/);
    expect(stack.sandbox.requests).toEqual([]);

    // From another address the same requests are judged by the upstream.
    expect(JSON.parse((await viaYoga(fresh)).text).errors[0].extensions.code).toBe('UNAUTHENTICATED');
    expect(JSON.parse(await viaGet(fresh)).errors[0].extensions.code).toBe('UNAUTHENTICATED');
    expect((await viaSse(fresh)).text).toContain('"UNAUTHENTICATED"');
    expect((await connect(stack, fresh, { authorization: `Bearer ${madeUp()}` })).closed).toEqual({
      code: 4403,
      reason: 'the merchant key was refused',
    });
  });

  describe('over WebSocket, the key is judged once at connection_init', () => {
    it('closes a socket without a key, or with a key the upstream refuses, saying which', async () => {
      const address = '198.51.100.50';
      stack.sandbox.resetRequests();
      expect((await connect(stack, address, {})).closed).toEqual({
        code: 4403,
        reason: 'no merchant key or client token in connection_init',
      });
      expect((await connect(stack, address, { authorization: DEMO })).closed).toEqual({
        code: 4403,
        reason: 'no merchant key or client token in connection_init',
      });
      expect(stack.sandbox.requests).toEqual([]);

      const key = madeUp();
      expect((await connect(stack, address, { authorization: `Bearer ${key}` })).closed).toEqual({
        code: 4403,
        reason: 'the merchant key was refused',
      });
      // The cheapest keyed call, the platform group's availability; the partner group's only because the platform
      // refused.
      expect(
        stack.sandbox.requests.map((r) => [r.group, r.method, r.path.replace(/.*\/api\/v1/, ''), r.status]),
      ).toEqual([
        ['platform', 'GET', `/${DEFAULT_PLATFORM_ID}/availability`, 401],
        ['partner', 'GET', '/availability', 401],
      ]);
      stack.sandbox.resetRequests();
      // Refused a moment ago: closed again without asking.
      expect((await connect(stack, address, { authorization: `Bearer ${key}` })).closed?.reason).toBe(
        'the merchant key was refused',
      );
      expect(stack.sandbox.requests).toEqual([]);
    });

    it('lets in a new real key for one upstream call, a known one for none, and a partner-only key too', async () => {
      const address = '198.51.100.51';
      stack.sandbox.resetRequests();
      const first = await connect(stack, address, { authorization: `Bearer ${SOCKET}` });
      expect(first.closed).toBeUndefined();
      expect(stack.sandbox.requests.map((r) => [r.group, r.status])).toEqual([['platform', 200]]);
      stack.sandbox.resetRequests();
      const second = await connect(stack, address, { authorization: `Bearer ${SOCKET}` });
      expect(second.closed).toBeUndefined();
      expect(stack.sandbox.requests).toEqual([]);
      expect((await runOn(second.client, AVAILABILITY)).data).toHaveLength(1);
      await Promise.all([first.client.dispose(), second.client.dispose()]);

      stack.sandbox.resetRequests();
      const elsewhere = await connect(stack, address, { authorization: `Bearer ${ELSEWHERE}` });
      expect(elsewhere.closed).toBeUndefined();
      expect(stack.sandbox.requests.map((r) => [r.group, r.status])).toEqual([
        ['platform', 401],
        ['partner', 200],
      ]);
      await elsewhere.client.dispose();
    });

    it('lets a socket in when the upstream cannot judge the key at connect time', async () => {
      const address = '198.51.100.52';
      stack.proxy!.fault = (req) => {
        if (!req.url?.endsWith('/availability')) return false;
        req.socket.destroy();
        return true;
      };
      try {
        const socket = await connect(stack, address, { authorization: `Bearer ${madeUp()}` });
        expect(socket.closed).toBeUndefined();
        // Each operation is still checked: this one reaches the (unreachable) upstream and says so.
        const { data } = await runOn(socket.client, AVAILABILITY);
        expect(JSON.stringify(data)).toContain('UPSTREAM_UNAVAILABLE');
        await socket.client.dispose();
      } finally {
        stack.proxy!.fault = undefined;
      }
    });
  });

  it('ends a deliveryEvents subscription at once when the upstream refuses its key, without asking again', async () => {
    const address = '198.51.100.60';
    const socket = await connect(stack, address, { authorization: `Bearer ${READER}` });
    expect(socket.closed).toBeUndefined();
    const seen: string[] = [];
    const errors: unknown[] = [];
    let live!: () => void;
    const listening = new Promise<void>((resolve) => (live = resolve));
    const ended = new Promise<void>((resolve) => {
      socket.client.subscribe(
        { query: EVENTS },
        {
          next: (message) => {
            if (message.errors) errors.push(...message.errors);
            if (message.data) {
              seen.push((message.data as { deliveryEvents: { uid: string } }).deliveryEvents.uid);
              live();
            }
          },
          error: (error) => {
            errors.push(error);
            resolve();
          },
          complete: () => resolve(),
        },
      );
    });
    // The reader's own delivery shows the stream is live (its access needs no upstream read).
    const own = (await gqlFrom(stack, address, READER, CREATE, { input: deliveryInput() })).data.createDelivery.data
      .uid as string;
    await stack.sandbox.advance(own);
    await listening;

    // From now on the upstream refuses the reader's key on reads.
    const reader = `Bearer ${READER}`;
    const refusedReads: string[] = [];
    stack.proxy!.fault = (req, res) => {
      // Reads by uid of either group: which one an access check makes depends on UPSTREAM_READ_SCOPE
      // (src/realtime/access.ts).
      if (
        req.headers.authorization !== reader ||
        req.method !== 'GET' ||
        !req.url ||
        !/\/(deliveries|orders)\//.test(req.url)
      )
        return false;
      refusedReads.push(req.url);
      res
        .writeHead(401, { 'content-type': 'application/json' })
        .end(JSON.stringify({ code: 'invalid_api_key', message: 'The key was revoked.' }));
      return true;
    };
    const canRead = vi.spyOn(stack.app.services.access, 'canRead');
    try {
      // Another merchant's partner order: the facade has no owner record of it, so the reader's access is asked
      // of the upstream (one booked through the facade would be skipped from its record, with no upstream call).
      const theirs = stack.sandbox.seedPartnerOrder(DEMO, partnerOrderBody('refused-reader')).uid;
      await ended;
      // Every webhook delivered, so none is in flight when the stack stops.
      await stack.sandbox.idle();
      expect(JSON.stringify(errors)).toContain('UNAUTHENTICATED');
      expect(seen).not.toContain(theirs);
      // Once: the refusal ended the stream instead of being retried as an outage would be.
      expect(canRead.mock.calls.filter(([, uid]) => uid === theirs)).toHaveLength(1);
      expect(refusedReads).toHaveLength(1);
    } finally {
      canRead.mockRestore();
      stack.proxy!.fault = undefined;
      await socket.client.dispose();
    }
  });
});

const withRedis = redisAvailable('auth-budget.test.ts');

describe.runIf(withRedis)('with REDIS_URL, two instances share one budget per key and per address', () => {
  const PER_KEY = 4;
  const PER_ADDRESS = 3;
  let redis: RedisServer;
  let sandbox: Sandbox;
  let workDir: string;
  let admin: Redis;
  const apps: App[] = [];

  /** The direct path of one instance, as a client at `address`. */
  async function ask(app: App, address: string, key: string): Promise<GraphQLResponse> {
    const response = await fetch(`${app.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'x-forwarded-for': address },
      body: JSON.stringify({ query: AVAILABILITY }),
    });
    return (await response.json()) as GraphQLResponse;
  }

  beforeAll(async () => {
    workDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-auth-budget-'));
    [redis, sandbox] = await Promise.all([
      startRedisServer(),
      startSandbox({ merchants: MERCHANTS, knobs: { stepMs: 0 } }),
    ]);
    admin = new Redis(redis.url);
    for (const name of ['a', 'b']) {
      apps.push(
        await startApp(
          loadConfig({
            PORT: '0',
            UPSTREAM_URL: sandbox.url,
            PLATFORM_ID: sandbox.platformId,
            DATA_DIR: path.join(workDir, name),
            REDIS_URL: redis.url,
            CLIENT_TOKEN_SECRET: TEST_CLIENT_TOKEN_SECRET,
            LOG_LEVEL: 'silent',
            UPSTREAM_CHECK_INTERVAL_MS: '3600000',
            RATE_LIMIT_PER_MINUTE: String(PER_KEY),
            AUTH_FAILURES_PER_MINUTE: String(PER_ADDRESS),
            ...KEYLESS_BUDGETS_OFF,
            TRUST_PROXY: '1',
          }),
        ),
      );
    }
  });
  afterAll(async () => {
    for (const app of apps) await app.stop().catch(() => undefined);
    admin?.disconnect();
    await sandbox?.stop();
    await redis?.stop();
    if (workDir) rmSync(workDir, { recursive: true, force: true });
  });

  it('allows RATE_LIMIT_PER_MINUTE operations per key across both instances, not per instance', async () => {
    const [a, b] = apps as [App, App];
    const answers: GraphQLResponse[] = [];
    for (let i = 0; i < 2 * PER_KEY; i += 1) answers.push(await ask(i % 2 === 0 ? a : b, '198.51.100.70', DEMO));
    expect(answers.map(codeOf)).toEqual([...Array(PER_KEY).fill(undefined), ...Array(PER_KEY).fill('RATE_LIMITED')]);
  });

  it('allows AUTH_FAILURES_PER_MINUTE unknown keys per address across both instances, not per instance', async () => {
    const [a, b] = apps as [App, App];
    sandbox.resetRequests();
    const answers: GraphQLResponse[] = [];
    for (let i = 0; i < 2 * PER_ADDRESS; i += 1)
      answers.push(await ask(i % 2 === 0 ? a : b, '198.51.100.71', madeUp()));
    expect(answers.map(codeOf)).toEqual([
      ...Array(PER_ADDRESS).fill('UNAUTHENTICATED'),
      ...Array(PER_ADDRESS).fill('RATE_LIMITED'),
    ]);
    expect(sandbox.requests).toHaveLength(2 * PER_ADDRESS);
  });

  it('costs one Redis command per operation of an accepted key, and stores no key or address in Redis', async () => {
    const [a] = apps as [App, App];
    expect(codeOf(await ask(a, '198.51.100.72', READER))).toBeUndefined();
    // The commands the instance sends about its limits (their keys are under dg:limit:).
    const client = (a.services.store as RedisStore).client;
    const send = vi.spyOn(client, 'sendCommand');
    try {
      for (let i = 0; i < 3; i += 1) expect(codeOf(await ask(a, '198.51.100.72', READER))).toBeUndefined();
      const limitCommands = send.mock.calls.filter(([command]) =>
        command.args.some((arg) => String(arg).startsWith('dg:limit:')),
      );
      expect(limitCommands).toHaveLength(3);
    } finally {
      send.mockRestore();
    }

    const limitKeys = await admin.keys('dg:limit:*');
    expect(limitKeys.length).toBeGreaterThan(0);
    const text = limitKeys.join('\n');
    for (const secret of [DEMO, READER, '198.51.100.7']) expect(text).not.toContain(secret);
  });

  it('limits each instance on its own while Redis is down, instead of failing or hanging', async () => {
    const [a] = apps as [App, App];
    await redis.kill();
    try {
      const answer = await ask(a, '198.51.100.73', BURST);
      expect(answer.errors).toBeUndefined();
      expect(answer.data.availability).toHaveLength(2);
    } finally {
      await redis.start();
    }
  });
});
