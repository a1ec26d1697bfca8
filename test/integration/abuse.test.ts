// Abusive GraphQL clients: graphql-cop's checks, ported, against a stack in
// production mode, each expected to be refused before anything reaches the
// upstream; the same limits over the three ways in (the direct JSON path, yoga's
// own handler, graphql-ws); introspection switches; the persisted-operations
// allowlist; the per-key rate limit; the per-socket subscription cap; the body cap.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { FaultProxy } from '../helpers/fault-proxy.js';
import { deliveryInput, startStack, type GraphQLResponse, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const CREATE = `mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }`;
const AVAILABILITY = '{ availability { group available } }';
const EVENTS = 'subscription { deliveryEvents { uid name } }';

/**
 * Delivery → events → edges → node → delivery …: 13 levels as a query, 14 under a subscription field; the limit is 12.
 */
const DEEP_SELECTION =
  'events { edges { node { delivery { events { edges { node { delivery { events { edges { node { uid } } } } } } } } } } }';
const DEEP_QUERY = `{ delivery(uid: "00000000-0000-4000-8000-000000000000") { ${DEEP_SELECTION} } }`;
const DEEP_SUBSCRIPTION = `subscription { deliveryUpdated(uid: "00000000-0000-4000-8000-000000000000") { delivery { ${DEEP_SELECTION} } } }`;

/** 500 events, each with 500 events of its delivery: 752,002 values at most, over the cost limit of 50,000. */
const PAGE_IN_PAGE =
  '{ delivery(uid: "x") { events(first: 500) { edges { node { delivery { events(first: 500) { edges { node { uid } } } } } } } } }';

// graphql-cop's own payloads (tests named after its checks).
const ALIAS_OVERLOAD = `query cop { ${Array.from({ length: 101 }, (_, i) => `alias${i}:__typename`).join(' \n ')} }`;
const FIELD_DUPLICATION = `query cop { ${'__typename \n '.repeat(500)} }`;
const DIRECTIVE_OVERLOAD = 'query cop { __typename @aa@aa@aa@aa@aa@aa@aa@aa@aa@aa }';
const CIRCULAR_INTROSPECTION =
  'query cop { __schema { types { fields { type { fields { type { fields { type { fields { type { name } } } } } } } } } } }';

/** Errors of a response as "code: message" lines, for assertions that name what refused the request. */
function refusals(body: GraphQLResponse): string {
  return (body.errors ?? []).map((error) => `${error.extensions?.code ?? '-'}: ${error.message}`).join('\n');
}

async function request(
  stack: Stack,
  init: RequestInit & { query?: string },
  key: string | null = stack.key,
): Promise<{ status: number; text: string }> {
  const headers = new Headers(init.headers);
  if (key) headers.set('authorization', `Bearer ${key}`);
  const target =
    init.query === undefined
      ? `${stack.app.url}/graphql`
      : `${stack.app.url}/graphql?query=${encodeURIComponent(init.query)}`;
  const response = await fetch(target, { ...init, headers });
  return { status: response.status, text: await response.text() };
}

/** A plain JSON POST: the direct envelop path of graphql/http.ts. */
async function postDirect(
  stack: Stack,
  body: unknown,
  key: string | null = stack.key,
): Promise<{ status: number; body: GraphQLResponse }> {
  const { status, text } = await request(
    stack,
    { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) },
    key,
  );
  return { status, body: JSON.parse(text) as GraphQLResponse };
}

/** A JSON POST that asks for the GraphQL-over-HTTP media type: always yoga's own handler. */
async function postViaYoga(
  stack: Stack,
  body: unknown,
  key: string | null = stack.key,
): Promise<{ status: number; body: GraphQLResponse }> {
  const { status, text } = await request(
    stack,
    {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/graphql-response+json' },
      body: JSON.stringify(body),
    },
    key,
  );
  return { status, body: JSON.parse(text) as GraphQLResponse };
}

/** Runs one operation over graphql-ws; errors of `error` and of `next` messages, flattened. */
async function overWebSocket(
  stack: Stack,
  payload: { query: string; variables?: Record<string, unknown>; extensions?: Record<string, unknown> },
  key = stack.key,
): Promise<{ data: unknown[]; errors: Array<{ message: string; extensions?: { code?: string } }> }> {
  const client = wsClient(stack.app.url, key);
  try {
    const data: unknown[] = [];
    const errors: Array<{ message: string; extensions?: { code?: string } }> = [];
    await new Promise<void>((resolve) => {
      client.subscribe(payload as { query: string }, {
        next: (message) => {
          if (message.data) data.push(message.data);
          errors.push(...((message.errors ?? []) as typeof errors));
        },
        error: (error) => {
          errors.push(...(Array.isArray(error) ? error : [{ message: String((error as Error).message ?? error) }]));
          resolve();
        },
        complete: () => resolve(),
      });
    });
    return { data, errors };
  } finally {
    await client.dispose();
  }
}

const wsRefusals = (result: { errors: Array<{ message: string; extensions?: { code?: string } }> }) =>
  result.errors.map((error) => `${error.extensions?.code ?? '-'}: ${error.message}`).join('\n');

describe('graphql-cop checks against production mode', () => {
  let stack: Stack;
  let proxy: FaultProxy;

  beforeAll(async () => {
    stack = await startStack({ env: { NODE_ENV: 'production' }, faultProxy: true });
    proxy = stack.proxy!;
  });
  afterAll(() => stack?.stop());
  beforeEach(() => {
    proxy.fault = undefined;
    stack.sandbox.resetRequests();
  });

  it('answers an ordinary query (the limits leave real operations alone)', async () => {
    const { body } = await postDirect(stack, { query: AVAILABILITY });
    expect(body.errors).toBeUndefined();
    expect(body.data.availability).toHaveLength(2);
  });

  it('alias overload: 101 aliases are refused', async () => {
    const { body } = await postDirect(stack, { query: ALIAS_OVERLOAD });
    expect(body.data).toBeUndefined();
    expect(refusals(body)).toContain('Aliases limit of 30 exceeded, found 101');
    const viaFields = await postDirect(stack, {
      query: `{ ${Array.from({ length: 31 }, (_, i) => `a${i}: availability { group }`).join(' ')} }`,
    });
    expect(viaFields.body.data).toBeUndefined();
    expect(refusals(viaFields.body)).toContain('Aliases limit of 30 exceeded, found 31');
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('batch overload: a JSON array of operations is refused whole', async () => {
    const batch = Array.from({ length: 50 }, () => ({ query: AVAILABILITY }));
    const { status, body } = await postDirect(stack, batch);
    expect(status).toBe(400);
    expect(Array.isArray(body)).toBe(false);
    expect(refusals(body)).toContain('Batching is not supported');
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('circular fragments are refused by validation', async () => {
    const { body } = await postDirect(stack, {
      query: 'query { ...A } fragment A on Query { availability { group } ...B } fragment B on Query { ...A }',
    });
    expect(body.data).toBeUndefined();
    expect(refusals(body)).toMatch(/Cannot spread fragment "[AB]" within itself/);
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('circular introspection is refused: introspection is off', async () => {
    const { body } = await postDirect(stack, { query: CIRCULAR_INTROSPECTION });
    expect(body.data).toBeUndefined();
    expect(refusals(body)).toContain('GraphQL introspection has been disabled');
    const type = await postDirect(stack, { query: '{ __type(name: "Delivery") { fields { name } } }' });
    expect(refusals(type.body)).toContain('GraphQL introspection has been disabled');
    // __typename is not introspection and stays.
    expect((await postDirect(stack, { query: '{ __typename }' })).body).toEqual({ data: { __typename: 'Query' } });
  });

  it('a query nested past the depth limit is refused', async () => {
    const { body } = await postDirect(stack, { query: DEEP_QUERY });
    expect(body.data).toBeUndefined();
    expect(refusals(body)).toContain('Query depth limit of 12 exceeded, found 13');
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('directive overload: many directives are refused', async () => {
    const { body } = await postDirect(stack, { query: DIRECTIVE_OVERLOAD });
    expect(body.data).toBeUndefined();
    expect(refusals(body)).toContain('Unknown directive "@aa"');
    const many = await postDirect(stack, { query: `{ availability ${'@include(if: true) '.repeat(25)} { group } }` });
    expect(many.body.data).toBeUndefined();
    expect(refusals(many.body)).toContain('Directives limit of 20 exceeded, found 25');
    const spread = await postDirect(stack, {
      query: `{ ${Array.from({ length: 21 }, (_, i) => `a${i}: availability @skip(if: false) { group }`).join(' ')} }`,
    });
    expect(refusals(spread.body)).toContain('Directives limit of 20 exceeded, found 21');
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('field duplication: the same field 500 times is refused before validation', async () => {
    const { body } = await postDirect(stack, { query: FIELD_DUPLICATION });
    expect(body.data).toBeUndefined();
    expect(refusals(body)).toContain('Field "__typename" is selected more than 10 times in one selection set.');
    const nested = await postDirect(stack, { query: `{ availability { ${'group '.repeat(500)} } }` });
    expect(refusals(nested.body)).toContain('Field "group" is selected more than 10 times');
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('a document over the token limit is refused while parsing', async () => {
    const { body } = await postDirect(stack, {
      query: `{ ${Array.from({ length: 2000 }, (_, i) => `f${i}`).join(' ')} }`,
    });
    expect(body.data).toBeUndefined();
    expect(refusals(body)).toContain('Token limit of 2000 exceeded');
  });

  it('a page of events nested in a page of events is over the cost limit; one full page is not', async () => {
    const { body } = await postDirect(stack, { query: PAGE_IN_PAGE });
    expect(body.data).toBeUndefined();
    expect(refusals(body)).toMatch(
      /^GRAPHQL_VALIDATION_FAILED: Operation cost limit of 50000 exceeded, found 752002: /,
    );
    expect(stack.sandbox.requests).toHaveLength(0);
    const node =
      'cursor uid name status statusText stale receivedAt courierLocation { lat lng } delivery { uid status }';
    const page = await postDirect(stack, {
      query: `{ delivery(uid: "x") { events(first: 500) { edges { cursor node { ${node} } } pageInfo { hasNextPage endCursor } } } }`,
    });
    expect(page.body.errors).toBeUndefined();
  });

  it('field suggestions: a misspelt field, argument or enum value gets no "Did you mean"', async () => {
    for (const query of [
      '{ availability { grop } }',
      '{ availabilty { group } }',
      '{ delivery(uid: "x", group: PARTNR) { uid } }',
      '{ delivery(uuid: "x") { uid } }',
      'query cop { __schema { directive } }',
    ]) {
      const { body } = await postDirect(stack, { query });
      expect(body.errors?.length, query).toBeGreaterThan(0);
      expect(JSON.stringify(body), query).not.toContain('Did you mean');
    }
    expect(refusals((await postDirect(stack, { query: '{ availability { grop } }' })).body)).toContain(
      'Cannot query field "grop" on type "ServiceAvailability".',
    );
  });

  it('GET mutations are refused with 405, booking nothing', async () => {
    const mutation = 'mutation { cancelDelivery(uid: "00000000-0000-4000-8000-000000000000") { __typename } }';
    const { status, text } = await request(stack, { method: 'GET', query: mutation });
    expect(status).toBe(405);
    expect(text).toContain('Can only perform a mutation operation from a POST request');
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('POST CSRF: text/plain, url-encoded and multipart bodies are refused (415) and nothing runs', async () => {
    const mutation = JSON.stringify({ query: CREATE, variables: { input: deliveryInput() } });
    const forms: Array<[string, string]> = [
      ['text/plain', mutation],
      ['text/plain;charset=UTF-8', mutation],
      [
        'application/x-www-form-urlencoded',
        `query=${encodeURIComponent(CREATE)}&variables=${encodeURIComponent(JSON.stringify({ input: deliveryInput() }))}`,
      ],
      [
        'multipart/form-data; boundary=cop',
        `--cop\r\nContent-Disposition: form-data; name="operations"\r\n\r\n${mutation}\r\n--cop--\r\n`,
      ],
    ];
    for (const [type, body] of forms) {
      const response = await request(stack, { method: 'POST', headers: { 'content-type': type }, body });
      expect(response.status, type).toBe(415);
      expect(response.text, type).not.toContain('"data"');
    }
    expect(stack.sandbox.requests).toHaveLength(0);
    // The same mutation as JSON does run: the refusal is about the form, not the operation.
    const booked = await stack.gql(CREATE, { input: deliveryInput() });
    expect(booked.data.createDelivery.data.uid).toBeTruthy();
  });

  it('trace mode: no tracing extensions, no stack traces', async () => {
    for (const query of ['query cop { __typename }', AVAILABILITY, '{ nope }']) {
      for (const answer of [await postDirect(stack, { query }), await postViaYoga(stack, { query })]) {
        const text = JSON.stringify(answer.body);
        expect(text, query).not.toMatch(/tracing|"stack"|stacktrace|exception|"originalError"/i);
        expect((answer.body as { extensions?: unknown }).extensions, query).toBeUndefined();
      }
    }
  });

  it('unhandled errors: a malformed query gets a parse error and nothing more', async () => {
    const { body } = await postDirect(stack, { query: 'query cop { __typename {}' });
    expect(body.data).toBeUndefined();
    expect(body.errors).toHaveLength(1);
    expect(body.errors![0]!.message).toMatch(/^Syntax Error/);
    expect(Object.keys(body.errors![0]!.extensions ?? {}).filter((key) => key !== 'code')).toEqual([]);
  });

  it('unhandled errors: a fault inside a resolver is "Unexpected error." with INTERNAL_SERVER_ERROR and no detail', async () => {
    // A bug, not an upstream answer: the mapping and the client turn every odd
    // upstream answer into a typed error, so the fault is put in by hand.
    const platform = stack.app.services.upstream.platform as { get: (...args: unknown[]) => Promise<unknown> };
    const original = platform.get;
    platform.get = async () => {
      throw new TypeError(
        `Cannot read properties of undefined (reading 'secret-detail') at mapDelivery (src/mapping/delivery.ts:42:7)`,
      );
    };
    try {
      const query = '{ delivery(uid: "33333333-3333-4333-8333-333333333333") { uid status pickup { name } } }';
      for (const answer of [
        await postDirect(stack, { query }),
        await postViaYoga(stack, { query }),
        { body: { errors: (await overWebSocket(stack, { query })).errors } as GraphQLResponse },
      ]) {
        expect(answer.body.errors, JSON.stringify(answer.body)).toHaveLength(1);
        expect(answer.body.errors![0]).toMatchObject({
          message: 'Unexpected error.',
          extensions: { code: 'INTERNAL_SERVER_ERROR' },
        });
        // yoga may mark a masked error `unexpected: true`; nothing else is added.
        expect(
          Object.keys(answer.body.errors![0]!.extensions!).filter((key) => key !== 'code' && key !== 'unexpected'),
        ).toEqual([]);
        expect(JSON.stringify(answer.body)).not.toMatch(/secret-detail|TypeError|Cannot read|\.ts:\d+|stack/);
      }
    } finally {
      platform.get = original;
    }
  });

  it('GraphiQL is not served', async () => {
    const { text } = await request(stack, { method: 'GET', headers: { accept: 'text/html' } });
    expect(text).not.toMatch(/<html|graphiql/i);
  });

  it('applies the same limits on every way in: direct path, yoga handler, GET and WebSocket', async () => {
    const cases: Array<[string, string]> = [
      [ALIAS_OVERLOAD, 'Aliases limit of 30 exceeded'],
      [DEEP_QUERY, 'Query depth limit of 12 exceeded'],
      [FIELD_DUPLICATION, 'selected more than 10 times'],
      [CIRCULAR_INTROSPECTION, 'GraphQL introspection has been disabled'],
      [`{ availability ${'@include(if: true) '.repeat(25)} { group } }`, 'Directives limit of 20 exceeded'],
      [`{ ${'a '.repeat(2001)}}`, 'Token limit of 2000 exceeded'],
      ['{ availability { grop } }', 'Cannot query field "grop" on type "ServiceAvailability".'],
      [PAGE_IN_PAGE, 'Operation cost limit of 50000 exceeded, found 752002'],
    ];
    for (const [query, refusal] of cases) {
      const direct = await postDirect(stack, { query });
      const yoga = await postViaYoga(stack, { query });
      const get = await request(stack, { method: 'GET', query, headers: { accept: 'application/json' } });
      const ws = await overWebSocket(stack, { query });
      expect(refusals(direct.body), `direct: ${refusal}`).toContain(refusal);
      expect(refusals(yoga.body), `yoga: ${refusal}`).toContain(refusal);
      expect(get.text, `GET: ${refusal}`).toContain(refusal.replace(/"/g, '\\"'));
      expect(wsRefusals(ws), `WebSocket: ${refusal}`).toContain(refusal);
      expect(ws.data).toEqual([]);
      // The HTTP status yoga keeps for the HTTP answer means nothing on a socket.
      expect(
        ws.errors.every((error) => !('http' in (error.extensions ?? {}))),
        `WebSocket extensions: ${JSON.stringify(ws.errors)}`,
      ).toBe(true);
      for (const text of [JSON.stringify(direct.body), JSON.stringify(yoga.body), get.text, JSON.stringify(ws.errors)])
        expect(text).not.toContain('Did you mean');
    }
    expect(stack.sandbox.requests).toHaveLength(0);
  });

  it('refuses deep, alias-heavy and repeated subscriptions over WebSocket', async () => {
    const aliased = `subscription { deliveryEvents { ${Array.from({ length: 31 }, (_, i) => `a${i}: uid`).join(' ')} } }`;
    const repeated = `subscription { deliveryEvents { ${'uid '.repeat(11)} } }`;
    expect(wsRefusals(await overWebSocket(stack, { query: DEEP_SUBSCRIPTION }))).toContain(
      'Query depth limit of 12 exceeded, found 14',
    );
    expect(wsRefusals(await overWebSocket(stack, { query: DEEP_QUERY }))).toContain(
      'Query depth limit of 12 exceeded, found 13',
    );
    expect(wsRefusals(await overWebSocket(stack, { query: aliased }))).toContain(
      'Aliases limit of 30 exceeded, found 31',
    );
    expect(wsRefusals(await overWebSocket(stack, { query: repeated }))).toContain(
      'Field "uid" is selected more than 10 times',
    );
  });

  describe('subscriptions per socket', () => {
    it('refuses the 101st operation on one socket with TOO_MANY_SUBSCRIPTIONS, and takes one again once another ends', async () => {
      const client = wsClient(stack.app.url, stack.key);
      const other = wsClient(stack.app.url, stack.key);
      try {
        const subs = Array.from({ length: 100 }, () => collect(client, EVENTS));
        const over = collect(client, EVENTS);
        await over.done;
        expect(JSON.stringify(over.errors)).toContain('TOO_MANY_SUBSCRIPTIONS');
        expect(JSON.stringify(over.errors)).toContain('At most 100 operations may run at once on one WebSocket.');
        // The 100 are still open, and a query on the full socket is refused too.
        expect(subs.filter((sub) => sub.completed || sub.errors.length > 0)).toEqual([]);
        const query = collect(client, AVAILABILITY);
        await query.done;
        expect(JSON.stringify(query.errors)).toContain('TOO_MANY_SUBSCRIPTIONS');

        // The cap is per socket: another socket of the same key runs.
        const elsewhere = collect(other, AVAILABILITY);
        await elsewhere.done;
        expect(elsewhere.items).toHaveLength(1);

        // Ending one frees a place (graphql-ws handles one socket's messages in order).
        subs[0]!.dispose();
        const again = collect(client, AVAILABILITY);
        await again.done;
        expect(again.errors).toEqual([]);
        expect(again.items[0].availability).toHaveLength(2);
      } finally {
        await client.dispose();
        await other.dispose();
      }
    });
  });

  describe('request body size', () => {
    const big = () => JSON.stringify({ query: AVAILABILITY, variables: { padding: 'x'.repeat(1024 * 1024) } });

    it('answers 413 on the direct path, with and without a content-length', async () => {
      const sized = await request(stack, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: big(),
      });
      expect(sized.status).toBe(413);
      const bytes = new TextEncoder().encode(big());
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          for (let at = 0; at < bytes.length; at += 64 * 1024) controller.enqueue(bytes.subarray(at, at + 64 * 1024));
          controller.close();
        },
      });
      const chunked = await request(stack, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: stream,
        duplex: 'half',
      } as RequestInit);
      expect(chunked.status).toBe(413);
      expect(stack.sandbox.requests).toHaveLength(0);
    });

    it("answers 413 on yoga's handler too", async () => {
      const response = await request(stack, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
        body: big(),
      });
      expect(response.status).toBe(413);
      expect(stack.sandbox.requests).toHaveLength(0);
    });

    it('takes a body just under the cap', async () => {
      const body = JSON.stringify({ query: AVAILABILITY, variables: { padding: 'x'.repeat(1024 * 1024 - 200) } });
      const response = await request(stack, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      expect(response.status).toBe(200);
      expect(JSON.parse(response.text).data.availability).toHaveLength(2);
    });
  });
});

describe('introspection switches', () => {
  const INTROSPECT = '{ __schema { queryType { name } } }';

  it('is on in development, with suggestions and GraphiQL', async () => {
    const stack = await startStack();
    try {
      expect((await postDirect(stack, { query: INTROSPECT })).body).toEqual({
        data: { __schema: { queryType: { name: 'Query' } } },
      });
      expect(refusals((await postDirect(stack, { query: '{ availability { grop } }' })).body)).toContain(
        'Did you mean "group"?',
      );
      const page = await request(stack, { method: 'GET', headers: { accept: 'text/html' } });
      expect(page.text).toMatch(/graphiql/i);
      // The limits hold in development too.
      expect(refusals((await postDirect(stack, { query: ALIAS_OVERLOAD })).body)).toContain(
        'Aliases limit of 30 exceeded',
      );
    } finally {
      await stack.stop();
    }
  });

  it('is on in production with GRAPHQL_INTROSPECTION=true, on both transports', async () => {
    const stack = await startStack({ env: { NODE_ENV: 'production', GRAPHQL_INTROSPECTION: 'true' } });
    try {
      expect((await postDirect(stack, { query: INTROSPECT })).body).toEqual({
        data: { __schema: { queryType: { name: 'Query' } } },
      });
      expect((await overWebSocket(stack, { query: INTROSPECT })).data).toEqual([
        { __schema: { queryType: { name: 'Query' } } },
      ]);
      const page = await request(stack, { method: 'GET', headers: { accept: 'text/html' } });
      expect(page.text).toMatch(/graphiql/i);
    } finally {
      await stack.stop();
    }
  });

  it('is off over WebSocket in production', async () => {
    const stack = await startStack({ env: { NODE_ENV: 'production' } });
    try {
      const ws = await overWebSocket(stack, { query: INTROSPECT });
      expect(ws.data).toEqual([]);
      expect(wsRefusals(ws)).toContain('GraphQL introspection has been disabled');
    } finally {
      await stack.stop();
    }
  });
});

describe('persisted-operations allowlist', () => {
  const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');
  const persisted = (text: string) => ({ persistedQuery: { version: 1, sha256Hash: sha256(text) } });
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack({ env: { NODE_ENV: 'production' } });
    // The file goes in the stack's data directory, then the facade restarts to read it.
    const file = path.join(stack.dataDir, 'persisted-operations.json');
    writeFileSync(
      file,
      JSON.stringify({ [sha256(AVAILABILITY)]: AVAILABILITY, [sha256(EVENTS)]: EVENTS, [sha256(CREATE)]: CREATE }),
    );
    stack.env.PERSISTED_OPERATIONS_FILE = file;
    await stack.restart();
  });
  afterAll(async () => {
    await stack?.stop();
  });
  beforeEach(() => stack.sandbox.resetRequests());

  it('runs a listed operation sent as its exact text (the direct path) or by hash alone (yoga)', async () => {
    expect((await postDirect(stack, { query: AVAILABILITY })).body.data.availability).toHaveLength(2);
    expect((await postDirect(stack, { extensions: persisted(AVAILABILITY) })).body.data.availability).toHaveLength(2);
    expect((await postViaYoga(stack, { extensions: persisted(AVAILABILITY) })).body.data.availability).toHaveLength(2);
    const booked = await postDirect(stack, { extensions: persisted(CREATE), variables: { input: deliveryInput() } });
    expect(booked.body.data.createDelivery.data.uid).toBeTruthy();
  });

  it('refuses anything else on every HTTP way in, before any upstream call', async () => {
    const unlisted = '{ availability { group } }';
    for (const answer of [
      await postDirect(stack, { query: unlisted }),
      await postViaYoga(stack, { query: unlisted }),
    ]) {
      expect(answer.body.data).toBeUndefined();
      expect(answer.body.errors?.[0]?.extensions?.code).toBe('PERSISTED_QUERY_NOT_FOUND');
    }
    const get = await request(stack, { method: 'GET', query: unlisted, headers: { accept: 'application/json' } });
    expect(get.text).toContain('PERSISTED_QUERY_NOT_FOUND');
    expect(get.text).not.toContain('"data"');
    // An unknown hash, and a listed hash whose text is swapped for another operation.
    const unknown = await postDirect(stack, {
      extensions: { persistedQuery: { version: 1, sha256Hash: sha256(unlisted) } },
    });
    expect(unknown.body.errors?.[0]?.extensions?.code).toBe('PERSISTED_QUERY_NOT_FOUND');
    const swapped = await postViaYoga(stack, {
      query: 'mutation { cancelDelivery(uid: "x") { __typename } }',
      extensions: persisted(AVAILABILITY),
    });
    expect(swapped.body.data?.availability).toHaveLength(2);
    expect(JSON.stringify(swapped.body)).not.toContain('cancelDelivery');
    // Introspection is an unlisted operation like any other.
    expect(
      (await postDirect(stack, { query: '{ __schema { queryType { name } } }' })).body.errors?.[0]?.extensions?.code,
    ).toBe('PERSISTED_QUERY_NOT_FOUND');
    expect(stack.sandbox.requests.filter((r) => !r.path.includes('availability'))).toEqual([]);
  });

  it('holds over WebSocket: listed by text or hash runs, anything else is refused', async () => {
    expect((await overWebSocket(stack, { query: AVAILABILITY })).data).toHaveLength(1);
    expect((await overWebSocket(stack, { query: '', extensions: persisted(AVAILABILITY) })).data).toHaveLength(1);
    for (const payload of [
      { query: '{ availability { group } }' },
      { query: 'subscription { deliveryEvents { uid } }' },
      { query: '', extensions: persisted('{ nope }') },
    ]) {
      const ws = await overWebSocket(stack, payload);
      expect(ws.data).toEqual([]);
      expect(wsRefusals(ws)).toContain('PERSISTED_QUERY_NOT_FOUND');
    }
    // A listed subscription is accepted: it is still open, without error, after a later query on its socket answered.
    const client = wsClient(stack.app.url, stack.key);
    const sub = collect(client, EVENTS);
    const after = collect(client, AVAILABILITY);
    await after.done;
    expect(after.items).toHaveLength(1);
    expect(sub.errors).toEqual([]);
    expect(sub.completed).toBe(false);
    sub.dispose();
    await client.dispose();
  });
});

describe('rate limit per merchant key', () => {
  let stack: Stack;

  beforeAll(async () => {
    stack = await startStack({ env: { NODE_ENV: 'production', RATE_LIMIT_PER_MINUTE: '5' } });
  });
  afterAll(async () => {
    await stack?.stop();
  });

  it('refuses the key past its budget with RATE_LIMITED on every transport; another key is unaffected', async () => {
    for (let i = 0; i < 5; i += 1)
      expect((await postDirect(stack, { query: AVAILABILITY })).body.errors, `request ${i + 1}`).toBeUndefined();
    stack.sandbox.resetRequests();

    const direct = await postDirect(stack, { query: AVAILABILITY });
    expect(direct.body.data).toBeUndefined();
    expect(direct.body.errors).toHaveLength(1);
    expect(direct.body.errors![0]!.extensions).toMatchObject({ code: 'RATE_LIMITED' });
    expect(direct.body.errors![0]!.extensions!.retryAfterSeconds).toBeGreaterThanOrEqual(1);
    expect(direct.body.errors![0]!.extensions!.retryAfterSeconds).toBeLessThanOrEqual(12);
    expect(refusals((await postViaYoga(stack, { query: AVAILABILITY })).body)).toContain('RATE_LIMITED');
    const mutation = await postDirect(stack, { query: CREATE, variables: { input: deliveryInput() } });
    expect(refusals(mutation.body)).toContain('RATE_LIMITED');
    expect(wsRefusals(await overWebSocket(stack, { query: AVAILABILITY }))).toContain('RATE_LIMITED');
    expect(wsRefusals(await overWebSocket(stack, { query: EVENTS }))).toContain('RATE_LIMITED');
    expect(stack.sandbox.requests).toEqual([]);

    // Never the key in the refusal.
    expect(JSON.stringify(direct.body)).not.toContain(stack.key);

    const other = await postDirect(stack, { query: AVAILABILITY }, stack.otherKey);
    expect(other.body.errors).toBeUndefined();
    expect((await overWebSocket(stack, { query: AVAILABILITY }, stack.otherKey)).data).toHaveLength(1);
  });

  it('does not count requests without a key (they are refused UNAUTHENTICATED anyway)', async () => {
    for (let i = 0; i < 8; i += 1) {
      const answer = await postDirect(stack, { query: AVAILABILITY }, null);
      expect(answer.body.errors?.[0]?.extensions?.code).toBe('UNAUTHENTICATED');
    }
  });
});
