// The Store contract, run against both stores: the embedded SQLite file and
// Redis (a private redis-server, or REDIS_TEST_URL). De-duplication, milestone
// ranking, the log and its per-delivery reads, idempotency states and ownership
// must behave the same; every (state, event name) case must be judged as the
// domain's transition() judges it (for Redis: by the real Lua append script); a
// property test then feeds the same random batches to both and compares every answer.
// With a retention, both forget the same things at the same time (Date faked where
// the stores read it; Redis TTLs run on real time, so those tests wait for them).
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { bookingMarker } from '../../src/domain/booking-marker.js';
import { advance, courierIdentity, factsOf, transition, type MilestoneState } from '../../src/domain/milestones.js';
import { knownAfter } from '../../src/domain/delivery-view.js';
import { fromDeliveryView } from '../../src/mapping/delivery.js';
import { RedisStore } from '../../src/store/redis.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { Retention } from '../../src/store/retention.js';
import { OWNER_CLAIMS_KEPT, PENDING_EXPIRY_MS, type Store, type StoredEvent } from '../../src/store/store.js';
import { DELIVERY_EVENT_NAMES, LOCATION_EVENT_NAMES, type WireWebhookEvent } from '../../src/upstream/wire.js';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';

// A given Redis (REDIS_TEST_URL, as .ci/run exports) needs no local binary.
const withRedis = Boolean(process.env.REDIS_TEST_URL) || redisAvailable('store-contract.test.ts');

let redisServer: RedisServer | undefined;
let redisUrl: string | undefined;
const clients: Redis[] = [];
const dirs: string[] = [];

beforeAll(async () => {
  if (!withRedis) return;
  redisUrl = process.env.REDIS_TEST_URL;
  if (!redisUrl) {
    redisServer = await startRedisServer();
    redisUrl = redisServer.url;
  }
});
afterAll(async () => {
  for (const client of clients) client.disconnect();
  await redisServer?.stop();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

function sqliteStore(retention?: Retention): Store {
  const dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-contract-'));
  dirs.push(dir);
  return new SqliteStore(dir, { retention });
}

/** A fresh key space on the shared server: a prefix of its own. */
function redisStore(retention?: Retention): Store {
  const client = new Redis(redisUrl!, { lazyConnect: false });
  clients.push(client);
  return new RedisStore(client, { prefix: `contract:${randomUUID()}:`, ownsClient: true, retention });
}

/**
 * The same data opened again: the same SQLite file (closed first: one process
 * holds a file at a time, data-dir-lock.ts), or the same prefix on the same Redis.
 */
async function reopen(store: Store): Promise<Store> {
  if (store instanceof SqliteStore) {
    await store.close();
    return new SqliteStore(path.dirname(store.db.name));
  }
  const client = new Redis(redisUrl!);
  clients.push(client);
  return new RedisStore(client, { prefix: (store as RedisStore).prefix, ownsClient: true });
}

/** One trim pass now, as the store's timer runs them. */
const trim = (store: Store) => (store as SqliteStore | RedisStore).trimExpired();

/**
 * What the store holds, counted where it holds it. For SQLite the de-duplication
 * entries and per-delivery indexes are the event rows; in Redis they are keys of their own.
 */
async function footprint(store: Store): Promise<{
  events: number;
  dedup: number;
  indexed: number;
  deliveries: number;
  owners: number;
  idempotency: number;
}> {
  if (store instanceof SqliteStore) {
    const count = (table: string) => (store.db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
    const events = count('events');
    return {
      events,
      dedup: events,
      indexed: events,
      deliveries: count('delivery_state') + count('read_views'),
      owners: count('ownership'),
      idempotency: count('idempotency'),
    };
  }
  const redis = store as RedisStore;
  const keys = await redis.client.keys(`${redis.prefix}*`);
  const named = (pattern: RegExp) => keys.filter((key) => pattern.test(key.slice(redis.prefix.length)));
  const sum = async (list: string[], count: (key: string) => Promise<number>) =>
    (await Promise.all(list.map(count))).reduce((a, b) => a + b, 0);
  return {
    events: await redis.client.xlen(`${redis.prefix}log`),
    dedup: await sum(named(/^delivery:.*:dedup$/), (key) => redis.client.hlen(key)),
    indexed: await sum(named(/^delivery:.*:events$/), (key) => redis.client.zcard(key)),
    deliveries: named(/^delivery:/).filter((key) => !/:(dedup|events)$/.test(key)).length,
    owners: named(/^owner:/).length,
    idempotency: named(/^idem:/).length,
  };
}

const AT = '2030-05-01T10:00:00.000Z';

function event(
  uid: string,
  name: string,
  extra: Record<string, unknown> = {},
): { payload: WireWebhookEvent; receivedAt: string } {
  return {
    payload: { uid, event_name: name, status: name.slice(name.indexOf('.') + 1), ...extra } as WireWebhookEvent,
    receivedAt: AT,
  };
}

/** A poll event's markers: a read made at `basis` (src/realtime/reconcile.ts eventFromRead). */
const poll = (basis: number, confirm = false) => ({
  facade_source: 'poll',
  facade_read_basis: basis,
  ...(confirm ? { facade_confirms: true } : {}),
});
/** A read newer than anything stored, one older than anything, and one that confirms a cancel or failure. */
const NEW_READ = poll(1e9);
const OLD_READ = poll(0);
const CONFIRMING = poll(1e9, true);

/** A step of a path: an event name, or a name with its payload's extra fields (a poll event's markers). */
type PathStep = string | [name: string, extra: Record<string, unknown>];
const stepEvent = (uid: string, step: PathStep, extra: Record<string, unknown> = {}) =>
  typeof step === 'string' ? event(uid, step, extra) : event(uid, step[0], { ...step[1], ...extra });
const stepLabel = (step: PathStep) => {
  if (typeof step === 'string') return step;
  const [name, extra] = step;
  const read =
    extra.facade_source === 'poll'
      ? `read${extra.facade_confirms ? ', confirming' : ''}${extra.facade_read_basis === 0 ? ', old' : ''}`
      : undefined;
  const courier =
    extra.driver_id !== undefined || extra.driver_name !== undefined
      ? `courier ${String(extra.driver_id ?? '-')}/${String(extra.driver_name ?? '-')}`
      : undefined;
  return `${name} (${[read, courier].filter(Boolean).join(', ')})`;
};

/** Couriers as events and reads name them: an id and a name, or (reads keep driver_id null) a name alone. */
const ANN = { driver_id: 1, driver_name: 'Ann' };
const ANN_BY_NAME = { driver_name: 'Ann' };
const BOB = { driver_id: 2, driver_name: 'Bob' };
const BOB_BY_NAME = { driver_name: 'Bob' };

/** Event sequences that reach every state the rule can produce (and none). */
const STATE_PATHS: PathStep[][] = [
  [],
  ...[
    'created',
    'assigned',
    'pickup_enroute',
    'pickup_arrived',
    'pickup_complete',
    'dropoff_enroute',
    'dropoff_arrived',
    'dropoff_complete',
  ].map((m) => [`delivery.${m}`]),
  ['delivery.canceled'],
  ['delivery.assigned', 'delivery.failed'],
  ['delivery.pickup_arrived', 'delivery.canceled'],
  ['delivery.pickup_complete', 'delivery.failed'],
  ['delivery.dropoff_arrived', 'delivery.canceled'],
  ['delivery.pickup_complete', 'delivery.failed', 'delivery.return_in_progress'],
  ['delivery.dropoff_enroute', 'delivery.canceled', 'delivery.return_in_progress', 'delivery.returned'],
  ['delivery.mystery'],
  // A cancel before pickup, then evidence of the pickup arriving late.
  ['delivery.pickup_arrived', 'delivery.canceled', 'location.pickup_complete'],
  // A cancel before pickup that a read confirmed: final.
  ['delivery.assigned', 'delivery.canceled', ['delivery.canceled', CONFIRMING]],
  // Delivered, then read as failed; failed, then read delivered (a second attempt); a read of the way after a failure
  // changes nothing.
  ['delivery.dropoff_complete', ['delivery.failed', NEW_READ]],
  ['delivery.pickup_complete', 'delivery.failed', ['delivery.dropoff_complete', NEW_READ]],
  ['delivery.pickup_complete', 'delivery.failed', ['delivery.dropoff_enroute', NEW_READ]],
  // Polling alone: reads only.
  [
    ['delivery.created', NEW_READ],
    ['delivery.canceled', NEW_READ],
  ],
  // With couriers: a cancel by the assigned courier, a confirming read naming another, a failure after a reassignment.
  [
    ['delivery.assigned', ANN],
    ['delivery.canceled', ANN],
  ],
  [
    ['delivery.assigned', ANN],
    ['delivery.canceled', ANN],
    ['delivery.canceled', { ...CONFIRMING, ...BOB_BY_NAME }],
  ],
  [
    ['delivery.pickup_complete', ANN],
    ['delivery.assigned', BOB],
    ['delivery.failed', BOB],
  ],
  [
    ['delivery.dropoff_complete', ANN],
    ['delivery.failed', { ...NEW_READ, ...BOB_BY_NAME }],
  ],
];
/** Every documented name, some in other cases, unknown ones and a non-delivery one. */
const JUDGED_NAMES = [
  ...DELIVERY_EVENT_NAMES,
  ...LOCATION_EVENT_NAMES,
  'location.created',
  'Delivery.Failed',
  'DELIVERY.RETURN_IN_PROGRESS',
  'Location.Return_In_Progress',
  'delivery.mystery',
  'other.assigned',
  'ping',
];
/** Poll events judged after each path: reads newer than the state, older ones, confirming ones. */
const JUDGED_READS: PathStep[] = [
  ...DELIVERY_EVENT_NAMES.map((name): PathStep => [name, NEW_READ]),
  ['delivery.canceled', CONFIRMING],
  ['delivery.failed', CONFIRMING],
  ['delivery.dropoff_complete', OLD_READ],
  ['delivery.returned', OLD_READ],
  ['location.dropoff_enroute', NEW_READ],
  // Reads that name a courier: the same one, another, by name alone (as reads do), confirming or not, newer or older.
  ['delivery.canceled', { ...CONFIRMING, ...BOB_BY_NAME }],
  ['delivery.failed', { ...CONFIRMING, ...BOB }],
  ['delivery.canceled', { ...CONFIRMING, ...ANN_BY_NAME }],
  ['delivery.dropoff_complete', { ...NEW_READ, ...ANN_BY_NAME }],
  ['delivery.dropoff_complete', { ...NEW_READ, ...BOB }],
  ['delivery.pickup_enroute', { ...NEW_READ, ...BOB_BY_NAME }],
  ['delivery.returned', { ...NEW_READ, ...ANN }],
  ['delivery.dropoff_arrived', { ...OLD_READ, ...BOB_BY_NAME }],
];

/** Writes a state as an earlier version of the store may have left it (only SQLite rows and Redis hashes hold one). */
async function seedState(store: Store, uid: string, state: MilestoneState): Promise<void> {
  if (store instanceof SqliteStore) {
    store.db
      .prepare('INSERT INTO delivery_state (uid, rank, terminal, seq) VALUES (?, ?, ?, 0)')
      .run(uid, state.rank, state.terminal ? 1 : 0);
  } else if (store instanceof RedisStore) {
    await store.client.hset(
      `${store.prefix}delivery:${uid}`,
      'rank',
      String(state.rank),
      'terminal',
      state.terminal ? '1' : '0',
      'seq',
      '0',
    );
  }
}

const kinds: Array<[string, (retention?: Retention) => Store, boolean]> = [
  ['SqliteStore', sqliteStore, true],
  ['RedisStore', redisStore, withRedis],
];

describe.each(kinds)('%s', (_name, makeStore, enabled) => {
  const test = it.skipIf(!enabled);
  let store: Store;
  // Closed at the end, each: a store with a retention runs a timer until then.
  const opened: Store[] = [];
  const open = (retention?: Retention) => {
    const made = makeStore(retention);
    opened.push(made);
    return made;
  };
  const fresh = () => (store = open());
  afterAll(async () => {
    for (const each of opened) await each.close();
  });

  test('starts empty: lastSeq 0, no events, no latest event, no owner', async () => {
    fresh();
    expect(await store.lastSeq()).toBe(0);
    expect(await store.eventsAfter(0, 10)).toEqual([]);
    expect(await store.eventsAfter(0, 10, { uids: ['u'] })).toEqual([]);
    expect(await store.latestEvent('u', 'delivery')).toBeUndefined();
    expect(await store.latestEvent('u', 'location')).toBeUndefined();
    expect(await store.ownerOf('u')).toBeUndefined();
  });

  test('stores each (uid, name, canonical payload) once: a repeat, even with its keys reordered, is a duplicate of the first', async () => {
    fresh();
    const created = event('d1', 'delivery.created', { platform_payload: { a: 1, b: [1, { c: 2, d: 3 }] } });
    const [first] = await store.appendEvents([created]);
    expect(first).toEqual({
      duplicate: false,
      event: {
        seq: 1,
        uid: 'd1',
        name: 'delivery.created',
        statusText: 'created',
        receivedAt: AT,
        stale: false,
        courierOnly: false,
        // The verdict: it moved the milestone (the delivery's first).
        moved: true,
        payload: created.payload,
      },
    });

    const reordered = {
      payload: JSON.parse(
        '{"platform_payload":{"b":[1,{"d":3,"c":2}],"a":1},"status":"created","event_name":"delivery.created","uid":"d1"}',
      ),
      receivedAt: '2031-01-01T00:00:00.000Z',
    };
    const [again] = await store.appendEvents([reordered]);
    // The first one's record, receivedAt included.
    expect(again).toEqual({ duplicate: true, event: first!.event });

    // Other payload, other uid, other name: new events. Within one batch, a repeat is already a duplicate.
    const other = event('d1', 'delivery.created', { platform_payload: { a: 2 } });
    const results = await store.appendEvents([
      other,
      event('d2', 'delivery.created'),
      other,
      event('d1', 'location.created'),
    ]);
    expect(results.map((r) => [r.event.seq, r.duplicate])).toEqual([
      [2, false],
      [3, false],
      [2, true],
      [4, false],
    ]);
    expect(await store.lastSeq()).toBe(4);
    expect((await store.eventsAfter(0, 100)).map((e) => e.seq)).toEqual([1, 2, 3, 4]);
  });

  test('ranks milestones: late, repeated and post-terminal events are stale and move nothing', async () => {
    fresh();
    const sequence: Array<[string, Record<string, unknown>, boolean]> = [
      ['location.assigned_driver', { driver_location: { lat: 1, lng: 1 } }, false], // no state yet
      ['delivery.created', {}, false],
      ['delivery.pickup_complete', {}, false],
      ['delivery.assigned', {}, true], // below the current rank
      ['delivery.pickup_complete', { n: 2 }, true], // a repeat of the current milestone
      ['location.pickup_enroute', { driver_location: { lat: 2, lng: 2 } }, true], // a position from an earlier milestone
      ['location.pickup_complete', { driver_location: { lat: 3, lng: 3 } }, false], // positions may repeat their milestone
      ['delivery.something_new', {}, false], // unknown milestone: not ranked
      ['delivery.return_in_progress', {}, false], // 9 after 4: a return implies a pickup
      ['delivery.dropoff_arrived', {}, true], // 6 below 9
      ['delivery.returned', { driver_location: { lat: 4, lng: 4 } }, false], // terminal
      ['delivery.canceled', {}, true], // after a terminal one
      ['location.dropoff_complete', { driver_location: { lat: 5, lng: 5 } }, true],
      ['delivery.whatever', {}, true],
    ];
    const results = await store.appendEvents(sequence.map(([name, extra]) => event('r1', name, extra)));
    expect(results.map((r) => [r.event.name, r.event.stale])).toEqual(sequence.map(([name, , stale]) => [name, stale]));
    expect(results.every((r) => !r.duplicate)).toBe(true);

    // The latest non-stale delivery.* event, and the latest non-stale one that carries a position.
    expect((await store.latestEvent('r1', 'delivery'))?.name).toBe('delivery.returned');
    expect(await store.latestEvent('r1', 'location')).toEqual(results[10]!.event);

    // One at a time gives the same answers as one batch.
    const single = makeStore();
    try {
      const oneByOne = [];
      for (const [name, extra] of sequence) oneByOne.push(...(await single.appendEvents([event('r1', name, extra)])));
      expect(oneByOne.map((r) => r.event.stale)).toEqual(sequence.map(([, , stale]) => stale));
    } finally {
      await single.close();
    }
  });

  test('the return path: after a failure or cancel past pickup, return_in_progress and returned are accepted; returned ends it', async () => {
    fresh();
    for (const notDelivered of ['delivery.failed', 'delivery.canceled']) {
      const uid = `back:${notDelivered}`;
      const sequence: Array<[string, Record<string, unknown>, boolean]> = [
        ['delivery.created', {}, false],
        ['delivery.pickup_complete', {}, false],
        ['delivery.dropoff_enroute', { driver_location: { lat: 1, lng: 1 } }, false],
        [notDelivered, { driver_location: { lat: 2, lng: 2 } }, false],
        ['delivery.dropoff_arrived', {}, true], // late: the delivery will not be delivered
        ['location.dropoff_enroute', { driver_location: { lat: 3, lng: 3 } }, true],
        ['location.return_in_progress', { driver_location: { lat: 4, lng: 4 } }, false],
        ['delivery.return_in_progress', { driver_location: { lat: 5, lng: 5 } }, false],
        ['location.return_in_progress', { driver_location: { lat: 6, lng: 6 } }, false],
        ['delivery.failed', { n: 2 }, true],
        ['delivery.returned', {}, false],
        ['location.return_in_progress', { driver_location: { lat: 7, lng: 7 } }, true],
        ['delivery.returned', { n: 2 }, true],
      ];
      const results = await store.appendEvents(sequence.map(([name, extra]) => event(uid, name, extra)));
      expect(results.map((r) => [r.event.name, r.event.stale])).toEqual(
        sequence.map(([name, , stale]) => [name, stale]),
      );
      expect((await store.latestEvent(uid, 'delivery'))?.name).toBe('delivery.returned');
      expect((await store.latestEvent(uid, 'location'))?.payload.driver_location).toEqual({ lat: 6, lng: 6 });
      expect(await store.deliveryState(uid)).toEqual({
        rank: 10,
        terminal: true,
        pickedUp: true,
        seq: results[10]!.event.seq,
      });
    }

    // A cancel with no evidence of pickup is not final: the return that follows proves the pickup and is applied.
    const early = await store.appendEvents(
      ['delivery.assigned', 'delivery.canceled', 'delivery.return_in_progress', 'delivery.returned'].map((name) =>
        event('early', name),
      ),
    );
    expect(early.map((r) => r.event.stale)).toEqual([false, false, false, false]);
    expect((await store.latestEvent('early', 'delivery'))?.name).toBe('delivery.returned');
    expect(await store.deliveryState('early')).toEqual({
      rank: 10,
      terminal: true,
      pickedUp: true,
      seq: early[3]!.event.seq,
    });
    expect(await store.deliveryState('nobody')).toBeUndefined();

    // The reordered cancel: the retried pickup_complete after it is late (stale) but proves the pickup.
    const names = [
      'delivery.assigned',
      'delivery.pickup_enroute',
      'delivery.pickup_arrived',
      'delivery.canceled',
      'delivery.pickup_complete',
    ];
    const reordered = await store.appendEvents(names.map((name) => event('reordered', name)));
    expect(reordered.map((r) => r.event.stale)).toEqual([false, false, false, false, true]);
    expect(await store.deliveryState('reordered')).toEqual({
      rank: 8,
      terminal: false,
      pickedUp: true,
      seq: reordered[3]!.event.seq,
    });
    // So a read confirming the cancel changes nothing: the return is still to come.
    const [confirming] = await store.appendEvents([event('reordered', 'delivery.canceled', CONFIRMING)]);
    expect(confirming!.event.stale).toBe(true);
    const back = await store.appendEvents(
      ['delivery.return_in_progress', 'delivery.returned'].map((name) => event('reordered', name)),
    );
    expect(back.map((r) => r.event.stale)).toEqual([false, false]);
    expect(await store.deliveryState('reordered')).toEqual({
      rank: 10,
      terminal: true,
      pickedUp: true,
      seq: back[1]!.event.seq,
    });
  });

  test('flags an event that contradicts where the delivery stands; a newer read then decides', async () => {
    fresh();
    const failed = await store.appendEvents(
      [
        'delivery.pickup_complete',
        'delivery.dropoff_arrived',
        'delivery.failed',
        'delivery.dropoff_enroute',
        'delivery.dropoff_complete',
      ].map((name) => event('again', name)),
    );
    expect(failed.map((r) => [r.event.stale, r.event.contradicts ?? false])).toEqual([
      [false, false],
      [false, false],
      [false, false],
      [true, true],
      [true, true],
    ]);
    // Kept with the event in the log.
    expect((await store.eventsAfter(0, 10, { uids: ['again'] })).map((e) => e.contradicts ?? false)).toEqual([
      false,
      false,
      false,
      true,
      true,
    ]);
    // A read made before the last move (basis below its seq) is judged as an event; one made after it wins.
    const [old] = await store.appendEvents([event('again', 'delivery.dropoff_complete', poll(failed[1]!.event.seq))]);
    expect(old!.event).toMatchObject({ stale: true, contradicts: true });
    const [read] = await store.appendEvents([event('again', 'delivery.dropoff_complete', poll(await store.lastSeq()))]);
    expect(read!.event).toMatchObject({ stale: false, courierOnly: false });
    expect(read!.event.contradicts).toBeUndefined();
    expect(await store.deliveryState('again')).toEqual({
      rank: 7,
      terminal: true,
      pickedUp: true,
      seq: read!.event.seq,
    });
    expect((await store.latestEvent('again', 'delivery'))?.seq).toBe(read!.event.seq);
  });

  test("keeps each delivery's view: merged over events and reads, never erased, filled only by a stale event; each event keeps what was carried over", async () => {
    fresh();
    const uid = 'view';
    // No state yet: the read is kept apart (a later one overwrites it), and the first event is merged over it.
    await store.recordRead({ uid, body: { uid, tracking_link: 'https://t.example/first', weight: 2 }, basis: 0 });
    await store.recordRead({ uid, body: { uid, tracking_link: 'https://t.example/early' }, basis: 0 });
    expect(await store.deliveryView(uid)).toBeUndefined();
    const [created] = await store.appendEvents([
      event(uid, 'delivery.created', { price: { value: 10, currency: 'USD' }, driver_name: null, weight: 2.5 }),
    ]);
    expect(created!.event.carried).toEqual({ tracking_link: 'https://t.example/early' });
    // A read newer than the state overwrites; what only reads carry comes with it; its datetime is kept as
    // scheduled_at.
    await store.recordRead({
      uid,
      body: {
        uid,
        status: 'ASSIGNED',
        tracking_link: 'https://t.example/1',
        delivery_style: 'STANDARD',
        delivery_date: '2030-05-01T16:00:00+00:00',
        price: { value: 12, currency: 'USD' },
        driver_name: null,
      },
      basis: await store.lastSeq(),
    });
    expect(await store.deliveryView(uid)).toEqual({
      uid,
      event_name: 'delivery.created',
      status: 'created',
      weight: 2.5,
      price: { value: 12, currency: 'USD' },
      tracking_link: 'https://t.example/1',
      delivery_style: 'STANDARD',
      delivery_date: '2030-05-01T16:00:00+00:00',
      scheduled_at: '2030-05-01T16:00:00+00:00',
    });
    const results = await store.appendEvents([
      event(uid, 'delivery.assigned', { driver_name: 'Ana Costa', delivery_date: '2030-05-01' }),
      event(uid, 'delivery.dropoff_arrived', {
        driver_name: 'Ana Costa',
        dropoff_verification_image_url: 'https://p.example/photo',
        dropoff_signature_image_url: 'https://p.example/sig',
      }),
      // Late: it fills what is missing (pickup_name), never what a newer one said (price).
      event(uid, 'delivery.pickup_complete', { price: { value: 99, currency: 'USD' }, pickup_name: 'Ada Shop' }),
      // Null is absence: the proof stays.
      event(uid, 'delivery.dropoff_complete', { driver_name: 'Ana Costa', dropoff_verification_image_url: null }),
    ]);
    expect(results.map((r) => r.event.stale)).toEqual([false, false, true, false]);
    const [, arrived, late, complete] = results.map((r) => r.event);
    // Each member of a documented object is a field of its own.
    expect(complete!.carried).toEqual({
      'price.value': 12,
      'price.currency': 'USD',
      weight: 2.5,
      tracking_link: 'https://t.example/1',
      delivery_style: 'STANDARD',
      delivery_date: '2030-05-01',
      scheduled_at: '2030-05-01T16:00:00+00:00',
      dropoff_verification_image_url: 'https://p.example/photo',
      dropoff_signature_image_url: 'https://p.example/sig',
      pickup_name: 'Ada Shop',
    });
    // The stale event's view is the delivery's after it: the milestone it did not move, the price it did not change.
    expect(late!.carried).toMatchObject({
      event_name: 'delivery.dropoff_arrived',
      status: 'dropoff_arrived',
      'price.value': 12,
    });
    expect(arrived!.carried).not.toHaveProperty('dropoff_verification_image_url');
    // Read back from the log as it was answered.
    expect((await store.eventsAfter(0, 10, { uids: [uid] })).map((e) => e.carried)).toEqual([
      created!.event.carried,
      ...results.map((r) => r.event.carried),
    ]);
    // As the GraphQL Delivery of the completing message sees it.
    const delivery = fromDeliveryView(knownAfter(complete!));
    expect(delivery).toMatchObject({
      status: 'DROPOFF_COMPLETE',
      proofOfDelivery: { photoUrl: 'https://p.example/photo', signatureUrl: 'https://p.example/sig' },
      trackingUrl: 'https://t.example/1',
      style: 'STANDARD',
      scheduledAt: '2030-05-01T16:00:00Z',
      deliveryDate: '2030-05-01',
      price: { amount: '12.00', currency: 'USD' },
      courier: { name: 'Ana Costa' },
    });
    expect(fromDeliveryView(knownAfter(late!))).toMatchObject({
      status: 'DROPOFF_ARRIVED',
      price: { amount: '12.00', currency: 'USD' },
    });
    // A read older than the state's last move only fills.
    await store.recordRead({ uid, body: { uid, tracking_link: 'https://t.example/old', items_count: 3 }, basis: 0 });
    expect(await store.deliveryView(uid)).toMatchObject({
      tracking_link: 'https://t.example/1',
      items_count: 3,
      event_name: 'delivery.dropoff_complete',
    });
  });

  test('merges the documented objects member by member: a null or absent member never erases a known one; half a position is none', async () => {
    fresh();
    const uid = 'members';
    const position = { lat: 40.7, lng: -73.9 };
    await store.recordRead({
      uid,
      body: {
        uid,
        price: { value: 12.5, currency: 'USD' },
        pickup_address: { street: 'Main St', city: 'Springfield', latitude: 1.5 },
        expected_cancellation_fee: { amount: '1.00', currency: 'USD' },
      },
      basis: 0,
    });
    const results = await store.appendEvents([
      // "null until pricing settles": no value, so the price read stays; the address is merged into.
      event(uid, 'delivery.assigned', {
        price: { value: null, currency: 'USD' },
        pickup_address: { street: 'Main Street', city: null },
        driver_location: position,
      }),
      // A value without a currency keeps the currency known; half a position keeps the whole one known.
      event(uid, 'delivery.pickup_enroute', { price: { value: 20 }, driver_location: { lat: 41, lng: null } }),
    ]);
    const [assigned, enroute] = results.map((result) => result.event);
    expect(fromDeliveryView(knownAfter(assigned!))).toMatchObject({
      price: { amount: '12.50', currency: 'USD' },
      pickup: { address: { street: 'Main Street', city: 'Springfield', latitude: 1.5 } },
      expectedCancellationFee: { amount: '1.00', currency: 'USD' },
    });
    expect(fromDeliveryView(knownAfter(enroute!))).toMatchObject({
      price: { amount: '20.00', currency: 'USD' },
      courier: { location: position },
    });
    expect(await store.deliveryView(uid)).toEqual({
      uid,
      event_name: 'delivery.pickup_enroute',
      status: 'pickup_enroute',
      price: { value: 20, currency: 'USD' },
      pickup_address: { street: 'Main Street', city: 'Springfield', latitude: 1.5 },
      expected_cancellation_fee: { amount: '1.00', currency: 'USD' },
      driver_location: position,
    });
  });

  test('judges every (state, event) case as the domain rule does: events and reads alike', async () => {
    fresh();
    const judgedSteps: PathStep[] = [...JUDGED_NAMES, ...JUDGED_READS];
    const cases = STATE_PATHS.flatMap((path, i) =>
      judgedSteps.map((step, j) => ({ uid: `case:${i}:${j}`, path, step })),
    );
    // The judged event's payload differs from the path's, so a repeated name is a repeat, not a duplicate.
    const input = cases.flatMap(({ uid, path, step }) => [
      ...path.map((p) => stepEvent(uid, p)),
      stepEvent(uid, step, { judged: true }),
    ]);
    const results = await store.appendEvents(input);
    let index = 0;
    for (const { uid, path, step } of cases) {
      let expected: MilestoneState | undefined;
      for (let n = 0; n <= path.length; n += 1) {
        const appended = results[index]!.event;
        const judged = advance(expected, factsOf(input[index]!.payload), appended.seq);
        index += 1;
        expected = judged.state;
        if (n < path.length) continue;
        const label = `${path.map(stepLabel).join(' → ') || '(none)'} then ${stepLabel(step)}`;
        // The verdict the streams and reconciliation follow: as appended, and as read back from the log.
        const verdict = (event: StoredEvent) => [
          event.stale,
          event.courierOnly,
          event.contradicts ?? false,
          event.moved ?? false,
          event.final ?? false,
        ];
        const rule = [
          judged.stale,
          judged.courierOnly,
          judged.contradicts,
          judged.moved,
          judged.state?.terminal === true,
        ];
        expect(verdict(appended), label).toEqual(rule);
        const [logged] = await store.eventsAfter(appended.seq - 1, 1, { uids: [uid] });
        expect(verdict(logged!), label).toEqual(rule);
        expect(await store.deliveryState(uid), label).toEqual(expected);
      }
    }
  });

  test('stores an event made from a read only when its condition holds, judged as any event: accepted, decisive', async () => {
    fresh();
    const judgedSteps: PathStep[] = [...JUDGED_NAMES, ...JUDGED_READS];
    for (const condition of ['accepted', 'decisive'] as const) {
      const cases = STATE_PATHS.flatMap((path, i) =>
        judgedSteps.map((step, j) => ({ uid: `${condition}:${i}:${j}`, path, step })),
      );
      const paths = await store.appendEvents(cases.flatMap(({ uid, path }) => path.map((p) => stepEvent(uid, p))));
      const seqAfterPaths = await store.lastSeq();
      const states = new Map<string, MilestoneState | undefined>();
      for (const { uid } of cases) states.set(uid, await store.deliveryState(uid));
      const inputs = cases.map(({ uid, step }) => ({ ...stepEvent(uid, step, { judged: true }), onlyIf: condition }));
      const results = await store.appendEvents(inputs);
      let stored = 0;
      for (const [k, { uid, path, step }] of cases.entries()) {
        const before = states.get(uid);
        const judged = advance(before, factsOf(inputs[k]!.payload), 0);
        const holds =
          condition === 'accepted'
            ? !judged.stale
            : judged.moved &&
              (before?.terminal === true || (judged.state!.terminal && judged.state!.rank === before?.rank));
        const label = `${condition}: ${path.map(stepLabel).join(' → ') || '(none)'} then ${stepLabel(step)}`;
        const result = results[k]!;
        expect('skipped' in result, label).toBe(!holds);
        if (holds) stored += 1;
        // Skipped: nothing changed.
        else expect(await store.deliveryState(uid), label).toEqual(before);
      }
      expect(paths.length).toBeGreaterThan(0);
      // A skipped event takes no place in the log.
      expect(await store.lastSeq()).toBe(seqAfterPaths + stored);
    }
  });

  test('judges the courier an event names as the domain transition does (a reassignment, a replaced courier, ids and names)', async () => {
    fresh();
    const ana = { driver_id: 1, driver_name: 'Ana Costa' };
    const ben = { driver_id: 2, driver_name: 'Ben Okafor' };
    const at = (lat: number) => ({ driver_location: { lat, lng: lat } });
    const sequences: Array<Array<[string, Record<string, unknown>]>> = [
      // Reassigned while en route: the new courier's assigned changes the courier alone; the old one's events are late.
      [
        ['delivery.assigned', ana],
        ['delivery.pickup_enroute', ana],
        ['delivery.assigned', { ...ben, ...at(1) }],
        ['location.pickup_enroute', { ...ana, ...at(2) }],
        ['delivery.pickup_enroute', { ...ana, n: 2 }],
        ['delivery.pickup_arrived', ana],
        ['location.pickup_enroute', { ...ben, ...at(3) }],
        ['delivery.pickup_arrived', ben],
        ['delivery.assigned', { driver_id: 3, driver_name: 'Chen Wei' }],
        ['delivery.assigned', { ...ben, n: 3 }],
      ],
      // A position of a courier no delivery.* event named yet; then a repeat of the milestone by that courier.
      [
        ['delivery.assigned', ana],
        ['location.assigned_driver', { ...ben, ...at(4) }],
        ['delivery.assigned', ben],
        ['location.assigned_driver', { ...ben, ...at(5) }],
      ],
      // Names only; an id on one side only compares by name; a new name under the same id is the same courier.
      [
        ['delivery.assigned', { driver_name: 'Ana Costa' }],
        ['delivery.pickup_enroute', ana],
        ['delivery.assigned', { driver_id: 1, driver_name: 'A. Costa' }],
        ['delivery.pickup_arrived', { driver_name: 'Ben Okafor' }],
        ['delivery.pickup_enroute', { driver_name: 'Ana Costa', n: 4 }],
        ['delivery.pickup_complete', {}],
      ],
      // Nothing changes a final delivery; an unknown milestone changes no courier.
      [
        ['delivery.assigned', ana],
        ['delivery.mystery', ben],
        ['delivery.dropoff_complete', ana],
        ['delivery.assigned', ben],
      ],
    ];
    for (const [n, sequence] of sequences.entries()) {
      const uid = `courier:${n}`;
      let expected: MilestoneState | undefined;
      let movedAt: number | undefined;
      for (const [i, [name, extra]] of sequence.entries()) {
        const judged = transition(expected, name, courierIdentity(extra));
        // One at a time, so the stored state can be read after each.
        const appended: StoredEvent = (await store.appendEvents([event(uid, name, extra)]))[0]!.event;
        const label = `${uid} #${i} ${name} ${JSON.stringify(extra)}`;
        expect([appended.stale, appended.courierOnly], label).toEqual([judged.stale, judged.courierOnly]);
        if (judged.moved) movedAt = appended.seq;
        expected = judged.state && { ...judged.state, seq: movedAt };
        expect(await store.deliveryState(uid), label).toEqual(expected);
      }
    }
    // The rule's answers, spelt out for the first sequence: [stale, courierOnly].
    const first = (await store.eventsAfter(0, 100, { uids: ['courier:0'] })).map((e) => [e.stale, e.courierOnly]);
    expect(first).toEqual([
      [false, false],
      [false, false],
      [false, true],
      [true, false],
      [true, false],
      [true, false],
      [false, false],
      [false, false],
      [false, true],
      [true, false],
    ]);
    expect(await store.deliveryState('courier:0')).toMatchObject({
      rank: 3,
      courier: { id: '3', name: 'Chen Wei' },
      formerCouriers: [
        { id: '1', name: 'Ana Costa' },
        { id: '2', name: 'Ben Okafor' },
      ],
    });
    // latestEvent counts a courier change: the newest delivery.* event and pin are the new courier's.
    expect((await store.latestEvent('courier:1', 'delivery'))?.payload.driver_name).toBe('Ben Okafor');
    expect((await store.latestEvent('courier:0', 'location'))?.payload.driver_location).toEqual({ lat: 3, lng: 3 });
  });

  test('keeps judging states stored under the earlier ranks (return_in_progress 6.5, returned 7.5)', async () => {
    fresh();
    const legacy: Array<[MilestoneState, string, boolean, MilestoneState]> = [
      [{ rank: 6.5, terminal: false }, 'delivery.returned', false, { rank: 10, terminal: true }],
      [{ rank: 6.5, terminal: false }, 'delivery.dropoff_arrived', true, { rank: 6.5, terminal: false }],
      [{ rank: 6.5, terminal: false }, 'delivery.failed', false, { rank: 8, terminal: false }],
      [{ rank: 7.5, terminal: true }, 'delivery.returned', true, { rank: 7.5, terminal: true }],
      [{ rank: 8, terminal: true }, 'delivery.return_in_progress', true, { rank: 8, terminal: true }],
    ];
    for (const [n, [state, name, stale, after]] of legacy.entries()) {
      const uid = `legacy:${n}`;
      await seedState(store, uid, state);
      expect(transition(state, name)).toMatchObject({ stale, state: after });
      const [result] = await store.appendEvents([event(uid, name)]);
      expect(result!.event.stale, `${state.rank} then ${name}`).toBe(stale);
      expect(await store.deliveryState(uid)).toMatchObject(after);
    }
  });

  test('latestEvent ignores stale events and events without a position', async () => {
    fresh();
    await store.appendEvents([
      event('l1', 'delivery.created'),
      event('l1', 'delivery.assigned', { driver_location: { lat: 10, lng: 10 } }),
      event('l1', 'location.assigned_driver', { driver_location: { lat: 11, lng: 11 } }),
      event('l1', 'delivery.created', { n: 2 }), // stale
      event('l1', 'location.created', { driver_location: { lat: 12, lng: 12 } }), // stale: below assigned
      event('l1', 'location.assigned_driver', { driver_location: null }), // no position
      event('l1', 'location.assigned_driver', { driver_location: { lng: 13 } }), // no latitude
      event('l2', 'delivery.pickup_arrived'),
    ]);
    expect(await store.latestEvent('l1', 'delivery')).toMatchObject({ seq: 2, name: 'delivery.assigned' });
    expect(await store.latestEvent('l1', 'location')).toMatchObject({
      seq: 3,
      payload: { driver_location: { lat: 11, lng: 11 } },
    });
    expect(await store.latestEvent('l2', 'location')).toBeUndefined();
    expect(await store.latestEvent('l2', 'delivery')).toMatchObject({ seq: 8, statusText: 'pickup_arrived' });
  });

  test('eventsAfter reads the log in order, after a cursor, with a limit, for some deliveries', async () => {
    fresh();
    const uids = ['a', 'b', 'c'];
    const appended = await store.appendEvents(
      Array.from({ length: 30 }, (_, n) => event(uids[n % 3]!, 'location.assigned_driver', { n, status: null })),
    );
    const all = appended.map((r) => r.event);
    expect(all.map((e) => e.seq)).toEqual(Array.from({ length: 30 }, (_, n) => n + 1));
    expect(all[0]!.statusText).toBeNull();

    expect(await store.eventsAfter(0, 100)).toEqual(all);
    expect(await store.eventsAfter(10, 5)).toEqual(all.slice(10, 15));
    expect(await store.eventsAfter(30, 5)).toEqual([]);
    expect(await store.eventsAfter(0, 100, { uids: ['b'] })).toEqual(all.filter((e) => e.uid === 'b'));
    // Two deliveries merged in log order, the limit across both.
    expect(await store.eventsAfter(4, 6, { uids: ['c', 'a'] })).toEqual(
      all.filter((e) => e.uid !== 'b' && e.seq > 4).slice(0, 6),
    );
    expect(await store.eventsAfter(0, 100, { uids: ['nobody'] })).toEqual([]);
    expect(await store.eventsAfter(0, 100, { uids: [] })).toEqual(all);
    expect(await store.lastSeq()).toBe(30);
  });

  test('idempotency: claimed, pending while booking, done with the result, conflict on other input, released to be claimed again', async () => {
    fresh();
    expect(await store.claimIdempotency('owner', 'k1', 'fp')).toEqual({ state: 'claimed' });
    expect(await store.claimIdempotency('owner', 'k1', 'fp')).toEqual({ state: 'pending' });
    expect(await store.claimIdempotency('owner', 'k1', 'other')).toEqual({ state: 'conflict' });
    // Keys are per owner.
    expect(await store.claimIdempotency('someone else', 'k1', 'other')).toEqual({ state: 'claimed' });

    await store.completeIdempotency('owner', 'k1', { uid: 'uid-1', trackingUrl: 'https://t.example/1' });
    expect(await store.claimIdempotency('owner', 'k1', 'fp')).toEqual({
      state: 'done',
      result: { uid: 'uid-1', trackingUrl: 'https://t.example/1' },
    });
    expect(await store.claimIdempotency('owner', 'k1', 'other')).toEqual({ state: 'conflict' });
    // A done key is not released.
    await store.releaseIdempotency('owner', 'k1');
    expect(await store.claimIdempotency('owner', 'k1', 'fp')).toMatchObject({ state: 'done' });

    expect(await store.claimIdempotency('owner', 'k2', 'fp')).toEqual({ state: 'claimed' });
    await store.releaseIdempotency('owner', 'k2');
    expect(await store.claimIdempotency('owner', 'k2', 'fp2')).toEqual({ state: 'claimed' });
    await store.completeIdempotency('owner', 'k2', { uid: 'uid-2', trackingUrl: null });
    expect(await store.claimIdempotency('owner', 'k2', 'fp2')).toEqual({
      state: 'done',
      result: { uid: 'uid-2', trackingUrl: null },
    });

    // Completing a key that was released records nothing.
    await store.completeIdempotency('owner', 'never-claimed', { uid: 'x', trackingUrl: null });
    expect(await store.claimIdempotency('owner', 'never-claimed', 'fp')).toEqual({ state: 'claimed' });
  });

  test('idempotency: a pending claim older than the expiry turns unknown (its process died mid-call), never free again', async () => {
    fresh();
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(new Date('2030-01-01T00:00:00Z'));
      expect(await store.claimIdempotency('owner', 'k', 'fp')).toEqual({ state: 'claimed' });
      vi.setSystemTime(Date.now() + PENDING_EXPIRY_MS);
      expect(await store.claimIdempotency('owner', 'k', 'fp')).toEqual({ state: 'pending' });
      vi.setSystemTime(Date.now() + 1);
      expect(await store.claimIdempotency('owner', 'k', 'other')).toEqual({ state: 'conflict' });
      const since = new Date();
      expect(await store.claimIdempotency('owner', 'k', 'fp')).toEqual({ state: 'unknown', since });
      vi.setSystemTime(Date.now() + 5_000);
      expect(await store.claimIdempotency('owner', 'k', 'fp')).toEqual({ state: 'unknown', since });
    } finally {
      vi.useRealTimers();
    }
  });

  test('idempotency: a lost answer turns the claim unknown; a webhook marker resolves it to done; a release frees it', async () => {
    fresh();
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(new Date('2030-01-01T00:00:00Z'));
      expect(await store.claimIdempotency('owner', 'lost', 'fp')).toEqual({ state: 'claimed' });
      const since = new Date();
      expect(await store.markIdempotencyUnknown('owner', 'lost')).toEqual({ state: 'unknown', since });
      vi.setSystemTime(Date.now() + 1_000);
      // Kept with its time; other input is still a conflict.
      expect(await store.claimIdempotency('owner', 'lost', 'fp')).toEqual({ state: 'unknown', since });
      expect(await store.claimIdempotency('owner', 'lost', 'other')).toEqual({ state: 'conflict' });
      expect(await store.claimIdempotency('someone else', 'lost', 'fp')).toEqual({ state: 'claimed' });

      // A marker of no claim, and another owner's marker for the same idempotency key, resolve nothing of ours.
      expect(
        await store.resolveBookingMarker(bookingMarker('nobody', 'lost'), { uid: 'u-x', trackingUrl: null }),
      ).toBeUndefined();
      expect(await store.resolveBookingMarker(bookingMarker('owner', 'lost'), { uid: 'u-1', trackingUrl: null })).toBe(
        'owner',
      );
      expect(await store.claimIdempotency('owner', 'lost', 'fp')).toEqual({
        state: 'done',
        result: { uid: 'u-1', trackingUrl: null },
      });
      // Resolved once: a later event of the same booking changes nothing.
      expect(
        await store.resolveBookingMarker(bookingMarker('owner', 'lost'), { uid: 'u-2', trackingUrl: null }),
      ).toBeUndefined();
      expect(await store.markIdempotencyUnknown('owner', 'lost')).toEqual({
        state: 'done',
        result: { uid: 'u-1', trackingUrl: null },
      });

      // A webhook may come before the create's answer: it resolves the pending claim, and a lost answer then finds it
      // done.
      expect(await store.claimIdempotency('owner', 'early', 'fp')).toEqual({ state: 'claimed' });
      expect(
        await store.resolveBookingMarker(bookingMarker('owner', 'early'), {
          uid: 'u-3',
          trackingUrl: 'https://t.example/3',
        }),
      ).toBe('owner');
      expect(await store.markIdempotencyUnknown('owner', 'early')).toEqual({
        state: 'done',
        result: { uid: 'u-3', trackingUrl: 'https://t.example/3' },
      });

      // A definite refusal frees an unknown claim too (its own booking said nothing was booked).
      expect(await store.claimIdempotency('owner', 'refused', 'fp')).toEqual({ state: 'claimed' });
      await store.markIdempotencyUnknown('owner', 'refused');
      await store.releaseIdempotency('owner', 'refused');
      expect(await store.claimIdempotency('owner', 'refused', 'fp2')).toEqual({ state: 'claimed' });

      // The unknown state is durable.
      expect(await store.claimIdempotency('owner', 'durable', 'fp')).toEqual({ state: 'claimed' });
      const lostAt = new Date();
      await store.markIdempotencyUnknown('owner', 'durable');
      const again = await reopen(store);
      try {
        expect(await again.claimIdempotency('owner', 'durable', 'fp')).toEqual({ state: 'unknown', since: lostAt });
      } finally {
        await again.close();
      }
    } finally {
      vi.useRealTimers();
    }
  });

  test('ownership: the first owner recorded stays', async () => {
    fresh();
    await store.recordOwner('o1', 'first');
    await store.recordOwner('o1', 'second');
    expect(await store.ownerOf('o1')).toBe('first');
    expect(await store.ownerOf('o2')).toBeUndefined();
  });

  test('ownership: records keep their group, many are written and read at once, and the first still stays', async () => {
    fresh();
    await store.recordOwner('g1', 'first', 'PARTNER');
    await store.recordOwners([
      { uid: 'g1', owner: 'second', group: 'PLATFORM' },
      { uid: 'g2', owner: 'second', group: 'PLATFORM' },
      { uid: 'g3', owner: 'third', group: null },
    ]);
    const found = await store.ownersOf(['g1', 'g2', 'g3', 'g4']);
    expect(Object.fromEntries(found)).toEqual({
      g1: { owner: 'first', group: 'PARTNER', proof: 'read' },
      g2: { owner: 'second', group: 'PLATFORM', proof: 'read' },
      g3: { owner: 'third', group: null, proof: 'read' },
    });
    expect(await store.ownersOf([])).toEqual(new Map());
  });

  test('ownership: a merchant-scoped proof replaces a record learned from a read, never another proof; a claim replaces any', async () => {
    fresh();
    await store.recordOwners([
      { uid: 'p1', owner: 'reader', group: 'PARTNER', proof: 'read' },
      { uid: 'p2', owner: 'booker', group: 'PLATFORM', proof: 'booked' },
      { uid: 'p3', owner: 'reader', group: 'PARTNER' },
    ]);
    await store.recordOwners([
      { uid: 'p1', owner: 'owner', group: 'PARTNER', proof: 'reference' },
      { uid: 'p2', owner: 'other', group: 'PLATFORM', proof: 'canceled' },
      { uid: 'p3', owner: 'other', group: 'PARTNER', proof: 'read' },
    ]);
    await store.recordOwner('p1', 'late', 'PARTNER', 'reference');
    expect(Object.fromEntries(await store.ownersOf(['p1', 'p2', 'p3']))).toEqual({
      p1: { owner: 'owner', group: 'PARTNER', proof: 'reference' },
      p2: { owner: 'booker', group: 'PLATFORM', proof: 'booked' },
      p3: { owner: 'reader', group: 'PARTNER', proof: 'read' },
    });
    await store.recordOwners([
      { uid: 'p2', owner: 'operator-said', group: 'PLATFORM', proof: 'claimed', replace: true },
    ]);
    expect((await store.ownersOf(['p2'])).get('p2')).toEqual({
      owner: 'operator-said',
      group: 'PLATFORM',
      proof: 'claimed',
    });
    // Read back the same after the data is opened again.
    const again = await reopen(store);
    try {
      expect((await again.ownersOf(['p1'])).get('p1')).toEqual({
        owner: 'owner',
        group: 'PARTNER',
        proof: 'reference',
      });
    } finally {
      await again.close();
    }
  });

  test('ownership: a record from before proofs were kept reads with none, keeps its owner, and a proof replaces it', async () => {
    fresh();
    // As an earlier version wrote them: no proof (SQLite: the column empty; Redis: "<owner>" or "<owner> <group>").
    if (store instanceof SqliteStore) {
      await store.recordOwners([
        { uid: 'old1', owner: 'reader', group: 'PARTNER' },
        { uid: 'old2', owner: 'booker', group: null },
      ]);
      store.db.prepare('UPDATE ownership SET proof = NULL').run();
    } else {
      const redis = store as RedisStore;
      await redis.client.set(`${redis.prefix}owner:old1`, 'reader PARTNER');
      await redis.client.set(`${redis.prefix}owner:old2`, 'booker');
    }
    expect(Object.fromEntries(await store.ownersOf(['old1', 'old2']))).toEqual({
      old1: { owner: 'reader', group: 'PARTNER', proof: null },
      old2: { owner: 'booker', group: null, proof: null },
    });
    await store.recordOwner('old1', 'owner', 'PARTNER', 'reference');
    await store.recordOwner('old2', 'other', 'PLATFORM', 'read');
    expect(Object.fromEntries(await store.ownersOf(['old1', 'old2']))).toEqual({
      old1: { owner: 'owner', group: 'PARTNER', proof: 'reference' },
      old2: { owner: 'booker', group: null, proof: null },
    });
  });

  test("operator claims: a shared store tells running instances the uids claimed since a version they saw; one process's store has none to tell", async () => {
    fresh();
    const start = await store.ownerClaimsAfter(undefined);
    expect(start.uids).toEqual([]);
    await store.recordOwners([{ uid: 'c1', owner: 'a', group: 'PLATFORM', proof: 'booked' }]);
    // Records a proof writes are no claims; the operator's (replace) are.
    await store.recordOwners([
      { uid: 'c1', owner: 'b', group: 'PLATFORM', proof: 'claimed', replace: true },
      { uid: 'c2', owner: 'b', group: null, proof: 'claimed', replace: true },
      { uid: 'c3', owner: 'b', group: null, proof: 'reference' },
    ]);
    if (!(store instanceof RedisStore)) {
      expect(await store.ownerClaimsAfter(start.version)).toEqual({ version: 0, uids: [] });
      return;
    }
    const after = await store.ownerClaimsAfter(start.version);
    expect(after).toEqual({ version: start.version + 2, uids: ['c1', 'c2'] });
    expect(await store.ownerClaimsAfter(after.version)).toEqual({ version: after.version, uids: [] });
    // More claims since a version than are kept: which is not known.
    await store.recordOwners(
      Array.from({ length: OWNER_CLAIMS_KEPT + 1 }, (_, i) => ({
        uid: `m${i}`,
        owner: 'b',
        group: null,
        proof: 'claimed' as const,
        replace: true,
      })),
    );
    expect(await store.ownerClaimsAfter(after.version)).toEqual({
      version: after.version + OWNER_CLAIMS_KEPT + 1,
      uids: undefined,
    });
    expect((await store.ownerClaimsAfter(after.version + 1)).uids).toHaveLength(OWNER_CLAIMS_KEPT);
  });

  test('merchant links: a root with history (owner records, unreleased idempotency claims, ids linked to it) is never linked elsewhere; the bare one joins it, whichever id called; two with history are refused', async () => {
    fresh();
    expect(await store.merchantLinks(['k1', 'k2'])).toEqual(new Map());
    // Neither has history: the key joins the previous one's merchant.
    expect(await store.linkMerchant('k2', 'k1')).toEqual({ outcome: 'linked', merchant: 'k1' });
    // k1 has an id linked to it now: k9, bare, joins it though k2 (a key of k1's) made the call with k9 as the previous
    // key.
    expect(await store.linkMerchant('k2', 'k9')).toEqual({ outcome: 'linked', merchant: 'k1' });
    // k3 joins the merchant k2 leads to: k1, not k2.
    expect(await store.linkMerchant('k3', 'k2')).toEqual({ outcome: 'linked', merchant: 'k1' });
    expect(Object.fromEntries(await store.merchantLinks(['k1', 'k2', 'k3', 'k9']))).toEqual({
      k2: 'k1',
      k3: 'k1',
      k9: 'k1',
    });
    // k1 is already where k3 leads: nothing to link.
    expect(await store.linkMerchant('k1', 'k3')).toEqual({ outcome: 'same', merchant: 'k1' });

    // An owner record is history: the merchant that booked stays the root, whichever key calls.
    await store.recordOwner('u-m1', 'm1', 'PLATFORM', 'booked');
    expect(await store.linkMerchant('m1', 'm2')).toEqual({ outcome: 'linked', merchant: 'm1' });
    expect(Object.fromEntries(await store.merchantLinks(['m1', 'm2']))).toEqual({ m2: 'm1' });
    // So is an idempotency claim, pending or done.
    expect(await store.claimIdempotency('c1', 'order-1', 'fp')).toEqual({ state: 'claimed' });
    expect(await store.linkMerchant('c1', 'c2')).toEqual({ outcome: 'linked', merchant: 'c1' });
    // A released claim booked nothing: no history.
    expect(await store.claimIdempotency('r1', 'order-1', 'fp')).toEqual({ state: 'claimed' });
    await store.releaseIdempotency('r1', 'order-1');
    await store.recordOwner('u-r2', 'r2', 'PLATFORM', 'booked');
    expect(await store.linkMerchant('r1', 'r2')).toEqual({ outcome: 'linked', merchant: 'r2' });

    // Both with history: refused, nothing linked, either way round, and through their keys too.
    await store.recordOwner('u-h1', 'h1', 'PLATFORM', 'booked');
    await store.claimIdempotency('h2', 'order-1', 'fp');
    expect(await store.linkMerchant('h1', 'h2')).toEqual({ outcome: 'refused' });
    expect(await store.linkMerchant('h2', 'h1')).toEqual({ outcome: 'refused' });
    expect(await store.linkMerchant('m2', 'k2')).toEqual({ outcome: 'refused' });
    expect(await store.merchantLinks(['h1', 'h2', 'm1', 'k1'])).toEqual(new Map());

    // Unlinked, an id is bare again, and its former merchant without linked ids and records is too.
    for (const id of ['k2', 'k3', 'k9']) expect(await store.unlinkMerchant(id)).toBe(true);
    expect(await store.unlinkMerchant('k3')).toBe(false);
    expect(await store.linkMerchant('k1', 'm1')).toEqual({ outcome: 'linked', merchant: 'm1' });
    expect(Object.fromEntries(await store.merchantLinks(['k1', 'k2', 'k3']))).toEqual({ k1: 'm1' });

    const again = await reopen(store);
    try {
      expect(Object.fromEntries(await again.merchantLinks(['k1', 'm2']))).toEqual({ k1: 'm1', m2: 'm1' });
      expect(await again.linkMerchant('h2', 'h1')).toEqual({ outcome: 'refused' });
    } finally {
      await again.close();
    }
  });

  test('merchant links on data written before merchants had a history: the records, claims and links there count', async () => {
    fresh();
    await store.recordOwner('u-old', 'old', 'PLATFORM', 'booked');
    await store.claimIdempotency('older', 'order-1', 'fp');
    expect(await store.linkMerchant('linked-old', 'oldest')).toEqual({ outcome: 'linked', merchant: 'oldest' });
    if (store instanceof RedisStore) {
      // What an earlier version left: the same records, claims and links, without the histories it did not keep.
      const { client, prefix } = store;
      const histories = (await client.keys(`${prefix}merchant-*`)).filter(
        (key) => !key.startsWith(`${prefix}merchant-link:`),
      );
      expect(histories.length).toBeGreaterThan(0);
      await client.del(...histories);
      store = await reopen(store);
      opened.push(store);
    }
    expect(await store.linkMerchant('old', 'new-1')).toEqual({ outcome: 'linked', merchant: 'old' });
    expect(await store.linkMerchant('older', 'new-2')).toEqual({ outcome: 'linked', merchant: 'older' });
    expect(await store.linkMerchant('oldest', 'new-3')).toEqual({ outcome: 'linked', merchant: 'oldest' });
    expect(await store.linkMerchant('old', 'older')).toEqual({ outcome: 'refused' });
  });

  test("merchant merge: a merchant with history becomes part of another's with what it owns; a key both used keeps the root's claim; markers still resolve; running it again moves what came later", async () => {
    fresh();
    await store.recordOwners([
      { uid: 'u-a', owner: 'A', group: 'PLATFORM', proof: 'booked' },
      { uid: 'u-b', owner: 'B', group: 'PARTNER', proof: 'reference' },
      { uid: 'u-other', owner: 'C', group: 'PLATFORM', proof: 'booked' },
    ]);
    for (const [owner, uid] of [
      ['A', 'u-a'],
      ['B', 'u-b'],
    ] as const) {
      expect(await store.claimIdempotency(owner, 'shared', `fp-${owner}`)).toEqual({ state: 'claimed' });
      await store.completeIdempotency(owner, 'shared', { uid, trackingUrl: null });
    }
    // A booking of B's in flight: its marker is B's.
    expect(await store.claimIdempotency('B', 'in-flight', 'fp-f')).toEqual({ state: 'claimed' });
    // A key of B's merchant.
    expect(await store.linkMerchant('B2', 'B')).toEqual({ outcome: 'linked', merchant: 'B' });
    expect(await store.linkMerchant('A', 'B2')).toEqual({ outcome: 'refused' });

    expect(await store.mergeMerchant('B2', 'A')).toEqual({
      merchant: 'A',
      merged: 'B',
      records: 1,
      claims: 1,
      conflicts: 1,
    });
    expect(Object.fromEntries(await store.merchantLinks(['A', 'B', 'B2']))).toEqual({ B: 'A', B2: 'A' });
    const owners = await store.ownersOf(['u-a', 'u-b', 'u-other']);
    expect(Object.fromEntries([...owners].map(([uid, record]) => [uid, record.owner]))).toEqual({
      'u-a': 'A',
      'u-b': 'A',
      'u-other': 'C',
    });
    expect(owners.get('u-b')).toEqual({ owner: 'A', group: 'PARTNER', proof: 'reference' });
    // Its unfinished deliveries are the merchant's to reconcile.
    expect((await unfinishedOf('A')).map((each) => each.uid)).toEqual(['u-a', 'u-b']);
    expect(await unfinishedOf('B')).toEqual([]);
    // A's own claim of the key both used stays; B's claim in flight is A's, and its booking marker resolves it.
    expect(await store.claimIdempotency('A', 'shared', 'fp-A')).toEqual({
      state: 'done',
      result: { uid: 'u-a', trackingUrl: null },
    });
    expect(await store.claimIdempotency('A', 'in-flight', 'fp-f')).toEqual({ state: 'pending' });
    expect(
      await store.resolveBookingMarker(bookingMarker('B', 'in-flight'), {
        uid: 'u-f',
        trackingUrl: 'https://t.example/f',
      }),
    ).toBe('A');
    expect(await store.claimIdempotency('A', 'in-flight', 'fp-f')).toEqual({
      state: 'done',
      result: { uid: 'u-f', trackingUrl: 'https://t.example/f' },
    });
    // Nothing is left under the merged ids: a new merchant id joining them is refused only for A's history.
    expect(await store.claimIdempotency('B', 'shared', 'fp-B')).toEqual({ state: 'claimed' });
    await store.releaseIdempotency('B', 'shared');

    // Once more: nothing to link or move...
    expect(await store.mergeMerchant('B', 'A')).toEqual({
      merchant: 'A',
      merged: undefined,
      records: 0,
      claims: 0,
      conflicts: 0,
    });
    // ...until an instance that had not read the link yet records under B.
    await store.recordOwner('u-late', 'B', 'PLATFORM', 'booked');
    await store.claimIdempotency('B', 'late', 'fp-l');
    expect(await store.mergeMerchant('B2', 'A')).toEqual({
      merchant: 'A',
      merged: undefined,
      records: 1,
      claims: 1,
      conflicts: 0,
    });
    expect((await store.ownersOf(['u-late'])).get('u-late')?.owner).toBe('A');
    expect(await store.claimIdempotency('A', 'late', 'fp-l')).toEqual({ state: 'pending' });
  });

  /**
   * Every page of an owner's unfinished deliveries, as reconciliation pages through them (two at most a page), in uid
   * order.
   */
  async function unfinishedOf(owner: string, since = 0): Promise<Array<{ uid: string; group: string | null }>> {
    const found: Array<{ uid: string; group: string | null }> = [];
    let after: string | undefined;
    for (let pages = 0; pages < 100; pages += 1) {
      const page = await store.unfinishedDeliveries(owner, after, { limit: 2, since });
      expect(page.deliveries.length).toBeLessThanOrEqual(2);
      found.push(...page.deliveries);
      if (page.next === undefined) return found.sort((a, b) => a.uid.localeCompare(b.uid));
      after = page.next;
    }
    throw new Error('unfinishedDeliveries never ended');
  }

  test("unfinished deliveries: an owner's recorded ones with no state or a state not final, page by page; a read that takes a final state back brings one back", async () => {
    fresh();
    await store.recordOwners([
      { uid: 'u-booked', owner: 'o', group: 'PLATFORM' },
      { uid: 'u-moving', owner: 'o', group: null },
      { uid: 'u-canceled', owner: 'o', group: 'PARTNER' },
      { uid: 'u-delivered', owner: 'o', group: 'PLATFORM' },
      { uid: 'u-returned', owner: 'o', group: 'PLATFORM' },
      { uid: 'u-others', owner: 'p', group: 'PLATFORM' },
    ]);
    // The first record stays: another owner's later claim makes it no delivery of theirs.
    await store.recordOwner('u-moving', 'p', 'PLATFORM');
    await store.appendEvents([
      event('u-moving', 'delivery.assigned'),
      // A cancel is not final until a read confirms it.
      event('u-canceled', 'delivery.canceled'),
      event('u-delivered', 'delivery.dropoff_complete'),
      event('u-returned', 'delivery.returned'),
      // Known from a webhook alone, with no owner record: no key could read it.
      event('u-orphan', 'delivery.assigned'),
    ]);
    expect(await unfinishedOf('o')).toEqual([
      { uid: 'u-booked', group: 'PLATFORM' },
      { uid: 'u-canceled', group: 'PARTNER' },
      { uid: 'u-moving', group: null },
    ]);
    expect(await unfinishedOf('p')).toEqual([{ uid: 'u-others', group: 'PLATFORM' }]);
    expect(await unfinishedOf('nobody')).toEqual([]);

    // A FAILED after DROPOFF_COMPLETE contradicts it; the read that settles it says FAILED: unfinished again.
    await store.appendEvents([event('u-delivered', 'delivery.failed', NEW_READ)]);
    await store.recordRead({ uid: 'u-delivered', body: { uid: 'u-delivered', status: 'failed' }, basis: 1e9 });
    expect((await unfinishedOf('o')).map((each) => each.uid)).toEqual([
      'u-booked',
      'u-canceled',
      'u-delivered',
      'u-moving',
    ]);
    // And the confirming read of the cancel ends it.
    await store.appendEvents([event('u-canceled', 'delivery.canceled', CONFIRMING)]);
    expect((await unfinishedOf('o')).map((each) => each.uid)).toEqual(['u-booked', 'u-delivered', 'u-moving']);

    // Records older than the window are left out (for good: the window only moves on).
    expect(await unfinishedOf('o', Date.now() + 60_000)).toEqual([]);
  });

  test('read leases: taken once until they expire or are given back, by one instance, which may take its own again; a store one process holds grants every one', async () => {
    fresh();
    expect(await store.leaseReads(['a', 'b'], 10_000)).toEqual(new Set(['a', 'b']));
    expect(await store.leaseReads([], 10_000)).toEqual(new Set());
    // The instance that holds a lease takes it again (a second read of the same delivery, asked for while the first was
    // under way).
    expect(await store.leaseReads(['a', 'c'], 10_000)).toEqual(new Set(['a', 'c']));
    // Given back (and giving back one not held, or nothing, is no error): taken again at once.
    await store.releaseReads(['a', 'never-taken']);
    await store.releaseReads([]);
    expect(await store.leaseReads(['a'], 10_000)).toEqual(new Set(['a']));
    if (store instanceof RedisStore) {
      // Another instance on the same Redis.
      const other = await reopen(store);
      try {
        expect(await other.leaseReads(['a', 'c', 'd'], 10_000)).toEqual(new Set(['d']));
        // It cannot give back what it does not hold...
        await other.releaseReads(['a']);
        expect(await other.leaseReads(['a'], 10_000)).toEqual(new Set());
        // ...and takes what the holder gave back.
        await store.releaseReads(['a', 'c']);
        expect(await other.leaseReads(['a', 'c'], 10_000)).toEqual(new Set(['a', 'c']));
        expect(await store.leaseReads(['a', 'c', 'd'], 10_000)).toEqual(new Set());
        expect(await other.leaseReads(['short'], 50)).toEqual(new Set(['short']));
        await vi.waitFor(async () => expect(await store.leaseReads(['short'], 50)).toEqual(new Set(['short'])), {
          timeout: 5_000,
          interval: 20,
        });
      } finally {
        await other.close();
      }
    }
  });

  test('keeps one cursor secret: made on first use, the same when the data is opened again, another in another store', async () => {
    fresh();
    const secret = await store.cursorSecret();
    expect(secret).toHaveLength(32);
    expect(await store.cursorSecret()).toEqual(secret);
    const again = await reopen(store);
    const other = makeStore();
    try {
      expect(await again.cursorSecret()).toEqual(secret);
      expect(await other.cursorSecret()).not.toEqual(secret);
    } finally {
      await again.close();
      await other.close();
    }
  });

  test('with a retention: expired events leave the log, their delivery reads and de-duplication; newer ones stay', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(new Date('2030-01-01T00:00:00Z'));
      store = open({ eventRetentionMs: 60_000, idempotencyRetentionMs: 60_000 });
      const now = (name: string, uid: string, extra: Record<string, unknown> = {}) => ({
        ...event(uid, name, extra),
        receivedAt: new Date().toISOString(),
      });
      await store.appendEvents([
        now('delivery.created', 'gone'),
        now('delivery.assigned', 'gone', { driver_location: { lat: 1, lng: 1 } }),
        now('delivery.created', 'mixed'),
      ]);
      vi.setSystemTime(Date.now() + 30_000);
      const recent = (
        await store.appendEvents([
          now('location.created', 'mixed', { driver_location: { lat: 2, lng: 2 } }),
          now('delivery.created', 'kept'),
        ])
      ).map((r) => r.event);
      // At exactly the retention, nothing has expired yet.
      vi.setSystemTime(Date.now() + 30_000);
      await trim(store);
      expect(await store.eventsAfter(0, 100)).toHaveLength(5);

      vi.setSystemTime(Date.now() + 1);
      await trim(store);
      expect(await store.eventsAfter(0, 100)).toEqual(recent);
      expect(await store.eventsAfter(0, 100, { uids: ['gone', 'mixed'] })).toEqual([recent[0]]);
      expect(await store.latestEvent('gone', 'delivery')).toBeUndefined();
      expect(await store.latestEvent('gone', 'location')).toBeUndefined();
      expect(await store.latestEvent('mixed', 'delivery')).toBeUndefined();
      // A delivery's state goes with its last event, not before.
      expect(await store.deliveryState('gone')).toBeUndefined();
      expect(await store.deliveryState('mixed')).toMatchObject({ seq: 3 });
      expect(await store.lastSeq()).toBe(5);
      expect(await footprint(store)).toMatchObject({ events: 2, dedup: 2, indexed: 2, deliveries: 2 });

      // Inside the window a repeat is still a duplicate; past it, the same event is a new one.
      const [again] = await store.appendEvents([now('delivery.created', 'kept')]);
      expect(again).toEqual({ duplicate: true, event: recent[1] });
      const [reborn] = await store.appendEvents([now('delivery.created', 'gone')]);
      expect(reborn).toMatchObject({ duplicate: false, event: { seq: 6, stale: false } });
    } finally {
      vi.useRealTimers();
    }
  });

  test('with a retention: a steady stream of events keeps the data bounded, and nothing is left once it stops', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(new Date('2030-01-01T00:00:00Z'));
      store = open({ eventRetentionMs: 60_000, idempotencyRetentionMs: 60_000 });
      const uids = Array.from({ length: 10 }, (_, n) => `stream-${n}`);
      let appended = 0;
      // 30 events every 20 s, for 10 minutes: a pass after each round keeps at most the last 60 s (4 rounds).
      for (let round = 0; round < 30; round += 1) {
        const receivedAt = new Date().toISOString();
        await store.appendEvents(
          Array.from({ length: 30 }, (_, n) => ({
            ...event(uids[n % 10]!, 'location.assigned_driver', { round, n }),
            receivedAt,
          })),
        );
        appended += 30;
        await trim(store);
        const size = await footprint(store);
        expect(size.events).toBe(Math.min(appended, 120));
        expect(size).toMatchObject({ dedup: size.events, indexed: size.events });
        expect(size.deliveries).toBeLessThanOrEqual(10);
        vi.setSystemTime(Date.now() + 20_000);
      }
      vi.setSystemTime(Date.now() + 60_000);
      await trim(store);
      expect(await footprint(store)).toEqual({
        events: 0,
        dedup: 0,
        indexed: 0,
        deliveries: 0,
        owners: 0,
        idempotency: 0,
      });
      // The log is empty, and its head did not move back: the next event comes after every earlier one.
      expect(await store.lastSeq()).toBe(appended);
      const [next] = await store.appendEvents([
        { ...event('stream-0', 'delivery.created'), receivedAt: new Date().toISOString() },
      ]);
      expect(next!.event.seq).toBe(appended + 1);
    } finally {
      vi.useRealTimers();
    }
  });

  test('with a retention: idempotency keys and ownership records expire, a booking in flight keeps its claim', async () => {
    store = open({ eventRetentionMs: 1_000, idempotencyRetentionMs: 1_000 });
    await store.claimIdempotency('owner', 'booked', 'fp');
    await store.completeIdempotency('owner', 'booked', { uid: 'u1', trackingUrl: null });
    expect(await store.claimIdempotency('owner', 'in-flight', 'fp')).toEqual({ state: 'claimed' });
    await store.recordOwner('o1', 'owner');
    expect(await store.claimIdempotency('owner', 'booked', 'other')).toEqual({ state: 'conflict' });
    expect(await store.ownerOf('o1')).toBe('owner');

    // Redis expires keys on its own clock: wait for it (other input is a conflict until then, and changes nothing).
    await vi.waitFor(
      async () => expect(await store.claimIdempotency('owner', 'booked', 'other')).toEqual({ state: 'claimed' }),
      { timeout: 10_000, interval: 100 },
    );
    await vi.waitFor(async () => expect(await store.ownerOf('o1')).toBeUndefined(), { timeout: 10_000, interval: 100 });
    expect(await store.claimIdempotency('owner', 'in-flight', 'fp')).toEqual({ state: 'pending' });
    await trim(store);
    // Gone from the store, not only hidden: the two claims left are the new one and the one in flight.
    expect(await footprint(store)).toMatchObject({ owners: 0, idempotency: 2 });
  });

  test("with a retention: an owner record's retention counts from its last proof (an event of its delivery, its own merchant's proof), not from its making", async () => {
    const retentionMs = 1_500;
    store = open({ eventRetentionMs: retentionMs, idempotencyRetentionMs: 60_000 });
    await store.recordOwners([
      { uid: 'by-events', owner: 'owner', group: 'PLATFORM', proof: 'booked' },
      { uid: 'by-owner', owner: 'owner', group: 'PARTNER', proof: 'reference' },
      { uid: 'by-another', owner: 'owner', group: 'PLATFORM', proof: 'booked' },
      { uid: 'unproved', owner: 'owner', group: 'PLATFORM', proof: 'booked' },
    ]);
    const made = Date.now();
    // Proofs for twice the retention, a few per retention: part of the schedule, not a wait for a result.
    for (let n = 0; Date.now() - made < 2 * retentionMs; n += 1) {
      const position = { driver_location: { lat: n, lng: 1 } };
      await store.appendEvents([event('by-events', 'location.pickup_enroute', position)]);
      await store.recordOwner('by-owner', 'owner', 'PARTNER', 'reference');
      // Another merchant's proof proves nothing of this record (once it expired, it makes one of its own).
      await store.recordOwner('by-another', 'another', 'PLATFORM', 'booked');
      await new Promise((resolve) => setTimeout(resolve, 150));
    }
    const owners = await store.ownersOf(['by-events', 'by-owner', 'by-another', 'unproved']);
    expect(Object.fromEntries(owners)).toEqual({
      'by-events': { owner: 'owner', group: 'PLATFORM', proof: 'booked' },
      'by-owner': { owner: 'owner', group: 'PARTNER', proof: 'reference' },
      'by-another': { owner: 'another', group: 'PLATFORM', proof: 'booked' },
    });
    // Reconciliation still finds them (on Redis, the owner's set lives as long as its records).
    await trim(store);
    const page = await store.unfinishedDeliveries('owner', undefined, { limit: 10, since: 0 });
    expect(page.deliveries.map((delivery) => delivery.uid).sort()).toEqual(['by-events', 'by-owner']);
    // Once the proofs stop, a record goes a retention after the last one.
    const lastProof = Date.now();
    await vi.waitFor(async () => expect(await store.ownerOf('by-events')).toBeUndefined(), {
      timeout: 10_000,
      interval: 100,
    });
    expect(Date.now() - lastProof).toBeGreaterThanOrEqual(retentionMs - 200);
  });
});

describe('SqliteStore on a file from before the unknown state', () => {
  it('upgrades the idempotency table in place: rows kept, the unknown state accepted, markers found', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-upgrade-'));
    dirs.push(dir);
    const old = new Database(path.join(dir, 'delivery-graph.sqlite'));
    old.exec(`CREATE TABLE idempotency (
      owner_hash TEXT NOT NULL, idempotency_key TEXT NOT NULL, fingerprint TEXT NOT NULL,
      state TEXT NOT NULL CHECK (state IN ('pending', 'done')), uid TEXT, tracking_url TEXT, updated_at INTEGER NOT NULL,
      PRIMARY KEY (owner_hash, idempotency_key))`);
    const now = Date.now();
    old.prepare("INSERT INTO idempotency VALUES ('owner', 'booked', 'fp', 'done', 'u1', NULL, ?)").run(now);
    old.prepare("INSERT INTO idempotency VALUES ('owner', 'in-flight', 'fp', 'pending', NULL, NULL, ?)").run(now);
    old.close();
    const store = new SqliteStore(dir);
    try {
      expect(await store.claimIdempotency('owner', 'booked', 'fp')).toEqual({
        state: 'done',
        result: { uid: 'u1', trackingUrl: null },
      });
      expect(await store.markIdempotencyUnknown('owner', 'in-flight')).toMatchObject({ state: 'unknown' });
      expect(
        await store.resolveBookingMarker(bookingMarker('owner', 'in-flight'), { uid: 'u2', trackingUrl: null }),
      ).toBe('owner');
      expect(await store.claimIdempotency('owner', 'in-flight', 'fp')).toEqual({
        state: 'done',
        result: { uid: 'u2', trackingUrl: null },
      });
    } finally {
      await store.close();
    }
  });
});

describe('SqliteStore on a file from before proofs were timed', () => {
  it('counts a record from its making until it is proved again, and then from the proof', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-upgrade-'));
    dirs.push(dir);
    const old = new Database(path.join(dir, 'delivery-graph.sqlite'));
    old.exec(`CREATE TABLE ownership (uid TEXT PRIMARY KEY, owner_hash TEXT NOT NULL, created_at INTEGER NOT NULL,
      api_group TEXT, proof TEXT); CREATE INDEX ownership_by_time ON ownership (created_at);`);
    const insert = old.prepare("INSERT INTO ownership VALUES (?, 'owner', ?, 'PLATFORM', 'booked')");
    // Made a second ago, so that a proof now is later by more than the clock's millisecond.
    insert.run('recent', Date.now() - 1_000);
    insert.run('old', Date.now() - 5_000);
    old.close();
    const store = new SqliteStore(dir, { retention: { eventRetentionMs: 3_000, idempotencyRetentionMs: 3_000 } });
    try {
      expect([...(await store.ownersOf(['recent', 'old'])).keys()]).toEqual(['recent']);
      // Proved again by its delivery's event: counted from now.
      await store.appendEvents([event('recent', 'delivery.assigned')]);
      const row = store.db.prepare('SELECT created_at, proved_at FROM ownership WHERE uid = ?').get('recent') as {
        created_at: number;
        proved_at: number;
      };
      expect(row.proved_at).toBeGreaterThan(row.created_at);
    } finally {
      await store.close();
    }
  });
});

describe.skipIf(!withRedis)('RedisStore against SqliteStore', () => {
  const NAMES = [
    'delivery.created',
    'delivery.assigned',
    'delivery.pickup_arrived',
    'delivery.pickup_complete',
    'delivery.dropoff_enroute',
    'delivery.dropoff_arrived',
    'delivery.return_in_progress',
    'delivery.dropoff_complete',
    'delivery.canceled',
    'delivery.failed',
    'delivery.returned',
    'delivery.mystery',
    'Delivery.Assigned',
    'location.assigned_driver',
    'location.pickup_enroute',
    'location.dropoff_enroute',
    'location.return_in_progress',
    'location.pickup_complete',
    'other.thing',
  ];
  const anEvent = fc.record({
    uid: fc.constantFrom('x', 'y', 'z'),
    name: fc.constantFrom(...NAMES),
    variant: fc.integer({ min: 0, max: 2 }),
    position: fc.constantFrom(undefined, null, { lat: 1.5, lng: 2 }, { lng: 3 }, { lat: 0, lng: 0 }),
    status: fc.constantFrom(undefined, null, 'Picked Up', 7),
    // Some events are poll events: a read made at some point of the log, confirming or not.
    read: fc.option(fc.record({ basis: fc.integer({ min: 0, max: 30 }), confirm: fc.boolean() }), { nil: undefined }),
    // Fields the view merges: present, absent, null, another value.
    extra: fc.constantFrom(
      {},
      { tracking_link: 'a' },
      { tracking_link: 'b', price: { value: 1 } },
      { price: null },
      { price: { value: null, currency: 'EUR' }, pickup_address: { street: 's', city: null } },
      { pickup_address: { city: 'c' }, dimensions: { height: 1, 'odd member': 2 } },
      { dropoff_verification_image_url: 'p', 'odd key': 1 },
    ),
  });
  /** A read merged into a view now and then between batches. */
  const aRead = fc.option(
    fc.record({
      uid: fc.constantFrom('x', 'y', 'z'),
      basis: fc.integer({ min: 0, max: 30 }),
      tracking: fc.constantFrom('r1', 'r2'),
    }),
    { nil: undefined },
  );

  it('gives the same answers for the same random batches', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.record({ events: fc.array(anEvent, { minLength: 1, maxLength: 6 }), read: aRead }), {
          minLength: 1,
          maxLength: 8,
        }),
        async (batches) => {
          const sqlite = sqliteStore();
          const redis = redisStore();
          try {
            for (const { events: batch, read } of batches) {
              const input = batch.map(({ uid, name, variant, position, status, read: made, extra }) => ({
                payload: {
                  uid,
                  event_name: name,
                  platform_payload: { variant },
                  driver_location: position,
                  status,
                  ...extra,
                  ...(made ? poll(made.basis, made.confirm) : {}),
                } as unknown as WireWebhookEvent,
                receivedAt: AT,
              }));
              // The payload object is handed back as given; compare through JSON, as both keep it.
              const normal = (value: unknown) => JSON.parse(JSON.stringify(value));
              expect(normal(await redis.appendEvents(input))).toEqual(normal(await sqlite.appendEvents(input)));
              if (read) {
                const record = {
                  uid: read.uid,
                  body: {
                    uid: read.uid,
                    tracking_link: read.tracking,
                    delivery_date: '2030-05-01T10:00:00Z',
                    price: { value: 3, currency: 'USD' },
                    pickup_address: { street: read.tracking, country: 'US' },
                  },
                  basis: read.basis,
                };
                await Promise.all([redis.recordRead(record), sqlite.recordRead(record)]);
              }
            }
            for (const uid of ['x', 'y', 'z']) {
              for (const kind of ['delivery', 'location'] as const)
                expect(await redis.latestEvent(uid, kind)).toEqual(await sqlite.latestEvent(uid, kind));
              expect(await redis.deliveryState(uid)).toEqual(await sqlite.deliveryState(uid));
              expect(await redis.deliveryView(uid)).toEqual(await sqlite.deliveryView(uid));
              const uids = uid === 'z' ? ['z'] : [uid, 'z'];
              expect(await redis.eventsAfter(2, 5, { uids })).toEqual(await sqlite.eventsAfter(2, 5, { uids }));
            }
            expect(await redis.eventsAfter(0, 1000)).toEqual(await sqlite.eventsAfter(0, 1000));
            expect(await redis.lastSeq()).toBe(await sqlite.lastSeq());
          } finally {
            await sqlite.close();
            await redis.close();
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});
