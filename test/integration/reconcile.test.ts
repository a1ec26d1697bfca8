// Reconciliation by polling: with webhooks off (or one lost), a subscriber still
// sees its delivery move, from reads of the upstream made once per followed
// delivery whatever its number of subscribers; and a key the upstream refuses
// refuses new subscriptions and ends live ones.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name status source stale } }`;
const EVENTS = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid name source } }`;
const INTERVAL_MS = 200;

let stack: Stack;

beforeAll(async () => {
  stack = await startStack({ env: { RECONCILE_INTERVAL_MS: String(INTERVAL_MS) } });
});
afterAll(async () => {
  await stack?.stop();
});

async function book(key = stack.key): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput() }, key);
  return result.data.createDelivery.data.uid;
}

const reconciler = () => stack.app.services.reconciler!;
/** GETs of one delivery the sandbox answered after `mark`. */
const readsOf = (uid: string, mark: number) =>
  stack.sandbox.requestsSince(mark).filter((r) => r.method === 'GET' && r.path.endsWith(`/deliveries/${uid}`)).length;
const codeOf = (error: unknown) => (error as { extensions?: { code?: string } }).extensions?.code;

describe('with webhooks off', () => {
  it('a subscriber sees the delivery move to DROPOFF_COMPLETE from reads, and the subscription completes', async () => {
    stack.sandbox.setWebhookUrl(undefined);
    try {
      const uid = await book();
      const client = wsClient(stack.app.url, stack.key);
      const sub = collect(client, UPDATED, { uid });
      const [first] = await sub.waitFor(1);
      expect(first.deliveryUpdated).toMatchObject({ status: 'CREATED', source: 'read' });

      for (let i = 0; i < 3; i += 1) await stack.sandbox.advance(uid);
      await sub.waitForItem((item) => item.deliveryUpdated.status === 'PICKUP_ARRIVED');
      for (let i = 0; i < 4; i += 1) await stack.sandbox.advance(uid);
      await sub.done;
      expect(sub.errors).toEqual([]);
      const last = sub.items.at(-1).deliveryUpdated;
      expect(last).toMatchObject({
        name: 'delivery.dropoff_complete',
        status: 'DROPOFF_COMPLETE',
        source: 'poll',
        stale: false,
      });
      // Every change after the first state came from a read.
      expect(sub.items.slice(1).every((item) => item.deliveryUpdated.source === 'poll')).toBe(true);
      client.dispose();

      const metrics = await (await fetch(`${stack.app.url}/metrics`)).text();
      expect(metrics).toMatch(/delivery_graph_reconcile_total\{result="change"\} [1-9]/);
      expect(metrics).toMatch(/delivery_graph_reconcile_total\{result="read"\} [1-9]/);
    } finally {
      stack.sandbox.setWebhookUrl(stack.app.webhookUrl);
    }
  });

  it('N subscribers on one delivery cost one upstream read per interval, not N', async () => {
    stack.sandbox.setWebhookUrl(undefined);
    const clients: ReturnType<typeof wsClient>[] = [];
    try {
      const uid = await book();
      const subs = Array.from({ length: 5 }, () => {
        const client = wsClient(stack.app.url, stack.key);
        clients.push(client);
        return collect(client, UPDATED, { uid });
      });
      await Promise.all(subs.map((sub) => sub.waitFor(1)));
      expect(reconciler().followedCount).toBe(1);
      const mark = stack.sandbox.requestCount;
      const started = Date.now();
      await waitUntil(() => readsOf(uid, mark) >= 4, 'four reconciliation reads');
      const elapsed = Date.now() - started;
      const reads = readsOf(uid, mark);
      // One read per interval at most (the first may come right away: the interval ran from the subscriptions' start).
      expect(reads).toBeGreaterThanOrEqual(4);
      expect(reads).toBeLessThanOrEqual(Math.floor(elapsed / INTERVAL_MS) + 1);
      for (const sub of subs) expect(sub.errors).toEqual([]);
    } finally {
      for (const client of clients) await client.dispose();
      stack.sandbox.setWebhookUrl(stack.app.webhookUrl);
    }
  });
});

describe('with webhooks on', () => {
  it('a milestone whose webhook was lost is repaired from a read, and later webhooks go on as before', async () => {
    const uid = await book();
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, EVENTS, { uids: [uid] });
    await waitUntil(() => reconciler().followedCount > 0, 'the subscription to follow the delivery');
    await stack.sandbox.advance(uid);
    await sub.waitForItem((item) => item.deliveryEvents.name === 'delivery.assigned');

    // The upstream gives up on this one (no URL on file while it happens).
    stack.sandbox.setWebhookUrl(undefined);
    await stack.sandbox.advance(uid);
    stack.sandbox.setWebhookUrl(stack.app.webhookUrl);
    const [repaired] = (await sub.waitForItem((item) => item.deliveryEvents.name === 'delivery.pickup_enroute')).filter(
      (item) => item.deliveryEvents.name === 'delivery.pickup_enroute',
    );
    expect(repaired.deliveryEvents.source).toBe('poll');

    await stack.sandbox.advance(uid);
    const [next] = (await sub.waitForItem((item) => item.deliveryEvents.name === 'delivery.pickup_arrived')).filter(
      (item) => item.deliveryEvents.name === 'delivery.pickup_arrived',
    );
    expect(next.deliveryEvents.source).toBe('webhook');
    expect(sub.errors).toEqual([]);
    client.dispose();
  });
});

describe('an upstream answer during reconciliation', () => {
  it('a 404 for a followed delivery is logged in its code at info, without a stack', async () => {
    const lines: Array<Record<string, unknown>> = [];
    const logger = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line)) });
    const own = await startStack({ env: { RECONCILE_INTERVAL_MS: String(INTERVAL_MS) }, faultProxy: true, logger });
    try {
      const uid = (
        (await own.gql(CREATE, { input: deliveryInput() })).data as { createDelivery: { data: { uid: string } } }
      ).createDelivery.data.uid;
      const client = wsClient(own.app.url, own.key);
      const sub = collect(client, UPDATED, { uid });
      await sub.waitFor(1);
      // The upstream forgets it (as a restarted sandbox would): both groups answer 404 to its reads.
      own.proxy!.fault = (req, res) => {
        if (req.method !== 'GET' || !req.url?.includes(uid)) return false;
        res
          .writeHead(404, { 'content-type': 'application/json' })
          .end(JSON.stringify({ error: { code: 'not_found', message: 'No such delivery.' } }));
        return true;
      };
      const failed = () =>
        lines.filter((line) => line.msg === 'reconcile: reading a followed delivery failed; trying again later');
      await waitUntil(() => failed().length > 0, 'a reconciliation read answered 404');
      expect(failed()[0]).toMatchObject({ level: 30, uid, code: 'NOT_FOUND' });
      expect(failed()[0]).not.toHaveProperty('err');
      expect(JSON.stringify(lines)).not.toMatch(/"stack"/);
      await client.dispose();
    } finally {
      await own.stop();
    }
  });
});

// Last: the sandbox's revocation is for good.
describe('a key the upstream revoked', () => {
  it('ends a live subscription UNAUTHENTICATED and refuses new ones, though the facade holds the owner record', async () => {
    const key = stack.otherKey;
    const uid = await book(key);
    const client = wsClient(stack.app.url, key);
    const live = collect(client, UPDATED, { uid });
    await live.waitFor(1);

    stack.sandbox.revokeKey(key);
    await live.done;
    expect(live.errors.map(codeOf)).toEqual(['UNAUTHENTICATED']);

    const refused = collect(wsClient(stack.app.url, key), UPDATED, { uid });
    await refused.done;
    expect(refused.items).toEqual([]);
    expect(refused.errors.map(codeOf)).toEqual(['UNAUTHENTICATED']);

    // Not bound to one delivery: the key is confirmed with the availability calls.
    const unbound = collect(wsClient(stack.app.url, key), `subscription { deliveryEvents { uid name } }`);
    await unbound.done;
    expect(unbound.errors.map(codeOf)).toEqual(['UNAUTHENTICATED']);

    // The other merchant's subscriptions go on.
    const other = collect(wsClient(stack.app.url, stack.key), UPDATED, { uid: await book() });
    await other.waitFor(1);
    expect(other.errors).toEqual([]);
    other.dispose();
  });
});
