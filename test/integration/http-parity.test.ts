// One front door: the same HTTP cases against the direct JSON path and against
// yoga's handler (an app started with the direct path off) give the same status,
// content type, CORS headers, request id and body. Then CORS_ORIGINS on every
// kind of answer: GraphQL, SSE, probes, webhooks, 404 and 413 refusals, preflights
// and WebSocket upgrades.
import { rmSync } from 'node:fs';
import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { deliveryInput, makeDataDir, startStack, type Stack } from '../helpers/stack.js';

const ORIGIN = 'https://shop.example';
const QUOTE = 'mutation($input: DeliveryInput!) { quoteDelivery(input: $input) { __typename } }';
const READ = 'query($uid: ID!) { delivery(uid: $uid) { uid status } }';

interface Seen {
  status: number;
  headers: Record<string, string>;
  body: string;
}

/** What a browser page could see of an answer, minus what differs by nature (date, connection, our request id). */
async function see(url: string, init: RequestInit): Promise<Seen> {
  const response = await fetch(url, init);
  const headers: Record<string, string> = {};
  for (const [name, value] of response.headers) {
    if (!['date', 'connection', 'keep-alive', 'transfer-encoding', 'content-length'].includes(name))
      headers[name] = value;
  }
  return { status: response.status, headers, body: await response.text() };
}

describe('the direct path and yoga answer alike', () => {
  let stack: Stack;
  let yogaOnly: App;
  let yogaDataDir: string;

  beforeAll(async () => {
    stack = await startStack();
    // A data folder of its own: one process (here, one app) per folder.
    yogaDataDir = makeDataDir();
    yogaOnly = await startApp(loadConfig({ ...stack.env, DATA_DIR: yogaDataDir }), { directHttpPath: false });
  });
  afterAll(async () => {
    await yogaOnly?.stop();
    await stack?.stop();
    if (yogaDataDir) rmSync(yogaDataDir, { recursive: true, force: true });
  });

  const post = (body: unknown, headers: Record<string, string> = {}): RequestInit => ({
    method: 'POST',
    headers: { 'content-type': 'application/json', origin: ORIGIN, 'x-request-id': 'parity-1', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const withKey = (key: () => string) => ({ authorization: `Bearer ${key()}` });

  const cases: Array<[string, () => RequestInit]> = [
    [
      'a query that answers',
      () =>
        post(
          { query: '{ availability { group available } }' },
          withKey(() => stack.key),
        ),
    ],
    [
      'a read of an unknown uid (null, no error)',
      () =>
        post(
          { query: '{ delivery(uid: "no-such-uid") { uid } }' },
          withKey(() => stack.key),
        ),
    ],
    ['no key: UNAUTHENTICATED', () => post({ query: '{ availability { group available } }' })],
    [
      'a key the upstream refuses',
      () =>
        post({ query: 'mutation { cancelDelivery(uid: "x") { __typename } }' }, { authorization: 'Bearer sk_refused' }),
    ],
    [
      'a typed mutation error',
      () =>
        post(
          { query: 'mutation { cancelDelivery(uid: "no-such-uid") { __typename ... on Error { code message } } }' },
          withKey(() => stack.key),
        ),
    ],
    [
      'an empty uid: BAD_USER_INPUT',
      () =>
        post(
          { query: '{ deliveries(uids: [""]) { uid } }' },
          withKey(() => stack.key),
        ),
    ],
    ['a syntax error', () => post({ query: '{ availability { ' })],
    ['a field that does not exist', () => post({ query: '{ nope }' })],
    ['no query', () => post({ variables: {} })],
    ['a batch', () => post([{ query: '{ __typename }' }])],
    [
      'an operation name that is not in the document',
      () => post({ query: 'query A { __typename }', operationName: 'B' }),
    ],
    [
      'the charset spelled out',
      () => post({ query: '{ __typename }' }, { 'content-type': 'application/json; charset=utf-8' }),
    ],
    [
      'a bad value inside an input variable',
      () =>
        post(
          { query: QUOTE, variables: { input: deliveryInput({ tip: 'abc' }) } },
          withKey(() => stack.key),
        ),
    ],
    [
      'a required variable not given',
      () =>
        post(
          { query: READ, variables: {} },
          withKey(() => stack.key),
        ),
    ],
    [
      'a variable of the wrong type',
      () =>
        post(
          { query: READ, variables: { uid: { not: 'an id' } } },
          withKey(() => stack.key),
        ),
    ],
    ['a body that is not JSON', () => post('{"query": "{ x }", oops')],
  ];

  for (const [name, init] of cases) {
    it(name, async () => {
      const direct = await see(`${stack.app.url}/graphql`, init());
      const viaYoga = await see(`${yogaOnly.url}/graphql`, init());
      expect(direct).toEqual(viaYoga);
      // And what a page on another origin needs on both.
      expect(direct.headers['access-control-allow-origin']).toBe('*');
      expect(direct.headers['x-request-id']).toBe('parity-1');
      expect(direct.headers['content-type']).toMatch(/^application\/json/);
    });
  }

  it('answers variable errors as graphql-js words them, with BAD_USER_INPUT, on both', async () => {
    const variableCases: Array<[RequestInit, string]> = [
      [
        post(
          { query: QUOTE, variables: { input: deliveryInput({ tip: 'abc' }) } },
          withKey(() => stack.key),
        ),
        'Variable "$input" got invalid value "abc" at "input.tip"; Decimal must be a decimal number in major units as a string, e.g. "12.50" (plain notation, at most 18 integer and 10 fractional digits); got "abc".',
      ],
      [
        post(
          { query: READ, variables: {} },
          withKey(() => stack.key),
        ),
        'Variable "$uid" of required type "ID!" was not provided.',
      ],
      [
        post(
          { query: READ, variables: { uid: { not: 'an id' } } },
          withKey(() => stack.key),
        ),
        'Variable "$uid" got invalid value { not: "an id" }; ID cannot represent value: { not: "an id" }',
      ],
    ];
    for (const url of [stack.app.url, yogaOnly.url]) {
      for (const [init, message] of variableCases) {
        const seen = await see(`${url}/graphql`, init);
        expect(seen.status).toBe(200);
        expect(JSON.parse(seen.body)).toEqual({
          errors: [
            { message, locations: [{ line: 1, column: expect.any(Number) }], extensions: { code: 'BAD_USER_INPUT' } },
          ],
        });
      }
    }
  });

  it('answers a body that is not JSON with 400 BAD_REQUEST and without echoing it, on both', async () => {
    for (const url of [stack.app.url, yogaOnly.url]) {
      const seen = await see(`${url}/graphql`, post('{"query": "{ x }", oops'));
      expect(seen.status).toBe(400);
      expect(seen.body).toBe(
        '{"errors":[{"message":"POST body sent invalid JSON.","extensions":{"code":"BAD_REQUEST"}}]}',
      );
    }
  });

  it('a body over GRAPHQL_MAX_BODY_BYTES: 413 with CORS on both', async () => {
    const big = () => post({ query: '{ __typename }', padding: 'x'.repeat(1_100_000) });
    const direct = await see(`${stack.app.url}/graphql`, big());
    const viaYoga = await see(`${yogaOnly.url}/graphql`, big());
    expect(direct).toEqual(viaYoga);
    expect(direct.status).toBe(413);
    expect(JSON.parse(direct.body).errors[0].extensions.code).toBe('REQUEST_ENTITY_TOO_LARGE');
    expect(direct.headers['access-control-allow-origin']).toBe('*');
  });
});

describe('CORS_ORIGINS', () => {
  let stack: Stack;
  const allowed = 'https://shop.example';
  const refused = 'https://evil.example';

  beforeAll(async () => {
    stack = await startStack({ env: { CORS_ORIGINS: `${allowed}, https://admin.shop.example:8443` } });
  });
  afterAll(() => stack?.stop());

  const gqlPost = (origin: string) => ({
    method: 'POST',
    headers: { 'content-type': 'application/json', origin, authorization: `Bearer ${stack.key}` },
    body: JSON.stringify({ query: '{ __typename }' }),
  });

  it('answers a listed origin on a POST with that origin, Vary: Origin and the exposed headers', async () => {
    const response = await fetch(`${stack.app.url}/graphql`, gqlPost(allowed));
    expect(response.status).toBe(200);
    expect(response.headers.get('access-control-allow-origin')).toBe(allowed);
    expect(response.headers.get('vary')).toMatch(/Origin/);
    expect(response.headers.get('access-control-expose-headers')).toContain('x-request-id');
    expect(response.headers.get('access-control-allow-credentials')).toBeNull();
  });

  it('gives an origin that is not listed no allow-origin header, on a POST and on its preflight', async () => {
    const response = await fetch(`${stack.app.url}/graphql`, gqlPost(refused));
    expect(response.headers.get('access-control-allow-origin')).toBeNull();
    const preflight = await fetch(`${stack.app.url}/graphql`, {
      method: 'OPTIONS',
      headers: {
        origin: refused,
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type',
      },
    });
    expect(preflight.headers.get('access-control-allow-origin')).toBeNull();
    expect(preflight.headers.get('access-control-allow-methods')).toBeNull();
  });

  it('answers the preflight of a listed origin with the methods and the headers it asked for', async () => {
    const preflight = await fetch(`${stack.app.url}/graphql`, {
      method: 'OPTIONS',
      headers: {
        origin: 'https://admin.shop.example:8443',
        'access-control-request-method': 'POST',
        'access-control-request-headers': 'authorization, content-type, x-request-id',
      },
    });
    expect(preflight.status).toBe(204);
    expect(preflight.headers.get('access-control-allow-origin')).toBe('https://admin.shop.example:8443');
    expect(preflight.headers.get('access-control-allow-methods')).toContain('POST');
    expect(preflight.headers.get('access-control-allow-headers')).toBe('authorization, content-type, x-request-id');
    expect(Number(preflight.headers.get('access-control-max-age'))).toBeGreaterThan(0);
  });

  const everyKindOfAnswer: Array<[string, string, RequestInit, number]> = [
    ['GET /graphql', '/graphql?query=%7B__typename%7D', { headers: { accept: 'application/json' } }, 200],
    [
      'SSE subscription',
      '/graphql',
      {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
        body: JSON.stringify({ query: 'subscription { deliveryUpdated(uid: "x") { uid } }' }),
      },
      200,
    ],
    [
      'a bad JSON body',
      '/graphql',
      { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"query":' },
      400,
    ],
    ['an unsupported method', '/graphql', { method: 'DELETE' }, 405],
    ['the liveness probe', '/health', {}, 200],
    ['the readiness probe', '/ready', {}, 200],
    ['an unknown path', '/nowhere', {}, 404],
    [
      'a webhook without a token',
      '/webhooks',
      { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' },
      401,
    ],
    ['the tracking page', '/', {}, 200],
  ];
  for (const [name, path, init, status] of everyKindOfAnswer) {
    it(`carries the allow-origin header on ${name}`, async () => {
      const response = await fetch(`${stack.app.url}${path}`, {
        ...init,
        headers: { ...(init.headers as Record<string, string>), origin: allowed },
      });
      expect(response.status).toBe(status);
      expect(response.headers.get('access-control-allow-origin')).toBe(allowed);
      await response.body?.cancel();
    });
  }

  it('carries no CORS header on metrics, for a listed origin either: no page may read them', async () => {
    const response = await fetch(`${stack.app.url}/metrics`, { headers: { origin: allowed } });
    expect(response.status).toBe(200);
    expect(response.headers.get('access-control-allow-origin')).toBeNull();
    expect(response.headers.get('access-control-expose-headers')).toBeNull();
    await response.body?.cancel();
  });

  it('refuses a WebSocket upgrade from an origin that is not listed, and lets a listed one and a non-browser client in', async () => {
    const url = `${stack.app.url.replace('http', 'ws')}/graphql`;
    const attempt = async (headers: Record<string, string>) => {
      const socket = new WebSocket(url, 'graphql-transport-ws', { headers });
      const outcome = await Promise.race([
        once(socket, 'open').then(() => 'open'),
        once(socket, 'unexpected-response').then(
          ([, response]) => `refused ${(response as { statusCode: number }).statusCode}`,
        ),
      ]);
      socket.terminate();
      return outcome;
    };
    expect(await attempt({ origin: refused })).toBe('refused 403');
    expect(await attempt({ origin: allowed })).toBe('open');
    expect(await attempt({})).toBe('open');
  });
});

describe('a bad CORS_ORIGINS', () => {
  it.each([
    ['https://shop.example/path', 'is not an origin'],
    ['shop.example', 'is not an origin'],
    ['*, https://shop.example', 'stands alone'],
    ['ftp://shop.example', 'is not an origin'],
  ])('%s stops start-up naming the variable', (value, problem) => {
    expect(() => loadConfig({ CORS_ORIGINS: value })).toThrow(
      new RegExp(`^CORS_ORIGINS: .*${problem.replace('*', '\\*')}`),
    );
  });
});
