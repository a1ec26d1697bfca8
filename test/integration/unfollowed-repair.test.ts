// No event lost for good (issue 30 item 3): an unfinished delivery nobody follows
// is still read from the upstream at a slower cadence, with its merchant's key
// as the process last saw it (in memory only), so that a change whose webhook
// the upstream gave up on reaches an unfiltered deliveryEvents subscriber and
// Delivery.events. The sandbox drops the webhooks a delivery's script names,
// as after five failed retries. Reads are shared fairly across merchants, and
// counted in /metrics. On the embedded SQLite store and on a private Redis.
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { NOT_DELIVERED_RANK } from '../../src/domain/milestones.js';
import { createLogger } from '../../src/logger.js';
import { createEventBus } from '../../src/realtime/bus.js';
import { OwnerKeys } from '../../src/realtime/owner-keys.js';
import { Reconciler } from '../../src/realtime/reconcile.js';
import { RedisStore } from '../../src/store/redis.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { AppendCondition, AppendResult, Store } from '../../src/store/store.js';
import type { Upstream } from '../../src/upstream/clients.js';
import type { WireWebhookEvent } from '../../src/upstream/wire.js';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const ALL_EVENTS = `subscription { deliveryEvents { uid name source } }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name status } }`;
const HISTORY = `query($uid: ID!) { delivery(uid: $uid) { status events { edges { node { name source stale } } } } }`;
const INTERVAL_MS = 100;
const UNFOLLOWED_MS = 400;
const GRACE_MS = 300;
/** advance() steps from CREATED to DROPOFF_COMPLETE (the `delivered` outcome). */
const STEPS_TO_THE_END = 7;

const withRedis = redisAvailable('unfollowed-repair.test.ts');
let redis: RedisServer | undefined;

beforeAll(async () => {
  if (withRedis) redis = await startRedisServer();
});
afterAll(async () => {
  await redis?.stop();
});

async function book(
  stack: Stack,
  key: string,
  script?: Record<string, unknown>,
  outcome = 'delivered',
): Promise<string> {
  const payload = script ? { sandbox_outcome: outcome, sandbox_webhooks: script } : { sandbox_outcome: outcome };
  const result = await stack.gql(CREATE, { input: deliveryInput({ payload }) }, key);
  return result.data.createDelivery.data.uid;
}

/** The upstream reads of one delivery (GET of its platform path) the sandbox answered after `mark`. */
const readsOf = (stack: Stack, uid: string, mark: number) =>
  stack.sandbox.requestsSince(mark).filter((r) => r.method === 'GET' && r.path.endsWith(`/deliveries/${uid}`)).length;

/** A sample of /metrics (0 when absent). */
async function metric(app: App, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`${app.url}/metrics`)).text();
  const line = text.split('\n').find((each) => each.startsWith(`${name}${labels} `));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}
const readsOfKind = (app: App, kind: string) => metric(app, 'delivery_graph_reconcile_reads_total', `{kind="${kind}"}`);

/** Every line a logger wrote, for the check that no key is in one. */
function capturedLogs(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { lines, logger: createLogger('debug', destination) };
}

/** Everything a Redis holds, as text: every key's name and value, whatever its type. */
async function redisDump(url: string): Promise<string> {
  const client = new Redis(url);
  try {
    const parts: string[] = [];
    for (const key of await client.keys('*')) {
      parts.push(key);
      const type = await client.type(key);
      if (type === 'string') parts.push((await client.getBuffer(key))?.toString('latin1') ?? '');
      else if (type === 'hash') parts.push(JSON.stringify(await client.hgetall(key)));
      else if (type === 'zset') parts.push(JSON.stringify(await client.zrange(key, 0, -1)));
      else if (type === 'set') parts.push(JSON.stringify(await client.smembers(key)));
      else if (type === 'list') parts.push(JSON.stringify(await client.lrange(key, 0, -1)));
      else if (type === 'stream') parts.push(JSON.stringify(await client.xrange(key, '-', '+')));
    }
    return parts.join('\n');
  } finally {
    client.disconnect();
  }
}

/** Every file under the data directory (the SQLite file, its WAL, the sandbox's world), as bytes read as text. */
function dataDirDump(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => readFileSync(path.join(entry.parentPath, entry.name)).toString('latin1'))
    .join('\n');
}

const stores: Array<[string, boolean, () => Record<string, string>]> = [
  ['SQLite', true, () => ({})],
  ['Redis', withRedis, () => ({ REDIS_URL: redis!.url })],
];

describe.each(stores)('repair without a follower, on %s', (name, enabled, storeEnv) => {
  let stack: Stack;
  let logs: ReturnType<typeof capturedLogs>;
  beforeAll(async () => {
    if (!enabled) return;
    logs = capturedLogs();
    stack = await startStack({
      env: {
        ...storeEnv(),
        RECONCILE_INTERVAL_MS: String(INTERVAL_MS),
        RECONCILE_UNFOLLOWED_INTERVAL_MS: String(UNFOLLOWED_MS),
        FINALITY_GRACE_MS: String(GRACE_MS),
      },
      logger: logs.logger,
    });
  });
  afterAll(async () => {
    await stack?.stop();
  });
  const test = it.skipIf(!enabled);

  test('a dropoff_complete whose webhook was lost reaches an unfiltered deliveryEvents subscriber and Delivery.events; the key it was read with is nowhere but memory', async () => {
    const uid = await book(stack, stack.key, { drop: ['delivery.dropoff_complete'] });
    const client = wsClient(stack.app.url, stack.key);
    try {
      // Every event of the merchant, no uids: this follows no delivery.
      const feed = collect(client, ALL_EVENTS);
      await waitUntil(() => stack.app.services.bus.listenerCount() > 0, 'the feed to listen');
      for (let step = 0; step < STEPS_TO_THE_END - 1; step += 1) await stack.sandbox.advance(uid);
      await feed.waitForItem(
        (item) => item.deliveryEvents.uid === uid && item.deliveryEvents.name === 'delivery.dropoff_arrived',
      );
      const mark = stack.sandbox.requestCount;
      // The last step: its webhook never comes.
      await stack.sandbox.advance(uid);
      const [repaired] = (
        await feed.waitForItem(
          (item) => item.deliveryEvents.uid === uid && item.deliveryEvents.name === 'delivery.dropoff_complete',
        )
      ).filter((item) => item.deliveryEvents.uid === uid && item.deliveryEvents.name === 'delivery.dropoff_complete');
      expect(repaired.deliveryEvents.source).toBe('poll');
      expect(stack.app.services.reconciler!.followedCount).toBe(0);
      // One read after the end found it: the first of the passes that came after its last webhook.
      expect(readsOf(stack, uid, mark)).toBe(1);
      expect(feed.errors).toEqual([]);
    } finally {
      await client.dispose();
    }

    const history = await stack.gql(HISTORY, { uid });
    expect(history.data.delivery.status).toBe('DROPOFF_COMPLETE');
    expect(
      history.data.delivery.events.edges
        .map((edge: any) => edge.node)
        .filter((node: any) => !node.stale)
        .at(-1),
    ).toEqual({ name: 'delivery.dropoff_complete', source: 'poll', stale: false });

    // The key read it, and was never written down: not in the store, not in a log line.
    const key = stack.key;
    if (name === 'Redis') expect(await redisDump(redis!.url)).not.toContain(key);
    else expect(dataDirDump(stack.dataDir)).not.toContain(key);
    expect(logs.lines.length).toBeGreaterThan(0);
    expect(logs.lines.filter((line) => line.includes(key))).toEqual([]);
  });

  test('an event that contradicts the state of a delivery nobody follows has it read at once: the second attempt the read shows is stored', async () => {
    // Failed at the door, then delivered on a second attempt: the second attempt's first webhook comes late, the rest
    // never.
    const uid = await book(
      stack,
      stack.key,
      {
        hold: ['delivery.dropoff_enroute#2'],
        drop: [
          'location.dropoff_enroute#2',
          'delivery.dropoff_arrived#2',
          'location.dropoff_arrived#2',
          'delivery.dropoff_complete',
        ],
      },
      'failed_then_delivered',
    );
    const client = wsClient(stack.app.url, stack.key);
    try {
      const feed = collect(client, ALL_EVENTS);
      await waitUntil(() => stack.app.services.bus.listenerCount() > 0, 'the feed to listen');
      // created, assigned, pickup_enroute, pickup_arrived, pickup_complete, dropoff_enroute, dropoff_arrived, failed,
      // dropoff_enroute, dropoff_arrived, dropoff_complete
      for (let step = 0; step < 10; step += 1) await stack.sandbox.advance(uid);
      await feed.waitForItem(
        (item) => item.deliveryEvents.uid === uid && item.deliveryEvents.name === 'delivery.failed',
      );
      const contradictions = await readsOfKind(stack.app, 'contradiction');
      // The late dropoff_enroute contradicts FAILED: one read settles it, and the read says DROPOFF_COMPLETE.
      await stack.sandbox.releaseWebhooks(uid);
      const items = await feed.waitForItem(
        (item) => item.deliveryEvents.uid === uid && item.deliveryEvents.name === 'delivery.dropoff_complete',
      );
      expect(
        items.find(
          (item) => item.deliveryEvents.uid === uid && item.deliveryEvents.name === 'delivery.dropoff_complete',
        ).deliveryEvents.source,
      ).toBe('poll');
      expect(await readsOfKind(stack.app, 'contradiction')).toBeGreaterThan(contradictions);
      expect(stack.app.services.reconciler!.followedCount).toBe(0);
    } finally {
      await client.dispose();
    }
    expect((await stack.gql(HISTORY, { uid })).data.delivery.status).toBe('DROPOFF_COMPLETE');
  });

  test('a cancel before pickup of a delivery nobody follows is confirmed by a read once its grace ends: a new subscriber gets it final', async () => {
    const uid = await book(stack, stack.key, undefined, 'canceled_before_pickup');
    const client = wsClient(stack.app.url, stack.key);
    try {
      const feed = collect(client, ALL_EVENTS);
      await waitUntil(() => stack.app.services.bus.listenerCount() > 0, 'the feed to listen');
      const confirmations = await readsOfKind(stack.app, 'confirmation');
      // assigned, pickup_enroute, pickup_arrived, canceled
      for (let step = 0; step < 4; step += 1) await stack.sandbox.advance(uid);
      const canceled = (item: any) =>
        item.deliveryEvents.uid === uid && item.deliveryEvents.name === 'delivery.canceled';
      await feed.waitForItem(canceled);
      // The confirming read is stored as an event of its own, after the webhook's.
      await feed.waitForItem((item) => canceled(item) && item.deliveryEvents.source === 'poll');
      expect(await readsOfKind(stack.app, 'confirmation')).toBeGreaterThan(confirmations);
    } finally {
      await client.dispose();
    }
    const late = wsClient(stack.app.url, stack.key);
    try {
      const sub = collect(late, UPDATED, { uid });
      await sub.done;
      expect(sub.items.map((item) => item.deliveryUpdated.status)).toEqual(['CANCELED']);
      expect(sub.errors).toEqual([]);
    } finally {
      await late.dispose();
    }
  });

  test('/metrics counts the reads by kind, the unfinished deliveries and the merchants whose key is held, never the key', async () => {
    const uid = await book(stack, stack.key, { drop: ['*'] });
    await stack.sandbox.advance(uid);
    // Its pass reads it (nobody follows it, no webhook comes); the metrics are read after.
    const mark = stack.sandbox.requestCount;
    await waitUntil(() => readsOf(stack, uid, mark) >= 1, 'a pass to read the unfollowed delivery');
    const metrics = await (await fetch(`${stack.app.url}/metrics`)).text();
    expect(metrics).toMatch(/^delivery_graph_reconcile_reads_total\{kind="unfollowed"\} [1-9]/m);
    for (const kind of ['followed', 'contradiction', 'confirmation'])
      expect(metrics).toMatch(new RegExp(`^delivery_graph_reconcile_reads_total\\{kind="${kind}"\\} \\d+`, 'm'));
    expect(metrics).toMatch(/^delivery_graph_reconcile_queue_delay_seconds_count\{kind="unfollowed"\} [1-9]/m);
    expect(metrics).toMatch(/^delivery_graph_reconcile_unfinished_deliveries [1-9]/m);
    expect(metrics).toMatch(/^delivery_graph_reconcile_owner_keys [1-9]/m);
    expect(metrics).toMatch(/^delivery_graph_reconcile_due_reads \d+/m);
    expect(metrics).toMatch(/^delivery_graph_reconcile_keys_dropped_total 0/m);
    expect(metrics).not.toContain(stack.key);
  });
});

describe('fair across merchants (SQLite)', () => {
  // A budget far below what the followed deliveries want, so that reads queue.
  const BUDGET = 10;
  const FOLLOWED = 30;
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({
      env: {
        RECONCILE_INTERVAL_MS: String(INTERVAL_MS),
        RECONCILE_UNFOLLOWED_INTERVAL_MS: '1000',
        RECONCILE_MAX_READS_PER_SECOND: String(BUDGET),
      },
    });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  /** The merchant of each upstream read after `mark`, in the order the sandbox answered them. */
  function readOrder(mark: number, merchants: Map<string, 'A' | 'B'>): Array<'A' | 'B'> {
    const order: Array<'A' | 'B'> = [];
    for (const request of stack.sandbox.requestsSince(mark)) {
      if (request.method !== 'GET') continue;
      const uid = /\/deliveries\/([^/?]+)$/.exec(request.path)?.[1];
      const merchant = uid && merchants.get(uid);
      if (merchant) order.push(merchant);
    }
    return order;
  }

  it('A follows 30 deliveries; B follows one, and has four nobody follows: each B read comes within a few A reads', async () => {
    const merchants = new Map<string, 'A' | 'B'>();
    const clients = [wsClient(stack.app.url, stack.key), wsClient(stack.app.url, stack.otherKey)];
    try {
      // A: its deliveries never move, but each wants a read every 100 ms (300 a second against a budget of 10).
      const followedByA = await Promise.all(Array.from({ length: FOLLOWED }, () => book(stack, stack.key)));
      for (const uid of followedByA) merchants.set(uid, 'A');
      const subsA = followedByA.map((uid) => collect(clients[0]!, UPDATED, { uid }));
      await Promise.all(subsA.map((sub) => sub.waitFor(1)));
      // B: one followed delivery, and four nobody follows whose webhooks are all lost.
      const followedByB = await book(stack, stack.otherKey);
      merchants.set(followedByB, 'B');
      const subB = collect(clients[1]!, UPDATED, { uid: followedByB });
      await subB.waitFor(1);
      const unfollowedByB = await Promise.all(
        Array.from({ length: 4 }, () => book(stack, stack.otherKey, { drop: ['*'] })),
      );
      for (const uid of unfollowedByB) merchants.set(uid, 'B');

      const mark = stack.sandbox.requestCount;
      // Every unfollowed delivery of B read once (its pass), and B's followed one several times.
      await waitUntil(
        () => unfollowedByB.every((uid) => readsOf(stack, uid, mark) >= 1) && readsOf(stack, followedByB, mark) >= 5,
        "B's reads",
        20_000,
      );
      const order = readOrder(mark, merchants);
      // While B has reads due it gets every other read: A's reads between two of B's are few, whatever A follows.
      const firstB = order.indexOf('B');
      const lastB = order.lastIndexOf('B');
      let run = 0;
      let longest = 0;
      for (const merchant of order.slice(firstB, lastB + 1)) {
        run = merchant === 'A' ? run + 1 : 0;
        longest = Math.max(longest, run);
      }
      // B's followed delivery is due every 100 ms, a read a tenth of a second apart at this budget: one A read between,
      // at times two.
      expect(longest, order.join('')).toBeLessThanOrEqual(3);
      // And A, which wants far more, still gets its share: about half.
      const window = order.slice(firstB, lastB + 1);
      expect(window.filter((merchant) => merchant === 'A').length).toBeGreaterThanOrEqual(
        window.filter((merchant) => merchant === 'B').length - 2,
      );
      for (const sub of [...subsA, subB]) expect(sub.errors).toEqual([]);
    } finally {
      for (const client of clients) await client.dispose();
    }
  });
});

describe('after a restart (SQLite)', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({
      env: { RECONCILE_INTERVAL_MS: String(INTERVAL_MS), RECONCILE_UNFOLLOWED_INTERVAL_MS: '300' },
    });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("the keys are gone with the process: a merchant's unfinished deliveries wait until it calls again, then they are repaired", async () => {
    const waiting = await book(stack, stack.key, { drop: ['*'] });
    const other = await book(stack, stack.otherKey, { drop: ['*'] });
    await stack.restart();
    const mark = stack.sandbox.requestCount;
    await stack.sandbox.advance(waiting);
    await stack.sandbox.advance(other);
    // The other merchant calls: its delivery is read by the passes, and this one's is not.
    expect((await stack.gql('{ availability { available } }', {}, stack.otherKey)).errors).toBeUndefined();
    await waitUntil(() => readsOf(stack, other, mark) >= 2, "two passes over the other merchant's deliveries");
    expect(readsOf(stack, waiting, mark)).toBe(0);
    expect(await metric(stack.app, 'delivery_graph_reconcile_owner_keys')).toBe(1);

    // This merchant calls again (any call the upstream accepts): its delivery is read, and the lost change stored.
    expect((await stack.gql('{ availability { available } }', {}, stack.key)).errors).toBeUndefined();
    await waitUntil(() => readsOf(stack, waiting, mark) >= 1, "a pass over this merchant's deliveries");
    await waitUntil(async () => {
      const events: Array<{ name: string; source: string }> = (
        await stack.gql(HISTORY, { uid: waiting })
      ).data.delivery.events.edges.map((edge: any) => edge.node);
      return events.some((event) => event.name === 'delivery.assigned' && event.source === 'poll');
    }, "the repair of this merchant's delivery");
  });
});

describe.runIf(withRedis)('several instances on one Redis', () => {
  let stack: Stack;
  let second: App;
  beforeAll(async () => {
    const env = {
      REDIS_URL: redis!.url,
      RECONCILE_INTERVAL_MS: String(INTERVAL_MS),
      RECONCILE_UNFOLLOWED_INTERVAL_MS: '300',
    };
    stack = await startStack({ env });
    second = await startApp(loadConfig({ ...stack.env, DATA_DIR: `${stack.dataDir}-second` }));
  });
  afterAll(async () => {
    await second?.stop();
    await stack?.stop();
    rmSync(`${stack.dataDir}-second`, { recursive: true, force: true });
  });

  it('an unfollowed delivery is read about once per pass interval by the instances together, not once by each', async () => {
    // Both instances hold the merchant's key: one booked with it, the other read a delivery with it.
    const uid = await book(stack, stack.key, { drop: ['*'] });
    const read = await fetch(`${second.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.key}` },
      body: JSON.stringify({ query: HISTORY, variables: { uid } }),
    });
    expect(((await read.json()) as any).data.delivery.status).toBe('CREATED');

    const mark = stack.sandbox.requestCount;
    await waitUntil(() => readsOf(stack, uid, mark) >= 1, 'the first pass read');
    const started = Date.now();
    const first = stack.sandbox.requestCount;
    await waitUntil(() => readsOf(stack, uid, first) >= 6, 'six more pass reads', 20_000);
    const elapsed = Date.now() - started;
    // Each read holds its lease for 0.9 of the 300 ms interval: at most one read per 270 ms between both instances.
    expect(readsOf(stack, uid, first)).toBeLessThanOrEqual(Math.floor(elapsed / 270) + 1);
    // Both instances hold the key and make passes: the lease, not chance, kept it to one read per interval.
    expect(await metric(stack.app, 'delivery_graph_reconcile_owner_keys')).toBe(1);
    expect(await metric(second, 'delivery_graph_reconcile_owner_keys')).toBe(1);
    expect(
      (await readsOfKind(stack.app, 'unfollowed')) + (await readsOfKind(second, 'unfollowed')),
    ).toBeGreaterThanOrEqual(7);
  });
});

// A contradiction heard while the read it asked for is under way is read again
// when that read ends (its answer may be older than the contradiction). On Redis
// the read holds a lease in the store, which must not refuse the same instance's
// second read: SQLite grants every lease, and both stores must end where the
// upstream does. The upstream here is a stub whose first read is held until the
// second contradiction is stored, and answers what it showed before (delivered).
describe.each(stores)('a contradiction heard while its read is under way, on %s', (name, enabled) => {
  it.skipIf(!enabled)('is read again when that read ends, and the second read decides', async () => {
    const store: Store =
      name === 'SQLite'
        ? new SqliteStore(mkdtempSync(path.join(tmpdir(), 'delivery-graph-reread-')))
        : new RedisStore(new Redis(redis!.url), { prefix: `reread:${randomUUID()}:`, ownsClient: true });
    const bus = createEventBus();
    const uid = randomUUID();
    const event = (eventName: string) => ({
      payload: { uid, event_name: eventName, status: eventName.slice('delivery.'.length) } as WireWebhookEvent,
      receivedAt: new Date().toISOString(),
    });
    await store.recordOwners([{ uid, owner: 'merchant', group: 'PLATFORM', proof: 'booked' }]);
    await store.appendEvents([event('delivery.pickup_complete'), event('delivery.dropoff_complete')]);

    let reads = 0;
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const upstream = {
      platform: {
        get: async () => {
          reads += 1;
          if (reads === 1) await held;
          return { uid, status: reads === 1 ? 'dropoff_complete' : 'failed' };
        },
      },
      partner: { getOrder: async () => Promise.reject(new Error('not a partner order')) },
    } as unknown as Upstream;
    const keys = new OwnerKeys({ ownerOf: () => 'merchant' });
    keys.remember('sk_test_merchant');
    const append = async (payload: WireWebhookEvent, receivedAt: string, onlyIf?: AppendCondition) => {
      const [result] = await store.appendEvents([{ payload, receivedAt, onlyIf }]);
      if ('event' in result!) bus.publish(result.event);
      return result!;
    };
    /** A webhook: stored whatever the store judges of it. */
    const receive = async (payload: WireWebhookEvent, receivedAt: string) =>
      (await append(payload, receivedAt)) as AppendResult;
    const reconciler = new Reconciler({
      store,
      upstream,
      bus,
      keys,
      intervalMs: 30_000,
      maxReadsPerSecond: 100,
      finalityGraceMs: 60_000,
      append,
      ownerOf: async (u) => (await store.ownersOf([u])).get(u),
    });
    try {
      // A failure after dropoff_complete contradicts it: read at once.
      const first = await receive(event('delivery.failed').payload, new Date().toISOString());
      expect(first.event.contradicts).toBe(true);
      await expect.poll(() => reads, { timeout: 5_000 }).toBe(1);
      // Another contradiction while that read is held.
      expect(
        (await receive(event('delivery.return_in_progress').payload, new Date().toISOString())).event.contradicts,
      ).toBe(true);
      release();
      // The first read answers the old dropoff_complete; the second, asked for by the return, says failed and wins.
      await expect.poll(() => reads, { timeout: 5_000 }).toBe(2);
      await expect
        .poll(async () => (await store.deliveryState(uid))?.rank, { timeout: 5_000 })
        .toBe(NOT_DELIVERED_RANK);
      expect(reconciler.counters.byKind.contradiction).toBe(2);
    } finally {
      reconciler.stop();
      await store.close();
    }
  });
});
