// Errors a newcomer meets, as a client sees them: variable errors worded as
// graphql-js words them, with BAD_USER_INPUT, on every transport (the HTTP paths
// are compared in http-parity.test.ts; here WebSocket and SSE); every code the
// server answers common mistakes with is in the registry of src/errors.ts; and a
// cancel in the wrong endpoint group says which group to pass.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../../src/errors.js';
import { deliveryInput, partnerOrderBody, startStack, type Stack } from '../helpers/stack.js';
import { collect, wsClient } from '../helpers/ws-client.js';

const QUOTE = 'mutation($input: DeliveryInput!) { quoteDelivery(input: $input) { __typename } }';
const READ = 'query($uid: ID!) { delivery(uid: $uid) { uid status } }';
const UPDATED = 'subscription($uid: ID!) { deliveryUpdated(uid: $uid) { uid status } }';
const CREATE =
  'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }';
const CANCEL =
  'mutation($uid: ID!, $group: ApiGroup!) { cancelDelivery(uid: $uid, group: $group) { __typename ... on MutationCancelDeliverySuccess { data { uid status group } } ... on Error { code message } } }';

const TIP_MESSAGE =
  'Variable "$input" got invalid value "abc" at "input.tip"; Decimal must be a decimal number in major units as a string, e.g. "12.50" (plain notation, at most 18 integer and 10 fractional digits); got "abc".';
const MISSING_UID = 'Variable "$uid" of required type "ID!" was not provided.';
const WRONG_UID = 'Variable "$uid" got invalid value { not: "an id" }; ID cannot represent value: { not: "an id" }';

interface WireError {
  message: string;
  locations?: unknown;
  extensions?: { code?: string } & Record<string, unknown>;
}

/** The SSE messages of a finished response, in order (yoga ends the stream after `complete`). */
function sseEvents(text: string): Array<{ event: string; data: string }> {
  return text
    .split(/\n\n/)
    .map((block) => {
      const lines = block.split('\n').filter((line) => line !== '' && !line.startsWith(':'));
      const event =
        lines
          .find((line) => line.startsWith('event:'))
          ?.slice(6)
          .trim() ?? '';
      const data = lines
        .filter((line) => line.startsWith('data:'))
        .map((line) => line.slice(5).trim())
        .join('\n');
      return { event, data };
    })
    .filter((message) => message.event !== '');
}

let stack: Stack;

beforeAll(async () => {
  stack = await startStack();
});
afterAll(async () => {
  await stack?.stop();
});

function post(body: string | Record<string, unknown>, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${stack.app.url}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${stack.key}`, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

describe('variable errors on every transport', () => {
  const cases: Array<[string, string, Record<string, unknown>, string]> = [
    ['a bad value inside an input object (a mutation)', QUOTE, { input: deliveryInput({ tip: 'abc' }) }, TIP_MESSAGE],
    ['a required variable not given (a query)', READ, {}, MISSING_UID],
    ['a value of the wrong type (a query)', READ, { uid: { not: 'an id' } }, WRONG_UID],
    ['a required variable not given (a subscription)', UPDATED, {}, MISSING_UID],
    ['a value of the wrong type (a subscription)', UPDATED, { uid: { not: 'an id' } }, WRONG_UID],
  ];

  for (const [name, query, variables, message] of cases) {
    it(`${name}: the same error over HTTP, WebSocket and SSE, before any upstream call`, async () => {
      const mark = stack.sandbox.requestCount;
      const expected: WireError[] = [
        { message, locations: [{ line: 1, column: expect.any(Number) }], extensions: { code: 'BAD_USER_INPUT' } },
      ];

      // HTTP: a plain JSON POST for queries and mutations; a subscription goes to yoga's handler.
      if (!query.startsWith('subscription')) {
        const http = await post({ query, variables });
        expect(http.status).toBe(200);
        expect(await http.json()).toEqual({ errors: expected });
      }

      const client = wsClient(stack.app.url, stack.key);
      try {
        const ws = collect(client, query, variables);
        await ws.done;
        expect(ws.items).toEqual([]);
        expect(JSON.parse(JSON.stringify(ws.errors))).toEqual(expected);
        expect(ws.completed).toBe(true);
      } finally {
        await client.dispose();
      }

      const sse = await post({ query, variables }, { accept: 'text/event-stream' });
      expect(sse.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const events = sseEvents(await sse.text());
      expect(events.map((event) => event.event)).toEqual(['next', 'complete']);
      expect(JSON.parse(events[0]!.data)).toEqual({ errors: expected });

      // The only upstream call: the socket's check of a key it has not judged yet (an availability read).
      expect(stack.sandbox.requestsSince(mark).filter((request) => !request.path.endsWith('/availability'))).toEqual(
        [],
      );
    });
  }

  it('reports every bad value of one variable, each at its path (in the order of the input type)', async () => {
    const input = deliveryInput({ tip: 'abc', declaredValue: 'lots' });
    const body = await (await post({ query: QUOTE, variables: { input } })).json();
    expect(body.errors.map((error: WireError) => error.message.split(';')[0])).toEqual([
      'Variable "$input" got invalid value "lots" at "input.declaredValue"',
      'Variable "$input" got invalid value "abc" at "input.tip"',
    ]);
    expect(body.errors.every((error: WireError) => error.extensions?.code === 'BAD_USER_INPUT')).toBe(true);
  });

  it('lets valid variables through unchanged', async () => {
    const body = await (await post({ query: QUOTE, variables: { input: deliveryInput({ tip: '3.5' }) } })).json();
    expect(body.errors).toBeUndefined();
    expect(body.data.quoteDelivery.__typename).toBe('MutationQuoteDeliverySuccess');
  });
});

describe('a required variable with a default, left out', () => {
  // The spec (and graphql-js) take the default; graphql-jit alone refused it as "not provided".
  const READ_DEFAULTED = `query($uid: ID! = "UID", $first: Int! = 2) { delivery(uid: $uid) { uid events(first: $first) { edges { cursor } } } }`;
  const UPDATED_DEFAULTED = 'subscription($uid: ID! = "UID") { deliveryUpdated(uid: $uid) { uid status } }';
  let uid: string;
  beforeAll(async () => {
    uid = (await stack.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid;
  });

  it('takes its default over HTTP (direct path and SSE) and WebSocket, and a given value wins', async () => {
    const query = READ_DEFAULTED.replace('"UID"', JSON.stringify(uid));
    const direct = await (await post({ query })).json();
    expect(direct).toEqual({ data: { delivery: { uid, events: { edges: expect.any(Array) } } } });
    const given = await (await post({ query, variables: { uid: 'no-such-delivery' } })).json();
    expect(given).toEqual({ data: { delivery: null } });

    const sse = sseEvents(await (await post({ query }, { accept: 'text/event-stream' })).text());
    expect(JSON.parse(sse[0]!.data)).toMatchObject({ data: { delivery: { uid } } });

    const client = wsClient(stack.app.url, stack.key);
    try {
      const sub = collect(client, UPDATED_DEFAULTED.replace('"UID"', JSON.stringify(uid)), {});
      const [first] = await sub.waitFor(1);
      expect(first).toEqual({ deliveryUpdated: { uid, status: 'CREATED' } });
      sub.dispose();
    } finally {
      await client.dispose();
    }
  });
});

describe('without introspection', () => {
  let quiet: Stack;
  beforeAll(async () => {
    quiet = await startStack({ env: { GRAPHQL_INTROSPECTION: 'false' } });
  });
  afterAll(async () => {
    await quiet?.stop();
  });

  it('names no other field of an input type in a variable error (no "Did you mean"), where the default names them', async () => {
    const input = { ...deliveryInput(), tipp: '1.00' };
    const [open] = (await stack.gql(QUOTE, { input })).errors!;
    const [closed] = (await quiet.gql(QUOTE, { input })).errors!;
    expect(open!.message).toMatch(
      /^Variable "\$input" got invalid value \{ pickup: .*, tipp: "1\.00" \}; Field "tipp" is not defined by type "DeliveryInput"\. Did you mean "tip"\?$/,
    );
    expect(closed!.message).toBe(open!.message.replace(' Did you mean "tip"?', ''));
    expect(closed!.extensions?.code).toBe('BAD_USER_INPUT');
  });
});

describe('the codes of common mistakes are all in the registry', () => {
  /** Each mistake, the code it is answered with, and the HTTP status. */
  const mistakes: Array<[string, () => Promise<Response>, string, number]> = [
    ['a syntax error', () => post({ query: '{ availability { ' }), 'GRAPHQL_PARSE_FAILED', 200],
    ['a field that does not exist', () => post({ query: '{ nope }' }), 'GRAPHQL_VALIDATION_FAILED', 200],
    ['a body that is not JSON', () => post('{"query": "{ x }", oops'), 'BAD_REQUEST', 400],
    ['a body that is not an object', () => post('"{ availability { group } }"'), 'BAD_REQUEST', 400],
    ['a batch', () => post('[{"query": "{ __typename }"}]'), 'BAD_REQUEST', 400],
    ['no query', () => post({ variables: {} }), 'BAD_REQUEST', 200],
    [
      'an operation name not in the document',
      () => post({ query: 'query A { __typename }', operationName: 'B' }),
      'OPERATION_RESOLUTION_FAILURE',
      400,
    ],
    ['a bad variable', () => post({ query: READ, variables: {} }), 'BAD_USER_INPUT', 200],
    ['an empty uid', () => post({ query: '{ deliveries(uids: [""]) { uid } }' }), 'BAD_USER_INPUT', 200],
    ['no key', () => post({ query: '{ availability { group } }' }, { authorization: '' }), 'UNAUTHENTICATED', 200],
    [
      'a form POST',
      () => post('query={__typename}', { 'content-type': 'application/x-www-form-urlencoded' }),
      'BAD_REQUEST',
      415,
    ],
    [
      'a mutation over GET',
      () =>
        fetch(`${stack.app.url}/graphql?query=${encodeURIComponent('mutation { __typename }')}`, {
          headers: { accept: 'application/json' },
        }),
      'BAD_REQUEST',
      405,
    ],
    [
      'a GET whose variables are not JSON',
      () =>
        fetch(`${stack.app.url}/graphql?query=${encodeURIComponent(READ)}&variables=%7Buid`, {
          headers: { accept: 'application/json', authorization: `Bearer ${stack.key}` },
        }),
      'BAD_REQUEST',
      400,
    ],
    [
      'a body over GRAPHQL_MAX_BODY_BYTES',
      () => post({ query: '{ __typename }', padding: 'x'.repeat(1_100_000) }),
      'REQUEST_ENTITY_TOO_LARGE',
      413,
    ],
    [
      'a subscription POSTed for JSON',
      () => post({ query: UPDATED, variables: { uid: 'x' } }, { accept: 'application/json' }),
      'BAD_REQUEST',
      406,
    ],
    [
      'a subscription POSTed for HTML',
      () => post({ query: UPDATED, variables: { uid: 'x' } }, { accept: 'text/html' }),
      'BAD_REQUEST',
      406,
    ],
    [
      'a query that accepts only XML',
      () => post({ query: '{ __typename }' }, { accept: 'application/xml' }),
      'BAD_REQUEST',
      406,
    ],
  ];

  for (const [name, send, code, status] of mistakes) {
    it(`${name}: ${code} (HTTP ${status})`, async () => {
      const response = await send();
      const body = (await response.json()) as { errors: WireError[] };
      expect(response.status).toBe(status);
      expect(body.errors.map((error) => error.extensions?.code)).toEqual([code]);
      expect(Object.keys(ERROR_CODES)).toContain(code);
    });
  }

  it('over WebSocket: a syntax error and a validation error', async () => {
    const client = wsClient(stack.app.url, stack.key);
    try {
      for (const [query, code] of [
        ['{ availability { ', 'GRAPHQL_PARSE_FAILED'],
        ['{ nope }', 'GRAPHQL_VALIDATION_FAILED'],
      ] as const) {
        const ws = collect(client, query);
        await ws.done;
        const codes = (ws.errors as WireError[][]).flat().map((error) => error.extensions?.code);
        expect(codes).toEqual([code]);
        expect(Object.keys(ERROR_CODES)).toContain(code);
      }
    } finally {
      await client.dispose();
    }
  });
});

describe('every refusal has a body that says what to do', () => {
  const STREAM_HINT =
    'A subscription answers with a stream: send it with `accept: text/event-stream` (server-sent events), or over a graphql-ws WebSocket at the same path.';

  it('406 to a subscription whatever the accept header names, on the direct path and through yoga, with the same message', async () => {
    for (const accept of ['application/json', 'application/graphql-response+json', 'text/html', 'application/xml']) {
      const response = await post({ query: UPDATED, variables: { uid: 'x' } }, { accept });
      expect(response.status, accept).toBe(406);
      expect(response.headers.get('content-type'), accept).toMatch(/^application\/(graphql-response\+)?json/);
      expect(((await response.json()) as { errors: WireError[] }).errors, accept).toEqual([
        { message: STREAM_HINT, extensions: { code: 'BAD_REQUEST' } },
      ]);
    }
  });

  it('406 before anything runs to a mutation that accepts no answer this server gives, saying which to ask for', async () => {
    const mark = stack.sandbox.requestCount;
    const response = await post({ query: CREATE, variables: { input: deliveryInput() } }, { accept: 'text/html' });
    expect(response.status).toBe(406);
    const [error] = ((await response.json()) as { errors: WireError[] }).errors;
    expect(error!.message).toContain('application/graphql-response+json or application/json');
    expect(error!.extensions?.code).toBe('BAD_REQUEST');
    expect(stack.sandbox.requestsSince(mark)).toEqual([]);
  });

  it('405 on the page, GraphiQL and /metrics names the methods they answer', async () => {
    for (const path of ['/', '/graphiql/nothing.js', '/metrics']) {
      const response = await fetch(`${stack.app.url}${path}`, { method: 'POST' });
      expect(response.status, path).toBe(405);
      expect(await response.json(), path).toEqual({
        error: 'method_not_allowed',
        message: expect.stringContaining('answers GET and HEAD only'),
      });
    }
  });

  it('400 and 431 from the HTTP parser come with a JSON body', async () => {
    const { connect } = await import('node:net');
    const exchange = (text: string) =>
      new Promise<string>((resolve, reject) => {
        const socket = connect(Number(new URL(stack.app.url).port), '127.0.0.1');
        let answer = '';
        socket.on('data', (chunk) => (answer += chunk.toString()));
        socket.on('close', () => resolve(answer));
        socket.on('error', reject);
        socket.write(text);
      });
    const bodyOf = (answer: string) =>
      JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: string; message: string };
    const garbled = await exchange('GET /graphql HTTP/1.1\r\nhost: x\r\nnot a header\r\n\r\n');
    expect(garbled).toMatch(/^HTTP\/1\.1 400 /);
    expect(bodyOf(garbled)).toEqual({
      error: 'bad_request',
      message: expect.stringContaining('check its request line and headers'),
    });
    const large = await exchange(`GET /graphql HTTP/1.1\r\nhost: x\r\nx-padding: ${'p'.repeat(20 * 1024)}\r\n\r\n`);
    expect(large).toMatch(/^HTTP\/1\.1 431 /);
    expect(bodyOf(large)).toEqual({
      error: 'headers_too_large',
      message: expect.stringContaining('send fewer or shorter ones'),
    });
  });
});

describe('a cancel in the other endpoint group', () => {
  const cancel = async (uid: string, group: 'PLATFORM' | 'PARTNER', key = stack.key) =>
    (await stack.gql(CANCEL, { uid, group }, key)).data.cancelDelivery;

  it('says a platform delivery is in the PLATFORM group when canceled with group: PARTNER, from its owner record, with no upstream call', async () => {
    const uid: string = (await stack.gql(CREATE, { input: deliveryInput() })).data.createDelivery.data.uid;
    const mark = stack.sandbox.requestCount;
    expect(await cancel(uid, 'PARTNER')).toEqual({
      __typename: 'NotFoundError',
      code: 'NOT_FOUND',
      message: `No delivery ${uid} in the PARTNER group: it exists in the PLATFORM group; pass group: PLATFORM`,
    });
    // Booked through the facade: its owner record names the group, so nothing is asked.
    expect(stack.sandbox.requestsSince(mark)).toEqual([]);
    // The hint is right: the same cancel in that group goes through.
    expect(await cancel(uid, 'PLATFORM')).toMatchObject({
      __typename: 'MutationCancelDeliverySuccess',
      data: { uid, status: 'CANCELED', group: 'PLATFORM' },
    });
  });

  it('says a partner order is in the PARTNER group when canceled with group: PLATFORM', async () => {
    const uid = stack.sandbox.seedPartnerOrder(stack.key, partnerOrderBody('PO-wrong-group')).uid as string;
    expect(await cancel(uid, 'PLATFORM')).toEqual({
      __typename: 'NotFoundError',
      code: 'NOT_FOUND',
      message: `No delivery ${uid} in the PLATFORM group: it exists in the PARTNER group; pass group: PARTNER`,
    });
    expect(await cancel(uid, 'PARTNER')).toMatchObject({
      __typename: 'MutationCancelDeliverySuccess',
      data: { uid, status: 'CANCELED', group: 'PARTNER' },
    });
  });

  it('keeps the plain message for a uid in neither group, and for another merchant’s order (nothing leaks)', async () => {
    const plain = {
      __typename: 'NotFoundError',
      code: 'NOT_FOUND',
      message: 'No delivery with this uid belongs to the caller.',
    };
    expect(await cancel('00000000-0000-4000-8000-000000000000', 'PLATFORM')).toEqual(plain);
    expect(await cancel('00000000-0000-4000-8000-000000000000', 'PARTNER')).toEqual(plain);
    const theirs = stack.sandbox.seedPartnerOrder(stack.otherKey, partnerOrderBody('PO-theirs')).uid as string;
    expect(await cancel(theirs, 'PLATFORM')).toEqual(plain);
  });
});

describe('a cancel in the other group when the extra read fails', () => {
  let faulty: Stack;
  beforeAll(async () => {
    faulty = await startStack({ faultProxy: true });
  });
  afterAll(async () => {
    await faulty?.stop();
  });

  it('keeps the plain message', async () => {
    const uid = faulty.sandbox.seedPartnerOrder(faulty.key, partnerOrderBody('PO-read-fails')).uid as string;
    // The read of the order in the partner group answers something the facade cannot use.
    faulty.proxy!.fault = (req, res) => {
      if (req.method !== 'GET' || !req.url?.includes('/orders/')) return false;
      res.writeHead(200, { 'content-type': 'text/html' }).end('<html>maintenance</html>');
      return true;
    };
    const result = (await faulty.gql(CANCEL, { uid, group: 'PLATFORM' })).data.cancelDelivery;
    expect(result).toEqual({
      __typename: 'NotFoundError',
      code: 'NOT_FOUND',
      message: 'No delivery with this uid belongs to the caller.',
    });
    expect(
      faulty.proxy!.seen.some((request) => request.method === 'GET' && request.path.includes(`/orders/${uid}`)),
    ).toBe(true);
  });
});
