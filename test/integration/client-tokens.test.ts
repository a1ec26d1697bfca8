// Client tokens, as a merchant's browser app would use them: made with the
// merchant key, then sent instead of it over HTTP and WebSocket. What a token
// may read, what it is refused (before any upstream call), how it ends, and that
// the merchant key cannot be read out of it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClientTokens } from '../../src/access/client-tokens.js';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE_DELIVERY = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const CREATE_TOKEN = /* GraphQL */ `
  mutation ($uids: [ID!]!, $ttlSeconds: Int! = 3600) {
    createClientToken(uids: $uids, ttlSeconds: $ttlSeconds) {
      __typename
      ... on MutationCreateClientTokenSuccess {
        data {
          token
          expiresAt
          uids
        }
      }
      ... on ValidationError {
        code
        message
        fields {
          path
          message
        }
      }
      ... on NotFoundError {
        code
        message
      }
    }
  }
`;
const READ = `query($uid: ID!) { delivery(uid: $uid) { uid status } }`;
const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { uid status } }`;

let stack: Stack;
let mine: string;
let alsoMine: string;
let theirs: string;

beforeAll(async () => {
  stack = await startStack();
  const book = async (key: string) =>
    (await stack.gql(CREATE_DELIVERY, { input: deliveryInput() }, key)).data.createDelivery.data.uid as string;
  [mine, alsoMine, theirs] = await Promise.all([book(stack.key), book(stack.key), book(stack.otherKey)]);
});
afterAll(async () => {
  await stack?.stop();
});

async function tokenFor(uids: string[], ttlSeconds = 3600): Promise<string> {
  const result = await stack.gql(CREATE_TOKEN, { uids, ttlSeconds });
  expect(result.data.createClientToken.__typename, JSON.stringify(result)).toBe('MutationCreateClientTokenSuccess');
  return result.data.createClientToken.data.token;
}

/** Upstream requests made while `run` runs. */
async function upstreamRequestsDuring(run: () => Promise<unknown>): Promise<number> {
  const before = stack.sandbox.requests.length;
  await run();
  return stack.sandbox.requests.length - before;
}

/** The Relay id a Delivery answers in its `id` field. */
const nodeId = (group: 'PLATFORM' | 'PARTNER', uid: string) =>
  Buffer.from(`Delivery:${group}:${uid}`).toString('base64');

const codes = (result: { errors?: Array<{ extensions?: { code?: string } }> }) =>
  result.errors?.map((error) => error.extensions?.code);

describe('createClientToken', () => {
  it('makes a token for the merchant’s deliveries, repeats counted once, with its expiry', async () => {
    const before = Date.now();
    const result = await stack.gql(CREATE_TOKEN, { uids: [mine, alsoMine, mine], ttlSeconds: 600 });
    const { token, expiresAt, uids } = result.data.createClientToken.data;
    expect(uids).toEqual([mine, alsoMine]);
    expect(typeof token).toBe('string');
    // Compact JWE: five base64url parts, URL-safe as it is.
    expect(token.split('.')).toHaveLength(5);
    expect(encodeURIComponent(token)).toBe(token);
    const expires = Date.parse(expiresAt);
    expect(expires).toBeGreaterThanOrEqual(Math.floor(before / 1000) * 1000 + 600_000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 600_000);
  });

  it.each([
    [{ uids: ['x'], ttlSeconds: 59 }, 'ttlSeconds'],
    [{ uids: ['x'], ttlSeconds: 86_401 }, 'ttlSeconds'],
    [{ uids: [], ttlSeconds: 3600 }, 'uids'],
    [{ uids: Array.from({ length: 101 }, (_, i) => `u${i}`), ttlSeconds: 3600 }, 'uids'],
    // A blank or malformed uid is BAD_USER_INPUT, as on every path that takes one (test/integration/uids.test.ts).
  ])('refuses %j as a ValidationError on %s, before any upstream call', async (variables, path) => {
    let result: any;
    expect(await upstreamRequestsDuring(async () => (result = await stack.gql(CREATE_TOKEN, variables)))).toBe(0);
    const outcome = result.data.createClientToken;
    expect(outcome.__typename).toBe('ValidationError');
    expect(outcome.code).toBe('VALIDATION_FAILED');
    expect(outcome.fields.map((field: { path: string }) => field.path)).toContain(path);
  });

  it('answers NotFoundError for a uid the key cannot read (unknown, or another merchant’s), and makes no token', async () => {
    for (const uid of ['no-such-delivery', theirs]) {
      const outcome = (await stack.gql(CREATE_TOKEN, { uids: [mine, uid] })).data.createClientToken;
      expect(outcome).toMatchObject({ __typename: 'NotFoundError', code: 'NOT_FOUND' });
      expect(outcome.message).toContain(uid);
      expect(outcome).not.toHaveProperty('data');
    }
  });

  it('needs a merchant key: without one UNAUTHENTICATED, with a client token FORBIDDEN', async () => {
    expect(codes(await stack.gql(CREATE_TOKEN, { uids: [mine] }, null))).toEqual(['UNAUTHENTICATED']);
    const token = await tokenFor([mine]);
    let result: any;
    expect(
      await upstreamRequestsDuring(async () => (result = await stack.gql(CREATE_TOKEN, { uids: [mine] }, token))),
    ).toBe(0);
    expect(codes(result)).toEqual(['FORBIDDEN']);
    // Refused before execution: no data at all.
    expect(result).not.toHaveProperty('data');
  });
});

describe('what a client token may read', () => {
  let token: string;
  beforeAll(async () => {
    token = await tokenFor([mine]);
  });

  it('reads its delivery through delivery, deliveries and node', async () => {
    expect((await stack.gql(READ, { uid: mine }, token)).data.delivery).toMatchObject({ uid: mine, status: 'CREATED' });
    const { data } = await stack.gql(
      `query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }`,
      { uids: [mine] },
      token,
    );
    expect(data.deliveries).toEqual([{ uid: mine }]);
    const node = await stack.gql(
      `query($id: ID!) { node(id: $id) { ... on Delivery { uid } } }`,
      { id: nodeId('PLATFORM', mine) },
      token,
    );
    expect(node.data.node).toEqual({ uid: mine });
  });

  it('says what it grants through clientToken (null with a merchant key)', async () => {
    const { data } = await stack.gql(`{ clientToken { uids expiresAt token } }`, {}, token);
    expect(data.clientToken).toMatchObject({ uids: [mine], token });
    expect((await stack.gql(`{ clientToken { uids } }`)).data.clientToken).toBeNull();
  });

  it('reads the merchant’s other deliveries as not found, without asking the upstream', async () => {
    let single: any;
    let list: any;
    let node: any;
    const requests = await upstreamRequestsDuring(async () => {
      single = await stack.gql(READ, { uid: alsoMine }, token);
      list = await stack.gql(
        `query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }`,
        { uids: [alsoMine, theirs] },
        token,
      );
      node = await stack.gql(`query($id: ID!) { node(id: $id) { id } }`, { id: nodeId('PLATFORM', alsoMine) }, token);
    });
    expect(requests).toBe(0);
    expect(single).toEqual({ data: { delivery: null } });
    expect(list).toEqual({ data: { deliveries: [null, null] } });
    expect(node).toEqual({ data: { node: null } });
  });

  it.each([
    ['a mutation', `mutation($uid: ID!) { cancelDelivery(uid: $uid) { __typename } }`, { uid: 'UID' }],
    [
      'a booking',
      `mutation($input: DeliveryInput!) { createDelivery(input: $input) { __typename } }`,
      { input: deliveryInput() },
    ],
    ['availability', `{ availability { group available } }`, {}],
    ['deliveryByReference', `{ deliveryByReference(partnerReference: "R-1") { uid } }`, {}],
    [
      'a root field smuggled in a fragment',
      `query { ...Reads } fragment Reads on Query { delivery(uid: "UID") { uid } ... on Query { availability { group } } }`,
      {},
    ],
  ])('refuses %s with FORBIDDEN, before any upstream call', async (_what, query, variables) => {
    let result: any;
    const filled = JSON.parse(JSON.stringify(variables).replace('"UID"', JSON.stringify(mine)));
    expect(
      await upstreamRequestsDuring(
        async () => (result = await stack.gql(query.replace('"UID"', JSON.stringify(mine)), filled, token)),
      ),
    ).toBe(0);
    expect(codes(result)).toEqual(['FORBIDDEN']);
    expect(result.errors[0].message).not.toContain(stack.key);
  });
});

describe('subscriptions with a client token', () => {
  it('follows its delivery over WebSocket; other uids are not found; deliveryEvents needs uids', async () => {
    const token = await tokenFor([mine]);
    const client = wsClient(stack.app.url, token);
    try {
      const own = collect(client, UPDATED, { uid: mine });
      await own.waitFor(1);
      await stack.sandbox.advance(mine);
      await own.waitForItem((item) => item.deliveryUpdated.status === 'ASSIGNED');

      const other = collect(client, UPDATED, { uid: alsoMine });
      await other.done;
      expect(other.errors).toMatchObject([{ extensions: { code: 'NOT_FOUND' } }]);
      const location = collect(client, `subscription($uid: ID!) { courierLocation(uid: $uid) { milestone } }`, {
        uid: theirs,
      });
      await location.done;
      expect(location.errors).toMatchObject([{ extensions: { code: 'NOT_FOUND' } }]);

      const everything = collect(client, `subscription { deliveryEvents { uid } }`);
      await everything.done;
      expect(everything.errors).toMatchObject([{ extensions: { code: 'FORBIDDEN' } }]);
      const widened = collect(client, `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid } }`, {
        uids: [mine, alsoMine],
      });
      await widened.done;
      expect(widened.errors).toMatchObject([{ extensions: { code: 'NOT_FOUND' } }]);

      // Its own events, through deliveryEvents with its uids.
      const events = collect(client, `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid status } }`, {
        uids: [mine],
      });
      await stack.sandbox.advance(mine);
      // The ASSIGNED webhook may land after `own` saw ASSIGNED (from its confirming read), so it can come first here.
      await events.waitForItem((item) => item.deliveryEvents.status === 'PICKUP_ENROUTE');
      expect(events.items.map((item) => item.deliveryEvents.uid)).toEqual(events.items.map(() => mine));
      events.dispose();
      own.dispose();
    } finally {
      await client.dispose();
    }
  });

  it('ends an open subscription when the token expires, and refuses it afterwards on every transport', async () => {
    // A token shorter than createClientToken allows (60 s), made the way the mutation makes it, so the test need not
    // wait a minute.
    const issued = await stack.app.services.clientTokens.issue(stack.key, [mine], 2);
    let closed: { code: number; reason: string } | undefined;
    // Not lazy: the socket stays open once its subscription ends, for the next one.
    const client = wsClient(stack.app.url, issued.token, { lazy: false });
    try {
      const sub = collect(client, UPDATED, { uid: mine });
      await sub.waitFor(1);
      await sub.done;
      expect(Date.now()).toBeGreaterThanOrEqual(issued.expiresAt.getTime() - 50);
      expect(sub.errors).toMatchObject([{ extensions: { code: 'UNAUTHENTICATED' } }]);
      expect((sub.errors[0] as { message: string }).message).toMatch(/expired/);

      // On the same socket, a new subscription is refused too.
      const again = collect(client, UPDATED, { uid: mine });
      await again.done;
      expect(again.errors).toMatchObject([{ extensions: { code: 'UNAUTHENTICATED' } }]);
    } finally {
      await client.dispose();
    }
    expect(codes(await stack.gql(READ, { uid: mine }, issued.token))).toEqual(['UNAUTHENTICATED']);
    // A new socket is closed at connection_init.
    const late = wsClient(stack.app.url, issued.token, { onClose: (code, reason) => (closed = { code, reason }) });
    const refused = collect(late, UPDATED, { uid: mine });
    await refused.done;
    expect(closed).toMatchObject({ code: 4403, reason: expect.stringMatching(/client token/) });
    await late.dispose();
  });
});

describe('a token that is not ours', () => {
  it('refuses an altered token (header, ciphertext or tag) with UNAUTHENTICATED, over HTTP and WebSocket', async () => {
    const token = await tokenFor([mine]);
    const parts = token.split('.');
    const flip = (part: string) => {
      const bytes = Buffer.from(part, 'base64url');
      const middle = bytes.length >> 1;
      bytes[middle] = bytes[middle]! ^ 0x01;
      return bytes.toString('base64url');
    };
    const altered = [
      // The protected header is the AEAD's additional data: changing it (here: a different kid) breaks the tag.
      [
        Buffer.from(
          JSON.stringify({ ...JSON.parse(Buffer.from(parts[0]!, 'base64url').toString()), typ: 'other' }),
        ).toString('base64url'),
        ...parts.slice(1),
      ].join('.'),
      [...parts.slice(0, 3), flip(parts[3]!), parts[4]].join('.'),
      [...parts.slice(0, 4), flip(parts[4]!)].join('.'),
      [parts[0], parts[1], flip(parts[2]!), parts[3], parts[4]].join('.'),
    ];
    for (const forged of altered) {
      const result = await stack.gql(READ, { uid: mine }, forged);
      expect(codes(result), forged).toEqual(['UNAUTHENTICATED']);
      expect(result.errors![0]!.message).toMatch(/client token/);
    }
    let closed: number | undefined;
    const client = wsClient(stack.app.url, altered[1]!, { onClose: (code) => (closed = code) });
    await collect(client, UPDATED, { uid: mine }).done;
    expect(closed).toBe(4403);
    await client.dispose();
  });

  it('refuses a token made under another secret, and an expired one, the same way', async () => {
    const foreign = await new ClientTokens(['another server’s secret, long enough to be accepted']).issue(
      stack.key,
      [mine],
      3600,
    );
    expect(codes(await stack.gql(READ, { uid: mine }, foreign.token))).toEqual(['UNAUTHENTICATED']);
    const expired = await stack.app.services.clientTokens.issue(stack.key, [mine], -10);
    const result = await stack.gql(READ, { uid: mine }, expired.token);
    expect(codes(result)).toEqual(['UNAUTHENTICATED']);
  });
});

describe('the merchant key inside a token', () => {
  it('cannot be read from the token’s bytes, in any encoding', async () => {
    const token = await tokenFor([mine, alsoMine]);
    const key = stack.key;
    const decoded = token.split('.').map((part) => Buffer.from(part, 'base64url'));
    const haystacks = [
      token,
      ...decoded.map((bytes) => bytes.toString('latin1')),
      ...decoded.map((bytes) => bytes.toString('hex')),
    ];
    const needles = [
      key,
      Buffer.from(key).toString('base64'),
      Buffer.from(key).toString('base64url'),
      Buffer.from(key).toString('hex'),
      key.slice(4, 16),
    ];
    for (const haystack of haystacks)
      for (const needle of needles) expect(haystack.includes(needle), `${needle} found`).toBe(false);
    // The header says how it is encrypted, nothing about whom.
    expect(JSON.parse(decoded[0]!.toString('utf8'))).toEqual({
      alg: 'dir',
      enc: 'A256GCM',
      kid: expect.any(String),
      typ: 'JWT',
    });
    // Neither the mutation nor the clientToken query hands the key back.
    expect(JSON.stringify(await stack.gql(`{ clientToken { token uids expiresAt } }`, {}, token))).not.toContain(key);
  });

  it('stays readable by the same facade after a restart (its generated secret is kept in DATA_DIR)', async () => {
    const token = await tokenFor([mine]);
    await stack.restart();
    expect((await stack.gql(READ, { uid: mine }, token)).data.delivery).toEqual({
      uid: mine,
      status: expect.any(String),
    });
  });
});
