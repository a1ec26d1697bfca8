// Retention, end to end, on the embedded SQLite store and on a real Redis: with
// EVENT_RETENTION=2s and IDEMPOTENCY_RETENTION=1s, what a merchant can read
// (replays, Delivery.events), book again (an idempotency key) and what the store
// holds (rows, keys) follow the retention, trimmed by the store's own timer.
// Then the schedule itself: one pass at a time, none after close.
import { exportPKCS8, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { RedisStore } from '../../src/store/redis.js';
import { TrimSchedule } from '../../src/store/retention.js';
import type { SqliteStore } from '../../src/store/sqlite.js';
import { hashKey } from '../../src/domain/merchant-key.js';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { deliveryInput, partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const withRedis = redisAvailable('retention.test.ts');

const CREATE = `mutation($input: DeliveryInput!, $key: String) {
  createDelivery(input: $input, idempotencyKey: $key) { ... on MutationCreateDeliverySuccess { data { uid } } ... on Error { code message } }
}`;
const HISTORY = `query($uid: ID!) { delivery(uid: $uid) { events { edges { cursor node { name receivedAt } } } } }`;
const EVENTS = `subscription($uids: [ID!], $after: String) { deliveryEvents(uids: $uids, after: $after) { cursor name } }`;
const READ = `query($uid: ID!) { delivery(uid: $uid) { uid } }`;
const BY_REFERENCE = `query($reference: String!) { deliveryByReference(partnerReference: $reference) { uid } }`;

const RETENTION_MS = 2_000;
/** Long enough for the store's timer (every 250 ms at these retentions) to pass over what expired. */
const WAIT = { timeout: 15_000, interval: 100 };

let privateKey: CryptoKey;
let privateKeyPem: string;
let redis: RedisServer | undefined;

beforeAll(async () => {
  const pair = await generateKeyPair('RS256', { extractable: true });
  privateKey = pair.privateKey as CryptoKey;
  privateKeyPem = await exportPKCS8(pair.privateKey);
  if (withRedis) redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

/** What the store holds, counted where it keeps it (SQLite rows, Redis keys and stream entries). */
async function footprint(
  stack: Stack,
): Promise<{ events: number; deliveries: number; owners: number; idempotency: number }> {
  const store = stack.app.services.store;
  if ('db' in store) {
    const count = (table: string) =>
      ((store as SqliteStore).db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
    return {
      events: count('events'),
      deliveries: count('delivery_state') + count('read_views'),
      owners: count('ownership'),
      idempotency: count('idempotency'),
    };
  }
  const { client, prefix } = store as RedisStore;
  const keys = (await client.keys(`${prefix}*`)).map((key) => key.slice(prefix.length));
  return {
    events: await client.xlen(`${prefix}log`),
    // Every per-delivery key: state, its events and its de-duplication entries.
    deliveries: keys.filter((key) => key.startsWith('delivery:')).length,
    owners: keys.filter((key) => key.startsWith('owner:')).length,
    idempotency: keys.filter((key) => key.startsWith('idem:')).length,
  };
}

const stores: Array<[string, boolean, () => Record<string, string>]> = [
  ['SQLite', true, () => ({})],
  ['Redis', withRedis, () => ({ REDIS_URL: redis!.url })],
];

describe.each(stores)('with EVENT_RETENTION=2s on %s', (_name, enabled, storeEnv) => {
  let stack: Stack;
  beforeAll(async () => {
    if (!enabled) return;
    stack = await startStack({
      sandbox: { privateKeyPem },
      env: { ...storeEnv(), EVENT_RETENTION: '2s', IDEMPOTENCY_RETENTION: '1s' },
    });
    // Every event here is posted by the test: it decides when each one arrives.
    stack.sandbox.setWebhookUrl(undefined);
  });
  afterAll(async () => {
    await stack?.stop();
  });
  const test = it.skipIf(!enabled);

  async function post(event: Record<string, unknown>): Promise<void> {
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

  async function book(idempotencyKey?: string): Promise<string> {
    const result = await stack.gql(CREATE, { input: deliveryInput(), key: idempotencyKey });
    expect(result.data?.createDelivery.data?.uid).toBeTruthy();
    return result.data.createDelivery.data.uid;
  }

  async function history(uid: string): Promise<Array<{ cursor: string; node: { name: string; receivedAt: string } }>> {
    const result = await stack.gql(HISTORY, { uid });
    expect(result.errors).toBeUndefined();
    return result.data.delivery.events.edges;
  }

  /**
   * What deliveryEvents(after:) replays for one delivery, up to a marker event
   * posted meanwhile: replayed or live, it comes after everything the log held
   * (the stream listens before it reads). Markers are left out.
   */
  async function replay(uid: string, after: string): Promise<string[]> {
    const client = wsClient(stack.app.url, stack.key);
    try {
      const sub = collect(client, EVENTS, { uids: [uid], after });
      const marker = `delivery.marker-${Math.random()}`;
      await post({ uid, event_name: marker, status: 'marker' });
      const names = await vi.waitFor(() => {
        const seen = sub.items.map((item) => item.deliveryEvents.name as string);
        if (!seen.includes(marker))
          throw new Error(`no marker yet: ${JSON.stringify(seen)}; errors ${JSON.stringify(sub.errors)}`);
        return seen;
      }, WAIT);
      return names.filter((name) => !name.startsWith('delivery.marker-'));
    } finally {
      await client.dispose();
    }
  }

  test('events older than the retention leave replays and Delivery.events; newer ones stay', async () => {
    const uid = await book();
    await post({ uid, event_name: 'delivery.created', status: 'old' });
    const [old] = await history(uid);
    expect(old!.node.name).toBe('delivery.created');

    // The store's own timer trims it, once it is older than 2 s.
    const goneAt = await vi.waitFor(async () => {
      expect(await history(uid)).toEqual([]);
      return Date.now();
    }, WAIT);
    // Never before its time.
    expect(Date.parse(old!.node.receivedAt)).toBeLessThanOrEqual(goneAt - RETENTION_MS);

    await post({ uid, event_name: 'delivery.assigned', status: 'new' });
    // A pass right now keeps what is younger than the retention.
    await (stack.app.services.store as SqliteStore | RedisStore).trimExpired();
    const recent = await history(uid);
    expect(recent.map((edge) => edge.node.name)).toEqual(['delivery.assigned']);
    // Replays from the start, or from the expired event's cursor, hold only what is left.
    expect(await replay(uid, '0')).toEqual(['delivery.assigned']);
    expect(await replay(uid, old!.cursor)).toEqual(['delivery.assigned']);
  });

  test('an idempotency key expires: the same key books again afterwards', async () => {
    const key = `retention-${Date.now()}`;
    const first = await book(key);
    expect(await book(key)).toBe(first);
    // A repeat before the expiry returns the first booking and books nothing; the first one after it books anew.
    const second = await vi.waitFor(async () => {
      const uid = await book(key);
      expect(uid).not.toBe(first);
      return uid;
    }, WAIT);
    expect(await book(key)).toBe(second);
  });

  test('ownership records expire with the events', async () => {
    const uid = await book();
    const store = stack.app.services.store;
    expect(await store.ownerOf(uid)).toBe(hashKey(stack.key));
    await vi.waitFor(async () => expect(await store.ownerOf(uid)).toBeUndefined(), WAIT);
  });

  test('an owner record lives while what proves it keeps coming: its webhooks, its merchant reading it by reference', async () => {
    const uid = await book();
    const reference = `R-retention-${Date.now()}`;
    const order = stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody(reference));
    const byReference = async () => (await stack.gql(BY_REFERENCE, { reference })).data?.deliveryByReference?.uid;
    expect(await byReference()).toBe(order.uid);
    const store = stack.app.services.store;
    const owner = hashKey(stack.key);
    const started = Date.now();
    // Proofs for more than twice the retention, a few per retention: part of the schedule, not a wait for a result.
    for (let n = 0; Date.now() - started < 2.5 * RETENTION_MS; n += 1) {
      await post({
        uid,
        event_name: 'location.pickup_enroute',
        status: `tick ${n}`,
        driver_location: { lat: n, lng: 1 },
      });
      expect(await byReference()).toBe(order.uid);
      // The delivery whose webhooks keep coming stays its merchant's, and readable, all along.
      expect((await stack.gql(READ, { uid })).data?.delivery, `after ${Date.now() - started} ms`).toEqual({ uid });
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
    expect(await store.ownerOf(uid)).toBe(owner);
    expect(await store.ownerOf(order.uid)).toBe(owner);
    // Once the proofs stop, each goes a retention after its last.
    await vi.waitFor(async () => expect(await store.ownerOf(uid)).toBeUndefined(), WAIT);
    await vi.waitFor(async () => expect(await store.ownerOf(order.uid)).toBeUndefined(), WAIT);
  });

  test('the data stays bounded under a stream of events, and nothing is left once it stops', async () => {
    const uids = Array.from({ length: 8 }, (_, n) => `stream-${Date.now()}-${n}`);
    const first = { uid: uids[0]!, event_name: 'delivery.created', status: 'first' };
    await post(first);
    let sent = 1;
    let held = 0;
    // A stream, paced by the facade's answers, until the first event has been trimmed while it runs.
    await vi.waitFor(async () => {
      await Promise.all(
        Array.from({ length: 8 }, (_, n) =>
          post({
            uid: uids[n]!,
            event_name: 'location.dropoff_enroute',
            status: `tick ${sent + n}`,
            driver_location: { lat: n, lng: sent },
          }),
        ),
      );
      sent += 8;
      const log = await stack.app.services.store.eventsAfter(0, 1, { uids: [uids[0]!] });
      held = (await footprint(stack)).events;
      expect(log[0]?.name).not.toBe('delivery.created');
    }, WAIT);
    // The oldest went while newer ones kept coming: the store held fewer than were sent.
    expect(held).toBeLessThan(sent);
    // Once the stream stops, every event, delivery state and de-duplication entry goes.
    await vi.waitFor(async () => expect(await footprint(stack)).toMatchObject({ events: 0, deliveries: 0 }), WAIT);
  });

  test('everything else expires too: no ownership or idempotency record is left', async () => {
    await vi.waitFor(
      async () => expect(await footprint(stack)).toEqual({ events: 0, deliveries: 0, owners: 0, idempotency: 0 }),
      WAIT,
    );
  });
});

describe('the trim schedule', () => {
  it('runs one pass at a time, and none after stop()', async () => {
    let running = 0;
    let most = 0;
    let passes = 0;
    let toldToStop = false;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const schedule = new TrimSchedule(async (stopping) => {
      running += 1;
      most = Math.max(most, running);
      passes += 1;
      await gate;
      // A pass checks between its steps: stop() was called meanwhile.
      toldToStop = stopping();
      running -= 1;
    }, 60_000);
    const first = schedule.run();
    const second = schedule.run();
    await vi.waitFor(() => expect(passes).toBe(1));
    const stopped = schedule.stop();
    release();
    await Promise.all([first, second, stopped]);
    // The second was asked for while the first ran: it never started, the schedule being stopped by then.
    expect({ passes, most, toldToStop }).toEqual({ passes: 1, most: 1, toldToStop: true });
    await schedule.run();
    expect(passes).toBe(1);
  });
});
