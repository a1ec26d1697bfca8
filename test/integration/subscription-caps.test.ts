// Subscriptions open at once, per merchant key, per client token and per client
// address, over WebSocket and server-sent events alike: past a cap the next one
// is refused TOO_MANY_SUBSCRIPTIONS naming it, and a subscription gives its slot
// back however it ends. And Delivery.events selected in a subscription is read
// once per event for all the delivery's subscribers, not once for each.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StoredEvent } from '../../src/store/store.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { listenersAttached, waitUntil } from '../helpers/wait.js';
import { collect, wsClient, type Collected } from '../helpers/ws-client.js';

const CREATE_DELIVERY = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const CREATE_TOKEN = `mutation($uids: [ID!]!) { createClientToken(uids: $uids, ttlSeconds: 3600) { ... on MutationCreateClientTokenSuccess { data { token } } } }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { uid status } }`;
const WITH_EVENTS = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name delivery { events { edges { cursor node { name } } } } } }`;

type Sub = Collected<any>;

async function book(stack: Stack, key = stack.key): Promise<string> {
  return (await stack.gql(CREATE_DELIVERY, { input: deliveryInput() }, key)).data.createDelivery.data.uid;
}

async function tokenFor(stack: Stack, uids: string[]): Promise<string> {
  return (await stack.gql(CREATE_TOKEN, { uids })).data.createClientToken.data.token;
}

/** The TOO_MANY_SUBSCRIPTIONS error a subscription ended with, if any. */
function capRefusal(
  sub: Sub,
): { message: string; extensions: { code: string; setting: string; limit: number } } | undefined {
  return (sub.errors as any[]).find((error) => error?.extensions?.code === 'TOO_MANY_SUBSCRIPTIONS');
}

/** Subscribes and waits for the first message, or for the end (a refusal). */
async function started(sub: Sub): Promise<Sub> {
  await Promise.race([sub.waitFor(1), sub.done]);
  return sub;
}

async function expectRefused(sub: Sub, setting: string, limit: number): Promise<void> {
  // A subscription let through sends its first message instead of ending.
  await started(sub);
  const refusal = capRefusal(sub);
  expect(
    refusal,
    `${setting}: refused, not running (${JSON.stringify(sub.items)}; ${JSON.stringify(sub.errors)})`,
  ).toBeDefined();
  expect(refusal!.extensions).toMatchObject({ code: 'TOO_MANY_SUBSCRIPTIONS', setting, limit });
  expect(refusal!.message).toContain(setting);
  expect(sub.items).toEqual([]);
}

function expectRunning(sub: Sub): void {
  expect(sub.errors, JSON.stringify(sub.errors)).toEqual([]);
  expect(sub.items.length).toBeGreaterThan(0);
}

interface EventStream {
  /** The first message's payload (data, or errors). */
  first: any;
  close(): void;
}

/** A subscription over server-sent events, read up to its first message and left open. */
async function overSse(
  stack: Stack,
  credential: string,
  query: string,
  variables: Record<string, unknown>,
  address?: string,
): Promise<EventStream> {
  const controller = new AbortController();
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    accept: 'text/event-stream',
    authorization: `Bearer ${credential}`,
  };
  if (address) headers['x-forwarded-for'] = address;
  const response = await fetch(`${stack.app.url}/graphql`, {
    method: 'POST',
    headers,
    body: JSON.stringify({ query, variables }),
    signal: controller.signal,
  });
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let message: RegExpExecArray | null = null;
  while (!(message = /event: next\ndata: (.*)\n\n/.exec(text))) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  return { first: message ? JSON.parse(message[1]!) : undefined, close: () => controller.abort() };
}

async function metricsText(stack: Stack): Promise<string> {
  return (await fetch(`${stack.app.url}/metrics`)).text();
}

/** A metric's value: `labels` picks the line; 0 when there is none. */
async function metric(stack: Stack, name: string, labels: Record<string, string> = {}): Promise<number> {
  const wanted = Object.entries(labels).map(([label, value]) => `${label}="${value}"`);
  const line = (await metricsText(stack))
    .split('\n')
    .find(
      (candidate) =>
        (candidate.startsWith(`${name}{`) || candidate.startsWith(`${name} `)) &&
        wanted.every((pair) => candidate.includes(pair)),
    );
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

const openSubscriptions = (stack: Stack) => metric(stack, 'delivery_graph_subscriptions_open');

describe('subscriptions per client token and per merchant key', () => {
  /** SUBSCRIPTIONS_PER_KEY=30; the other caps at their defaults (20 per token, 500 per address). */
  let stack: Stack;
  let uid: string;

  beforeAll(async () => {
    stack = await startStack({ env: { SUBSCRIPTIONS_PER_KEY: '30' } });
    uid = await book(stack);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('holds one client token to SUBSCRIPTIONS_PER_CLIENT_TOKEN (20 by default) over many sockets and streams, and takes one again once one ends', async () => {
    const token = await tokenFor(stack, [uid]);
    const clients = Array.from({ length: 6 }, () => wsClient(stack.app.url, token));
    try {
      // 18 over 6 sockets and 2 streams: 20.
      const subs = await Promise.all(
        clients.flatMap((client) => [0, 1, 2].map(() => started(collect(client, UPDATED, { uid })))),
      );
      for (const sub of subs) expectRunning(sub);
      const streams = [await overSse(stack, token, UPDATED, { uid }), await overSse(stack, token, UPDATED, { uid })];
      for (const stream of streams) expect(stream.first.data.deliveryUpdated.uid).toBe(uid);

      // The 21st: on a socket with room of its own, and as a stream.
      const extra = wsClient(stack.app.url, token);
      const over = collect(extra, UPDATED, { uid });
      await expectRefused(over, 'SUBSCRIPTIONS_PER_CLIENT_TOKEN', 20);
      const overStream = await overSse(stack, token, UPDATED, { uid });
      expect(overStream.first.errors[0].extensions).toMatchObject({
        code: 'TOO_MANY_SUBSCRIPTIONS',
        setting: 'SUBSCRIPTIONS_PER_CLIENT_TOKEN',
        limit: 20,
      });
      expect(JSON.stringify(overStream.first)).not.toContain(token);
      overStream.close();

      // Another token of the same merchant has slots of its own.
      const otherToken = await tokenFor(stack, [uid]);
      const other = wsClient(stack.app.url, otherToken);
      expectRunning(await started(collect(other, UPDATED, { uid })));

      // One completed by the client, then one closed stream: each frees one slot.
      const before = await openSubscriptions(stack);
      subs[0]!.dispose();
      await waitUntil(
        async () => (await openSubscriptions(stack)) === before - 1,
        'the completed subscription to give its slot back',
      );
      expectRunning(await started(collect(extra, UPDATED, { uid })));
      streams[0]!.close();
      await waitUntil(
        async () => (await openSubscriptions(stack)) === before - 1,
        'the closed stream to give its slot back',
      );
      expectRunning(await started(collect(extra, UPDATED, { uid })));
      await expectRefused(collect(extra, UPDATED, { uid }), 'SUBSCRIPTIONS_PER_CLIENT_TOKEN', 20);

      // A closed socket gives back every slot it held.
      clients[1]!.dispose();
      await waitUntil(
        async () => (await openSubscriptions(stack)) === before - 3,
        'the closed socket to give its three slots back',
      );
      const again = await Promise.all([0, 1, 2].map(() => started(collect(extra, UPDATED, { uid }))));
      for (const sub of again) expectRunning(sub);
      await expectRefused(collect(extra, UPDATED, { uid }), 'SUBSCRIPTIONS_PER_CLIENT_TOKEN', 20);

      expect(await metric(stack, 'delivery_graph_subscription_refusals_total', { cap: 'client_token' })).toBe(4);
      streams[1]!.close();
      await extra.dispose();
      await other.dispose();
    } finally {
      for (const client of clients) await client.dispose();
    }
    await waitUntil(async () => (await openSubscriptions(stack)) === 0, 'every slot to come back');
  });

  it('holds one merchant key to SUBSCRIPTIONS_PER_KEY, those of its client tokens included; another key is not held to it', async () => {
    const token = await tokenFor(stack, [uid]);
    const theirs = await book(stack, stack.otherKey);
    const keyed = [wsClient(stack.app.url, stack.key), wsClient(stack.app.url, stack.key)];
    const tokened = wsClient(stack.app.url, token);
    const others = wsClient(stack.app.url, stack.otherKey);
    try {
      // 30: 2 sockets × 10 and one stream with the key, 9 with its token.
      const subs = await Promise.all([
        ...keyed.flatMap((client) => Array.from({ length: 10 }, () => started(collect(client, UPDATED, { uid })))),
        ...Array.from({ length: 9 }, () => started(collect(tokened, UPDATED, { uid }))),
      ]);
      for (const sub of subs) expectRunning(sub);
      const stream = await overSse(stack, stack.key, UPDATED, { uid });
      expect(stream.first.data.deliveryUpdated.uid).toBe(uid);

      await expectRefused(collect(keyed[0]!, UPDATED, { uid }), 'SUBSCRIPTIONS_PER_KEY', 30);
      // The token has 11 of its own 20 left, but its merchant's are spent.
      await expectRefused(collect(tokened, UPDATED, { uid }), 'SUBSCRIPTIONS_PER_KEY', 30);
      const overStream = await overSse(stack, stack.key, UPDATED, { uid });
      expect(overStream.first.errors[0].extensions).toMatchObject({
        code: 'TOO_MANY_SUBSCRIPTIONS',
        setting: 'SUBSCRIPTIONS_PER_KEY',
        limit: 30,
      });
      // The key is a secret: the refusal names the cap, never the key.
      expect(JSON.stringify(overStream.first)).not.toContain(stack.key);
      overStream.close();

      // Another merchant is not held to this one's cap.
      expectRunning(await started(collect(others, UPDATED, { uid: theirs })));

      // The stream closed: one slot back, for the key or any of its tokens.
      const open = await openSubscriptions(stack);
      stream.close();
      await waitUntil(
        async () => (await openSubscriptions(stack)) === open - 1,
        'the closed stream to give its slot back',
      );
      expectRunning(await started(collect(tokened, UPDATED, { uid })));
      expect(await metric(stack, 'delivery_graph_subscription_refusals_total', { cap: 'key' })).toBe(3);
      const text = await metricsText(stack);
      expect(text).not.toContain(stack.key);
      expect(text).not.toContain(token);
    } finally {
      for (const client of [...keyed, tokened, others]) await client.dispose();
    }
    await waitUntil(async () => (await openSubscriptions(stack)) === 0, 'every slot to come back');
  });

  it('gives a slot back when a subscription completes, fails or is refused after it started, through 200 cycles of one token', async () => {
    const token = await tokenFor(stack, [uid]);
    const client = wsClient(stack.app.url, token);
    try {
      // Refused after the slot was taken (NOT_FOUND: not one of the token's deliveries), many times over the cap.
      for (let i = 0; i < 30; i += 1) {
        const refused = collect(client, UPDATED, { uid: `00000000-0000-4000-8000-00000000000${i % 10}` });
        await refused.done;
        expect((refused.errors as any[]).map((error) => error.extensions?.code)).toEqual(['NOT_FOUND']);
      }
      // 200 started and completed by the client, on sockets and streams, ten at a time (half the cap).
      for (let round = 0; round < 20; round += 1) {
        const subs = await Promise.all(Array.from({ length: 8 }, () => started(collect(client, UPDATED, { uid }))));
        const streams = await Promise.all([0, 1].map(() => overSse(stack, token, UPDATED, { uid })));
        for (const sub of subs) expectRunning(sub);
        for (const stream of streams) expect(stream.first.data, JSON.stringify(stream.first)).toBeDefined();
        for (const sub of subs) sub.dispose();
        for (const stream of streams) stream.close();
        // The server hears of each end a moment later; every slot comes back, none is left behind.
        await waitUntil(() => stack.app.pipeline.subscriptions.open === 0, `every slot of round ${round} to come back`);
      }

      // One that completes by itself: the delivery reaches its end.
      const done = collect(client, UPDATED, { uid });
      await done.waitFor(1);
      for (let step = 0; step < 7; step += 1) await stack.sandbox.advance(uid);
      await done.done;
      expect(done.completed).toBe(true);
      expect(done.items.at(-1).deliveryUpdated.status).toBe('DROPOFF_COMPLETE');
    } finally {
      await client.dispose();
    }
    await waitUntil(async () => (await openSubscriptions(stack)) === 0, 'every slot to come back');
    // Nothing is kept of a caller whose subscriptions all ended.
    expect(stack.app.pipeline.subscriptions.ids).toBe(0);
    expect(stack.app.services.bus.listenerCount()).toBe(0);
  });
});

describe('subscriptions per client address', () => {
  /** SUBSCRIPTIONS_PER_ADDRESS=4; one proxy in front, so a test can speak from other addresses. */
  let stack: Stack;
  let uid: string;

  beforeAll(async () => {
    stack = await startStack({ env: { SUBSCRIPTIONS_PER_ADDRESS: '4', TRUST_PROXY: '1' } });
    uid = await book(stack);
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('holds the client tokens of one address to SUBSCRIPTIONS_PER_ADDRESS together; an accepted key and other addresses are not held to it', async () => {
    const tokens = await Promise.all(Array.from({ length: 5 }, () => tokenFor(stack, [uid])));
    const clients = tokens.map((token) => wsClient(stack.app.url, token));
    const merchant = wsClient(stack.app.url, stack.key);
    try {
      // Four tokens, one subscription each (three on sockets, one a stream): the address's four.
      for (const client of clients.slice(0, 3)) expectRunning(await started(collect(client, UPDATED, { uid })));
      const stream = await overSse(stack, tokens[3]!, UPDATED, { uid });
      expect(stream.first.data.deliveryUpdated.uid).toBe(uid);

      // A fifth token, with all of its own 20 left, from the same address.
      await expectRefused(collect(clients[4]!, UPDATED, { uid }), 'SUBSCRIPTIONS_PER_ADDRESS', 4);
      const refusedStream = await overSse(stack, tokens[4]!, UPDATED, { uid });
      expect(refusedStream.first.errors[0].extensions).toMatchObject({
        setting: 'SUBSCRIPTIONS_PER_ADDRESS',
        limit: 4,
      });
      refusedStream.close();

      // The same token from another address (behind the trusted proxy).
      const elsewhere = await overSse(stack, tokens[4]!, UPDATED, { uid }, '198.51.100.7');
      expect(elsewhere.first.data.deliveryUpdated.uid).toBe(uid);
      // A merchant key the upstream accepted answers for itself: the address's cap is not its own.
      for (let i = 0; i < 6; i += 1) expectRunning(await started(collect(merchant, UPDATED, { uid })));

      expect(await metric(stack, 'delivery_graph_subscription_refusals_total', { cap: 'address' })).toBe(2);
      stream.close();
      elsewhere.close();
    } finally {
      for (const client of [...clients, merchant]) await client.dispose();
    }
    await waitUntil(async () => (await openSubscriptions(stack)) === 0, 'every slot to come back');
  });
});

describe('Delivery.events in a subscription', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('is read from the store once per event for all the subscribers of a delivery, not once for each', async () => {
    const uid = await book(stack);
    const token = await tokenFor(stack, [uid]);
    const SUBSCRIBERS = 30;
    // Five sockets of the merchant key and one of a client token (of the same merchant), five subscriptions each.
    const clients = [
      ...Array.from({ length: 5 }, () => wsClient(stack.app.url, stack.key)),
      wsClient(stack.app.url, token),
    ];
    try {
      const attached = listenersAttached(stack.app.services.bus, SUBSCRIBERS);
      const subs = clients.flatMap((client) =>
        Array.from({ length: SUBSCRIBERS / clients.length }, () => collect(client, WITH_EVENTS, { uid })),
      );
      await attached;
      await Promise.all(subs.map((sub) => sub.waitFor(1)));

      // Every page read of this delivery's events from now on.
      const store = stack.app.services.store;
      const eventsAfter = store.eventsAfter.bind(store);
      const pageReads: number[] = [];
      store.eventsAfter = (
        afterSeq: number,
        limit: number,
        filter?: { uids?: readonly string[] },
      ): Promise<StoredEvent[]> => {
        if (filter?.uids?.includes(uid) && limit > 1) pageReads.push(afterSeq);
        return eventsAfter(afterSeq, limit, filter);
      };
      try {
        for (let step = 1; step <= 3; step += 1) {
          await stack.sandbox.advance(uid);
          await Promise.all(subs.map((sub) => sub.waitFor(1 + step)));
          expect(pageReads, `page reads after event ${step}`).toHaveLength(step);
          // Each subscriber's page holds the event its message is about, with cursors of its own key.
          for (const sub of subs) {
            const message = sub.items[step].deliveryUpdated;
            const edges = message.delivery.events.edges;
            expect(edges.at(-1).node.name).toBe(message.name);
            expect(edges).toHaveLength(subs[0]!.items[step].deliveryUpdated.delivery.events.edges.length);
          }
        }
      } finally {
        store.eventsAfter = eventsAfter;
      }
      // Each of the other subscribers had the page from the first one's read: its page, or its whole message
      // (src/realtime/fanout.ts).
      const { eventPages, fanout } = stack.app.services;
      expect(eventPages.counters.shared + (fanout?.counters.shared ?? 0)).toBeGreaterThanOrEqual(3 * (SUBSCRIBERS - 1));
    } finally {
      for (const client of clients) await client.dispose();
    }
  });
});
