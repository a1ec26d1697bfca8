// A key the upstream stops accepting ends every open subscription of it, whatever
// webhooks keep arriving: deliveryUpdated, courierLocation and deliveryEvents
// with and without uids, over WebSocket and server-sent events, and those of
// the client tokens it minted. Each key is re-confirmed once per
// KEY_RECONFIRM_INTERVAL_MS whatever its number of subscriptions; an upstream
// that cannot answer ends nothing. And a refusal is remembered only briefly: a
// key the upstream accepts again is served again within seconds, while each
// new try of a refused key still costs its address one of AUTH_FAILURES_PER_MINUTE.
import { randomBytes, randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_PLATFORM_ID } from '@delivery-graph/sandbox';
import { RedisStore } from '../../src/store/redis.js';
import { deliveryInput, startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { listenersAttached, waitUntil } from '../helpers/wait.js';
import { collect, wsClient, type Collected } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const CREATE_TOKEN = `mutation($uids: [ID!]!) { createClientToken(uids: $uids, ttlSeconds: 3600) { ... on MutationCreateClientTokenSuccess { data { token } } } }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name status } }`;
const LOCATION = `subscription($uid: ID!) { courierLocation(uid: $uid) { milestone } }`;
const EVENTS = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid name } }`;
const AVAILABILITY = '{ availability { group available } }';
const INTERVAL_MS = 300;
/**
 * The sandbox moves each delivery on by itself: a milestone every 800 ms and three positions in between, so webhooks
 * keep arriving.
 */
const STEP_MS = 800;

const merchant = (name: string) => ({
  key: `sk_test_${name}_${randomBytes(12).toString('hex')}`,
  name,
  platformId: DEFAULT_PLATFORM_ID,
});
/** The sandbox's revocation is for good: each test revokes a merchant of its own. */
const MERCHANTS = ['streams', 'token', 'many', 'outage', 'flaky', 'redis'].map(merchant);
const [STREAMS, TOKEN, MANY, OUTAGE, FLAKY, REDIS] = MERCHANTS.map((m) => m.key) as [
  string,
  string,
  string,
  string,
  string,
  string,
];

const codeOf = (error: unknown) => (error as { extensions?: { code?: string } }).extensions?.code;
const codesOf = (errors: unknown[]) => errors.map(codeOf);

/** The upstream answers the proxy passes, and the faults it makes, by key. */
interface Traffic {
  /** Availability calls made with each key (the re-confirmations, and deliveryEvents' start). */
  availability: Map<string, number[]>;
  /** Keys whose every call is answered with this status instead. */
  failing: Map<string, number>;
}

function watchTraffic(stack: Stack): Traffic {
  const traffic: Traffic = { availability: new Map(), failing: new Map() };
  stack.proxy!.fault = (req, res) => {
    const key = /^Bearer (\S+)$/.exec(req.headers.authorization ?? '')?.[1];
    if (!key) return false;
    if (req.url?.endsWith('/availability')) {
      const calls = traffic.availability.get(key) ?? [];
      calls.push(Date.now());
      traffic.availability.set(key, calls);
    }
    const status = traffic.failing.get(key);
    if (status === undefined) return false;
    const body =
      status === 401
        ? { code: 'invalid_api_key', message: 'The API key is invalid.' }
        : { code: 'unavailable', message: 'Try again later.' };
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    return true;
  };
  return traffic;
}

async function book(stack: Stack, key: string): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput() }, key);
  expect(result.errors, JSON.stringify(result.errors)).toBeUndefined();
  return result.data.createDelivery.data.uid;
}

/** POST /sandbox/revoke-key over HTTP, as a merchant revoking the key in its dashboard would. */
async function revoke(stack: Stack, key: string): Promise<number> {
  const response = await fetch(`${stack.sandbox.origin}/sandbox/revoke-key`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}` },
  });
  expect(response.status).toBe(200);
  return Date.now();
}

/** A subscription over server-sent events: its messages as they come, and its end. */
interface EventStream {
  messages: GraphQLResponse[];
  completed: boolean;
  done: Promise<void>;
  close(): void;
}

function overSse(stack: Stack, credential: string, query: string, variables: Record<string, unknown>): EventStream {
  const controller = new AbortController();
  const stream: EventStream = {
    messages: [],
    completed: false,
    done: Promise.resolve(),
    close: () => controller.abort(),
  };
  stream.done = (async () => {
    const response = await fetch(`${stack.app.url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${credential}`,
      },
      body: JSON.stringify({ query, variables }),
      signal: controller.signal,
    });
    const decoder = new TextDecoder();
    let text = '';
    try {
      for await (const chunk of response.body!) {
        text += decoder.decode(chunk as Uint8Array, { stream: true });
        let end: number;
        while ((end = text.indexOf('\n\n')) >= 0) {
          const block = text.slice(0, end);
          text = text.slice(end + 2);
          const event = /^event: (\w+)/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event === 'next' && data) stream.messages.push(JSON.parse(data) as GraphQLResponse);
          if (event === 'complete') stream.completed = true;
        }
      }
    } catch (error) {
      if (!controller.signal.aborted) throw error;
    }
  })();
  return stream;
}

/** Resolves once `what` ended, within `ms`; rejects past it (a safety net: the old code never ends them). */
function endsWithin(done: Promise<unknown>, ms: number, what: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} still open ${ms} ms after the revocation`)), ms);
    done.then(
      () => {
        clearTimeout(timer);
        resolve(Date.now());
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error as Error);
      },
    );
  });
}

async function metric(stack: Stack, name: string, labels: Record<string, string> = {}): Promise<number> {
  const wanted = Object.entries(labels).map(([label, value]) => `${label}="${value}"`);
  const line = (await (await fetch(`${stack.app.url}/metrics`)).text())
    .split('\n')
    .find(
      (candidate) =>
        (candidate.startsWith(`${name}{`) || candidate.startsWith(`${name} `)) &&
        wanted.every((pair) => candidate.includes(pair)),
    );
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

/**
 * Every kind of subscription of `key` on `uid`, live, then the key revoked while
 * the sandbox keeps the delivery moving: each ends UNAUTHENTICATED, long before
 * the delivery does.
 */
async function revocationEndsEverything(stack: Stack, key: string): Promise<void> {
  const uid = await book(stack, key);
  const socket = wsClient(stack.app.url, key);
  // One bus listener each: 4 on the socket, 2 over SSE.
  const live = listenersAttached(stack.app.services.bus, 6);
  const updated = collect(socket, UPDATED, { uid });
  const location = collect(socket, LOCATION, { uid });
  const unfiltered = collect(socket, EVENTS, {});
  const named = collect(socket, EVENTS, { uids: [uid] });
  const sse = overSse(stack, key, EVENTS, {});
  const sseUpdated = overSse(stack, key, UPDATED, { uid });
  try {
    await live;
    // Webhooks are arriving: the courier moves, and every stream has had something.
    await Promise.all([updated.waitFor(2), location.waitFor(1), unfiltered.waitFor(2), named.waitFor(2)]);
    await waitUntil(
      () => sse.messages.length >= 1 && sseUpdated.messages.length >= 2,
      'the SSE streams to have events',
    );

    await revoke(stack, key);
    const streams: Array<[string, Promise<unknown>]> = [
      ['deliveryUpdated', updated.done],
      ['courierLocation', location.done],
      ['deliveryEvents', unfiltered.done],
      ['deliveryEvents(uids)', named.done],
      ['SSE deliveryEvents', sse.done],
      ['SSE deliveryUpdated', sseUpdated.done],
    ];
    // Far longer than an interval, far shorter than the delivery's remaining milestones.
    await Promise.all(streams.map(([what, done]) => endsWithin(done, 4_000, what)));

    for (const sub of [updated, location, unfiltered, named] as Collected[]) {
      expect(codesOf(sub.errors)).toEqual(['UNAUTHENTICATED']);
      expect(sub.completed).toBe(true);
    }
    for (const stream of [sse, sseUpdated]) {
      expect(codesOf(stream.messages.at(-1)!.errors ?? [])).toEqual(['UNAUTHENTICATED']);
      expect(stream.completed).toBe(true);
    }
    expect(sse.messages.at(-1)!.errors![0]!.message).toBe('The delivery service refused the merchant key.');
    // Ended by the revocation, not by the delivery's end: it had not reached its final milestone.
    expect(updated.items.map((item) => item.deliveryUpdated.name)).not.toContain('delivery.dropoff_complete');
    const state = await stack.app.services.store.deliveryState(uid);
    expect(state?.terminal ?? false).toBe(false);
    // And the subscription slots are given back.
    await waitUntil(
      async () => (await metric(stack, 'delivery_graph_subscriptions_open')) === 0,
      'no subscription open',
    );
  } finally {
    sse.close();
    sseUpdated.close();
    await socket.dispose();
  }
}

describe('on SQLite', () => {
  let stack: Stack;
  let traffic: Traffic;

  beforeAll(async () => {
    stack = await startStack({
      faultProxy: true,
      sandbox: { merchants: MERCHANTS, knobs: { stepMs: STEP_MS } },
      // RECONCILE_INTERVAL_MS stays at its 30 s: the webhooks would put its reads off anyway.
      env: { KEY_RECONFIRM_INTERVAL_MS: String(INTERVAL_MS) },
    });
    traffic = watchTraffic(stack);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('a revoked key ends its open deliveryUpdated, courierLocation and deliveryEvents (with and without uids, WebSocket and SSE) UNAUTHENTICATED while webhooks keep arriving', async () => {
    await revocationEndsEverything(stack, STREAMS);
    expect(await metric(stack, 'delivery_graph_key_refused_subscriptions_total')).toBeGreaterThanOrEqual(6);
    expect(
      await metric(stack, 'delivery_graph_key_reconfirmations_total', { result: 'refused' }),
    ).toBeGreaterThanOrEqual(1);
  });

  it('ends the subscriptions of the client tokens a revoked key minted', async () => {
    const uid = await book(stack, TOKEN);
    const minted = await stack.gql(CREATE_TOKEN, { uids: [uid] }, TOKEN);
    const token = minted.data.createClientToken.data.token as string;
    const socket = wsClient(stack.app.url, token);
    const live = listenersAttached(stack.app.services.bus, 2);
    const updated = collect(socket, UPDATED, { uid });
    const sse = overSse(stack, token, LOCATION, { uid });
    try {
      await live;
      await updated.waitFor(2);
      await waitUntil(() => sse.messages.length >= 1, 'a position over SSE');
      await revoke(stack, TOKEN);
      await endsWithin(updated.done, 4_000, "the client token's deliveryUpdated");
      await endsWithin(sse.done, 4_000, "the client token's SSE courierLocation");
      expect(codesOf(updated.errors)).toEqual(['UNAUTHENTICATED']);
      expect((updated.errors[0] as Error).message).toBe(
        'The delivery service no longer accepts the merchant key behind this client token; ask the merchant for a new one.',
      );
      expect(codesOf(sse.messages.at(-1)!.errors ?? [])).toEqual(['UNAUTHENTICATED']);
      expect(updated.items.map((item) => item.deliveryUpdated.name)).not.toContain('delivery.dropoff_complete');
    } finally {
      sse.close();
      await socket.dispose();
    }
  });

  it('re-confirms a key once per interval, whatever its number of subscriptions', async () => {
    const uids = [await book(stack, MANY), await book(stack, MANY)];
    const sockets = [wsClient(stack.app.url, MANY), wsClient(stack.app.url, MANY)];
    // Per socket, one bus listener per delivery of each subscription: 2 × 2, 1 unfiltered, 2 named.
    const live = listenersAttached(stack.app.services.bus, 2 * 7);
    const subs = sockets.flatMap((socket) => [
      ...uids.flatMap((uid) => [collect(socket, UPDATED, { uid }), collect(socket, LOCATION, { uid })]),
      collect(socket, EVENTS, {}),
      collect(socket, EVENTS, { uids }),
    ]);
    try {
      // Each deliveryEvents asked the upstream's availability as it started, before it listened: those are behind us.
      await live;
      const started = Date.now();
      const calls = () => (traffic.availability.get(MANY) ?? []).filter((at) => at >= started);
      await waitUntil(() => calls().length >= 4, 'four re-confirmations of the key');
      const elapsed = Date.now() - started;
      // 12 subscriptions, one call per interval, not 12. A key is due a tick (10 ms here) before its interval is over,
      // so a call may come that much early, and the first at once (the interval ran from their start).
      expect(calls().length).toBeLessThanOrEqual(Math.floor(elapsed / (INTERVAL_MS - 10)) + 1);
      expect(stack.app.services.keyWatch!.keys).toBeGreaterThanOrEqual(1);
      for (const sub of subs) expect(sub.errors).toEqual([]);
    } finally {
      for (const socket of sockets) await socket.dispose();
    }
  });

  it('ends nothing while the upstream cannot answer, and confirms the key again once it can', async () => {
    const uid = await book(stack, OUTAGE);
    const socket = wsClient(stack.app.url, OUTAGE);
    const live = listenersAttached(stack.app.services.bus, 2);
    const updated = collect(socket, UPDATED, { uid });
    const unfiltered = collect(socket, EVENTS, {});
    try {
      await live;
      await updated.waitFor(1);
      const failedBefore = await metric(stack, 'delivery_graph_key_reconfirmations_total', { result: 'failed' });
      traffic.failing.set(OUTAGE, 503);
      await waitUntil(
        async () =>
          (await metric(stack, 'delivery_graph_key_reconfirmations_total', { result: 'failed' })) >= failedBefore + 2,
        'two failed re-confirmations',
      );
      traffic.failing.delete(OUTAGE);
      const seen = updated.items.length;
      // Still open: the next milestone arrives.
      await updated.waitFor(seen + 1);
      expect(updated.errors).toEqual([]);
      expect(unfiltered.errors).toEqual([]);
      expect(updated.completed).toBe(false);
    } finally {
      traffic.failing.delete(OUTAGE);
      await socket.dispose();
    }
  });

  it('serves a key the upstream refused once again as soon as it accepts it, within the refusal memory (5 s by default)', async () => {
    traffic.failing.set(FLAKY, 401);
    const refused = await stack.gql(AVAILABILITY, {}, FLAKY);
    expect(codesOf(refused.errors ?? [])).toEqual(['UNAUTHENTICATED']);
    traffic.failing.delete(FLAKY);
    const since = traffic.availability.get(FLAKY)?.length ?? 0;
    const refusedAt = Date.now();
    // Remembered for a moment: a burst with the refused key costs the upstream nothing.
    const again = await stack.gql(AVAILABILITY, {}, FLAKY);
    expect(codesOf(again.errors ?? [])).toEqual(['UNAUTHENTICATED']);
    expect(traffic.availability.get(FLAKY)?.length ?? 0).toBe(since);
    // Then asked again, and served (a 60 s memory would fail here).
    let answer = again;
    while (answer.errors !== undefined && Date.now() - refusedAt < 15_000) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      answer = await stack.gql(AVAILABILITY, {}, FLAKY);
    }
    expect(answer.errors).toBeUndefined();
    expect(answer.data.availability).toHaveLength(2);
  });
});

describe('AUTH_FAILURES_PER_MINUTE with a short refusal memory', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack({
      env: { AUTH_FAILURES_PER_MINUTE: '2', KEY_REFUSAL_MEMORY_MS: '1000', TRUST_PROXY: '1' },
    });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  async function from(address: string, key: string): Promise<GraphQLResponse> {
    const response = await fetch(`${stack.app.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, 'x-forwarded-for': address },
      body: JSON.stringify({ query: AVAILABILITY }),
    });
    return (await response.json()) as GraphQLResponse;
  }

  it('charges the address again for each upstream try of a key refused after its memory, so repeating made-up keys does not outrun the budget', async () => {
    const address = '198.51.100.40';
    const key = `sk_made_up_${randomBytes(12).toString('hex')}`;
    const keys = stack.app.services.upstream.keys;
    const forgotten = () => waitUntil(() => keys.standing(key) === 'unknown', 'the refusal to be forgotten');
    // A real key, accepted from another address first.
    expect((await from('198.51.100.41', stack.key)).errors).toBeUndefined();

    stack.sandbox.resetRequests();
    expect(codesOf((await from(address, key)).errors ?? [])).toEqual(['UNAUTHENTICATED']);
    // Within the memory: answered without asking, and without another try.
    expect(codesOf((await from(address, key)).errors ?? [])).toEqual(['UNAUTHENTICATED']);
    expect(stack.sandbox.requests).toHaveLength(2);
    await forgotten();
    // Asked again: the second try of the budget.
    expect(codesOf((await from(address, key)).errors ?? [])).toEqual(['UNAUTHENTICATED']);
    expect(stack.sandbox.requests).toHaveLength(4);
    await forgotten();
    // A third try is over the budget of 2: refused before any upstream call.
    expect(codesOf((await from(address, key)).errors ?? [])).toEqual(['RATE_LIMITED']);
    expect(stack.sandbox.requests).toHaveLength(4);
    // A key the upstream accepts is not held back.
    expect((await from(address, stack.key)).errors).toBeUndefined();
  });
});

// The re-confirmation is none of the store's business; once on a given Redis all the same (events fan out through it).
describe.runIf(Boolean(process.env.REDIS_TEST_URL))('on Redis (REDIS_TEST_URL)', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack({
      faultProxy: true,
      sandbox: { merchants: MERCHANTS, knobs: { stepMs: STEP_MS } },
      env: { KEY_RECONFIRM_INTERVAL_MS: String(INTERVAL_MS) },
      store: () =>
        new RedisStore(new Redis(process.env.REDIS_TEST_URL!), {
          prefix: `key-revocation:${randomUUID()}:`,
          ownsClient: true,
        }),
    });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('a revoked key ends every kind of subscription UNAUTHENTICATED while webhooks keep arriving', async () => {
    await revocationEndsEverything(stack, REDIS);
  });
});
