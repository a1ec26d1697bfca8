// Issue 20's findings 2, 3 and 5 and item 2, as a caller meets them: nothing
// costly before a credential (no parse into the shared caches, no compile, no
// validation of what needs a key), a document length cap comments included,
// the shared cache bounded in bytes, client tokens on budgets of their own,
// and the resolvers refusing a client token what only a merchant may do even
// when nothing before them did.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createContext, type Services } from '../../src/graphql/context.js';
import { toSchema } from '../../src/graphql/schema.js';
import { deliveryInput, startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE_DELIVERY = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const CREATE_TOKEN = `mutation($uids: [ID!]!) { createClientToken(uids: $uids) { ... on MutationCreateClientTokenSuccess { data { token } } } }`;

const codes = (result: GraphQLResponse) => result.errors?.map((error) => error.extensions?.code);

async function post(
  stack: Stack,
  body: unknown,
  key?: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: GraphQLResponse }> {
  const response = await fetch(`${stack.app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? (JSON.parse(text) as GraphQLResponse) : {} };
}

/** A distinct, valid document of about `bytes` bytes that reads a delivery (aliases vary, so each text differs). */
function distinctRead(n: number, fields = 20): string {
  const selections = Array.from({ length: fields }, (_, i) => `f${n}_${i}: status`).join(' ');
  return `query Read${n} { delivery(uid: "00000000-0000-4000-a000-000000000001") { ${selections} } }`;
}

describe('nothing costly before a credential', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('answers a keyless read UNAUTHENTICATED without parsing it into the shared cache or asking the upstream', async () => {
    const before = stack.sandbox.requests.length;
    const cached = stack.app.pipeline.documents.size.entries;
    for (let n = 0; n < 20; n += 1) {
      const { status, body } = await post(stack, { query: distinctRead(n) });
      expect(status).toBe(200);
      expect(codes(body)).toEqual(['UNAUTHENTICATED']);
      expect(body.data).toBeUndefined();
    }
    expect(stack.app.pipeline.documents.size.entries).toBe(cached);
    expect(stack.sandbox.requests.length).toBe(before);
  });

  it('does the same over GET and server-sent events', async () => {
    const before = stack.sandbox.requests.length;
    const cached = stack.app.pipeline.documents.size.entries;
    for (let n = 400; n < 405; n += 1) {
      const get = await fetch(`${stack.app.url}/graphql?query=${encodeURIComponent(distinctRead(n, 3))}`);
      expect(codes((await get.json()) as GraphQLResponse)).toEqual(['UNAUTHENTICATED']);
      const sse = await fetch(`${stack.app.url}/graphql`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify({ query: distinctRead(n + 10, 3) }),
      });
      expect(await sse.text()).toMatch(/UNAUTHENTICATED/);
    }
    expect(stack.app.pipeline.documents.size.entries).toBe(cached);
    expect(stack.sandbox.requests.length).toBe(before);
  });

  it('does not validate what a keyless caller may not run anyway (an invalid read is refused for its missing key)', async () => {
    const { body } = await post(stack, { query: '{ delivery(uid: "x") { noSuchField } }' });
    expect(codes(body)).toEqual(['UNAUTHENTICATED']);
  });

  it('serves what needs no key to anyone: __typename, introspection (on outside production), uncached', async () => {
    const cached = stack.app.pipeline.documents.size.entries;
    const { body } = await post(stack, { query: '{ __typename __schema { queryType { name } } }' });
    expect(body).toEqual({ data: { __typename: 'Query', __schema: { queryType: { name: 'Query' } } } });
    expect(stack.app.pipeline.documents.size.entries).toBe(cached);
  });

  it('treats a key the upstream refused like no key: nothing kept, nothing asked again', async () => {
    const bogus = 'sk_refused_key_for_the_pipeline_test';
    // The first try asks the upstream, which refuses it.
    expect(codes((await post(stack, { query: distinctRead(100) }, bogus)).body)).toEqual(['UNAUTHENTICATED']);
    const before = stack.sandbox.requests.length;
    const cached = stack.app.pipeline.documents.size.entries;
    for (let n = 101; n < 110; n += 1)
      expect(codes((await post(stack, { query: distinctRead(n) }, bogus)).body)).toEqual(['UNAUTHENTICATED']);
    expect(stack.sandbox.requests.length).toBe(before);
    expect(stack.app.pipeline.documents.size.entries).toBe(cached);
  });

  it('keeps and compiles a document only for a caller whose key the upstream accepted, and counts its bytes', async () => {
    // Accepted once: the key's first read is judged by the upstream.
    await stack.gql('{ availability { group } }');
    const query = distinctRead(200, 5);
    const first = await post(stack, { query }, stack.key);
    expect(first.body.errors).toBeUndefined();
    const { entries, bytes } = stack.app.pipeline.documents.size;
    expect(entries).toBeGreaterThan(0);
    // The syntax tree is counted, not one unit per entry: at least the text's own length many times over.
    expect(bytes).toBeGreaterThan(query.length * 10);
    await post(stack, { query }, stack.key);
    expect(stack.app.pipeline.documents.size.bytes).toBeGreaterThan(bytes);
  });

  it('refuses a document longer than MAX_DOCUMENT_BYTES, comments included, before parsing it, over HTTP and WebSocket', async () => {
    const padded = `${'# padding\n'.repeat(2_000)}{ __typename }`;
    const anonymous = await post(stack, { query: padded });
    expect(anonymous.status).toBe(413);
    expect(codes(anonymous.body)).toEqual(['DOCUMENT_TOO_LARGE']);
    const keyed = await post(stack, { query: padded }, stack.key);
    expect(keyed.status).toBe(413);
    const client = wsClient(stack.app.url, stack.key);
    try {
      const refused = collect(client, padded);
      await refused.done;
      expect(
        (refused.errors as Array<{ extensions?: { code?: string } }> | undefined)?.map(
          (error) => error.extensions?.code,
        ),
      ).toEqual(['DOCUMENT_TOO_LARGE']);
    } finally {
      await client.dispose();
    }
  });

  it('answers a subscription asked for as plain JSON with 406 and what to do instead', async () => {
    const { status, body } = await post(
      stack,
      { query: 'subscription { deliveryUpdated(uid: "x") { uid } }' },
      stack.key,
      { accept: 'application/json' },
    );
    expect(status).toBe(406);
    expect(codes(body)).toEqual(['BAD_REQUEST']);
    expect(body.errors?.[0]?.message).toMatch(/text\/event-stream/);
  });
});

describe('requests without a credential, budgeted per address', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { KEYLESS_REFUSALS_PER_MINUTE: '3' } });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('reads no more of a keyless body than a document and its variables need', async () => {
    const { status, body } = await post(stack, { query: '{ __typename }', variables: { filler: 'x'.repeat(200_000) } });
    expect(status).toBe(413);
    expect(codes(body)).toEqual(['REQUEST_ENTITY_TOO_LARGE']);
    // With a key, the body limit is GRAPHQL_MAX_BODY_BYTES.
    expect(
      (await post(stack, { query: '{ __typename }', variables: { filler: 'x'.repeat(200_000) } }, stack.key)).status,
    ).toBe(200);
  });

  it('refuses an address unread once its keyless requests were refused KEYLESS_REFUSALS_PER_MINUTE times, and no one else', async () => {
    for (let n = 0; n < 3; n += 1)
      expect(codes((await post(stack, { query: distinctRead(300 + n) })).body)).toEqual(['UNAUTHENTICATED']);
    const limited = await fetch(`${stack.app.url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ query: '{ __typename }' }),
    });
    expect(limited.status).toBe(429);
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(codes((await limited.json()) as GraphQLResponse)).toEqual(['RATE_LIMITED']);
    // Over GET (yoga's handler) too, and a caller with a key is not affected.
    const get = await fetch(`${stack.app.url}/graphql?query=${encodeURIComponent('{ __typename }')}`);
    expect(codes((await get.json()) as GraphQLResponse)).toEqual(['RATE_LIMITED']);
    expect((await post(stack, { query: '{ __typename }' }, stack.key)).body).toEqual({ data: { __typename: 'Query' } });
  });
});

describe('the shared document cache', () => {
  let stack: Stack;
  const cacheBytes = 2_000_000;
  beforeAll(async () => {
    stack = await startStack({ env: { GRAPHQL_CACHE_BYTES: String(cacheBytes) } });
    await stack.gql('{ availability { group } }');
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('holds at most GRAPHQL_CACHE_BYTES, however many distinct documents an accepted key sends', async () => {
    for (let n = 0; n < 200; n += 1) {
      const query = distinctRead(n, 60);
      // Twice each: the second run compiles, and the entry grows.
      await post(stack, { query }, stack.key);
      await post(stack, { query }, stack.key);
    }
    const { entries, bytes } = stack.app.pipeline.documents.size;
    expect(bytes).toBeLessThanOrEqual(cacheBytes);
    expect(entries).toBeLessThan(200);
    expect(entries).toBeGreaterThan(0);
  });
});

describe('client tokens on budgets of their own', () => {
  let stack: Stack;
  let token: string;
  let uid: string;
  beforeAll(async () => {
    stack = await startStack({ env: { RATE_LIMIT_PER_MINUTE: '20', CLIENT_TOKEN_RATE_LIMIT_PER_MINUTE: '5' } });
    uid = (await stack.gql(CREATE_DELIVERY, { input: deliveryInput() })).data.createDelivery.data.uid;
    token = (await stack.gql(CREATE_TOKEN, { uids: [uid] })).data.createClientToken.data.token;
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it("never spends the merchant key's budget: a token over its own budget is refused, the merchant's backend is not", async () => {
    const read = `query($uid: ID!) { delivery(uid: $uid) { uid } }`;
    const answers = [];
    for (let n = 0; n < 30; n += 1) answers.push(await stack.gql(read, { uid }, token));
    const limited = answers.filter((answer) => codes(answer)?.includes('RATE_LIMITED'));
    expect(answers.slice(0, 5).every((answer) => answer.data?.delivery?.uid === uid)).toBe(true);
    expect(limited.length).toBe(25);
    expect(limited[0]!.errors![0]!.message).toMatch(/client token/);
    // The merchant key has spent three operations of its twenty (a booking, a token, this read).
    const own = await stack.gql(read, { uid });
    expect(own.errors).toBeUndefined();
    expect(own.data.delivery.uid).toBe(uid);
  });
});

describe('the resolvers refuse a client token what only a merchant may do, on their own', () => {
  it('FORBIDDEN from every mutation and merchant-only query, before any upstream call, even run straight on the schema', async () => {
    const calls: string[] = [];
    const upstream = new Proxy(
      {},
      {
        get: (_target, group) =>
          new Proxy({}, { get: (_t, method) => () => void calls.push(`${String(group)}.${String(method)}`) }),
      },
    );
    const services = {
      config: { graphql: { maxBatchSize: 100, batchConcurrency: 4 }, server: { trustProxyHops: 0 } },
      upstream,
    } as unknown as Services;
    const contextValue = createContext(services, {
      caller: {
        kind: 'client-token',
        key: 'sk_merchant',
        token: { key: 'sk_merchant', uids: ['u1'], expiresAt: new Date(Date.now() + 60_000), token: 'eyJ.token' },
      },
    });
    const schema = toSchema();
    const fields = {
      ...schema.getMutationType()!.getFields(),
      availability: schema.getQueryType()!.getFields().availability!,
    };
    const args: Record<string, Record<string, unknown>> = {
      createDelivery: { input: deliveryInput() },
      cancelDelivery: { uid: 'u1' },
      createClientToken: { uids: ['u1'], ttlSeconds: 3600 },
      quoteDelivery: { input: deliveryInput() },
      availability: {},
    };
    for (const [name, input] of Object.entries(args)) {
      const field = fields[name as keyof typeof fields];
      expect(field, name).toBeDefined();
      let outcome: unknown;
      try {
        outcome = await field!.resolve!(undefined, input, contextValue, {} as never);
      } catch (error) {
        outcome = error;
      }
      expect((outcome as { code?: string }).code, name).toBe('FORBIDDEN');
    }
    expect(calls).toEqual([]);
  });
});
