// deliveryEvents without uids replays the whole log (after: "0") and then follows
// it live: every merchant's events pass by, and only the caller's may be sent.
// The facade's owner records decide first, with no upstream call: a delivery
// recorded as another merchant's is left out, one recorded as the caller's is sent.
// Only a delivery with no record (a partner order) is asked of the upstream, at
// most SUBSCRIPTION_ACCESS_CHECKS times a minute per subscription and one unit of
// the key's RATE_LIMIT_PER_MINUTE each; past either its events are skipped, and
// /metrics counts them. The sandbox's request log counts what did reach the
// upstream. On the embedded store and on Redis. The sandbox scopes reads to the
// key here, and the facade is told so (UPSTREAM_READ_SCOPE=key: the upstream's
// reads decide); on a platform-scoped upstream see identity.test.ts.
import { randomBytes } from 'node:crypto';
import { exportPKCS8, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { callerCursors } from '../../src/domain/cursor.js';
import { DEFAULT_PLATFORM_ID } from '@delivery-graph/sandbox';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { deliveryInput, partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const REPLAY = `subscription($after: String) { deliveryEvents(after: $after) { cursor uid name statusText } }`;

/** Deliveries of another merchant, booked through the facade, and events posted for each of them. */
const FOREIGN = 25;
const ROUNDS = 4;
/** SUBSCRIPTION_ACCESS_CHECKS of the first stack. */
const CHECKS = 3;
/** RATE_LIMIT_PER_MINUTE of the second stack. */
const PER_MINUTE = 4;

const merchant = (name: string) => ({
  key: `sk_test_${name}_${randomBytes(12).toString('hex')}`,
  name,
  platformId: DEFAULT_PLATFORM_ID,
});

let privateKey: CryptoKey;
let privateKeyPem: string;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey as CryptoKey;
  privateKeyPem = await exportPKCS8(pair.privateKey);
});

interface Replayed {
  uid: string;
  name: string;
  statusText: string | null;
}

async function book(stack: Stack, key: string): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput() }, key);
  return result.data.createDelivery.data.uid;
}

/**
 * Partner orders seeded at the sandbox, of which the facade has no owner record;
 * one at a time, so that their delivery.created events are stored in this order.
 */
async function partnerOrders(stack: Stack, key: string, count: number): Promise<string[]> {
  const uids: string[] = [];
  for (let i = 0; i < count; i += 1) {
    uids.push(stack.sandbox.seedPartnerOrder(key, partnerOrderBody(`R-${randomBytes(4).toString('hex')}`)).uid);
    await stack.sandbox.idle();
  }
  return uids;
}

/** Signs and posts one event the way the upstream would. */
async function post(stack: Stack, event: Record<string, unknown>): Promise<void> {
  const token = await new SignJWT({ payload: event })
    .setProtectedHeader({ alg: 'RS256' })
    .setIssuer(stack.sandbox.issuer)
    .setExpirationTime('5m')
    .sign(privateKey);
  const response = await fetch(`${stack.app.url}/webhooks`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}` },
    body: JSON.stringify(event),
  });
  expect(response.status).toBe(200);
}

/**
 * Replays the log as `key` (from the start, or after `after`), up to a marker event
 * of `own` (a delivery the key is sent events of) posted once the subscription
 * started: replayed or live, it is the last event of the log, so once it arrived
 * every earlier event was either sent or left out. Markers are not returned.
 */
async function replay(
  stack: Stack,
  key: string,
  own: string,
  after = '0',
): Promise<{ events: Replayed[]; errors: unknown[] }> {
  const client = wsClient(stack.app.url, key);
  try {
    const sub = collect<{ deliveryEvents: Replayed }>(client, REPLAY, { after });
    const marker = `marker ${Math.random()}`;
    await post(stack, { uid: own, event_name: 'delivery.marker', status: marker });
    await sub.waitForItem((item) => item.deliveryEvents.statusText === marker, 15_000);
    return {
      events: sub.items.map((item) => item.deliveryEvents).filter((event) => event.name !== 'delivery.marker'),
      errors: sub.errors,
    };
  } finally {
    await client.dispose();
  }
}

/** The key's cursor for the end of the log as it is now: a replay after it sees only what comes next. */
async function cursorNow(stack: Stack, key: string): Promise<string> {
  const { store, merchants } = stack.app.services;
  return (await callerCursors(store, await merchants.of(key))).cursorOf(await store.lastSeq());
}

/** The upstream requests since `mark` (a sandbox requestCount), as "METHOD path". */
const upstreamSince = (stack: Stack, mark: number) =>
  stack.sandbox.requestsSince(mark).map((request) => `${request.method} ${request.path}`);
/** Those that name one of `uids`. */
/**
 * The one upstream call a deliveryEvents subscription makes to confirm its key (src/realtime/reconcile.ts, confirmKey).
 */
const KEY_CHECK = `GET /api/v1/${DEFAULT_PLATFORM_ID}/availability`;
const upstreamAbout = (stack: Stack, mark: number, uids: string[]) =>
  upstreamSince(stack, mark).filter((request) => uids.some((uid) => request.includes(uid)));

/** One sample of /metrics by name and labels; 0 when absent. */
async function metric(stack: Stack, name: string, labels: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${stack.app.url}/metrics`)).text();
  const wanted = Object.entries(labels).map(([label, value]) => `${label}="${value}"`);
  const line = text
    .split('\n')
    .find((candidate) => candidate.startsWith(`${name}{`) && wanted.every((pair) => candidate.includes(pair)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

const withRedis = redisAvailable('replay-access.test.ts');

for (const storeName of ['the embedded store', 'Redis'] as const) {
  describe.skipIf(storeName === 'Redis' && !withRedis)(`deliveryEvents(after: "0") on ${storeName}`, () => {
    /** One Redis per stack: they share nothing (not even pub/sub channels). */
    const redis: RedisServer[] = [];
    /** Owner records and SUBSCRIPTION_ACCESS_CHECKS. */
    let stack: Stack;
    /** A small RATE_LIMIT_PER_MINUTE. */
    let limited: Stack;
    const [caller, other, third] = [merchant('caller'), merchant('other'), merchant('third')];
    /** The second stack's merchant, and one more the stack helper wants. */
    const [budgeted, idle] = [merchant('budgeted'), merchant('idle')];

    beforeAll(async () => {
      if (storeName === 'Redis') redis.push(...(await Promise.all([startRedisServer(), startRedisServer()])));
      const store = (n: number): Record<string, string> => (redis[n] ? { REDIS_URL: redis[n].url } : {});
      const scope = { UPSTREAM_READ_SCOPE: 'key' };
      stack = await startStack({
        sandbox: { privateKeyPem, merchants: [caller, other, third] },
        env: { ...store(0), ...scope, SUBSCRIPTION_ACCESS_CHECKS: String(CHECKS) },
      });
      limited = await startStack({
        sandbox: { privateKeyPem, merchants: [budgeted, idle] },
        env: { ...store(1), ...scope, RATE_LIMIT_PER_MINUTE: String(PER_MINUTE) },
      });
    });
    afterAll(async () => {
      await stack?.stop();
      await limited?.stop();
      for (const server of redis) await server.stop();
    });

    it('leaves out every event of another merchant’s deliveries without asking the upstream about any, and sends the caller’s own', async () => {
      const theirs = await Promise.all(Array.from({ length: FOREIGN }, () => book(stack, other.key)));
      const mine = await book(stack, caller.key);
      // Their delivery.created webhooks are stored too.
      await stack.sandbox.idle();
      for (let round = 0; round < ROUNDS; round += 1) {
        await Promise.all(
          theirs.map((uid) => post(stack, { uid, event_name: 'delivery.assigned', status: `theirs ${round}` })),
        );
        await post(stack, { uid: mine, event_name: 'delivery.assigned', status: `mine ${round}` });
      }

      const mark = stack.sandbox.requestCount;
      const { events, errors } = await replay(stack, caller.key, mine);
      expect(errors).toEqual([]);
      // None of the 125 events of theirs, and no upstream request but the key's confirmation: each is left out on its
      // owner record.
      expect(events.filter((event) => event.uid !== mine)).toEqual([]);
      expect(upstreamSince(stack, mark)).toEqual([KEY_CHECK]);
      // Every event of mine, in log order: the sandbox's delivery.created, then the ones posted.
      expect(events.map((event) => event.statusText)).toEqual([
        'Created',
        ...Array.from({ length: ROUNDS }, (_, round) => `mine ${round}`),
      ]);

      // The other merchant's replay is the mirror image: its own 125 events, none of mine, no upstream request.
      const theirMark = stack.sandbox.requestCount;
      const theirReplay = await replay(stack, other.key, theirs[0]!);
      expect(theirReplay.events.filter((event) => !theirs.includes(event.uid))).toEqual([]);
      expect(theirReplay.events).toHaveLength(FOREIGN * (ROUNDS + 1));
      expect(upstreamSince(stack, theirMark)).toEqual([KEY_CHECK]);
    });

    it(`asks the upstream about at most SUBSCRIPTION_ACCESS_CHECKS (${CHECKS}) deliveries with no owner record, skips the rest and counts them, and still sends the caller’s recorded ones`, async () => {
      // In log order: five partner orders of the caller, ten of another merchant, then a booking of the caller's.
      const ownOrders = await partnerOrders(stack, third.key, 5);
      const foreignOrders = await partnerOrders(stack, other.key, 10);
      const booked = await book(stack, third.key);
      await stack.sandbox.idle();

      const [allowedBefore, withheldBefore] = await Promise.all([
        metric(stack, 'delivery_graph_access_checks_total', { outcome: 'allowed' }),
        metric(stack, 'delivery_graph_access_checks_withheld_total', { reason: 'subscription' }),
      ]);
      const mark = stack.sandbox.requestCount;
      const { events, errors } = await replay(stack, third.key, booked);
      expect(errors).toEqual([]);
      // The first three orders were asked (a platform read, not found, then a partner read) and sent.
      const asked = ownOrders.slice(0, CHECKS);
      expect(upstreamSince(stack, mark)).toEqual([
        KEY_CHECK,
        ...asked.flatMap((uid) => [
          `GET /api/v1/${DEFAULT_PLATFORM_ID}/deliveries/${uid}`,
          `GET /api/v1/orders/${uid}`,
        ]),
      ]);
      expect(events.map((event) => event.uid)).toEqual([...asked, booked]);
      // The other two of the caller's and all ten of theirs were skipped, one withheld check each, nothing asked about
      // them.
      expect(upstreamAbout(stack, mark, [...ownOrders.slice(CHECKS), ...foreignOrders])).toEqual([]);
      expect(await metric(stack, 'delivery_graph_access_checks_total', { outcome: 'allowed' })).toBe(
        allowedBefore + CHECKS,
      );
      expect(await metric(stack, 'delivery_graph_access_checks_withheld_total', { reason: 'subscription' })).toBe(
        withheldBefore + 2 + 10,
      );
    });

    it('records no owner from a check of an event passing by; a read naming the delivery does, and after a restart nothing is asked about it, for that key or another', async () => {
      const [from, otherFrom] = [await cursorNow(stack, third.key), await cursorNow(stack, other.key)];
      const orders = await partnerOrders(stack, third.key, 2);
      const otherOwn = await book(stack, other.key);
      await stack.sandbox.idle();
      const first = await replay(stack, third.key, orders[0]!, from);
      expect(first.events.map((event) => event.uid)).toEqual(orders);

      // A new process: no cached answer, only what the store keeps. Passing by claimed nothing: the checks are made
      // again.
      await stack.restart();
      let mark = stack.sandbox.requestCount;
      const again = await replay(stack, third.key, orders[0]!, from);
      expect(again.events.map((event) => event.uid)).toEqual(orders);
      expect(upstreamAbout(stack, mark, orders)).toHaveLength(orders.length * 2);

      // The owner reads its orders by uid: now they are recorded as its own.
      for (const uid of orders) {
        const read = await stack.gql(
          `query($uid: ID!) { delivery(uid: $uid, group: PARTNER) { uid } }`,
          { uid },
          third.key,
        );
        expect(read.data.delivery.uid).toBe(uid);
      }
      await stack.app.services.owners.flush();
      await stack.restart();
      mark = stack.sandbox.requestCount;
      const recorded = await replay(stack, third.key, orders[0]!, from);
      expect(recorded.errors).toEqual([]);
      expect(recorded.events.map((event) => event.uid)).toEqual(orders);
      expect(upstreamAbout(stack, mark, orders)).toEqual([]);
      mark = stack.sandbox.requestCount;
      const theirs = await replay(stack, other.key, otherOwn, otherFrom);
      expect(theirs.events.map((event) => event.uid)).toEqual([otherOwn]);
      expect(upstreamAbout(stack, mark, orders)).toEqual([]);
    });

    it(`takes one unit of the key’s RATE_LIMIT_PER_MINUTE (${PER_MINUTE}) per upstream check, and skips the rest once it is spent`, async () => {
      const orders = await partnerOrders(limited, budgeted.key, 6);
      const mark = limited.sandbox.requestCount;
      // The subscription is one operation; three checks spend the rest of the minute's four.
      const { events, errors } = await replay(limited, budgeted.key, orders[0]!);
      expect(errors).toEqual([]);
      const asked = orders.slice(0, PER_MINUTE - 1);
      expect(events.map((event) => event.uid)).toEqual(asked);
      expect(upstreamAbout(limited, mark, orders)).toEqual(
        asked.flatMap((uid) => [`GET /api/v1/${DEFAULT_PLATFORM_ID}/deliveries/${uid}`, `GET /api/v1/orders/${uid}`]),
      );
      expect(await metric(limited, 'delivery_graph_access_checks_withheld_total', { reason: 'rate_limit' })).toBe(
        orders.length - asked.length,
      );
      // Those checks were operations of the key: its next one is refused.
      const next = await limited.gql('{ availability { group } }', {}, budgeted.key);
      expect(next.errors?.[0]?.extensions?.code).toBe('RATE_LIMITED');
    });
  });
}
