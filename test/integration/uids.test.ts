// Uids are checked before they go into an upstream path (src/domain/uid.ts):
// ".", "..", "/", "\", whitespace, control characters and more than 64
// characters are BAD_USER_INPUT, naming the argument, on every path that takes
// a uid, and nothing reaches the upstream: the sandbox's request log, and the
// facade's own count of upstream calls (a 900 KB request line never reaches the
// sandbox's log: its HTTP parser refuses it first), prove it.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, partnerOrderBody, startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const READ = `query($uid: ID!, $group: ApiGroup! = PLATFORM) { delivery(uid: $uid, group: $group) { uid events { edges { cursor } } } }`;
const CANCEL = /* GraphQL */ `
  mutation ($uid: ID!, $group: ApiGroup! = PLATFORM) {
    cancelDelivery(uid: $uid, group: $group) {
      __typename
      ... on MutationCancelDeliverySuccess {
        data {
          status
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;
const CREATE_TOKEN = /* GraphQL */ `
  mutation ($uids: [ID!]!) {
    createClientToken(uids: $uids) {
      __typename
      ... on MutationCreateClientTokenSuccess {
        data {
          token
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;
const ENTITIES = `query($representations: [_Any!]!) { _entities(representations: $representations) { ... on Delivery { uid } } }`;

/** 900 KB, under GRAPHQL_MAX_BODY_BYTES: it was forwarded whole. */
const HUGE = 'a'.repeat(900 * 1024);

/** Each kind of uid that is refused, with the end of the message that says why. */
const BAD: Array<[string, string, string]> = [
  ['"."', '.', 'must not be "." or "..".'],
  ['".."', '..', 'must not be "." or "..".'],
  ['a path', '../../availability', 'must not contain "/" or "\\".'],
  ['a backslash', '..\\cancel', 'must not contain "/" or "\\".'],
  ['a space', 'a b', 'must not contain whitespace or control characters.'],
  ['a newline', 'a\nb', 'must not contain whitespace or control characters.'],
  ['a NUL', 'a\u0000b', 'must not contain whitespace or control characters.'],
  ['a percent sign', '%2e%2e', 'may only hold ASCII letters, digits, "-", "_", "." and "~".'],
  ['65 characters', 'a'.repeat(65), 'must be at most 64 characters; got 65.'],
  ['900 KB', HUGE, `must be at most 64 characters; got ${HUGE.length}.`],
];

let stack: Stack;
let mine: string;
let partnerUid: string;

beforeAll(async () => {
  stack = await startStack();
  mine = (await stack.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid;
  // Seeded in the sandbox, not booked through the facade: reading access to it takes upstream reads.
  partnerUid = stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody(`PO/UIDS ${Date.now()}`)).uid;
});
afterAll(async () => {
  await stack?.stop();
});

/** Every upstream call the facade made so far, as its metrics count them. */
async function upstreamCalls(): Promise<number> {
  const text = await (await fetch(`${stack.app.url}/metrics`)).text();
  return text
    .split('\n')
    .filter((line) => line.startsWith('delivery_graph_upstream_requests_total{'))
    .reduce((sum, line) => sum + Number(line.split(' ').at(-1)), 0);
}

/** Runs `run` and fails unless neither the sandbox nor the facade's count saw an upstream request meanwhile. */
async function withoutUpstream<T>(run: () => Promise<T>): Promise<T> {
  const mark = stack.sandbox.requestCount;
  const calls = await upstreamCalls();
  const result = await run();
  expect(stack.sandbox.requestsSince(mark).map((request) => `${request.method} ${request.path}`)).toEqual([]);
  expect(await upstreamCalls()).toBe(calls);
  return result;
}

const refusals = (result: GraphQLResponse) => result.errors?.map((error) => [error.extensions?.code, error.message]);
const nodeId = (group: string, uid: string) => Buffer.from(`Delivery:${group}:${uid}`).toString('base64');

describe('a uid that is not one plain path segment', () => {
  it.each(BAD)('is refused by delivery (and so Delivery.events) on both groups: %s', async (_what, uid, why) => {
    for (const group of ['PLATFORM', 'PARTNER']) {
      const result = await withoutUpstream(() => stack.gql(READ, { uid, group }));
      expect(refusals(result)).toEqual([['BAD_USER_INPUT', `uid ${why}`]]);
      expect(result.data).toEqual({ delivery: null });
    }
  });

  it.each(BAD)('is refused by cancelDelivery on both groups: %s', async (_what, uid, why) => {
    for (const group of ['PLATFORM', 'PARTNER']) {
      const result = await withoutUpstream(() => stack.gql(CANCEL, { uid, group }));
      expect(refusals(result)).toEqual([['BAD_USER_INPUT', `uid ${why}`]]);
    }
  });

  it('is refused by node, inside the global id', async () => {
    // In base64 the 900 KB one is over GRAPHQL_MAX_BODY_BYTES: 65 characters stand for it.
    for (const [, uid, why] of BAD.filter(([, uid]) => uid !== HUGE)) {
      const result = await withoutUpstream(() =>
        stack.gql('query($id: ID!) { node(id: $id) { ... on Delivery { uid } } }', { id: nodeId('PLATFORM', uid) }),
      );
      expect(refusals(result)).toEqual([['BAD_USER_INPUT', `The uid in id ${why}`]]);
    }
  });

  it('still lets a uid of 64 characters, and the real ones, through', async () => {
    const longest = 'a'.repeat(64);
    const mark = stack.sandbox.requestCount;
    const result = await stack.gql(READ, { uid: longest });
    expect(result).toEqual({ data: { delivery: null } });
    expect(stack.sandbox.requestsSince(mark).map((request) => request.path)).toEqual([
      `/api/v1/${stack.sandbox.platformId}/deliveries/${longest}`,
    ]);
    expect((await stack.gql(READ, { uid: mine })).data.delivery.uid).toBe(mine);
    expect((await stack.gql(READ, { uid: partnerUid, group: 'PARTNER' })).data.delivery.uid).toBe(partnerUid);
  });
});

describe('deliveries(uids:)', () => {
  it('fails only the entry of a bad uid, and reads the others', async () => {
    const mark = stack.sandbox.requestCount;
    const result = await stack.gql('query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }', {
      uids: [mine, '..', mine, HUGE, 'a/b'],
    });
    expect(result.data.deliveries).toEqual([{ uid: mine }, null, { uid: mine }, null, null]);
    expect(result.errors?.map((error) => [error.path, error.extensions?.code, error.message])).toEqual([
      [['deliveries', 1], 'BAD_USER_INPUT', 'uid must not be "." or "..".'],
      [['deliveries', 3], 'BAD_USER_INPUT', `uid must be at most 64 characters; got ${HUGE.length}.`],
      [['deliveries', 4], 'BAD_USER_INPUT', 'uid must not contain "/" or "\\".'],
    ]);
    expect(stack.sandbox.requestsSince(mark).map((request) => request.path)).toEqual([
      `/api/v1/${stack.sandbox.platformId}/deliveries/${mine}`,
    ]);
  });
});

describe('_entities', () => {
  it('fails the representation of a bad uid, and resolves the others', async () => {
    const mark = stack.sandbox.requestCount;
    const representations = [
      { __typename: 'Delivery', uid: '..' },
      { __typename: 'Delivery', uid: mine },
      { __typename: 'Delivery', uid: HUGE, group: 'PARTNER' },
    ];
    const result = await stack.gql(ENTITIES, { representations });
    expect(result.data._entities).toEqual([null, { uid: mine }, null]);
    expect(result.errors?.map((error) => [error.path, error.extensions?.code, error.message])).toEqual([
      [['_entities', 0], 'BAD_USER_INPUT', 'A Delivery representation\'s uid must not be "." or "..".'],
      [
        ['_entities', 2],
        'BAD_USER_INPUT',
        `A Delivery representation's uid must be at most 64 characters; got ${HUGE.length}.`,
      ],
    ]);
    expect(stack.sandbox.requestsSince(mark).map((request) => request.path)).toEqual([
      `/api/v1/${stack.sandbox.platformId}/deliveries/${mine}`,
    ]);
  });
});

describe('createClientToken', () => {
  it('makes no token when one uid is bad, and looks none of them up', async () => {
    for (const [, uid, why] of BAD) {
      const result = await withoutUpstream(() => stack.gql(CREATE_TOKEN, { uids: [partnerUid, uid] }));
      expect(refusals(result)).toEqual([['BAD_USER_INPUT', `uids[1] ${why}`]]);
      expect(result.data).toBeNull();
    }
    const blank = await withoutUpstream(() => stack.gql(CREATE_TOKEN, { uids: ['  '] }));
    expect(refusals(blank)).toEqual([['BAD_USER_INPUT', 'uids[0] must not be empty.']]);
  });

  it('refuses a bad uid with a token too, instead of reading it as not found', async () => {
    const token = (await stack.gql(CREATE_TOKEN, { uids: [mine] })).data.createClientToken.data.token as string;
    const one = await withoutUpstream(() => stack.gql(READ, { uid: '..' }, token));
    expect(refusals(one)).toEqual([['BAD_USER_INPUT', 'uid must not be "." or "..".']]);
    const mark = stack.sandbox.requestCount;
    const list = await stack.gql(
      'query($uids: [ID!]!) { deliveries(uids: $uids) { uid } }',
      { uids: [mine, '.'] },
      token,
    );
    expect(list.data.deliveries).toEqual([{ uid: mine }, null]);
    expect(refusals(list)).toEqual([['BAD_USER_INPUT', 'uid must not be "." or "..".']]);
    expect(stack.sandbox.requestsSince(mark).map((request) => request.path)).toEqual([
      `/api/v1/${stack.sandbox.platformId}/deliveries/${mine}`,
    ]);
    const client = wsClient(stack.app.url, token);
    try {
      const sub = collect(client, `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { uid } }`, { uid: '..' });
      await withoutUpstream(() => sub.done);
      expect(sub.errors).toEqual([
        expect.objectContaining({
          message: 'uid must not be "." or "..".',
          extensions: expect.objectContaining({ code: 'BAD_USER_INPUT' }),
        }),
      ]);
    } finally {
      await client.dispose();
    }
  });
});

describe('deliveryByReference', () => {
  it.each([
    ['"."', '.', 'must not be "." or "..".'],
    ['".."', '..', 'must not be "." or "..".'],
    ['a control character', 'PO\r\n1', 'must not contain control characters.'],
    ['201 characters', 'r'.repeat(201), 'must be at most 200 characters; got 201.'],
    ['900 KB', HUGE, `must be at most 200 characters; got ${HUGE.length}.`],
  ])('refuses a reference that is %s', async (_what, partnerReference, why) => {
    const result = await withoutUpstream(() =>
      stack.gql('query($ref: String!) { deliveryByReference(partnerReference: $ref) { uid } }', {
        ref: partnerReference,
      }),
    );
    expect(refusals(result)).toEqual([['BAD_USER_INPUT', `partnerReference ${why}`]]);
  });

  it('still finds a reference with "/" and spaces, sent encoded in its one segment', async () => {
    const reference = `PO/2024 ${Date.now()}`;
    const order = stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody(reference));
    const mark = stack.sandbox.requestCount;
    const result = await stack.gql(
      'query($ref: String!) { deliveryByReference(partnerReference: $ref) { uid partnerReference } }',
      { ref: reference },
    );
    expect(result).toEqual({ data: { deliveryByReference: { uid: order.uid, partnerReference: reference } } });
    expect(stack.sandbox.requestsSince(mark).map((request) => request.path)).toEqual([
      `/api/v1/orders/partner/${encodeURIComponent(reference)}`,
    ]);
  });
});

describe('subscriptions', () => {
  const UPDATED = `subscription($uid: ID!) { deliveryUpdated(uid: $uid) { uid } }`;
  const LOCATION = `subscription($uid: ID!) { courierLocation(uid: $uid) { uid } }`;
  const EVENTS = `subscription($uids: [ID!]) { deliveryEvents(uids: $uids) { uid } }`;

  // Variables are made when the test runs, once partnerUid is known. (A 900 KB uid is over the socket's message limit.)
  it.each([
    ['deliveryUpdated', UPDATED, () => ({ uid: '..' }), 'uid must not be "." or "..".'],
    ['courierLocation', LOCATION, () => ({ uid: 'a'.repeat(65) }), 'uid must be at most 64 characters; got 65.'],
    // The first uid would need upstream reads to check access: the bad second one stops them all.
    ['deliveryEvents', EVENTS, () => ({ uids: [partnerUid, '.'] }), 'uids[1] must not be "." or "..".'],
  ])('%s refuses it over WebSocket', async (_field, query, variables, message) => {
    const client = wsClient(stack.app.url, stack.key);
    try {
      // The key is known by now: the socket's connection_init costs no upstream call either.
      const sub = await withoutUpstream(async () => {
        const collected = collect(client, query, variables());
        await collected.done;
        return collected;
      });
      expect(sub.items).toEqual([]);
      expect(sub.errors).toEqual([
        expect.objectContaining({ message, extensions: expect.objectContaining({ code: 'BAD_USER_INPUT' }) }),
      ]);
    } finally {
      await client.dispose();
    }
  });

  it('deliveryUpdated refuses it over server-sent events', async () => {
    const text = await withoutUpstream(async () => {
      const response = await fetch(`${stack.app.url}/graphql`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'text/event-stream',
          authorization: `Bearer ${stack.key}`,
        },
        body: JSON.stringify({ query: UPDATED, variables: { uid: 'a/../b' } }),
      });
      return response.text();
    });
    expect(text).toContain('BAD_USER_INPUT');
    expect(text).toContain('uid must not contain \\"/\\" or \\"\\\\\\".');
  });
});
