// Who may see a delivery, against an upstream that scopes reads to the platform
// (the document's 404 reads "no delivery with this uid belongs to the platform",
// so any merchant of the platform may get a 200 for another's delivery), with
// the facade's UPSTREAM_READ_SCOPE at its default, platform. The sandbox runs
// with readScope: 'platform'; each test first shows that the upstream itself
// would hand the other merchant the delivery, then that the facade does not, on
// every path: it answers as for a uid that does not exist, with the same
// upstream calls (reads of a uid drawn now, never the delivery, never a cancel).
// A delivery booked outside the facade is nobody's until something the merchant
// alone can do proves it (for a partner order, its read by reference), or an
// operator claims it. Events of a partner order take their group from what the
// facade knows, not from fields the document's webhook body lacks. An operator's
// claim made while the facade runs (on Redis) counts there within seconds.
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { merchantCommand } from '../../src/access/merchant-admin.js';
import { CLAIM_CHECK_MS } from '../../src/access/owners.js';
import { RedisStore } from '../../src/store/redis.js';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { partnerOrderBody, startStack, deliveryInput, type Stack } from '../helpers/stack.js';
import { listenersAttached } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const READ = `query($uid: ID!, $group: ApiGroup! = PLATFORM) { delivery(uid: $uid, group: $group) { uid group pickup { name } payload } }`;
const MANY = `query($uids: [ID!]!) { deliveries(uids: $uids) { uid pickup { name } } }`;
const NODE = `query($id: ID!) { node(id: $id) { id ... on Delivery { uid } } }`;
const ENTITIES = `query($representations: [_Any!]!) { _entities(representations: $representations) { ... on Delivery { uid } } }`;
const CANCEL = `mutation($uid: ID!, $group: ApiGroup! = PLATFORM) { cancelDelivery(uid: $uid, group: $group) { __typename ... on NotFoundError { message } ... on MutationCancelDeliverySuccess { data { status } } } }`;
const TOKEN = `mutation($uids: [ID!]!) { createClientToken(uids: $uids) { __typename ... on MutationCreateClientTokenSuccess { data { token } } } }`;

/** A Delivery's global id (Relay: base64 of type, group and uid). */
const nodeId = (group: string, uid: string) => Buffer.from(`Delivery:${group}:${uid}`).toString('base64');

let stack: Stack;
let owner: string;
let other: string;

/** What the upstream answers `key` for a platform read of `uid`, asked directly (not through the facade). */
async function upstreamStatus(key: string, uid: string): Promise<number> {
  const response = await fetch(`${stack.sandbox.url}/${stack.sandbox.platformId}/deliveries/${uid}`, {
    headers: { authorization: `Bearer ${key}` },
  });
  await response.body?.cancel();
  return response.status;
}

/** The upstream requests `run` caused: method and route with every uid replaced, and the paths themselves. */
async function upstreamCalls(run: () => Promise<unknown>): Promise<{ routes: string[]; paths: string[] }> {
  const mark = stack.sandbox.requestCount;
  await run();
  const requests = stack.sandbox.requestsSince(mark).filter((r) => r.group !== 'control');
  const routes = requests.map((r) => `${r.method} ${r.path.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, '{uid}')}`).sort();
  return { routes, paths: requests.map((r) => r.path) };
}

async function book(key: string): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput() }, key);
  expect(result.errors).toBeUndefined();
  return result.data.createDelivery.data.uid;
}

beforeAll(async () => {
  stack = await startStack({ sandbox: { knobs: { readScope: 'platform' } } });
  owner = stack.key;
  other = stack.otherKey;
});

afterAll(async () => {
  await stack?.stop();
});

describe('a delivery booked through the facade', () => {
  /**
   * Every read path, for one uid, as `key`: one after the other, so that the calls they cost can be counted (concurrent
   * ones may share a read).
   */
  const readEverywhere = async (uid: string, key: string) => [
    await stack.gql(READ, { uid }, key),
    await stack.gql(MANY, { uids: [uid, uid] }, key),
    await stack.gql(NODE, { id: nodeId('PLATFORM', uid) }, key),
    await stack.gql(ENTITIES, { representations: [{ __typename: 'Delivery', uid }] }, key),
    await stack.gql(ENTITIES, { representations: [{ __typename: 'Delivery', uid, group: 'PARTNER' }] }, key),
  ];

  it('answers every other merchant on every read path as a uid that does not exist, with the same upstream calls and never a read of it', async () => {
    const uid = await book(owner);
    // The upstream itself would let the other merchant of the platform read it.
    expect(await upstreamStatus(other, uid)).toBe(200);

    let answers: Array<Record<string, any>> = [];
    const calls = await upstreamCalls(async () => (answers = await readEverywhere(uid, other)));
    const [read, many, node, entities, partnerEntities] = answers;
    expect(read).toEqual({ data: { delivery: null } });
    expect(many).toEqual({ data: { deliveries: [null, null] } });
    expect(node).toEqual({ data: { node: null } });
    expect(entities).toEqual({ data: { _entities: [null] } });
    expect(partnerEntities).toEqual({ data: { _entities: [null] } });
    // A uid nobody has: the same answers, the same calls.
    const unknown = randomUUID();
    let unknownAnswers: Array<Record<string, any>> = [];
    const unknownCalls = await upstreamCalls(async () => (unknownAnswers = await readEverywhere(unknown, other)));
    expect(unknownAnswers).toEqual(answers);
    expect(calls.routes).toEqual(unknownCalls.routes);
    expect(calls.paths.some((path) => path.includes(uid))).toBe(false);

    // The owner still reads it.
    expect((await stack.gql(READ, { uid }, owner)).data.delivery.uid).toBe(uid);
  });

  it('cannot be canceled, followed or put in a client token by another key: each answers as for an unknown uid, and no cancel is sent', async () => {
    const uid = await book(owner);
    let cancel: Record<string, any> = {};
    let token: Record<string, any> = {};
    const calls = await upstreamCalls(async () => {
      cancel = await stack.gql(CANCEL, { uid }, other);
      token = await stack.gql(TOKEN, { uids: [uid] }, other);
    });
    expect(cancel.data.cancelDelivery.__typename).toBe('NotFoundError');
    expect(token.data.createClientToken.__typename).toBe('NotFoundError');
    expect(calls.routes.some((route) => route.endsWith('/cancel'))).toBe(false);
    expect(calls.paths.some((path) => path.includes(uid))).toBe(false);
    const unknown = randomUUID();
    const unknownCalls = await upstreamCalls(async () => {
      await stack.gql(CANCEL, { uid: unknown }, other);
      await stack.gql(TOKEN, { uids: [unknown] }, other);
    });
    expect(calls.routes).toEqual(unknownCalls.routes);

    const client = wsClient(stack.app.url, other);
    try {
      const updates = collect(client, `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { uid status } }`, { uid });
      await updates.done;
      expect(JSON.stringify(updates.errors)).toContain('NOT_FOUND');
      expect(updates.items).toEqual([]);
    } finally {
      await client.dispose();
    }
    // Still not canceled: the owner's read says so.
    expect(
      (await stack.gql(`query($uid: ID!) { delivery(uid: $uid) { status } }`, { uid }, owner)).data.delivery.status,
    ).not.toBe('CANCELED');
  });

  it("keeps another key's deliveryEvents free of it, whatever the upstream would allow", async () => {
    const client = wsClient(stack.app.url, other);
    try {
      const uid = await book(owner);
      await stack.sandbox.advance(uid);
      await stack.sandbox.idle();
      // A delivery of the other key's own, after the owner's: once its event arrives, the owner's would have too.
      const own = await book(other);
      await stack.sandbox.idle();
      // From the oldest stored event: the owner's are in the log, before the other key's own.
      const events = collect(client, `subscription { deliveryEvents(after: "0") { uid name } }`);
      await events.waitForItem((item: any) => item.deliveryEvents.uid === own);
      expect(events.items.map((item: any) => item.deliveryEvents.uid)).not.toContain(uid);
      expect(events.errors).toEqual([]);
    } finally {
      await client.dispose();
    }
  });
});

describe('a delivery the facade has no record of', () => {
  it("is nobody's on a platform-scoped upstream, whoever reads it first, until an operator claims it; the claim outlives a restart", async () => {
    // Booked at the upstream directly, by the owner: the facade never saw it.
    const response = await fetch(`${stack.sandbox.url}/${stack.sandbox.platformId}/deliveries`, {
      method: 'POST',
      headers: { authorization: `Bearer ${owner}`, 'content-type': 'application/json' },
      body: JSON.stringify(wireBooking()),
    });
    const { uid } = (await response.json()) as { uid: string };
    expect(await upstreamStatus(other, uid)).toBe(200);

    // A read's 200 proves nothing: not the other merchant's, who reads it first, nor the owner's.
    expect(await stack.gql(READ, { uid }, other)).toEqual({ data: { delivery: null } });
    expect(await stack.gql(READ, { uid }, owner)).toEqual({ data: { delivery: null } });
    expect(await stack.app.services.store.ownersOf([uid])).toEqual(new Map());

    // The operator's claim (npm run merchant -- claim --uid=… with the owner's key on standard input).
    const claimed = await merchantCommand(['claim', `--uid=${uid}`], `${owner}\n`, { store: stack.app.services.store });
    expect(claimed.code).toBe(0);
    await stack.restart();
    expect((await stack.gql(READ, { uid }, owner)).data.delivery.uid).toBe(uid);
    expect(await stack.gql(READ, { uid }, other)).toEqual({ data: { delivery: null } });
  });

  it("gives a partner order's events the partner group, though the webhook body does not say it", async () => {
    const order = stack.sandbox.seedPartnerOrder(
      owner,
      partnerOrderBody('OWN-1', { partner_payload: { shop: 'one' } }),
    );
    // The facade learns the group from the owner's read.
    expect((await stack.gql(READ, { uid: order.uid, group: 'PARTNER' }, owner)).data.delivery.group).toBe('PARTNER');
    await stack.sandbox.advance(order.uid);
    await stack.sandbox.idle();
    const page = await stack.gql(
      `query($uid: ID!) { delivery(uid: $uid, group: PARTNER) { events { edges { node { name delivery { id group } } } } } }`,
      { uid: order.uid },
      owner,
    );
    const nodes = page.data.delivery.events.edges.map((edge: any) => edge.node);
    expect(nodes.length).toBeGreaterThan(0);
    for (const node of nodes) expect(node.delivery).toEqual({ id: nodeId('PARTNER', order.uid), group: 'PARTNER' });
    // Its id leads back to the order.
    expect((await stack.gql(NODE, { id: nodes[0].delivery.id }, owner)).data.node).toEqual({
      id: nodeId('PARTNER', order.uid),
      uid: order.uid,
    });
    // And another key is refused it, though the upstream would read it out (platform scope).
    expect(await stack.gql(READ, { uid: order.uid, group: 'PARTNER' }, other)).toEqual({ data: { delivery: null } });
  });
});

describe('an operator claim made while the facade runs (Redis)', () => {
  const withRedis = redisAvailable('owner-records.test.ts');
  let redis: RedisServer | undefined;
  let running: Stack;
  beforeAll(async () => {
    if (!withRedis) return;
    redis = await startRedisServer();
    running = await startStack({ sandbox: { knobs: { readScope: 'platform' } }, env: { REDIS_URL: redis.url } });
  });
  afterAll(async () => {
    await running?.stop();
    await redis?.stop();
  });

  it.skipIf(!withRedis)(
    'counts within seconds: the merchant it was recorded for reads null, its stream of the delivery ends NOT_FOUND, its unfiltered feed shows it no more; the claimant reads it',
    async () => {
      const [recorded, claimant] = [running.key, running.otherKey];
      const booked = async (key: string) =>
        (await running.gql(CREATE, { input: deliveryInput() }, key)).data.createDelivery.data.uid as string;
      // Booked with one key: recorded as its merchant's, which the instance remembers as it reads, follows and passes
      // the events on.
      const uid = await booked(recorded);
      expect((await running.gql(READ, { uid }, recorded)).data.delivery.uid).toBe(uid);
      const client = wsClient(running.app.url, recorded);
      try {
        const attached = listenersAttached(running.app.services.bus);
        const feed = collect(client, `subscription { deliveryEvents { uid name } }`);
        await attached;
        const updated = collect(client, `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { uid name } }`, { uid });
        await updated.waitFor(1);
        await running.sandbox.advance(uid);
        await feed.waitForItem((item: any) => item.deliveryEvents.uid === uid);
        await updated.waitFor(2);

        // The operator claims it for the other merchant, from a process of its own (npm run merchant -- claim, the key
        // on standard input).
        const operatorStore = new RedisStore(new Redis(redis!.url), {
          prefix: (running.app.services.store as RedisStore).prefix,
          ownsClient: true,
        });
        try {
          const claimed = await merchantCommand(['claim', `--uid=${uid}`], `${claimant}\n`, { store: operatorStore });
          expect(claimed.code, claimed.lines.join('\n')).toBe(0);
        } finally {
          await operatorStore.close();
        }

        await vi.waitFor(
          async () => expect(await running.gql(READ, { uid }, recorded)).toEqual({ data: { delivery: null } }),
          { timeout: CLAIM_CHECK_MS * 3, interval: 100 },
        );
        expect((await running.gql(READ, { uid }, claimant)).data.delivery.uid).toBe(uid);

        // The delivery's next event: the recorded merchant's stream of it ends as a new one would be refused, and its
        // feed passes it by.
        const shown = feed.items.filter((item: any) => item.deliveryEvents.uid === uid).length;
        await running.sandbox.advance(uid);
        await updated.done;
        expect(updated.items).toHaveLength(2);
        expect(JSON.stringify(updated.errors)).toContain('NOT_FOUND');
        const later = await booked(recorded);
        await feed.waitForItem((item: any) => item.deliveryEvents.uid === later);
        expect(feed.items.filter((item: any) => item.deliveryEvents.uid === uid)).toHaveLength(shown);
        expect(feed.errors).toEqual([]);
      } finally {
        await client.dispose();
      }
    },
  );
});

/** A platform booking body as the upstream takes it. */
function wireBooking() {
  return {
    pickup_address_street: '1 Market St',
    pickup_address_city: 'San Francisco',
    pickup_address_country: 'US',
    pickup_name: 'Shop',
    pickup_phone_number: '+14155550100',
    dropoff_address_street: '2 Mission St',
    dropoff_address_city: 'San Francisco',
    dropoff_address_country: 'US',
    dropoff_name: 'Customer',
    dropoff_phone_number: '+14155550101',
    email: 'shop@example.com',
    currency: 'USD',
    package_delivery_mode: 'NOW',
  };
}
