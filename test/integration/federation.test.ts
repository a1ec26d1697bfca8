// The facade as a federation subgraph: `_service { sdl }` and `_entities` over
// every transport, with the same key, batch, cost and introspection rules as
// every other read; then composed with a second (merchant orders) subgraph by
// @theguild/federation-composition and served by Hive Gateway, one operation
// reading fields of both, upstream reads counted on the sandbox.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { buildSubgraphSchema } from '@apollo/subgraph';
import { createGatewayRuntime, type GatewayRuntime } from '@graphql-hive/gateway-runtime';
import { composeServices } from '@theguild/federation-composition';
import { parse } from 'graphql';
import { createYoga } from 'graphql-yoga';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryInput, partnerOrderBody, startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { wsClient } from '../helpers/ws-client.js';

const CREATE = /* GraphQL */ `
  mutation Create($input: DeliveryInput!) {
    createDelivery(input: $input) {
      ... on MutationCreateDeliverySuccess {
        data {
          uid
        }
      }
      ... on Error {
        code
        message
      }
    }
  }
`;

const ENTITIES = /* GraphQL */ `
  query Entities($representations: [_Any!]!) {
    _entities(representations: $representations) {
      __typename
      ... on Delivery {
        uid
        group
        status
      }
    }
  }
`;

/** The orders subgraph a merchant might already run: it extends the facade's Delivery by its key. */
const ORDERS_SDL = /* GraphQL */ `
  extend schema @link(url: "https://specs.apollo.dev/federation/v2.6", import: ["@key"])
  type Query {
    "The merchant's orders."
    merchantOrders: [MerchantOrder!]!
  }
  "An order of the merchant's shop."
  type MerchantOrder {
    id: ID!
    reference: String!
    "The delivery that ships it, from delivery-graph."
    delivery: Delivery
  }
  type Delivery @key(fields: "uid") {
    uid: ID!
    "The order this delivery ships."
    merchantOrder: MerchantOrder
  }
`;

/** A uid no merchant has, on either group. */
const UNKNOWN_UID = '00000000-0000-4000-8000-000000000000';

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

async function book(): Promise<string> {
  const result = await stack.gql(CREATE, { input: deliveryInput() });
  expect(result.errors).toBeUndefined();
  return result.data.createDelivery.data.uid;
}

/** Upstream reads since `mark`, one path each: platform `/deliveries/<uid>`, partner `/orders/<uid>`. */
function readsSince(mark: number): string[] {
  return stack.sandbox
    .requestsSince(mark)
    .filter((r) => r.method === 'GET' && /\/(deliveries|orders)\/[^/]+$/.test(r.path))
    .map((r) => r.path.replace(/^.*\/(deliveries|orders)\//, '$1/'));
}

const delivery = (uid: string, group?: string) => ({ __typename: 'Delivery', uid, ...(group ? { group } : {}) });

function listen(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  return once(server, 'listening').then(() => `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
}

async function close(server: Server | undefined): Promise<void> {
  if (!server?.listening) return;
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

describe('the subgraph schema', () => {
  it('serves _service { sdl } without a key: Delivery keyed on uid (and on uid group), the federation link included', async () => {
    const result = await stack.gql('{ _service { sdl } }', undefined, null);
    expect(result.errors).toBeUndefined();
    const sdl: string = result.data._service.sdl;
    expect(sdl).toContain('@link(url: "https://specs.apollo.dev/federation/v2.6", import: ["@key"])');
    expect(sdl).toMatch(/type Delivery implements Node\s+@key\(fields: "uid"\)\s+@key\(fields: "uid group"\)/);
    // The subgraph SDL leaves out what federation adds (the gateway adds its own).
    expect(sdl).not.toContain('_entities');
    expect(sdl).toContain('deliveries(');
  });

  it('answers _service and _entities alike on the direct JSON path, through yoga (GET) and over WebSocket', async () => {
    const uid = await book();
    const query = `{ _service { sdl } _entities(representations: [{ __typename: "Delivery", uid: "${uid}" }]) { ... on Delivery { uid status } } }`;
    const direct = await stack.gql(query);
    const viaGet = (await (
      await fetch(`${stack.app.url}/graphql?query=${encodeURIComponent(query)}`, {
        headers: { authorization: `Bearer ${stack.key}`, accept: 'application/json' },
      })
    ).json()) as GraphQLResponse;
    const ws = wsClient(stack.app.url, stack.key);
    let overWs: GraphQLResponse | undefined;
    try {
      for await (const message of ws.iterate({ query })) overWs = message as GraphQLResponse;
    } finally {
      await ws.dispose();
    }
    for (const answer of [direct, viaGet, overWs!]) {
      expect(answer.errors).toBeUndefined();
      expect(answer.data._entities).toEqual([{ uid, status: 'CREATED' }]);
      expect(answer.data._service.sdl).toBe(direct.data._service.sdl);
    }
  });

  it('keeps _service readable with introspection off, while __schema is refused', async () => {
    const closed = await startStack({ env: { GRAPHQL_INTROSPECTION: 'false' } });
    try {
      const service = await closed.gql('{ _service { sdl } }', undefined, null);
      expect(service.errors).toBeUndefined();
      expect(service.data._service.sdl).toContain('@key(fields: "uid")');
      const introspection = await closed.gql('{ __schema { queryType { name } } }');
      expect(introspection.errors?.[0]?.message).toMatch(/introspection has been disabled/);
    } finally {
      await closed.stop();
    }
  });
});

describe('_entities on the facade', () => {
  it('resolves many representations in order with one upstream read per distinct uid, null for an unknown uid', async () => {
    const [first, second] = [await book(), await book()];
    const mark = stack.sandbox.requestCount;
    const representations = [first, second, first, UNKNOWN_UID, first, second].map((uid) => delivery(uid));
    const result = await stack.gql(ENTITIES, { representations });
    expect(result.errors).toBeUndefined();
    const expected = (uid: string) => ({ __typename: 'Delivery', uid, group: 'PLATFORM', status: 'CREATED' });
    expect(result.data._entities).toEqual([
      expected(first),
      expected(second),
      expected(first),
      null,
      expected(first),
      expected(second),
    ]);
    // The unknown uid is looked for on both groups (platform, then partner) before it reads as null.
    expect(readsSince(mark).sort()).toEqual(
      [`deliveries/${first}`, `deliveries/${second}`, `deliveries/${UNKNOWN_UID}`, `orders/${UNKNOWN_UID}`].sort(),
    );
  });

  it('finds a partner order by uid alone (platform first, then partner), and straight on the partner group when the representation carries it', async () => {
    const order = stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody(`PO-FED-${Date.now()}`));
    let mark = stack.sandbox.requestCount;
    const byUid = await stack.gql(ENTITIES, { representations: [delivery(order.uid)] });
    expect(byUid.errors).toBeUndefined();
    expect(byUid.data._entities).toEqual([
      { __typename: 'Delivery', uid: order.uid, group: 'PARTNER', status: 'CREATED' },
    ]);
    expect(readsSince(mark)).toEqual([`deliveries/${order.uid}`, `orders/${order.uid}`]);

    mark = stack.sandbox.requestCount;
    const byGroup = await stack.gql(ENTITIES, { representations: [delivery(order.uid, 'PARTNER')] });
    expect(byGroup.data._entities).toEqual(byUid.data._entities);
    expect(readsSince(mark)).toEqual([`orders/${order.uid}`]);
  });

  it('refuses a caller without a key with UNAUTHENTICATED before any upstream call', async () => {
    const mark = stack.sandbox.requestCount;
    const result = await stack.gql(ENTITIES, { representations: [delivery(UNKNOWN_UID)] }, null);
    // Refused before it runs (nothing of it needs parsing further for a caller without a key): no data at all.
    expect(result.data).toBeUndefined();
    expect(result.errors?.map((e) => e.extensions?.code)).toEqual(['UNAUTHENTICATED']);
    expect(stack.sandbox.requestsSince(mark)).toHaveLength(0);
  });

  it('refuses more than MAX_BATCH_SIZE representations, and ones that are not a Delivery, with BAD_USER_INPUT before any upstream call', async () => {
    const max = stack.app.services.config.graphql.maxBatchSize;
    const mark = stack.sandbox.requestCount;
    const tooMany = await stack.gql(ENTITIES, {
      representations: Array.from({ length: max + 1 }, (_, i) => delivery(`uid-${i}`)),
    });
    expect(tooMany.errors?.map((e) => [e.extensions?.code, e.message])).toEqual([
      ['BAD_USER_INPUT', `_entities takes at most ${max} representations; got ${max + 1}.`],
    ]);
    const secret = 'sk_test_pasted_by_mistake';
    const notDelivery = await stack.gql(ENTITIES, {
      representations: [delivery(UNKNOWN_UID), { __typename: secret, uid: UNKNOWN_UID }],
    });
    expect(notDelivery.errors?.map((e) => e.extensions?.code)).toEqual(['BAD_USER_INPUT']);
    expect(notDelivery.errors?.[0]?.message).toContain('Representation 1 is not one of a Delivery');
    expect(JSON.stringify(notDelivery)).not.toContain(secret);
    const badGroup = await stack.gql(ENTITIES, { representations: [delivery(UNKNOWN_UID, 'ELSEWHERE')] });
    expect(badGroup.data._entities).toEqual([null]);
    expect(badGroup.errors?.map((e) => [e.extensions?.code, e.path])).toEqual([['BAD_USER_INPUT', ['_entities', 0]]]);
    // graphql-jit parses an inline representation without the operation's variables: one with a variable in it is
    // refused up front.
    const inline = await stack.gql(
      'query($uid: ID!) { _entities(representations: [{ __typename: "Delivery", uid: $uid }]) { __typename } }',
      { uid: UNKNOWN_UID },
    );
    expect(inline.errors?.map((e) => e.extensions?.code)).toEqual(['GRAPHQL_VALIDATION_FAILED']);
    expect(inline.errors?.[0]?.message).toContain('cannot hold variables; pass the whole list as a variable');
    expect(stack.sandbox.requestsSince(mark)).toHaveLength(0);
  });

  it('counts the selection once per representation towards the operation cost limit', async () => {
    // A full page of events per delivery: about 4,000 per representation, so 20 of them are over 50,000 where one is
    // not.
    const query = /* GraphQL */ `
      query Heavy($representations: [_Any!]!) {
        _entities(representations: $representations) {
          ... on Delivery {
            uid
            events {
              edges {
                cursor
                node {
                  cursor
                  uid
                  name
                  status
                  stale
                  receivedAt
                }
              }
            }
          }
        }
      }
    `;
    const uid = await book();
    const one = await stack.gql(query, { representations: [delivery(uid)] });
    expect(one.errors).toBeUndefined();
    expect(one.data._entities[0].uid).toBe(uid);
    const mark = stack.sandbox.requestCount;
    const twenty = await stack.gql(query, { representations: Array.from({ length: 20 }, () => delivery(uid)) });
    expect(twenty.errors?.[0]?.message).toMatch(
      /^Operation cost limit of 50000 exceeded, found \d+: .*_entities\(representations:\) once per representation/,
    );
    expect(stack.sandbox.requestsSince(mark)).toHaveLength(0);
  });
});

describe('in a supergraph with Hive Gateway', () => {
  /** The merchant's own orders, each shipped as one facade delivery (two orders share one). */
  const orders: Array<{ id: string; reference: string; deliveryUid: string }> = [];
  let ordersServer: Server | undefined;
  let gatewayServer: Server | undefined;
  let gateway: GatewayRuntime | undefined;
  let gatewayUrl: string;
  /** What reached each subgraph's Authorization header, by subgraph. */
  const authorizations = new Map<string, Array<string | null>>();

  beforeAll(async () => {
    const ordersSchema = buildSubgraphSchema({
      typeDefs: parse(ORDERS_SDL),
      resolvers: {
        Query: { merchantOrders: () => orders },
        MerchantOrder: { delivery: (order: { deliveryUid: string }) => ({ uid: order.deliveryUid }) },
        Delivery: {
          __resolveReference: (reference: { uid: string }) => ({ uid: reference.uid }),
          merchantOrder: (parent: { uid: string }) => orders.find((order) => order.deliveryUid === parent.uid) ?? null,
        },
      } as never,
    });
    const ordersYoga = createYoga({
      schema: ordersSchema,
      logging: false,
      context: ({ request }) => {
        const seen = authorizations.get('orders') ?? [];
        seen.push(request.headers.get('authorization'));
        authorizations.set('orders', seen);
        return {};
      },
    });
    ordersServer = createServer(ordersYoga);
    const ordersUrl = `${await listen(ordersServer)}/graphql`;

    // The facade's subgraph SDL as a gateway's build step reads it: over HTTP, no key needed.
    const service = await stack.gql('{ _service { sdl } }', undefined, null);
    const composed = composeServices([
      { name: 'deliveries', typeDefs: parse(service.data._service.sdl), url: `${stack.app.url}/graphql` },
      { name: 'orders', typeDefs: parse(ORDERS_SDL), url: ordersUrl },
    ]);
    expect(composed.errors ?? []).toEqual([]);

    gateway = createGatewayRuntime({
      supergraph: composed.supergraphSdl!,
      logging: false,
      // The merchant key goes to delivery-graph only: the orders subgraph never sees it.
      propagateHeaders: {
        fromClientToSubgraphs: ({ request, subgraphName }) =>
          subgraphName === 'deliveries' ? { authorization: request.headers.get('authorization') } : {},
      },
    });
    gatewayServer = createServer(gateway);
    gatewayUrl = `${await listen(gatewayServer)}/graphql`;
  });

  afterAll(async () => {
    await close(gatewayServer);
    await gateway?.dispose();
    await close(ordersServer);
  });

  async function viaGateway(
    query: string,
    variables?: Record<string, unknown>,
    key: string | null = stack.key,
  ): Promise<GraphQLResponse> {
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' };
    if (key) headers.authorization = `Bearer ${key}`;
    const response = await fetch(gatewayUrl, { method: 'POST', headers, body: JSON.stringify({ query, variables }) });
    return (await response.json()) as GraphQLResponse;
  }

  it("reads the orders subgraph's orders with their deliveries' status from the facade, one upstream read per distinct uid", async () => {
    const [first, second] = [await book(), await book()];
    orders.splice(
      0,
      orders.length,
      { id: 'o-1', reference: 'SHOP-1', deliveryUid: first },
      { id: 'o-2', reference: 'SHOP-2', deliveryUid: first },
      { id: 'o-3', reference: 'SHOP-3', deliveryUid: second },
      { id: 'o-4', reference: 'SHOP-4', deliveryUid: UNKNOWN_UID },
    );
    authorizations.clear();
    const mark = stack.sandbox.requestCount;
    const result = await viaGateway('{ merchantOrders { reference delivery { uid status group trackingUrl } } }');
    // The facade has no delivery with the last order's uid: the gateway reads the entity as null,
    // and, Delivery.status being non-null, says so at that path.
    expect(result.errors?.map((e) => e.path)).toEqual([['merchantOrders', 3, 'delivery', 'status']]);
    const view = result.data.merchantOrders.map((o: any) => [
      o.reference,
      o.delivery && [o.delivery.uid, o.delivery.status, o.delivery.group],
    ]);
    expect(view).toEqual([
      ['SHOP-1', [first, 'CREATED', 'PLATFORM']],
      ['SHOP-2', [first, 'CREATED', 'PLATFORM']],
      ['SHOP-3', [second, 'CREATED', 'PLATFORM']],
      ['SHOP-4', null],
    ]);
    expect(result.data.merchantOrders[0].delivery.trackingUrl).toMatch(/^https?:\/\//);
    // Four representations, three distinct uids: each read once (the unknown one on both groups).
    expect(readsSince(mark).sort()).toEqual(
      [`deliveries/${first}`, `deliveries/${second}`, `deliveries/${UNKNOWN_UID}`, `orders/${UNKNOWN_UID}`].sort(),
    );
    expect(authorizations.get('orders')?.every((header) => header === null)).toBe(true);
  });

  it("reads a facade delivery with the orders subgraph's field on it", async () => {
    const uid = await book();
    orders.splice(0, orders.length, { id: 'o-9', reference: 'SHOP-9', deliveryUid: uid });
    const result = await viaGateway('query($uid: ID!) { delivery(uid: $uid) { status merchantOrder { reference } } }', {
      uid,
    });
    expect(result.errors).toBeUndefined();
    expect(result.data.delivery).toEqual({ status: 'CREATED', merchantOrder: { reference: 'SHOP-9' } });
  });

  it('passes UNAUTHENTICATED on when the client sends no merchant key', async () => {
    orders.splice(0, orders.length, { id: 'o-1', reference: 'SHOP-1', deliveryUid: UNKNOWN_UID });
    const mark = stack.sandbox.requestCount;
    const result = await viaGateway('{ merchantOrders { reference delivery { status } } }', undefined, null);
    expect(result.errors?.map((e) => e.extensions?.code)).toContain('UNAUTHENTICATED');
    // The orders subgraph's own fields still answer.
    expect(result.data?.merchantOrders?.[0]?.reference).toBe('SHOP-1');
    expect(stack.sandbox.requestsSince(mark)).toHaveLength(0);
  });
});
