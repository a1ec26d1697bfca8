// Real clients against the running facade: Apollo Client 3 (HttpLink over global
// fetch, GraphQLWsLink over graphql-ws for subscriptions, InMemoryCache; its
// persisted-queries link for APQ, counted on the wire) and urql 5
// (fetchExchange, subscriptionExchange over graphql-ws, the document cache and
// graphcache). Each queries a delivery, books one, follows it live as the sandbox
// moves it, and normalises `Delivery` by its Relay global `id`.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { ApolloClient, HttpLink, InMemoryCache, gql, split, type NormalizedCacheObject } from '@apollo/client/core';
import { createPersistedQueryLink } from '@apollo/client/link/persisted-queries';
import { GraphQLWsLink } from '@apollo/client/link/subscriptions';
import { getMainDefinition } from '@apollo/client/utilities';
import {
  Client as UrqlClient,
  cacheExchange as documentCacheExchange,
  fetchExchange,
  subscriptionExchange,
  type Exchange,
} from '@urql/core';
import { cacheExchange as graphcacheExchange } from '@urql/exchange-graphcache';
import { buildSchema, introspectionFromSchema } from 'graphql';
import { createClient as createWsClient, type Client as WsClient } from 'graphql-ws';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { deliveryInput, startStack, type Stack } from '../helpers/stack.js';

const MILESTONES = [
  'ASSIGNED',
  'PICKUP_ENROUTE',
  'PICKUP_ARRIVED',
  'PICKUP_COMPLETE',
  'DROPOFF_ENROUTE',
  'DROPOFF_ARRIVED',
  'DROPOFF_COMPLETE',
];

const CREATE = `mutation Book($input: DeliveryInput!) {
  createDelivery(input: $input) {
    __typename
    ... on MutationCreateDeliverySuccess { data { id uid trackingUrl status } }
    ... on ValidationError { fields { path message } }
  }
}`;
const SMALL = `query Small($uid: ID!) { delivery(uid: $uid) { id uid status } }`;
const MORE = `query More($uid: ID!) { delivery(uid: $uid) { id uid trackingUrl deliveryDate pickup { name } dropoff { name } } }`;
const ALL = `query All($uid: ID!) { delivery(uid: $uid) { id uid status trackingUrl deliveryDate pickup { name } dropoff { name } } }`;
const UPDATED = `subscription Follow($uid: ID!) { deliveryUpdated(uid: $uid) { cursor uid name status delivery { id status } } }`;

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

function wsClient(): WsClient {
  return createWsClient({
    url: `${stack.app.url.replace(/^http/, 'ws')}/graphql`,
    webSocketImpl: WebSocket,
    connectionParams: { authorization: `Bearer ${stack.key}` },
    retryAttempts: 0,
    lazy: true,
  });
}

/** Global fetch that counts the requests it sends. */
function countingFetch(): { fetch: typeof fetch; count: () => number } {
  let count = 0;
  return {
    fetch: (input, init) => {
      count += 1;
      return fetch(input, init);
    },
    count: () => count,
  };
}

/** Waits until `predicate` holds, polling. */
async function until(predicate: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Moves the delivery one milestone at a time, waiting for each status to reach the client. */
async function moveAndWatch(uid: string, statuses: () => string[]): Promise<void> {
  await until(() => statuses().length >= 1, 'the first update');
  for (const [i, milestone] of MILESTONES.entries()) {
    await stack.sandbox.advance(uid);
    await until(() => statuses().length >= i + 2, milestone);
    expect(statuses().at(-1)).toBe(milestone);
  }
}

async function bookViaGql(): Promise<{ id: string; uid: string }> {
  const result = await stack.gql(CREATE, { input: deliveryInput() });
  return result.data.createDelivery.data;
}

describe('Apollo Client 3', () => {
  let apollo: ApolloClient<NormalizedCacheObject>;
  let ws: WsClient;
  const counter = countingFetch();

  beforeAll(() => {
    ws = wsClient();
    const http = new HttpLink({
      uri: `${stack.app.url}/graphql`,
      fetch: counter.fetch,
      headers: { authorization: `Bearer ${stack.key}` },
    });
    const link = split(
      ({ query }) => {
        const definition = getMainDefinition(query);
        return definition.kind === 'OperationDefinition' && definition.operation === 'subscription';
      },
      new GraphQLWsLink(ws),
      http,
    );
    apollo = new ApolloClient({
      link,
      cache: new InMemoryCache({
        // Delivery by its Relay global id (also Apollo's default, stated here on purpose).
        typePolicies: { Delivery: { keyFields: ['id'] } },
        possibleTypes: {
          MutationCreateDeliveryResult: [
            'IdempotencyConflictError',
            'MutationCreateDeliverySuccess',
            'ValidationError',
          ],
        },
      }),
      defaultOptions: { query: { fetchPolicy: 'network-only' } },
    });
  });
  afterAll(async () => {
    apollo?.stop();
    await ws?.dispose();
  });

  it('books a delivery (mutation) and reads it back (query)', async () => {
    const booked = await apollo.mutate({ mutation: gql(CREATE), variables: { input: deliveryInput() } });
    expect(booked.errors).toBeUndefined();
    expect(booked.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
    const { id, uid, status } = booked.data.createDelivery.data;
    expect(status).toBe('CREATED');
    const read = await apollo.query({ query: gql(SMALL), variables: { uid } });
    expect(read.data.delivery).toEqual({ __typename: 'Delivery', id, uid, status: 'CREATED' });
  });

  it('follows deliveryUpdated over GraphQLWsLink as the sandbox moves the delivery, to completion', async () => {
    const { uid } = await bookViaGql();
    const updates: Array<{ status: string; uid: string }> = [];
    let completed = false;
    const errors: unknown[] = [];
    const subscription = apollo.subscribe({ query: gql(UPDATED), variables: { uid } }).subscribe({
      next: (result) => {
        if (result.errors) errors.push(...result.errors);
        if (result.data) updates.push(result.data.deliveryUpdated);
      },
      error: (error) => errors.push(error),
      complete: () => (completed = true),
    });
    try {
      await moveAndWatch(uid, () => updates.map((u) => u.status));
      await until(() => completed, 'completion');
    } finally {
      subscription.unsubscribe();
    }
    expect(errors).toEqual([]);
    expect(updates.map((u) => u.status)).toEqual(['CREATED', ...MILESTONES]);
    expect(updates.every((u) => u.uid === uid)).toBe(true);
  });

  it('normalises Delivery by id: two queries selecting different fields make one merged entity', async () => {
    const { id, uid } = await bookViaGql();
    const cache = apollo.cache as InMemoryCache;
    await apollo.query({ query: gql(SMALL), variables: { uid } });
    await apollo.query({ query: gql(MORE), variables: { uid } });

    const cacheId = cache.identify({ __typename: 'Delivery', id });
    expect(cacheId).toBe(`Delivery:${JSON.stringify({ id })}`);
    const merged = cache.readFragment<any>({
      id: cacheId,
      fragment: gql`
        fragment Merged on Delivery {
          id
          uid
          status
          trackingUrl
          deliveryDate
          pickup {
            name
          }
          dropoff {
            name
          }
        }
      `,
    });
    expect(merged).toMatchObject({
      id,
      uid,
      status: 'CREATED',
      deliveryDate: '2030-05-01',
      pickup: { name: 'Ada Shop' },
      dropoff: { name: 'Grace Customer' },
    });
    expect(merged.trackingUrl).toEqual(expect.any(String));

    // One entity for this delivery, referenced by both root fields' results.
    const entries = Object.keys(cache.extract()).filter((key) => key === cacheId);
    expect(entries).toHaveLength(1);
    const before = counter.count();
    const fromCache = await apollo.query({ query: gql(ALL), variables: { uid }, fetchPolicy: 'cache-only' });
    expect(counter.count()).toBe(before);
    expect(fromCache.data.delivery).toMatchObject({ id, uid, status: 'CREATED', pickup: { name: 'Ada Shop' } });

    // A subscription's nested Delivery { id status } lands on the same entity.
    const subscription = apollo.subscribe({ query: gql(UPDATED), variables: { uid } }).subscribe({});
    try {
      await stack.sandbox.advance(uid);
      await until(
        () =>
          cache.readFragment<any>({
            id: cacheId,
            fragment: gql`
              fragment S on Delivery {
                status
              }
            `,
          })?.status === 'ASSIGNED',
        'the cached status to move',
      );
    } finally {
      subscription.unsubscribe();
    }
  });
});

/** One request as it went on the wire: its method, and the GraphQL parameters of its body or URL. */
interface WireRequest {
  method: string;
  query: string | undefined;
  extensions: { persistedQuery?: { version: number; sha256Hash: string } } | undefined;
}

/** Global fetch that records each request's GraphQL parameters. */
function recordingFetch(): { fetch: typeof fetch; requests: WireRequest[] } {
  const requests: WireRequest[] = [];
  return {
    requests,
    fetch: (input, init) => {
      const method = init?.method ?? 'GET';
      if (method === 'GET') {
        const url = new URL(String(input));
        const extensions = url.searchParams.get('extensions');
        requests.push({
          method,
          query: url.searchParams.get('query') ?? undefined,
          extensions: extensions ? JSON.parse(extensions) : undefined,
        });
      } else {
        const body = JSON.parse(String(init?.body)) as Partial<WireRequest>;
        requests.push({ method, query: body.query, extensions: body.extensions });
      }
      return fetch(input, init);
    },
  };
}

describe('Apollo Client 3 with automatic persisted queries (createPersistedQueryLink)', () => {
  const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
  const clients: Array<ApolloClient<NormalizedCacheObject>> = [];

  function apqClient(
    fetchImpl: typeof fetch,
    options: { useGETForHashedQueries?: boolean } = {},
  ): ApolloClient<NormalizedCacheObject> {
    const http = new HttpLink({
      uri: `${stack.app.url}/graphql`,
      fetch: fetchImpl,
      headers: { authorization: `Bearer ${stack.key}` },
    });
    const client = new ApolloClient({
      link: createPersistedQueryLink({ sha256, ...options }).concat(http),
      cache: new InMemoryCache(),
      defaultOptions: { query: { fetchPolicy: 'network-only' } },
    });
    clients.push(client);
    return client;
  }
  afterAll(() => clients.forEach((client) => client.stop()));

  it('sends the hash alone, retries once with the query on PersistedQueryNotFound, then sends only the hash', async () => {
    const { uid } = await bookViaGql();
    const wire = recordingFetch();
    const apollo = apqClient(wire.fetch);
    const READ = gql`
      query ApqRead($uid: ID!) {
        delivery(uid: $uid) {
          id
          uid
          status
        }
      }
    `;

    const first = await apollo.query({ query: READ, variables: { uid } });
    expect(first.errors).toBeUndefined();
    expect(first.data.delivery).toMatchObject({ uid, status: 'CREATED' });
    expect(wire.requests).toHaveLength(2);
    const [miss, retry] = wire.requests;
    expect(miss).toMatchObject({
      method: 'POST',
      query: undefined,
      extensions: { persistedQuery: { version: 1, sha256Hash: expect.stringMatching(/^[0-9a-f]{64}$/) } },
    });
    expect(retry).toMatchObject({
      method: 'POST',
      query: expect.stringContaining('ApqRead'),
      extensions: miss!.extensions,
    });
    expect(sha256(retry!.query!)).toBe(miss!.extensions!.persistedQuery!.sha256Hash);

    const second = await apollo.query({ query: READ, variables: { uid } });
    expect(second.data.delivery).toMatchObject({ uid, status: 'CREATED' });
    expect(wire.requests).toHaveLength(3);
    expect(wire.requests[2]).toEqual({ method: 'POST', query: undefined, extensions: miss!.extensions });
  });

  it('with useGETForHashedQueries: hash-only GETs, the one retry as a POST with the query', async () => {
    const { uid } = await bookViaGql();
    const wire = recordingFetch();
    const apollo = apqClient(wire.fetch, { useGETForHashedQueries: true });
    const READ = gql`
      query ApqReadByGet($uid: ID!) {
        delivery(uid: $uid) {
          id
          uid
          status
        }
      }
    `;

    const first = await apollo.query({ query: READ, variables: { uid } });
    expect(first.errors).toBeUndefined();
    expect(first.data.delivery).toMatchObject({ uid, status: 'CREATED' });
    expect(
      wire.requests.map(({ method, query }) => [method, query === undefined ? 'hash only' : 'with query']),
    ).toEqual([
      ['GET', 'hash only'],
      ['POST', 'with query'],
    ]);

    const second = await apollo.query({ query: READ, variables: { uid } });
    expect(second.data.delivery).toMatchObject({ uid, status: 'CREATED' });
    expect(wire.requests).toHaveLength(3);
    expect(wire.requests[2]).toMatchObject({
      method: 'GET',
      query: undefined,
      extensions: wire.requests[0]!.extensions,
    });
  });
});

/** urql's subscriptionExchange over a graphql-ws client. */
function wsExchange(ws: WsClient): Exchange {
  return subscriptionExchange({
    forwardSubscription(request) {
      const input = { ...request, query: request.query || '' };
      return {
        subscribe(sink) {
          const unsubscribe = ws.subscribe(input, sink);
          return { unsubscribe };
        },
      };
    },
  });
}

/** Runs a urql subscription and records what arrives. */
function followWithUrql(client: UrqlClient, uid: string) {
  const updates: Array<{ status: string; uid: string }> = [];
  const errors: unknown[] = [];
  const { unsubscribe } = client.subscription(UPDATED, { uid }).subscribe((result) => {
    if (result.error) errors.push(result.error);
    if (result.data) updates.push(result.data.deliveryUpdated);
  });
  return { updates, errors, unsubscribe };
}

describe('urql 5', () => {
  let ws: WsClient;
  let client: UrqlClient;

  beforeAll(() => {
    ws = wsClient();
    client = new UrqlClient({
      url: `${stack.app.url}/graphql`,
      fetch: globalThis.fetch,
      fetchOptions: { headers: { authorization: `Bearer ${stack.key}` } },
      exchanges: [documentCacheExchange, fetchExchange, wsExchange(ws)],
      requestPolicy: 'network-only',
    });
  });
  afterAll(async () => {
    await ws?.dispose();
  });

  it('books a delivery (mutation) and reads it back (query)', async () => {
    const booked = await client.mutation(CREATE, { input: deliveryInput() }).toPromise();
    expect(booked.error).toBeUndefined();
    expect(booked.data.createDelivery.__typename).toBe('MutationCreateDeliverySuccess');
    const { id, uid } = booked.data.createDelivery.data;
    const read = await client.query(SMALL, { uid }).toPromise();
    expect(read.error).toBeUndefined();
    expect(read.data.delivery).toMatchObject({ id, uid, status: 'CREATED' });
  });

  it('follows deliveryUpdated over subscriptionExchange (graphql-ws) as the sandbox moves the delivery', async () => {
    const { uid } = await bookViaGql();
    const followed = followWithUrql(client, uid);
    try {
      await moveAndWatch(uid, () => followed.updates.map((u) => u.status));
    } finally {
      followed.unsubscribe();
    }
    expect(followed.errors).toEqual([]);
    expect(followed.updates.map((u) => u.status)).toEqual(['CREATED', ...MILESTONES]);
  });
});

describe('urql 5 with graphcache', () => {
  let ws: WsClient;
  let client: UrqlClient;
  const counter = countingFetch();

  beforeAll(() => {
    ws = wsClient();
    // The schema lets graphcache match the result union exactly and know which types are embedded.
    const schema = introspectionFromSchema(
      buildSchema(readFileSync(new URL('../../schema.graphql', import.meta.url), 'utf8')),
    );
    const embedded = () => null;
    client = new UrqlClient({
      url: `${stack.app.url}/graphql`,
      fetch: counter.fetch,
      fetchOptions: { headers: { authorization: `Bearer ${stack.key}` } },
      exchanges: [
        graphcacheExchange({
          schema,
          keys: {
            Delivery: (delivery) => delivery.id as string,
            DeliveryEvent: embedded,
            Stop: embedded,
            MutationCreateDeliverySuccess: embedded,
            ValidationError: embedded,
            FieldError: embedded,
          },
        }),
        fetchExchange,
        wsExchange(ws),
      ],
    });
  });
  afterAll(async () => {
    await ws?.dispose();
  });

  it('normalises Delivery by id: two queries selecting different fields make one merged entity', async () => {
    const booked = await client.mutation(CREATE, { input: deliveryInput() }).toPromise();
    expect(booked.error).toBeUndefined();
    const { id, uid } = booked.data.createDelivery.data;

    const small = await client.query(SMALL, { uid }, { requestPolicy: 'network-only' }).toPromise();
    expect(small.data.delivery).toMatchObject({ id, uid, status: 'CREATED' });
    const more = await client.query(MORE, { uid }).toPromise();
    expect(more.error).toBeUndefined();
    expect(more.data.delivery).toMatchObject({ id, uid, pickup: { name: 'Ada Shop' } });

    // Every field of both selections, answered from the one normalised entity without a request.
    const before = counter.count();
    const merged = await client.query(ALL, { uid }, { requestPolicy: 'cache-only' }).toPromise();
    expect(counter.count()).toBe(before);
    expect(merged.error).toBeUndefined();
    expect(merged.stale).toBe(false);
    expect(merged.data.delivery).toMatchObject({
      id,
      uid,
      status: 'CREATED',
      deliveryDate: '2030-05-01',
      pickup: { name: 'Ada Shop' },
      dropoff: { name: 'Grace Customer' },
    });
    expect(merged.data.delivery.trackingUrl).toEqual(expect.any(String));

    // Subscriptions write into the same entity: the cached status follows the courier.
    const watched: string[] = [];
    const watching = client.query(ALL, { uid }, { requestPolicy: 'cache-only' }).subscribe((result) => {
      if (result.data?.delivery) watched.push(result.data.delivery.status);
    });
    const followed = followWithUrql(client, uid);
    try {
      await moveAndWatch(uid, () => followed.updates.map((u) => u.status));
      await until(() => watched.at(-1) === 'DROPOFF_COMPLETE', 'the cached delivery to reach DROPOFF_COMPLETE');
    } finally {
      followed.unsubscribe();
      watching.unsubscribe();
    }
    expect(followed.errors).toEqual([]);
    expect(watched).toContain('PICKUP_COMPLETE');
  });
});
