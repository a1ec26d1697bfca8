// The front door's ports and limits (issues 20, 29, 37): webhook-sized heads only
// for the webhook path (or on WEBHOOK_PORT), counted as Node's parser counts them,
// every webhook refusal counted (431 included), and /metrics off the public port in
// production unless a port or a token is given for it, never with CORS.
import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { connect } from 'node:net';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { exportPKCS8, generateKeyPair, SignJWT, type CryptoKey } from 'jose';
import { Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApp, type App } from '../../src/app.js';
import { loadConfig } from '../../src/config.js';
import { headOver } from '../../src/http/server-limits.js';
import { createLogger } from '../../src/logger.js';
import { deliveryInput, makeDataDir, startStack, type Stack } from '../helpers/stack.js';

/**
 * Writes `parts` on one connection (`gapMs` apart; unless `pastAnswers`, none after the server's first answer)
 * and returns what the server sent before it closed or `waitMs` passed.
 */
async function exchange(
  url: string,
  parts: string[],
  { gapMs = 0, waitMs = 3_000, pastAnswers = false } = {},
): Promise<string> {
  const socket = connect(Number(new URL(url).port), '127.0.0.1');
  await once(socket, 'connect');
  let received = '';
  socket.on('data', (chunk: Buffer) => (received += chunk.toString('latin1')));
  // The server may close while parts are still being written: that is an answer too.
  socket.on('error', () => undefined);
  const closed = once(socket, 'close');
  for (const part of parts) {
    if (socket.destroyed || (received && !pastAnswers)) break;
    socket.write(part);
    if (gapMs) await sleep(gapMs);
  }
  await Promise.race([closed, sleep(waitMs)]);
  socket.destroy();
  return received;
}

/** The status lines of the answers in a raw exchange, in order. */
const statuses = (raw: string) => [...raw.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((match) => Number(match[1]));

const padding = (bytes: number) => `x-padding: ${'p'.repeat(bytes)}\r\n`;
/** A webhook POST; unless `keepAlive`, it asks the server to close the connection after answering. */
const webhookRequest = (authorization: string, keepAlive = false) =>
  `POST /webhooks HTTP/1.1\r\nhost: x\r\n${keepAlive ? '' : 'connection: close\r\n'}content-type: application/json\r\nauthorization: ${authorization}\r\ncontent-length: 2\r\n\r\n{}`;

async function refusalsOf(url: string, status: number): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  return Number(
    new RegExp(`^delivery_graph_webhook_refusals_total\\{status="${status}"\\} (\\d+)$`, 'm').exec(text)?.[1] ?? 0,
  );
}

async function eventNames(stack: Stack, uid: string): Promise<string[]> {
  const result = await stack.gql('query($uid: ID!) { delivery(uid: $uid) { events { edges { node { name } } } } }', {
    uid,
  });
  return result.data?.delivery?.events.edges.map((edge: { node: { name: string } }) => edge.node.name) ?? [];
}

describe('header limits on the shared port (default setup)', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(() => stack?.stop());

  it('answers 431 to 20 KiB of headers on /graphql and /health, as Node does by default', async () => {
    for (const path of ['/graphql', '/health']) {
      const response = await fetch(`${stack.app.url}${path}`, { headers: { 'x-padding': 'p'.repeat(20 * 1024) } });
      expect(response.status, path).toBe(431);
    }
    expect((await fetch(`${stack.app.url}/health`, { headers: { 'x-padding': 'p'.repeat(8 * 1024) } })).status).toBe(
      200,
    );
  });

  it('holds a /graphql head trickled past 16 KiB to 16 KiB once it is parsed (431), and never runs it', async () => {
    const parts = [
      'POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 26\r\n',
      ...Array.from({ length: 64 }, () => padding(1024)),
      '\r\n{"query":"{ __typename }"}',
    ];
    expect(statuses(await exchange(stack.app.url, parts, { gapMs: 5, waitMs: 1_500 }))).toEqual([431]);
  });

  it('answers a head over 16 KiB that expects 100-continue with 431 alone, and asks for the body of one within it', async () => {
    const post = (extra: string) =>
      `POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\nexpect: 100-continue\r\ncontent-length: 26\r\n${extra}\r\n`;
    expect(statuses(await exchange(stack.app.url, [post(padding(20 * 1024))]))).toEqual([431]);
    const small = await exchange(stack.app.url, [post(''), '{"query":"{ __typename }"}'], {
      gapMs: 100,
      pastAnswers: true,
    });
    expect(statuses(small)).toEqual([100, 200]);
  });

  it('reads and drops the body of a request refused for its head, so that the client reads the 431', async () => {
    const body = 'x'.repeat(4 * 1024 * 1024);
    const raw = await exchange(stack.app.url, [
      `POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n${padding(20 * 1024)}content-length: ${body.length}\r\n\r\n${body}`,
    ]);
    expect(statuses(raw)).toEqual([431]);
    expect(raw).toMatch(/"error":"headers_too_large"/);
  });

  it('answers 431 to a /graphql request of more headers than Node keeps (1,000), however short', async () => {
    const many = Array.from({ length: 1_000 }, (_, i) => `x-${i}: a\r\n`).join('');
    expect(statuses(await exchange(stack.app.url, [`GET /health HTTP/1.1\r\nhost: x\r\n${many}\r\n`]))).toEqual([431]);
    const fewer = Array.from({ length: 900 }, (_, i) => `x-${i}: a\r\n`).join('');
    expect(
      statuses(await exchange(stack.app.url, [`GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n${fewer}\r\n`])),
    ).toEqual([200]);
  });

  it("answers 400 at once to bytes that cannot begin a request line (Node's parser refuses them as they come)", async () => {
    const started = performance.now();
    expect(statuses(await exchange(stack.app.url, ['GEX'], { waitMs: 2_000 }))).toEqual([400]);
    expect(statuses(await exchange(stack.app.url, ['\x16\x03\x01\x02\x00'], { waitMs: 2_000 }))).toEqual([400]);
    expect(performance.now() - started).toBeLessThan(1_500);
  });

  it('takes a webhook token of 200 KiB on the webhook path (the verifier refuses it, the header limit does not)', async () => {
    const raw = await exchange(stack.app.url, [webhookRequest(`Bearer ${'a'.repeat(200 * 1024)}`)]);
    expect(statuses(raw)).toEqual([401]);
    // Empty lines before the request line are skipped, as the parser skips them.
    const afterEmptyLines = await exchange(
      stack.app.url,
      ['\r\n\r\n', webhookRequest(`Bearer ${'a'.repeat(200 * 1024)}`)],
      { gapMs: 20 },
    );
    expect(statuses(afterEmptyLines)).toEqual([401]);
  });

  it('answers another path after a webhook on the same connection within the default limit, with CORS and a request id, and keeps the connection', async () => {
    const health =
      'GET /health HTTP/1.1\r\nhost: x\r\norigin: https://shop.example\r\nx-request-id: after-webhook\r\n\r\n';
    const small = await exchange(stack.app.url, [
      `${webhookRequest('Bearer nope', true)}${health}GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
    ]);
    expect(statuses(small)).toEqual([401, 200, 200]);
    const second = small.slice(small.indexOf('HTTP/1.1 200'), small.lastIndexOf('HTTP/1.1 '));
    expect(second).toMatch(/^connection: keep-alive$/im);
    expect(second).toMatch(/^access-control-allow-origin: \*$/im);
    expect(second).toMatch(/^x-request-id: after-webhook$/im);
    const large = await exchange(stack.app.url, [
      `${webhookRequest('Bearer nope', true)}GET /graphql HTTP/1.1\r\nhost: x\r\n${padding(20 * 1024)}\r\n`,
    ]);
    expect(statuses(large)).toEqual([401, 431]);
    // A WebSocket asked for after a webhook is held to the default limit too.
    const upgrade =
      'GET /graphql HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-protocol: graphql-transport-ws\r\n';
    // (Not pipelined: Node answers an upgrade at once, even before the answer to a request ahead of it.)
    const parts = (last: string) => [webhookRequest('Bearer nope', true), last];
    expect(
      statuses(
        await exchange(stack.app.url, parts(`${upgrade}\r\n`), { gapMs: 300, waitMs: 1_000, pastAnswers: true }),
      ),
    ).toEqual([401, 101]);
    expect(
      statuses(
        await exchange(stack.app.url, parts(`${upgrade}${padding(20 * 1024)}\r\n`), { gapMs: 300, pastAnswers: true }),
      ),
    ).toEqual([401, 431]);
  });

  it("counts a head after a webhook on the same connection as Node's parser keeps it: whitespace inside a value counts, around it and before the request line it does not", async () => {
    const after = (header: string) =>
      exchange(stack.app.url, [
        `${webhookRequest('Bearer nope', true)}GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n${header}\r\n`,
      ]);
    const blanks = (count: number) => Array.from({ length: count }, () => ' ').join('');
    expect(statuses(await after(`x-padding: a\t${'\t'.repeat(20 * 1024)}b\r\n`))).toEqual([401, 431]);
    expect(statuses(await after(`x-padding: a${blanks(20 * 1024)}\r\n`))).toEqual([401, 200]);
    expect(statuses(await after(`x-padding:${blanks(20 * 1024)}a\r\n`))).toEqual([401, 200]);
    expect(
      statuses(
        await exchange(stack.app.url, [
          `${'\r\n'.repeat(10 * 1024)}GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
        ]),
      ),
    ).toEqual([200]);
  });

  it('answers 400 at once to a request line that ends in a bare LF, without waiting for the headers deadline', async () => {
    // HEADERS_TIMEOUT_MS is 10 s here: an answer within waitMs is not the deadline's.
    expect(statuses(await exchange(stack.app.url, ['GET /health HTTP/1.1\nhost: x\n\n'], { waitMs: 3_000 }))).toEqual([
      400,
    ]);
    expect(statuses(await exchange(stack.app.url, ['POST /webhooks HTTP/1.1\n'], { waitMs: 3_000 }))).toEqual([400]);
  });

  it('counts a webhook token over WEBHOOK_MAX_TOKEN_BYTES (431) in delivery_graph_webhook_refusals_total', async () => {
    const before = await refusalsOf(stack.app.url, 431);
    // Just over the 256 KiB default: the parser meets the limit far from the request line.
    const raw = await exchange(stack.app.url, [webhookRequest(`Bearer ${'a'.repeat(300 * 1024)}`)]);
    expect(statuses(raw)).toEqual([431]);
    // The request line alone in the first packet, the token after it.
    const trickled = await exchange(
      stack.app.url,
      ['POST /webhooks HTTP/1.1\r\n', `host: x\r\nauthorization: Bearer ${'a'.repeat(300 * 1024)}\r\n\r\n`],
      { gapMs: 50 },
    );
    expect(statuses(trickled)).toEqual([431]);
    expect(await refusalsOf(stack.app.url, 431)).toBe(before + 2);
    expect(stack.app.receiver!.counters.refusals.get(431)).toBe(before + 2);
  });
});

describe("a load balancer's kept-alive connections", () => {
  let stack: Stack;
  let privateKey: CryptoKey;
  beforeAll(async () => {
    const pair = await generateKeyPair('RS256', { extractable: true });
    privateKey = pair.privateKey;
    stack = await startStack({ sandbox: { privateKeyPem: await exportPKCS8(pair.privateKey) } });
  });
  afterAll(() => stack?.stop());

  /** A genuine webhook whose token is about `bytes` long (the upstream echoes large orders in every event). */
  const largeWebhook = async (bytes: number) => {
    const uid = randomUUID();
    const token = await new SignJWT({
      payload: { uid, event_name: 'delivery.created', notes: 'n'.repeat(Math.ceil((bytes * 3) / 4)) },
    })
      .setProtectedHeader({ alg: 'RS256' })
      .setIssuer(stack.sandbox.issuer)
      .setIssuedAt()
      .setExpirationTime('5m')
      .sign(privateKey);
    expect(token.length).toBeGreaterThan(bytes);
    return token;
  };

  it.each([
    ['GET /health', { method: 'GET', path: '/health' }],
    [
      'POST /graphql',
      {
        method: 'POST',
        path: '/graphql',
        headers: { 'content-type': 'application/json' },
        body: '{"query":"{ __typename }"}',
      },
    ],
    [
      'POST /graphql with a chunked body',
      {
        method: 'POST',
        path: '/graphql',
        headers: { 'content-type': 'application/json' },
        body: Readable.from(['{"query":', '"{ __typename }"}']),
      },
    ],
  ] as const)(
    'stores a webhook with a 40 KB token that comes after %s on the same connection',
    async (_first, first) => {
      // One connection, kept alive and reused for every path, as nginx keepalive, Envoy or a cloud load balancer does.
      const pool = new Pool(stack.app.url, { connections: 1, pipelining: 1 });
      let connects = 0;
      pool.on('connect', () => (connects += 1));
      try {
        const before = stack.app.receiver!.counters.accepted;
        const answer = await pool.request(first as Parameters<Pool['request']>[0]);
        await answer.body.text();
        expect(answer.statusCode).toBe(200);
        const webhook = await pool.request({
          method: 'POST',
          path: '/webhooks',
          headers: { 'content-type': 'application/json', authorization: `Bearer ${await largeWebhook(40_000)}` },
          body: '{}',
        });
        await webhook.body.text();
        expect(webhook.statusCode).toBe(200);
        expect(stack.app.receiver!.counters.accepted).toBe(before + 1);
        // Both went over the one connection.
        expect(connects).toBe(1);
      } finally {
        await pool.close();
      }
    },
  );

  it('answers 2,000 requests pipelined in one write, a chunked one among them (the server pauses the connection while its answers back up)', async () => {
    const health = 'GET /health HTTP/1.1\r\nhost: x\r\n\r\n';
    const chunked = 'POST /health HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n';
    const raw = await exchange(
      stack.app.url,
      [
        `${health.repeat(1_000)}${chunked}${health.repeat(998)}GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
      ],
      { waitMs: 10_000 },
    );
    expect(statuses(raw)).toEqual(Array.from({ length: 2_000 }, () => 200));
  });

  it('stores a webhook pipelined right behind another request, and answers a request pipelined behind the webhook', async () => {
    const token = await largeWebhook(40_000);
    const raw = await exchange(stack.app.url, [
      `GET /health HTTP/1.1\r\nhost: x\r\n\r\n${webhookRequest(`Bearer ${token}`, true)}GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
    ]);
    expect(statuses(raw)).toEqual([200, 200, 200]);
  });
});

describe("Node's deadlines", () => {
  const heads = [[], ['GET /grap'], ['POST /webhooks HTTP/1.1\r\nhost: x\r\n']];
  it('cut off a connection that sends no request line, half of one, or a webhook request line without its headers, within HEADERS_TIMEOUT_MS (408)', async () => {
    const stack = await startStack({ env: { HEADERS_TIMEOUT_MS: '300', REQUEST_TIMEOUT_MS: '600' } });
    try {
      const started = performance.now();
      const answers = await Promise.all(heads.map((parts) => exchange(stack.app.url, parts, { waitMs: 5_000 })));
      expect(performance.now() - started).toBeLessThan(3_000);
      expect(answers.map(statuses)).toEqual([[408], [408], [408]]);
      // On a shared port the path of a head that never ended is not known: nothing is put down to the webhook path.
      expect(stack.app.receiver!.counters.refusals.get(408)).toBeUndefined();
      expect((await fetch(`${stack.app.url}/health`)).status).toBe(200);
    } finally {
      await stack.stop();
    }
  });

  it('count every 408 of WEBHOOK_PORT as a webhook refusal', async () => {
    const stack = await startStack({
      env: { HEADERS_TIMEOUT_MS: '300', REQUEST_TIMEOUT_MS: '600', WEBHOOK_PORT: '0' },
    });
    try {
      const webhookOrigin = new URL(stack.app.webhookUrl).origin;
      const answers = await Promise.all([
        ...heads.map((parts) => exchange(webhookOrigin, parts, { waitMs: 5_000 })),
        exchange(stack.app.url, ['GET /grap'], { waitMs: 5_000 }),
      ]);
      expect(answers.map(statuses)).toEqual([[408], [408], [408], [408]]);
      expect(stack.app.receiver!.counters.refusals.get(408)).toBe(3);
    } finally {
      await stack.stop();
    }
  });
});

describe('the bound on a parsed head', () => {
  const LIMIT = 1_000;
  let native: Server;
  let parsed: Server;
  beforeAll(async () => {
    // Node's parser with the limit itself, and one that takes far more with the limit checked on each parsed head.
    native = createServer({ maxHeaderSize: LIMIT }, (_req, res) => res.end());
    parsed = createServer({ maxHeaderSize: 100 * LIMIT }, (req, res) => {
      res.statusCode = headOver(req, LIMIT) ? 431 : 200;
      res.end();
    });
    await Promise.all(
      [native, parsed].map((server) => new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))),
    );
  });
  afterAll(() => Promise.all([native, parsed].map((server) => new Promise((resolve) => server.close(resolve)))));
  const urlOf = (server: Server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  it("refuses exactly the heads Node's parser refuses at the same limit: target, names and values, whitespace inside a value", async () => {
    const shapes: Array<(n: number) => string> = [
      (n) => `GET /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-p: ${'p'.repeat(n)}\r\n\r\n`,
      (n) => `GET /a?${'q'.repeat(n)} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`,
      (n) => `GET /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\nx-p: a${' \t'.repeat(n / 2)}b\r\n\r\n`,
      (n) => `GET /a HTTP/1.1\r\nhost: x\r\nconnection: close\r\n${'a: b\r\n'.repeat(n / 2)}\r\n`,
    ];
    for (const [i, shape] of shapes.entries()) {
      const verdicts = { native: [] as number[], parsed: [] as number[] };
      for (let n = 940; n <= 1_000; n += 2) {
        verdicts.native.push(statuses(await exchange(urlOf(native), [shape(n)], { waitMs: 1_000 }))[0]!);
        verdicts.parsed.push(statuses(await exchange(urlOf(parsed), [shape(n)], { waitMs: 1_000 }))[0]!);
      }
      expect(verdicts.parsed, `shape ${i}`).toEqual(verdicts.native);
      // The sizes tried cross the limit: each shape is answered both ways.
      expect(new Set(verdicts.native), `shape ${i}`).toEqual(new Set([200, 431]));
    }
  });
});

describe('WEBHOOK_PORT', () => {
  let stack: Stack;
  beforeAll(async () => {
    stack = await startStack({ env: { WEBHOOK_PORT: '0' } });
  });
  afterAll(() => stack?.stop());

  it('receives webhooks on a port of its own, and only them; the main port keeps 16 KiB of headers and refuses the webhook path', async () => {
    expect(new URL(stack.app.webhookUrl).port).not.toBe(String(stack.app.port));
    // The sandbox posts this booking's webhooks to the webhook port.
    const created = await stack.gql(
      'mutation($input: DeliveryInput!) { createDelivery(input: $input) { ... on MutationCreateDeliverySuccess { data { uid } } } }',
      { input: deliveryInput() },
    );
    const uid = created.data.createDelivery.data.uid as string;
    while (!(await eventNames(stack, uid)).includes('delivery.created')) await sleep(25);

    const webhookOrigin = new URL(stack.app.webhookUrl).origin;
    expect(statuses(await exchange(webhookOrigin, [webhookRequest(`Bearer ${'a'.repeat(200 * 1024)}`)]))).toEqual([
      401,
    ]);
    expect((await fetch(`${webhookOrigin}/graphql`)).status).toBe(404);
    expect((await fetch(`${stack.app.url}/webhooks`, { method: 'POST', body: '{}' })).status).toBe(404);
    expect((await fetch(`${stack.app.url}/graphql`, { headers: { 'x-padding': 'p'.repeat(20 * 1024) } })).status).toBe(
      431,
    );
  });

  it("refuses a head trickled to the main port as it passes 16 KiB, without waiting for the rest (Node's own limit there)", async () => {
    const parts = [
      'POST /graphql HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n',
      ...Array.from({ length: 64 }, () => padding(1024)),
    ];
    const started = performance.now();
    expect(statuses(await exchange(stack.app.url, parts, { gapMs: 5, waitMs: 1_500 }))).toEqual([431]);
    expect(performance.now() - started).toBeLessThan(1_500);
  });

  it("counts a head on the main port as Node's parser does: whitespace inside and after a value, not before it nor blank lines before the request line", async () => {
    const blanks = ' '.repeat(20 * 1024);
    const get = (header: string) => `GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n${header}\r\n`;
    expect(statuses(await exchange(stack.app.url, [get(`x-padding: a\t${'\t'.repeat(20 * 1024)}b\r\n`)]))).toEqual([
      431,
    ]);
    expect(statuses(await exchange(stack.app.url, [get(`x-padding: a${blanks}\r\n`)]))).toEqual([431]);
    expect(statuses(await exchange(stack.app.url, [get(`x-padding:${blanks}a\r\n`)]))).toEqual([200]);
    expect(statuses(await exchange(stack.app.url, [`${'\r\n'.repeat(10 * 1024)}${get('')}`]))).toEqual([200]);
    // Node keeps 1,000 headers: the main port's parser counts them all, and they are under its limit.
    const many = Array.from({ length: 1_000 }, (_, i) => `x-${i}: a\r\n`).join('');
    expect(statuses(await exchange(stack.app.url, [get(many)]))).toEqual([200]);
  });
});

describe('/metrics', () => {
  const TOKEN = 'metrics-token-for-tests-0123456789';
  const apps: App[] = [];
  let stack: Stack;
  const lines: string[] = [];
  beforeAll(async () => {
    stack = await startStack();
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.stop()));
    await stack?.stop();
  });
  const start = async (env: Record<string, string>) => {
    const app = await startApp(loadConfig({ ...stack.env, DATA_DIR: makeDataDir(), ...env }), {
      logger: createLogger('trace', { write: (line: string) => void lines.push(line) }),
    });
    apps.push(app);
    return app;
  };

  it('is served on the main port outside production, without CORS', async () => {
    const response = await fetch(`${stack.app.url}/metrics`, { headers: { origin: 'https://shop.example' } });
    expect(response.status).toBe(200);
    expect(response.headers.get('access-control-allow-origin')).toBeNull();
    // Every other answer keeps its CORS.
    expect(
      (await fetch(`${stack.app.url}/health`, { headers: { origin: 'https://shop.example' } })).headers.get(
        'access-control-allow-origin',
      ),
    ).toBe('*');
  });

  it('is off the main port in production unless METRICS_PORT or METRICS_TOKEN asks for it', async () => {
    const app = await start({ NODE_ENV: 'production' });
    expect((await fetch(`${app.url}/metrics`)).status).toBe(404);
    expect(app.metricsUrl).toBeUndefined();
  });

  it('with METRICS_TOKEN: 401 without the bearer token or with another, 200 with it, no CORS, and the token never logged', async () => {
    const app = await start({ NODE_ENV: 'production', METRICS_TOKEN: TOKEN });
    const scrape = (authorization?: string) =>
      fetch(`${app.url}/metrics`, {
        headers: { origin: 'https://shop.example', ...(authorization ? { authorization } : {}) },
      });
    for (const authorization of [
      undefined,
      `Bearer ${TOKEN}x`,
      `Bearer ${TOKEN.slice(0, -1)}`,
      TOKEN,
      `Basic ${TOKEN}`,
    ]) {
      const refused = await scrape(authorization);
      expect(refused.status, String(authorization)).toBe(401);
      expect(refused.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(refused.headers.get('access-control-allow-origin')).toBeNull();
      expect(await refused.text()).not.toContain('delivery_graph_');
    }
    const allowed = await scrape(`Bearer ${TOKEN}`);
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get('access-control-allow-origin')).toBeNull();
    expect(await allowed.text()).toContain('delivery_graph_graphql_operations_total');
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.join('\n')).not.toContain(TOKEN);
  });

  it('with METRICS_PORT: served there (loopback), and not on the main port', async () => {
    const app = await start({ NODE_ENV: 'production', METRICS_PORT: '0' });
    expect(app.metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
    expect(new URL(app.metricsUrl!).port).not.toBe(String(app.port));
    const response = await fetch(app.metricsUrl!);
    expect(response.status).toBe(200);
    expect(await response.text()).toContain('delivery_graph_webhook_refusals_total');
    expect((await fetch(`${app.url}/metrics`)).status).toBe(404);
    expect((await fetch(`${new URL(app.metricsUrl!).origin}/graphql`)).status).toBe(404);
  });

  it('refuses a short METRICS_TOKEN, and a METRICS_PORT that is PORT, naming the variable', () => {
    expect(() => loadConfig({ METRICS_TOKEN: 'short' })).toThrow(/^METRICS_TOKEN: is 5 characters/);
    expect(() => loadConfig({ PORT: '4000', METRICS_PORT: '4000' })).toThrow(/^METRICS_PORT: 4000 is PORT as well/);
    expect(() => loadConfig({ PORT: '4000', WEBHOOK_PORT: '4000' })).toThrow(/^WEBHOOK_PORT: 4000 is PORT as well/);
  });
});
