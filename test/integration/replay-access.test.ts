// deliveryEvents without uids replays the whole log (after: "0") and then follows
// it live: every merchant's events pass by, and only the caller's may be sent.
// The facade's owner records decide first, with no upstream call: a delivery
// recorded as another key's is left out, one recorded as the caller's is sent.
// The sandbox's request log counts what did reach the upstream. On the embedded
// store and on Redis.
import { exportPKCS8, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const REPLAY = `subscription { deliveryEvents(after: "0") { cursor uid name statusText } }`;

/** Deliveries of another merchant, booked through the facade, and events posted for each of them. */
const FOREIGN = 25;
const ROUNDS = 4;

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

const withRedis = redisAvailable('replay-access.test.ts');

for (const storeName of ['the embedded store', 'Redis'] as const) {
  describe.skipIf(storeName === 'Redis' && !withRedis)(`deliveryEvents(after: "0") on ${storeName}`, () => {
    let redis: RedisServer | undefined;
    let stack: Stack;

    beforeAll(async () => {
      if (storeName === 'Redis') redis = await startRedisServer();
      stack = await startStack({ sandbox: { privateKeyPem }, env: redis ? { REDIS_URL: redis.url } : {} });
    });
    afterAll(async () => {
      await stack?.stop();
      await redis?.stop();
    });

    async function book(key: string): Promise<string> {
      const result = await stack.gql(CREATE, { input: deliveryInput() }, key);
      return result.data.createDelivery.data.uid;
    }

    /** Signs and posts one event the way the upstream would. */
    async function post(event: Record<string, unknown>): Promise<void> {
      const token = await new SignJWT({ payload: event }).setProtectedHeader({ alg: 'RS256' }).setIssuer(stack.sandbox.issuer).setExpirationTime('5m').sign(privateKey);
      const response = await fetch(`${stack.app.url}/webhooks`, { method: 'POST', headers: { authorization: `Bearer ${token}` }, body: JSON.stringify(event) });
      expect(response.status).toBe(200);
    }

    /**
     * Replays the whole log as `key`, up to a marker event of `own` posted once the
     * subscription started (replayed or live, it is the last event of the log: once it
     * arrived, every earlier event was either sent or left out). The marker is not returned.
     */
    async function replay(key: string, own: string): Promise<{ events: Replayed[]; errors: unknown[] }> {
      const client = wsClient(stack.app.url, key);
      try {
        const sub = collect<{ deliveryEvents: Replayed }>(client, REPLAY);
        const marker = `marker ${Math.random()}`;
        await post({ uid: own, event_name: 'delivery.marker', status: marker });
        await sub.waitForItem((item) => item.deliveryEvents.statusText === marker, 15_000);
        return { events: sub.items.map((item) => item.deliveryEvents).filter((event) => event.statusText !== marker), errors: sub.errors };
      } finally {
        await client.dispose();
      }
    }

    /** The upstream requests since `mark` (a sandbox requestCount), as "METHOD path". */
    const upstreamSince = (mark: number) => stack.sandbox.requestsSince(mark).map((request) => `${request.method} ${request.path}`);

    it('leaves out every event of another merchant’s deliveries without asking the upstream about any, and sends the caller’s own', async () => {
      const theirs = await Promise.all(Array.from({ length: FOREIGN }, () => book(stack.otherKey)));
      const mine = await book(stack.key);
      // Their delivery.created webhooks are stored too.
      await stack.sandbox.idle();
      for (let round = 0; round < ROUNDS; round += 1) {
        await Promise.all(theirs.map((uid) => post({ uid, event_name: 'delivery.assigned', status: `theirs ${round}` })));
        await post({ uid: mine, event_name: 'delivery.assigned', status: `mine ${round}` });
      }

      const mark = stack.sandbox.requestCount;
      const { events, errors } = await replay(stack.key, mine);
      expect(errors).toEqual([]);
      // None of the 125 events of theirs, and no upstream request at all: each is left out on its owner record.
      expect(events.filter((event) => event.uid !== mine)).toEqual([]);
      expect(upstreamSince(mark)).toEqual([]);
      // Every event of mine, in log order: the sandbox's delivery.created, then the ones posted.
      expect(events.map((event) => event.statusText)).toEqual(['Created', ...Array.from({ length: ROUNDS }, (_, round) => `mine ${round}`)]);

      // The other merchant's replay is the mirror image: its own 125 events, none of mine, no upstream request.
      const theirMark = stack.sandbox.requestCount;
      const theirReplay = await replay(stack.otherKey, theirs[0]!);
      expect(theirReplay.events.filter((event) => !theirs.includes(event.uid))).toEqual([]);
      expect(theirReplay.events).toHaveLength(FOREIGN * (ROUNDS + 1));
      expect(upstreamSince(theirMark)).toEqual([]);
    });
  });
}
