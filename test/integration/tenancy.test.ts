// Ten merchants share one facade and never see each other: 1,000 concurrent
// GraphQL requests over HTTP and 1,000 over WebSocket, keys interleaved, each
// reading every merchant's deliveries (its own → data, the others' → null), and
// deliveryEvents subscribers of every merchant while every delivery moves.
import { randomBytes } from 'node:crypto';
import type { Client } from 'graphql-ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_PLATFORM_ID } from '@delivery-graph/sandbox';
import { deliveryInput, partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';
import { listenersAttached } from '../helpers/wait.js';
import { collect, wsClient, type Collected } from '../helpers/ws-client.js';

const MERCHANT_COUNT = 10;
const REQUESTS = 1_000;
const IN_FLIGHT = 100;

const MERCHANTS = Array.from({ length: MERCHANT_COUNT }, (_, i) => ({
  key: `sk_test_tenant_${i}_${randomBytes(12).toString('hex')}`,
  name: `Tenant ${i}`,
  platformId: DEFAULT_PLATFORM_ID,
}));
const keyOf = (merchant: number) => MERCHANTS[merchant]!.key;

interface Owned {
  uid: string;
  merchant: number;
  group: 'PLATFORM' | 'PARTNER';
  /** Set on partner orders. */
  reference?: string;
}

let stack: Stack;
/** Every delivery, with the merchant that owns it. */
const owned: Owned[] = [];
const platformUids = () => owned.filter((o) => o.group === 'PLATFORM').map((o) => o.uid);
/**
 * One delivery per merchant booked after everything else moved: the last events of the log (see the subscribers'
 * beforeAll).
 */
const markers: Owned[] = [];
const ownerOf = (uid: string) => (owned.find((o) => o.uid === uid) ?? markers.find((o) => o.uid === uid))!.merchant;

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { __typename ... on MutationCreateDeliverySuccess { data { uid } } } }`;

/**
 * Every platform delivery in one batch (the order differs per request), one
 * single read of another merchant's, and two partner orders by reference: the
 * caller's and another's.
 */
const READ_ALL = /* GraphQL */ `
  query ($uids: [ID!]!, $single: ID!, $mineRef: String!, $theirsRef: String!, $mineOrder: ID!) {
    deliveries(uids: $uids) {
      uid
      payload
      pickup {
        name
      }
    }
    single: delivery(uid: $single) {
      uid
      payload
    }
    mineRef: deliveryByReference(partnerReference: $mineRef) {
      uid
      partnerReference
      payload
    }
    theirsRef: deliveryByReference(partnerReference: $theirsRef) {
      uid
    }
    mineOrder: delivery(uid: $mineOrder, group: PARTNER) {
      uid
      partnerReference
    }
  }
`;

/** A deterministic shuffle, so requests batch the same uids in different orders. */
function shuffled<T>(items: T[], seed: number): T[] {
  const out = [...items];
  let state = seed + 1;
  for (let i = out.length - 1; i > 0; i -= 1) {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    const j = state % (i + 1);
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** Request r: merchant r % 10, reading everything; the variables and what its answer must be. */
function plan(r: number): { merchant: number; variables: Record<string, unknown>; expected: unknown } {
  const merchant = r % MERCHANT_COUNT;
  const other = (merchant + 1 + (Math.floor(r / MERCHANT_COUNT) % (MERCHANT_COUNT - 1))) % MERCHANT_COUNT;
  const uids = shuffled(platformUids(), r);
  const single = owned.filter((o) => o.group === 'PLATFORM' && o.merchant === other)[r % 2]!.uid;
  const mineOrder = owned.find((o) => o.group === 'PARTNER' && o.merchant === merchant)!;
  const theirsOrder = owned.find((o) => o.group === 'PARTNER' && o.merchant === other)!;
  return {
    merchant,
    variables: {
      uids,
      single,
      mineRef: mineOrder.reference,
      theirsRef: theirsOrder.reference,
      mineOrder: mineOrder.uid,
    },
    expected: {
      deliveries: uids.map((uid) =>
        ownerOf(uid) === merchant
          ? { uid, payload: { merchant }, pickup: { name: `Shop of tenant ${merchant}` } }
          : null,
      ),
      single: null,
      mineRef: { uid: mineOrder.uid, partnerReference: mineOrder.reference, payload: { merchant } },
      theirsRef: null,
      mineOrder: { uid: mineOrder.uid, partnerReference: mineOrder.reference },
    },
  };
}

/** Runs `count` tasks, at most `limit` at a time. */
async function bounded<T>(count: number, limit: number, task: (index: number) => Promise<T>): Promise<T[]> {
  const results = new Array<T>(count);
  let next = 0;
  const worker = async () => {
    while (next < count) {
      const index = next++;
      results[index] = await task(index);
    }
  };
  await Promise.all(Array.from({ length: limit }, worker));
  return results;
}

beforeAll(async () => {
  stack = await startStack({ sandbox: { merchants: MERCHANTS, knobs: { retryBaseMs: 20 } } });
  for (const [merchant, { key }] of MERCHANTS.entries()) {
    for (let n = 0; n < 2; n += 1) {
      const input = deliveryInput({ payload: { merchant } });
      (input.pickup as { name: string }).name = `Shop of tenant ${merchant}`;
      const result = await stack.gql(CREATE, { input }, key);
      expect(result.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
      owned.push({ uid: result.data.createDelivery.data.uid, merchant, group: 'PLATFORM' });
    }
    // A partner order too: not booked through the facade, so who may see it is asked of the upstream.
    const reference = `T${merchant}-${randomBytes(4).toString('hex')}`;
    const order = stack.sandbox.seedPartnerOrder(
      key,
      partnerOrderBody(reference, { pickup_name: `Warehouse of tenant ${merchant}`, partner_payload: { merchant } }),
    );
    owned.push({ uid: order.uid, merchant, group: 'PARTNER', reference });
  }
});

afterAll(async () => {
  await stack?.stop();
});

describe('tenancy under concurrency', () => {
  it(`answers ${REQUESTS} concurrent HTTP requests with ${MERCHANT_COUNT} interleaved keys, each with its own deliveries only`, async () => {
    // A little upstream latency keeps identical reads of different keys in flight together.
    stack.sandbox.setKnobs({ latencyMs: 5 });
    try {
      const mismatches: string[] = [];
      await bounded(REQUESTS, IN_FLIGHT, async (r) => {
        const { merchant, variables, expected } = plan(r);
        const result = await stack.gql(READ_ALL, variables, keyOf(merchant));
        try {
          expect(result).toEqual({ data: expected });
        } catch {
          mismatches.push(`request ${r} (tenant ${merchant}): ${JSON.stringify(result).slice(0, 500)}`);
        }
      });
      expect(mismatches).toEqual([]);
    } finally {
      stack.sandbox.setKnobs({ latencyMs: 0 });
    }
  }, 60_000);

  it(`answers ${REQUESTS} concurrent WebSocket operations with ${MERCHANT_COUNT} interleaved keys, each with its own deliveries only`, async () => {
    stack.sandbox.setKnobs({ latencyMs: 5 });
    const clients = MERCHANTS.map(({ key }) => wsClient(stack.app.url, key));
    try {
      const mismatches: string[] = [];
      await bounded(REQUESTS, IN_FLIGHT, async (r) => {
        const { merchant, variables, expected } = plan(r);
        const result = await new Promise<unknown>((resolve, reject) => {
          let data: unknown;
          clients[merchant]!.subscribe(
            { query: READ_ALL, variables },
            { next: (message) => (data = message), error: reject, complete: () => resolve(data) },
          );
        });
        try {
          expect(result).toEqual({ data: expected });
        } catch {
          mismatches.push(`operation ${r} (tenant ${merchant}): ${JSON.stringify(result).slice(0, 500)}`);
        }
      });
      expect(mismatches).toEqual([]);
    } finally {
      stack.sandbox.setKnobs({ latencyMs: 0 });
      await Promise.all(clients.map((client) => client.dispose()));
    }
  }, 60_000);
});

describe(`deliveryEvents subscribers of ${MERCHANT_COUNT} merchants while every delivery moves`, () => {
  const EVENTS = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid name delivery { uid payload } } }`;
  let clients: Client[] = [];
  /** Per merchant: one subscriber with no filter... */
  let unfiltered: Collected[] = [];
  /** ...and one that names every merchant's deliveries. */
  let everyone: Collected[] = [];
  const mine = (merchant: number) => owned.filter((o) => o.merchant === merchant).map((o) => o.uid);
  const statusEvents = (sub: Collected, uid: string) =>
    sub.items.filter((item) => item.deliveryEvents.uid === uid && item.deliveryEvents.name.startsWith('delivery.'))
      .length;

  beforeAll(async () => {
    clients = MERCHANTS.map(({ key }) => wsClient(stack.app.url, key));
    const everyUid = owned.map((o) => o.uid);
    const attached = listenersAttached(stack.app.services.bus, MERCHANT_COUNT);
    unfiltered = clients.map((client) => collect(client, EVENTS, {}));
    // Refused before they listen: only the unfiltered ones attach.
    everyone = clients.map((client, merchant) => collect(client, EVENTS, { uids: shuffled(everyUid, merchant) }));
    await attached;
    await Promise.all(everyone.map((sub) => sub.done));
    // Deciding who may see another merchant's delivery takes upstream reads; a little latency makes them count.
    stack.sandbox.setKnobs({ latencyMs: 20 });
    try {
      // Two milestones for every delivery of every merchant, all at once: assigned, then pickup_enroute.
      for (let step = 0; step < 2; step += 1)
        await Promise.all(shuffled(owned, step).map((o) => stack.sandbox.advance(o.uid)));
      await stack.sandbox.idle();
      // Then one booking per merchant, whose delivery.created is among the last events of the log. Once a
      // subscriber has its own, it has been sent everything before it that it was ever going to be sent.
      for (const [merchant, { key }] of MERCHANTS.entries()) {
        const result = await stack.gql(CREATE, { input: deliveryInput({ payload: { merchant } }) }, key);
        markers.push({ uid: result.data.createDelivery.data.uid, merchant, group: 'PLATFORM' });
      }
      await stack.sandbox.idle();
      await Promise.all(
        unfiltered.map((sub, merchant) =>
          sub.waitForItem((item) => item.deliveryEvents.uid === markers[merchant]!.uid),
        ),
      );
    } finally {
      stack.sandbox.setKnobs({ latencyMs: 0 });
    }
  }, 30_000);

  afterAll(async () => {
    for (const sub of [...unfiltered, ...everyone]) sub.dispose();
    await Promise.all(clients.map((client) => client.dispose()));
  });

  it('gives each subscriber its own merchant’s events and nothing of anyone else’s', () => {
    for (const [merchant, sub] of unfiltered.entries()) {
      expect(sub.errors).toEqual([]);
      expect(sub.items.length, `tenant ${merchant} saw nothing`).toBeGreaterThan(0);
      const foreign = sub.items.filter(
        (item) =>
          ownerOf(item.deliveryEvents.uid) !== merchant || ownerOf(item.deliveryEvents.delivery.uid) !== merchant,
      );
      expect(foreign, `tenant ${merchant} saw another merchant's events`).toEqual([]);
      const payloads = sub.items
        .map((item) => item.deliveryEvents.delivery.payload)
        .filter((payload) => payload != null);
      expect(payloads.every((payload) => payload.merchant === merchant)).toBe(true);
    }
    // Every merchant's deliveries were seen by someone: the events did flow.
    const seenUids = new Set(unfiltered.flatMap((sub) => sub.items.map((item) => item.deliveryEvents.uid)));
    expect(seenUids.size).toBe(owned.length + markers.length);
  });

  it('refuses a filter that names another merchant’s deliveries, with no event', () => {
    for (const [merchant, sub] of everyone.entries()) {
      expect(sub.items, `tenant ${merchant}`).toEqual([]);
      expect(JSON.stringify(sub.errors)).toContain('NOT_FOUND');
    }
  });

  // PRODUCT BUG (events lost): a deliveryEvents subscriber that lags (more than
  // COALESCE_AFTER = 16 events waiting, here because deciding visibility of other
  // merchants' deliveries takes upstream reads) loses status events. EventQueue.push
  // (src/realtime/queue.ts) coalesces a location event into the slot of the older
  // one with the same uid, so a newer event (say seq 83) is handed out ahead of older
  // ones still waiting (seq 54, 55, …); deliveryEventsStream (src/realtime/streams.ts)
  // then skips every event with `seq <= position` as already seen, and the status
  // events between are dropped for good. Observed: most subscribers miss
  // delivery.assigned / delivery.pickup_enroute of their own deliveries although all
  // 150 webhooks were stored. Expected (CONTRACT: "no gap"): every status event of
  // its own deliveries reaches each subscriber; e.g. a coalesced position moves to
  // the tail of the queue (order kept) instead of taking the old slot.
  it('delivers each subscriber every status event of its own deliveries, with no gap', () => {
    for (const [merchant, sub] of unfiltered.entries()) {
      for (const uid of mine(merchant))
        expect(statusEvents(sub, uid), `tenant ${merchant}, ${uid}`).toBeGreaterThanOrEqual(2);
    }
  });
});
