// Requests that would stall everyone by amplification: one small document whose
// answer multiplies (aliases × a list of one uid repeated × a page of events ×
// the payload of each). The cost limit refuses them before any upstream call or
// store read, on every way in; duplicates of a uid are read once; the largest
// legitimate operations still run; and an answer over GRAPHQL_MAX_RESPONSE_BYTES
// is replaced by RESPONSE_TOO_LARGE on the direct path, yoga's handler (JSON and
// SSE) and WebSocket. bench/attacks/amplification.mjs measures the same attack
// against /health; timing stays out of this file.
import { readFileSync, rmSync } from 'node:fs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { getOperationAST, parse } from 'graphql';
import { operationCost } from '../../src/pipeline/guards/cost.js';
import { OPERATION_LIMITS } from '../../src/pipeline/limits.js';
import { toSchema } from '../../src/graphql/schema.js';
import type { Store } from '../../src/store/store.js';
import { deliveryInput, makeDataDir, startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;

/** The reported attack: 30 aliases of one uid × 100, each with every event's delivery payload. */
const ATTACK = `query Amplify($uids: [ID!]!) { ${Array.from(
  { length: 30 },
  (_, i) => `a${i}: deliveries(uids: $uids) { events { edges { node { delivery { payload } } } } }`,
).join(' ')} }`;
/** One alias of it: within the limit for a few uids, over it for 100. */
const ONE_ALIAS =
  'query Amplify($uids: [ID!]!) { deliveries(uids: $uids) { events { edges { node { delivery { payload } } } } } }';

const FULL_DELIVERY = /* GraphQL */ `
  fragment Full on Delivery {
    id
    uid
    group
    status
    rawStatus
    price {
      amount
      currency
    }
    tip
    distance {
      value
      unit
    }
    pickup {
      name
      phone
      email
      instructions
      windowStart
      address {
        street
        number
        secondaryNumber
        city
        county
        state
        postalCode
        country
        latitude
        longitude
      }
    }
    dropoff {
      name
      phone
      email
      instructions
      windowStart
      address {
        street
        number
        city
        country
        latitude
        longitude
      }
    }
    deliveryDate
    deliveryStartTime
    deliveryEndTime
    estimatedDropoffAt
    mode
    style
    rawStyle
    package {
      description
      minimumVehicleSize
      requirements
      itemsCount
      items {
        name
        quantity
        price
      }
      weight
      dimensions {
        height
        length
        width
      }
      declaredValue
    }
    courier {
      name
      pickupPhone
      dropoffPhone
      vehicle {
        make
        model
        year
      }
      location {
        lat
        lng
      }
    }
    proofOfDelivery {
      photoUrl
      signatureUrl
    }
    cancellationReason
    expectedCancellationFee {
      amount
      currency
    }
    trackingUrl
    payload
    partnerReference
  }
`;
const EVENT_NODE =
  'cursor uid name status statusText stale receivedAt courierLocation { lat lng } delivery { uid status }';

/** An operation as written in a source file (the tracking page's, GraphiQL's examples), so the test follows them. */
function operationIn(file: string, constant: string): string {
  const source = readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');
  const match = new RegExp(`const ${constant} = (?:/\\* GraphQL \\*/ )?\`([\\s\\S]*?)\`;`).exec(source);
  if (!match) throw new Error(`${constant} not found in ${file}`);
  return match[1]!;
}

async function post(
  url: string,
  body: unknown,
  key: string,
  accept?: string,
): Promise<{ status: number; body: GraphQLResponse }> {
  const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${key}` };
  if (accept) headers.accept = accept;
  const response = await fetch(`${url}/graphql`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: response.status, body: (await response.json()) as GraphQLResponse };
}

/** One query over graphql-ws: what its `next` messages carried, data and errors. */
async function overWebSocket(
  url: string,
  key: string,
  query: string,
  variables?: Record<string, unknown>,
): Promise<GraphQLResponse[]> {
  const client = wsClient(url, key);
  const answers: GraphQLResponse[] = [];
  try {
    await new Promise<void>((resolve) => {
      client.subscribe(
        { query, variables },
        {
          next: (message) => void answers.push(message as GraphQLResponse),
          error: (error) => {
            answers.push({
              errors: Array.isArray(error) ? error : [{ message: String((error as Error).message ?? error) }],
            });
            resolve();
          },
          complete: resolve,
        },
      );
    });
    return answers;
  } finally {
    await client.dispose();
  }
}

/** The first `next` message of a subscription over graphql-ws; then it is ended. */
async function firstEvent(
  url: string,
  key: string,
  query: string,
  variables: Record<string, unknown>,
): Promise<GraphQLResponse> {
  const client = wsClient(url, key);
  try {
    return await new Promise<GraphQLResponse>((resolve, reject) => {
      const end = client.subscribe(
        { query, variables },
        {
          next: (message) => (resolve(message as GraphQLResponse), end()),
          error: reject,
          complete: () => reject(new Error('completed without an event')),
        },
      );
    });
  } finally {
    await client.dispose();
  }
}

/** Counts the store reads resolvers make (Delivery.events), until `restore`. */
function countStoreReads(store: Store): { readonly count: number; restore(): void } {
  const eventsAfter = store.eventsAfter;
  let count = 0;
  store.eventsAfter = (...args) => {
    count += 1;
    return eventsAfter.apply(store, args);
  };
  return {
    get count() {
      return count;
    },
    restore: () => void (store.eventsAfter = eventsAfter),
  };
}

const costRefusal = (found: string) =>
  new RegExp(`^Operation cost limit of ${OPERATION_LIMITS.cost} exceeded, found ${found}: `);

describe('operationCost: the most field values an answer may hold', () => {
  const cost = (text: string, variables: Record<string, unknown> | 'least' | 'most' = {}) => {
    const document = parse(text);
    return operationCost(toSchema(), document, getOperationAST(document)!, variables, 100).cost;
  };

  it('counts each field once, and a list field with a list argument once per item', () => {
    expect(cost('{ delivery(uid: "a") { uid status pickup { name } } }')).toBe(1 + 1 + 1 + 2);
    expect(cost('{ deliveries(uids: ["a", "a", "b"]) { uid status } }')).toBe(3 * 3);
    // A single value is a list of one.
    expect(cost('{ deliveries(uids: "a") { uid } }')).toBe(2);
  });

  it('counts a page of events by `first`, a full page when it is omitted or null, and nothing else under the connection', () => {
    const page = (args: string) =>
      cost(`{ delivery(uid: "a") { events${args} { edges { node { name } } pageInfo { hasNextPage } } } }`);
    expect(page('(first: 10)')).toBe(1 + 1 + 10 * 3 + 2);
    expect(page('')).toBe(1 + 1 + OPERATION_LIMITS.eventsPage * 3 + 2);
    expect(page('(first: null)')).toBe(page(''));
  });

  it('takes variables as given, their defaults when absent, and bounds them before they are known', () => {
    const text =
      'query($uids: [ID!]!, $first: Int = 5) { deliveries(uids: $uids) { events(first: $first) { edges { cursor } } } }';
    expect(cost(text, { uids: ['a', 'b'] })).toBe(2 * (1 + 1 + 5 * 2));
    expect(cost(text, { uids: ['a', 'b'], first: 1 })).toBe(2 * (1 + 1 + 1 * 2));
    expect(cost(text, 'least')).toBe(1 + 1 + 1 * 2);
    expect(cost(text, 'most')).toBe(100 * (1 + 1 + OPERATION_LIMITS.eventsPage * 2));
  });

  it('counts a fragment where it is spread, with the page it is spread under', () => {
    const text =
      'fragment Names on DeliveryEventConnection { edges { node { name } } } { delivery(uid: "a") { a: events(first: 2) { ...Names } b: events(first: 3) { ...Names } } }';
    expect(cost(text)).toBe(1 + (1 + 2 * 3) + (1 + 3 * 3));
  });
});

describe('amplification: the cost limit', () => {
  let stack: Stack;
  let uid: string;
  const readsOf = (target: string) =>
    stack.sandbox.requests.filter((r) => r.method === 'GET' && r.path.endsWith(`/deliveries/${target}`));

  beforeAll(async () => {
    stack = await startStack({ env: { NODE_ENV: 'production' } });
    const booked = await stack.gql(CREATE, { input: deliveryInput() });
    uid = booked.data.createDelivery.data.uid;
  });
  afterAll(() => stack?.stop());
  beforeEach(() => stack.sandbox.resetRequests());

  it('refuses 30 aliases × 100 copies of one uid × events × delivery × payload before any upstream call or store read, on every way in', async () => {
    const variables = { uids: Array(100).fill(uid) };
    const reads = countStoreReads(stack.app.services.store);
    try {
      const direct = await post(stack.app.url, { query: ATTACK, variables }, stack.key);
      const yoga = await post(
        stack.app.url,
        { query: ATTACK, variables },
        stack.key,
        'application/graphql-response+json',
      );
      const ws = await overWebSocket(stack.app.url, stack.key, ATTACK, variables);
      for (const [way, answer] of [
        ['direct', direct.body],
        ['yoga', yoga.body],
        ['WebSocket', ws[0]!],
      ] as const) {
        expect(answer.data, way).toBeUndefined();
        expect(answer.errors, way).toHaveLength(1);
        // Refused by validation, whatever the list holds: 30 × (a delivery + a full page of 500 events × 4 fields) even
        // for one uid.
        expect(answer.errors![0]!.message, way).toMatch(costRefusal('at least 60060'));
        expect(answer.errors![0]!.extensions?.code, way).toBe('GRAPHQL_VALIDATION_FAILED');
      }
      expect(ws).toHaveLength(1);
      expect(reads.count).toBe(0);
    } finally {
      reads.restore();
    }
    expect(stack.sandbox.requests).toEqual([]);
  });

  it('counts a list given as a variable by its length: 5 copies run (one upstream read), 100 are refused before any read', async () => {
    const reads = countStoreReads(stack.app.services.store);
    try {
      const refused = await post(
        stack.app.url,
        { query: ONE_ALIAS, variables: { uids: Array(100).fill(uid) } },
        stack.key,
      );
      expect(refused.body.data).toBeUndefined();
      // 100 × (a delivery + a page of 500 events × (edge, node, delivery, payload)) + the list.
      expect(refused.body.errors?.[0]?.message).toMatch(costRefusal('200200'));
      expect(refused.body.errors?.[0]?.extensions?.code).toBe('GRAPHQL_VALIDATION_FAILED');
      const overSocket = await overWebSocket(stack.app.url, stack.key, ONE_ALIAS, { uids: Array(100).fill(uid) });
      expect(overSocket[0]?.errors?.[0]?.message).toMatch(costRefusal('200200'));
      expect(reads.count).toBe(0);
      expect(stack.sandbox.requests).toEqual([]);

      const run = await post(stack.app.url, { query: ONE_ALIAS, variables: { uids: Array(5).fill(uid) } }, stack.key);
      expect(run.body.errors).toBeUndefined();
      expect(run.body.data.deliveries).toHaveLength(5);
      expect(readsOf(uid)).toHaveLength(1);
    } finally {
      reads.restore();
    }
  });

  it('counts a literal list by its length, and an omitted `first` as a full page', async () => {
    const literal = `{ deliveries(uids: ${JSON.stringify(Array(100).fill(uid))}) { events { edges { node { delivery { payload } } } } } }`;
    const { body } = await post(stack.app.url, { query: literal }, stack.key);
    expect(body.errors?.[0]?.message).toMatch(costRefusal('200200'));
    // A short page makes the same list affordable.
    const paged = literal.replace('events {', 'events(first: 10) {');
    const answer = await post(stack.app.url, { query: paged }, stack.key);
    expect(answer.body.errors).toBeUndefined();
    expect(answer.body.data.deliveries).toHaveLength(100);
    expect(readsOf(uid)).toHaveLength(1);
  });

  it('reads duplicate uids once and answers every copy the same', async () => {
    const { body } = await post(
      stack.app.url,
      {
        query: 'query($uids: [ID!]!) { deliveries(uids: $uids) { uid status payload pickup { name } } }',
        variables: { uids: Array(100).fill(uid) },
      },
      stack.key,
    );
    expect(body.errors).toBeUndefined();
    expect(body.data.deliveries).toHaveLength(100);
    expect(new Set(body.data.deliveries.map((delivery: unknown) => JSON.stringify(delivery))).size).toBe(1);
    expect(stack.sandbox.requests).toHaveLength(1);
    expect(readsOf(uid)).toHaveLength(1);
  });

  describe('keeps the largest legitimate operations', () => {
    it('a literal batch of 100 full deliveries', async () => {
      const uids: string[] = [uid];
      for (let i = 0; i < 9; i += 1)
        uids.push((await stack.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid);
      const list = Array.from({ length: 100 }, (_, i) => uids[i % uids.length]!);
      const { body } = await post(
        stack.app.url,
        { query: `${FULL_DELIVERY} { deliveries(uids: ${JSON.stringify(list)}) { ...Full } }` },
        stack.key,
      );
      expect(body.errors).toBeUndefined();
      expect(body.data.deliveries.map((delivery: { uid: string }) => delivery.uid)).toEqual(list);
    });

    it('a page of 500 events with every field', async () => {
      const query = `query($uid: ID!) { delivery(uid: $uid) { events(first: 500) { edges { cursor node { ${EVENT_NODE} } } pageInfo { hasNextPage endCursor } } } }`;
      const { body } = await post(stack.app.url, { query, variables: { uid } }, stack.key);
      expect(body.errors).toBeUndefined();
      expect(body.data.delivery.events.pageInfo.hasNextPage).toBe(false);
    });

    it("the tracking page's read and GraphiQL's examples", async () => {
      const track = await post(
        stack.app.url,
        { query: operationIn('src/web/client/operations.ts', 'TRACK'), variables: { uid } },
        stack.key,
      );
      expect(track.body.errors).toBeUndefined();
      expect(track.body.data.delivery.uid).toBe(uid);
      // Every operation of the document is validated, whichever one runs.
      const examples = await post(
        stack.app.url,
        { query: operationIn('src/web/graphiql.ts', 'GRAPHIQL_EXAMPLES'), operationName: 'Availability' },
        stack.key,
      );
      expect(examples.body.errors).toBeUndefined();
      expect(examples.body.data.availability).toHaveLength(2);
    });
  });
});

describe('amplification: GRAPHQL_MAX_RESPONSE_BYTES', () => {
  const MAX = 4096;
  let stack: Stack;
  let viaYoga: App;
  let yogaDataDir: string;
  let uid: string;
  /** Each answer holding one payload fits; two do not. */
  const note = 'n'.repeat(2500);
  const ONE = 'query($uid: ID!) { delivery(uid: $uid) { payload } }';
  const TWO = 'query($uid: ID!) { a: delivery(uid: $uid) { payload } b: delivery(uid: $uid) { payload } }';
  const TWO_LIVE =
    'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { name a: delivery { payload } b: delivery { payload } } }';
  const refused = {
    errors: [
      {
        message: `The answer would be larger than ${MAX} bytes; ask for fewer deliveries, fields or events (page with first/after).`,
        extensions: { code: 'RESPONSE_TOO_LARGE' },
      },
    ],
    data: null,
  };

  beforeAll(async () => {
    // The second instance has a store of its own, without the booking's record: the sandbox scopes reads to the key,
    // and both are told so (the upstream decides), so it reads the delivery as the first does.
    stack = await startStack({ env: { GRAPHQL_MAX_RESPONSE_BYTES: String(MAX), UPSTREAM_READ_SCOPE: 'key' } });
    yogaDataDir = makeDataDir();
    // The same configuration, every HTTP request through yoga's own handler.
    viaYoga = await startApp(loadConfig({ ...stack.env, DATA_DIR: yogaDataDir }), { directHttpPath: false });
    const booked = await stack.gql(CREATE, { input: deliveryInput({ payload: { note } }) });
    uid = booked.data.createDelivery.data.uid;
  });
  afterAll(async () => {
    await viaYoga?.stop();
    await stack?.stop();
    rmSync(yogaDataDir, { recursive: true, force: true });
  });

  it('answers within the limit as usual on every way in', async () => {
    for (const url of [stack.app.url, viaYoga.url]) {
      const { body } = await post(url, { query: ONE, variables: { uid } }, stack.key);
      expect(body).toEqual({ data: { delivery: { payload: { note } } } });
    }
    expect(await overWebSocket(stack.app.url, stack.key, ONE, { uid })).toEqual([
      { data: { delivery: { payload: { note } } } },
    ]);
  });

  it('replaces a larger answer with RESPONSE_TOO_LARGE on the direct path and on yoga’s handler', async () => {
    const direct = await post(stack.app.url, { query: TWO, variables: { uid } }, stack.key);
    expect(direct.status).toBe(200);
    expect(direct.body).toEqual(refused);
    const yoga = await post(viaYoga.url, { query: TWO, variables: { uid } }, stack.key);
    expect(yoga.body).toEqual(refused);
    const graphqlResponse = await post(
      viaYoga.url,
      { query: TWO, variables: { uid } },
      stack.key,
      'application/graphql-response+json',
    );
    expect(graphqlResponse.body).toEqual(refused);
  });

  it('replaces a larger answer over WebSocket, a query and a subscription event alike', async () => {
    expect(await overWebSocket(stack.app.url, stack.key, TWO, { uid })).toEqual([refused]);
    // The first event of deliveryUpdated is the current state, its payload twice.
    expect(await firstEvent(stack.app.url, stack.key, TWO_LIVE, { uid })).toEqual(refused);
  });

  it("replaces a larger subscription event over yoga's server-sent events", async () => {
    const abort = new AbortController();
    const response = await fetch(`${viaYoga.url}/graphql`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'text/event-stream',
        authorization: `Bearer ${stack.key}`,
      },
      body: JSON.stringify({ query: TWO_LIVE, variables: { uid } }),
      signal: abort.signal,
    });
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = '';
    while (!/event: next\ndata: .*\n/.test(text)) {
      const { value, done } = await reader.read();
      if (done) break;
      text += value;
    }
    abort.abort();
    const data = /event: next\ndata: (.*)\n/.exec(text)?.[1];
    expect(JSON.parse(data!)).toEqual(refused);
  });
});
