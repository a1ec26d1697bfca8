// Apollo's automatic persisted queries (APQ) on every way in: the direct JSON
// path, yoga's own handler, GET, server-sent events and WebSocket (a graphql-ws
// client, and a raw socket that leaves `query` out as APQ clients may). A hash
// alone that is unknown is PersistedQueryNotFound; a query with its hash is
// checked and remembered; afterwards the hash alone runs it. Then the bound
// (APQ_MAX_ENTRIES), APQ switched off, the allowlist winning over APQ, and two
// instances sharing what they learned through one real Redis.
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { localPersistedQueryStore, sharedPersistedQueryStore } from '../../src/pipeline/persisted-query-store.js';
import type { RedisStore } from '../../src/store/redis.js';
import { redisAvailable, startRedisServer, type RedisServer } from '../helpers/redis.js';
import { deliveryInput, startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { waitUntil } from '../helpers/wait.js';
import { wsClient } from '../helpers/ws-client.js';

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
const persisted = (hash: string, version: unknown = 1) => ({ persistedQuery: { version, sha256Hash: hash } });
/** A query no other test has sent (each names its own operation), so no test sees another's registration. */
const freshQuery = (field = 'availability { group }') => `query Q${randomUUID().replaceAll('-', '')} { ${field} }`;

interface Sent {
  query?: string;
  variables?: Record<string, unknown>;
  extensions?: Record<string, unknown>;
}

interface Answer {
  /** HTTP status; undefined over WebSocket. */
  status: number | undefined;
  body: GraphQLResponse;
}

type Path = 'direct' | 'yoga' | 'get' | 'sse' | 'ws' | 'ws-raw';

function headers(stack: Stack, extra: Record<string, string>): Record<string, string> {
  return { authorization: `Bearer ${stack.key}`, ...extra };
}

async function post(stack: Stack, body: Sent, accept?: string): Promise<Answer> {
  const response = await fetch(`${stack.app.url}/graphql`, {
    method: 'POST',
    headers: headers(stack, { 'content-type': 'application/json', ...(accept ? { accept } : {}) }),
    body: JSON.stringify(body),
  });
  return { status: response.status, body: (await response.json()) as GraphQLResponse };
}

async function get(stack: Stack, body: Sent): Promise<Answer> {
  const url = new URL(`${stack.app.url}/graphql`);
  if (body.query !== undefined) url.searchParams.set('query', body.query);
  if (body.variables) url.searchParams.set('variables', JSON.stringify(body.variables));
  if (body.extensions) url.searchParams.set('extensions', JSON.stringify(body.extensions));
  const response = await fetch(url, { headers: headers(stack, { accept: 'application/json' }) });
  return { status: response.status, body: (await response.json()) as GraphQLResponse };
}

/** A POST answered as server-sent events: the first `next` event's payload. */
async function sse(stack: Stack, body: Sent): Promise<Answer> {
  const response = await fetch(`${stack.app.url}/graphql`, {
    method: 'POST',
    headers: headers(stack, { 'content-type': 'application/json', accept: 'text/event-stream' }),
    body: JSON.stringify(body),
  });
  const text = await response.text();
  const data = /^event: next\ndata: (.*)$/m.exec(text)?.[1];
  if (data === undefined) throw new Error(`no next event in ${JSON.stringify(text)}`);
  return { status: response.status, body: JSON.parse(data) as GraphQLResponse };
}

/** One operation over a graphql-ws client: the first result, or the errors it was refused with. */
async function overGraphqlWs(stack: Stack, body: Sent): Promise<Answer> {
  const client = wsClient(stack.app.url, stack.key);
  try {
    return await new Promise<Answer>((resolve) => {
      let first: GraphQLResponse | undefined;
      client.subscribe(
        { query: body.query ?? '', variables: body.variables, extensions: body.extensions },
        {
          next: (message) => (first ??= message as GraphQLResponse),
          error: (error) => resolve({ status: undefined, body: { errors: error as GraphQLResponse['errors'] } }),
          complete: () => resolve({ status: undefined, body: first ?? {} }),
        },
      );
    });
  } finally {
    await client.dispose();
  }
}

/**
 * The graphql-transport-ws protocol by hand, so the subscribe payload can leave
 * `query` out (the graphql-ws client insists on one): the first `next`, or the
 * `error` message's errors.
 */
async function overRawSocket(stack: Stack, body: Sent): Promise<Answer> {
  const socket = new WebSocket(`${stack.app.url.replace(/^http/, 'ws')}/graphql`, 'graphql-transport-ws');
  try {
    return await new Promise<Answer>((resolve, reject) => {
      let first: GraphQLResponse | undefined;
      socket.once('open', () =>
        socket.send(JSON.stringify({ type: 'connection_init', payload: { authorization: `Bearer ${stack.key}` } })),
      );
      socket.once('close', (code, reason) => reject(new Error(`socket closed ${code} ${reason.toString()}`)));
      socket.on('message', (data) => {
        const message = JSON.parse(data.toString()) as { type: string; payload?: unknown };
        if (message.type === 'connection_ack')
          socket.send(JSON.stringify({ id: '1', type: 'subscribe', payload: body }));
        else if (message.type === 'next') first ??= message.payload as GraphQLResponse;
        else if (message.type === 'error')
          resolve({ status: undefined, body: { errors: message.payload as GraphQLResponse['errors'] } });
        else if (message.type === 'complete') resolve({ status: undefined, body: first ?? {} });
      });
    });
  } finally {
    socket.removeAllListeners('close');
    socket.close();
  }
}

function send(stack: Stack, way: Path, body: Sent): Promise<Answer> {
  switch (way) {
    case 'direct':
      return post(stack, body);
    case 'yoga':
      // Asking for the GraphQL-over-HTTP media type takes yoga's own handler (isPlainJsonPost in http/graphql.ts).
      return post(stack, body, 'application/graphql-response+json');
    case 'get':
      return get(stack, body);
    case 'sse':
      return sse(stack, body);
    case 'ws':
      return overGraphqlWs(stack, body);
    case 'ws-raw':
      return overRawSocket(stack, body);
  }
}

const PATHS: Path[] = ['direct', 'yoga', 'get', 'sse', 'ws', 'ws-raw'];
/** Status of an answer with an error; a WebSocket has none. */
const expectStatus = (answer: Answer, status: number) => {
  if (answer.status !== undefined) expect(answer.status).toBe(status);
};
const firstError = (answer: Answer) => answer.body.errors?.[0];

describe('automatic persisted queries', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  describe.each(PATHS)('over %s', (way) => {
    it('answers an unknown hash alone with PersistedQueryNotFound (200), which Apollo and urql retry on', async () => {
      const answer = await send(stack, way, {
        ...(way === 'ws' ? { query: '' } : {}),
        extensions: persisted(sha256(freshQuery())),
      });
      expectStatus(answer, 200);
      expect(answer.body.data ?? undefined).toBeUndefined();
      expect(answer.body.errors).toEqual([
        { message: 'PersistedQueryNotFound', extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' } },
      ]);
    });

    it('runs a query sent with its hash, then runs it from the hash alone', async () => {
      const query = freshQuery();
      const registered = await send(stack, way, { query, extensions: persisted(sha256(query)) });
      expect(registered.body.errors).toBeUndefined();
      expect(registered.body.data).toEqual({ availability: [{ group: 'PLATFORM' }, { group: 'PARTNER' }] });
      const byHash = await send(stack, way, {
        ...(way === 'ws' ? { query: '' } : {}),
        extensions: persisted(sha256(query)),
      });
      expect(byHash.body.errors).toBeUndefined();
      expect(byHash.body.data).toEqual({ availability: [{ group: 'PLATFORM' }, { group: 'PARTNER' }] });
    });

    it('takes variables with a hash alone', async () => {
      const query = `query Q${randomUUID().replaceAll('-', '')}($uid: ID!) { delivery(uid: $uid) { uid } }`;
      const variables = { uid: '00000000-0000-4000-8000-000000000000' };
      expect((await send(stack, way, { query, variables, extensions: persisted(sha256(query)) })).body).toEqual({
        data: { delivery: null },
      });
      expect(
        (
          await send(stack, way, {
            ...(way === 'ws' ? { query: '' } : {}),
            variables,
            extensions: persisted(sha256(query)),
          })
        ).body,
      ).toEqual({ data: { delivery: null } });
    });

    it('refuses a hash that is not the query’s (400) and remembers nothing under it', async () => {
      const query = freshQuery();
      const wrong = sha256(freshQuery());
      const answer = await send(stack, way, { query, extensions: persisted(wrong) });
      expectStatus(answer, 400);
      expect(answer.body.data ?? undefined).toBeUndefined();
      expect(firstError(answer)?.extensions?.code).toBe('PERSISTED_QUERY_HASH_MISMATCH');
      expect(firstError(answer)?.message).toMatch(/hash does not match the query/);
      const later = await send(stack, way, { ...(way === 'ws' ? { query: '' } : {}), extensions: persisted(wrong) });
      expect(firstError(later)?.message).toBe('PersistedQueryNotFound');
    });

    it('refuses an unsupported version and malformed extensions with BAD_REQUEST (400), never a 500', async () => {
      const query = freshQuery();
      const cases: Array<[Record<string, unknown>, RegExp]> = [
        [persisted(sha256(query), 2), /only version 1/],
        [{ persistedQuery: 'abc' }, /must be an object/],
        [{ persistedQuery: { version: 1, sha256Hash: 42 } }, /sha256Hash must be a string/],
        [persisted('not-a-hash'), /SHA-256 in hexadecimal/],
      ];
      for (const [extensions, message] of cases) {
        const answer = await send(stack, way, { query, extensions });
        expectStatus(answer, 400);
        expect(answer.body.data ?? undefined).toBeUndefined();
        expect(firstError(answer)?.extensions?.code).toBe('BAD_REQUEST');
        expect(firstError(answer)?.message).toMatch(message);
      }
    });
  });

  it('does not remember a query that fails validation', async () => {
    const query = `query Q${randomUUID().replaceAll('-', '')} { nope }`;
    const answer = await post(stack, { query, extensions: persisted(sha256(query)) });
    expect(firstError(answer)?.extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
    expect(firstError(await post(stack, { extensions: persisted(sha256(query)) }))?.message).toBe(
      'PersistedQueryNotFound',
    );
  });

  it('remembers nothing for a caller without a key the upstream accepted: no key, or a made-up one (it runs all the same)', async () => {
    for (const authorization of [undefined, 'Bearer sk_test_made_up_by_a_stranger']) {
      const query = freshQuery('__typename');
      const response = await fetch(`${stack.app.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(authorization ? { authorization } : {}) },
        body: JSON.stringify({ query, extensions: persisted(sha256(query)) }),
      });
      expect(await response.json()).toEqual({ data: { __typename: 'Query' } });
      // Not even the merchant finds it by hash: a stranger cannot fill the store (nor Redis behind it).
      expect(firstError(await post(stack, { extensions: persisted(sha256(query)) }))?.message).toBe(
        'PersistedQueryNotFound',
      );
    }
  });

  it("remembers nothing a client token sends (it runs all the same), yet runs by hash what its merchant's key registered", async () => {
    const booked = await stack.gql(
      'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
      { input: deliveryInput() },
    );
    const uid = booked.data.createDelivery.data.uid as string;
    const minted = await stack.gql(
      'mutation($uids: [ID!]!) { createClientToken(uids: $uids) { ... on MutationCreateClientTokenSuccess { data { token } } } }',
      { uids: [uid] },
    );
    const token = minted.data.createClientToken.data.token as string;
    const asToken = async (body: Sent) => {
      const response = await fetch(`${stack.app.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
        body: JSON.stringify(body),
      });
      return (await response.json()) as GraphQLResponse;
    };
    const read = () => `query Q${randomUUID().replaceAll('-', '')}($uid: ID!) { delivery(uid: $uid) { uid } }`;
    const query = read();
    expect(await asToken({ query, variables: { uid }, extensions: persisted(sha256(query)) })).toEqual({
      data: { delivery: { uid } },
    });
    // Whoever holds a tracking link is not a merchant whose key the upstream accepted: nothing is stored, for anyone.
    expect((await asToken({ variables: { uid }, extensions: persisted(sha256(query)) })).errors?.[0]?.message).toBe(
      'PersistedQueryNotFound',
    );
    expect(firstError(await post(stack, { variables: { uid }, extensions: persisted(sha256(query)) }))?.message).toBe(
      'PersistedQueryNotFound',
    );
    // What the merchant registered, its token may run by hash.
    const registered = read();
    expect(
      (await post(stack, { query: registered, variables: { uid }, extensions: persisted(sha256(registered)) })).body,
    ).toEqual({ data: { delivery: { uid } } });
    expect(await asToken({ variables: { uid }, extensions: persisted(sha256(registered)) })).toEqual({
      data: { delivery: { uid } },
    });
  });

  it('runs a subscription named by hash over WebSocket', async () => {
    const booked = await stack.gql(
      'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
      { input: deliveryInput() },
    );
    const uid = booked.data.createDelivery.data.uid as string;
    const query = `subscription S${randomUUID().replaceAll('-', '')}($uid: ID!) { deliveryUpdated(uid: $uid) { uid status } }`;
    const clients = [wsClient(stack.app.url, stack.key), wsClient(stack.app.url, stack.key)];
    /** The first update (the delivery's current state) of a subscription sent as `payload`. */
    const firstUpdate = (client: (typeof clients)[number], payload: Sent) =>
      new Promise<GraphQLResponse>((resolve, reject) => {
        client.subscribe(
          { query: '', ...payload },
          { next: (message) => resolve(message as GraphQLResponse), error: reject, complete: () => undefined },
        );
      });
    try {
      // The text with its hash on one socket: it runs, and is remembered once subscribed, before its first update.
      expect(
        await firstUpdate(clients[0]!, { query, variables: { uid }, extensions: persisted(sha256(query)) }),
      ).toEqual({ data: { deliveryUpdated: { uid, status: 'CREATED' } } });
      // The hash alone on another socket.
      expect(await firstUpdate(clients[1]!, { variables: { uid }, extensions: persisted(sha256(query)) })).toEqual({
        data: { deliveryUpdated: { uid, status: 'CREATED' } },
      });
    } finally {
      await Promise.all(clients.map((client) => client.dispose()));
    }
  });

  it('counts hits, misses and registrations in /metrics', async () => {
    const text = await (await fetch(`${stack.app.url}/metrics`)).text();
    const value = (result: string) =>
      Number(
        new RegExp(`^delivery_graph_persisted_queries_total\\{result="${result}"\\} (\\d+)$`, 'm').exec(text)?.[1],
      );
    expect(value('hit')).toBeGreaterThan(0);
    expect(value('miss')).toBeGreaterThan(0);
    expect(value('registered')).toBeGreaterThan(0);
    expect(value('unregistered')).toBeGreaterThan(0);
  });
});

describe('APQ_MAX_ENTRIES', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack({ env: { APQ_MAX_ENTRIES: '2' } });
    // Queries are remembered for keys the upstream has accepted: one read gets the test key judged.
    await post(stack, { query: '{ availability { group } }' });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('keeps the most recently used queries and evicts the oldest', async () => {
    const [oldest, middle, newest] = [freshQuery('__typename'), freshQuery('__typename'), freshQuery('__typename')];
    for (const query of [oldest, middle, newest])
      expect((await post(stack, { query, extensions: persisted(sha256(query)) })).body.data).toEqual({
        __typename: 'Query',
      });
    expect(firstError(await post(stack, { extensions: persisted(sha256(oldest)) }))?.message).toBe(
      'PersistedQueryNotFound',
    );
    expect((await post(stack, { extensions: persisted(sha256(middle)) })).body.data).toEqual({ __typename: 'Query' });
    expect((await post(stack, { extensions: persisted(sha256(newest)) })).body.data).toEqual({ __typename: 'Query' });
  });

  it('0 turns APQ off: a hash alone is PersistedQueryNotSupported, a query with its hash simply runs', async () => {
    stack.env.APQ_MAX_ENTRIES = '0';
    await stack.restart();
    const query = freshQuery('__typename');
    for (const way of ['direct', 'yoga', 'ws-raw'] as const) {
      const answer = await send(stack, way, { extensions: persisted(sha256(query)) });
      expectStatus(answer, 200);
      expect(answer.body.errors).toEqual([
        { message: 'PersistedQueryNotSupported', extensions: { code: 'PERSISTED_QUERY_NOT_SUPPORTED' } },
      ]);
      expect((await send(stack, way, { query, extensions: persisted(sha256(query)) })).body).toEqual({
        data: { __typename: 'Query' },
      });
    }
    expect(firstError(await post(stack, { extensions: persisted(sha256(query)) }))?.message).toBe(
      'PersistedQueryNotSupported',
    );
  });
});

describe('with PERSISTED_OPERATIONS_FILE, the allowlist wins', () => {
  const LISTED = 'query Listed { __typename }';
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack();
    const file = path.join(stack.dataDir, 'persisted-operations.json');
    writeFileSync(file, JSON.stringify({ [sha256(LISTED)]: LISTED }));
    stack.env.PERSISTED_OPERATIONS_FILE = file;
    await stack.restart();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it.each(['direct', 'yoga', 'get', 'ws-raw'] as const)(
    'over %s: no registration, unlisted hashes are PersistedQueryNotFound, listed ones run',
    async (way) => {
      const unlisted = freshQuery('__typename');
      const registering = await send(stack, way, { query: unlisted, extensions: persisted(sha256(unlisted)) });
      expect(registering.body.data ?? undefined).toBeUndefined();
      expect(firstError(registering)?.extensions?.code).toBe('PERSISTED_QUERY_NOT_FOUND');
      const byHash = await send(stack, way, { extensions: persisted(sha256(unlisted)) });
      expect(byHash.body.errors).toEqual([
        { message: 'PersistedQueryNotFound', extensions: { code: 'PERSISTED_QUERY_NOT_FOUND' } },
      ]);
      expect((await send(stack, way, { extensions: persisted(sha256(LISTED)) })).body).toEqual({
        data: { __typename: 'Query' },
      });
    },
  );
});

const withRedis = redisAvailable('persisted-queries.test.ts');

describe.runIf(withRedis)('two instances on one Redis', () => {
  let redis: RedisServer;
  let stack: Stack;
  let other: App;
  let otherDir: string;

  beforeAll(async () => {
    redis = await startRedisServer();
    stack = await startStack({ env: { REDIS_URL: redis.url } });
    otherDir = mkdtempSync(path.join(tmpdir(), 'delivery-graph-apq-'));
    other = await startApp(loadConfig({ ...stack.env, DATA_DIR: otherDir }));
  }, 30_000);
  afterAll(async () => {
    await other?.stop();
    await stack?.stop();
    await redis?.stop();
    if (otherDir) rmSync(otherDir, { recursive: true, force: true });
  });

  const on = (app: App, body: Sent): Promise<Answer> => post({ ...stack, app } as Stack, body);

  it('finds on instance B, by hash alone, a query registered on instance A', async () => {
    const query = freshQuery();
    expect(firstError(await on(other, { extensions: persisted(sha256(query)) }))?.message).toBe(
      'PersistedQueryNotFound',
    );
    expect((await on(stack.app, { query, extensions: persisted(sha256(query)) })).body.errors).toBeUndefined();
    await waitUntil(
      async () => (await on(other, { extensions: persisted(sha256(query)) })).body.errors === undefined,
      'B to find the query',
    );
    expect((await on(other, { extensions: persisted(sha256(query)) })).body.data).toEqual({
      availability: [{ group: 'PLATFORM' }, { group: 'PARTNER' }],
    });
  });

  it('keeps each query in Redis under the store prefix with a TTL', async () => {
    const query = freshQuery();
    await on(stack.app, { query, extensions: persisted(sha256(query)) });
    const client = (stack.app.services.store as RedisStore).client;
    await waitUntil(async () => (await client.get(`dg:apq:${sha256(query)}`)) === query, 'the query in Redis');
    const ttl = await client.ttl(`dg:apq:${sha256(query)}`);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(24 * 60 * 60);
  });

  it('keeps Redis bounded: APQ_MAX_ENTRIES queries at most (the earliest registered go first), none over 16 KiB', async () => {
    const client = (stack.app.services.store as RedisStore).client;
    const shared = sharedPersistedQueryStore(localPersistedQueryStore(100), {
      client,
      prefix: 'dg-bound-test:',
      maxEntries: 2,
    });
    const queries = [freshQuery('__typename'), freshQuery('__typename'), freshQuery('__typename')];
    for (const query of queries) await shared.set(sha256(query), query);
    expect(await client.exists(...queries.map((query) => `dg-bound-test:apq:${sha256(query)}`))).toBe(2);
    expect(await client.get(`dg-bound-test:apq:${sha256(queries[0]!)}`)).toBeNull();
    expect(await client.zcard('dg-bound-test:apq-index')).toBe(2);
    const long = `${freshQuery('__typename')} # ${'x'.repeat(16 * 1024)}`;
    await shared.set(sha256(long), long);
    expect(await client.exists(`dg-bound-test:apq:${sha256(long)}`)).toBe(0);
    // Still remembered in this process.
    expect(await shared.get(sha256(long))).toBe(long);
  });

  it('degrades while Redis is down: a miss for what B never saw, and the full query still runs', async () => {
    const known = freshQuery('__typename');
    await on(stack.app, { query: known, extensions: persisted(sha256(known)) });
    const client = (other.services.store as RedisStore).client;
    await redis.kill();
    try {
      await waitUntil(() => client.status !== 'ready', 'B to notice Redis is gone');
      const miss = await on(other, { extensions: persisted(sha256(known)) });
      expect(miss.status).toBe(200);
      expect(firstError(miss)?.message).toBe('PersistedQueryNotFound');
      expect((await on(other, { query: known, extensions: persisted(sha256(known)) })).body.data).toEqual({
        __typename: 'Query',
      });
      // Remembered locally meanwhile.
      expect((await on(other, { extensions: persisted(sha256(known)) })).body.data).toEqual({ __typename: 'Query' });
    } finally {
      await redis.start();
    }
  });
});
